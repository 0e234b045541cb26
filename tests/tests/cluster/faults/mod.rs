//! The engine's failure paths on the real API server: vetoed timeouts, phases written by
//! someone else, deletion while a write conflicts, objects gone mid-reconcile, per-object
//! memory of deleted objects, `after_transition` at least once, and a removed status.
//!
//! The scenarios are in the submodules: `status` (statuses the operator did not write),
//! `deletion` (objects deleted under the operator) and `retries` (failures the operator
//! retries, and how often); the scripted Guarded handlers they share are here.

mod deletion;
mod retries;
mod status;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use kube_fsm::{Next, Step};
use kube_fsm_testkit::resources::*;

#[derive(Debug, thiserror::Error)]
pub(super) enum TestError {
    #[error(transparent)]
    Condition(#[from] kube_fsm::machine::ConditionError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("told to fail")]
    Told,
}

/// Guarded handlers that fail while the object's `fail` annotation says so (`always`, or
/// `once` per object), delete the object on `delete`, and record `after_transition` calls.
#[derive(Clone, Default)]
pub(super) struct Scripted {
    pub(super) api: Option<Api<Guarded>>,
    failed_once: Arc<Mutex<Vec<String>>>,
    pub(super) pending_runs: Arc<AtomicUsize>,
    pub(super) hooks: Arc<Mutex<HashMap<(String, String), usize>>>,
    pub(super) fail_first_hook: Arc<AtomicBool>,
}

impl GuardedHandler for Scripted {
    type Error = TestError;

    async fn on_pending(
        &self,
        g: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedPendingNext, TestError> {
        self.pending_runs.fetch_add(1, Ordering::SeqCst);
        match g.annotations().get("fail").map(String::as_str) {
            Some("always") => return Err(TestError::Told),
            Some("once") => {
                let uid = g.uid().unwrap_or_default();
                let mut failed = self.failed_once.lock().unwrap();
                if !failed.contains(&uid) {
                    failed.push(uid);
                    return Err(TestError::Told);
                }
            }
            _ => {}
        }
        if let (Some("delete"), Some(api)) =
            (g.annotations().get("then").map(String::as_str), &self.api)
        {
            api.delete(&g.name_any(), &DeleteParams::default()).await?;
        }
        Ok(GuardedPendingEvent::Activate.into())
    }

    async fn on_active(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedActiveNext, TestError> {
        Ok(Next::Stay)
    }

    async fn after_transition(
        &self,
        _: &Guarded,
        from: GuardedPhase,
        to: GuardedPhase,
    ) -> Result<(), TestError> {
        *self
            .hooks
            .lock()
            .unwrap()
            .entry((from.to_string(), to.to_string()))
            .or_default() += 1;
        if self.fail_first_hook.swap(false, Ordering::SeqCst) {
            return Err(TestError::Told);
        }
        Ok(())
    }
}

pub(super) fn guarded(name: &str, annotations: &[(&str, &str)]) -> Guarded {
    let mut g = Guarded::new(name, GuardedSpec {});
    g.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    g
}
