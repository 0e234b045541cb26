//! Saying that an object is stalled outside a step: an undeclared phase held, or a handler
//! failing again and again. One status write of the ecosystem's conditions (see
//! `pure::readiness`), locked on the version read; the next step that succeeds recomputes them.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use crate::engine::write::Write;
use crate::engine::{Engine, Reconcilable, ReconcileError};
use crate::pure::readiness::{self, Stall};

/// A handler failing this many times in a row makes its object `Stalled`.
pub(crate) const FAILURES_THAT_STALL: u32 = 5;

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Writes `Stalled` (True, for `stall`) and the conditions that follow from it on `object`.
    /// A write that does not land is not retried: the reconcile that follows says it again.
    pub(crate) async fn stalled(
        &self,
        object: &K,
        stall: Stall,
    ) -> Result<Write<K>, ReconcileError> {
        let status = object.machine_status();
        let mut conditions = status.map(|s| s.conditions.clone()).unwrap_or_default();
        let phase = status.and_then(|s| s.phase());
        tracing::info!(object = %object.name_any(), ?stall, "stalled");
        readiness::maintain(
            &mut conditions,
            phase,
            Some(stall),
            object.meta().generation,
            Timestamp::now(),
        );
        let patch = json!({ "status": { "conditions": conditions } });
        let api = self.api_for(object);
        self.write_status(&api, object, &patch).await
    }
}
