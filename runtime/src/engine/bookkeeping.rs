//! The engine's own status fields written outside a step (see `pure::bookkeeping`): after a
//! failed reconcile — a new object's initial phase, a pause that ended, the reconcile request
//! handled, `Stalled` once the handler has failed [`FAILURES_THAT_STALL`] times in a row (at
//! once when it panicked or ran past its deadline) —, and for an undeclared phase
//! held. One status write locked on the version read, only when something changed; a write
//! that does not land is said again after the next failure.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde_json::json;

use crate::engine::write::Write;
use crate::engine::{Engine, Reconcilable, ReconcileError};
use crate::machine::data::Phase;
use crate::pure::decide::{self, Transition};
use crate::pure::readiness::Stall;
use crate::pure::{bookkeeping, merge_patch, message, pause};

/// A handler failing this many times in a row makes its object `Stalled`.
pub(crate) const FAILURES_THAT_STALL: u32 = 5;

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// After the reconcile of `object` that `began` then failed with `error`, the
    /// `failures`-th time in a row: keeps what does not depend on the handler succeeding, and
    /// announces a resume.
    pub(crate) async fn failed(
        &self,
        object: &K,
        error: &ReconcileError,
        failures: u32,
        began: Timestamp,
    ) {
        let stall = match error {
            ReconcileError::Handler(cause) if failures >= FAILURES_THAT_STALL => {
                Some(Stall::Failing(failures, message::sentence(cause.as_ref())))
            }
            // At once: a panic says the code cannot handle this object; a person must look.
            ReconcileError::Panicked(panic) => Some(Stall::Panicked(panic.to_string())),
            // At once too: a hung call says the handler waits for something that does not come.
            ReconcileError::HandlerTimedOut(timed_out) => {
                Some(Stall::HandlerTimedOut(timed_out.to_string()))
            }
            _ => None,
        };
        let resumed = pause::requested(object.meta()).is_none()
            && object
                .machine_status()
                .is_some_and(|s| pause::paused_since(&s.conditions).is_some());
        let new = object
            .machine_status()
            .and_then(|s| s.phase.as_ref())
            .is_none();
        match self.keep(object, stall, began).await {
            Ok(Some(Write::Landed(_))) => {
                if new {
                    // It entered its initial phase (see `pure::bookkeeping`): reported as a
                    // step's first write is.
                    let initialised = Transition {
                        from: None,
                        to: K::Phase::initial(),
                        reason: decide::PHASE_CHANGED,
                    };
                    if let Err(err) = self.transitioned(object, &initialised, None).await {
                        tracing::debug!(object = %object.name_any(), %err, "could not report the initial phase");
                    }
                }
                if resumed {
                    self.resumed(object).await;
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(object = %object.name_any(), %err, "could not keep the status of a failed reconcile");
            }
        }
    }

    /// Writes the machine's fields `pure::bookkeeping` keeps for `object`, `stall` saying what
    /// holds it (a new object entered its initial phase when the step that failed `began`);
    /// `None` when there was nothing to write.
    pub(crate) async fn keep(
        &self,
        object: &K,
        stall: Option<Stall>,
        began: Timestamp,
    ) -> Result<Option<Write<K>>, ReconcileError> {
        if let Some(stall) = &stall {
            tracing::info!(object = %object.name_any(), ?stall, "stalled");
        }
        let now = Timestamp::now();
        let Some(machine) =
            bookkeeping::kept(object.machine_status(), object.meta(), stall, began, now)
        else {
            return Ok(None);
        };
        let mut status = object.status_of().cloned().unwrap_or_default();
        *K::machine_in_mut(&mut status) = machine;
        let Some(patch) = merge_patch::status_diff(object.status_of(), &status)? else {
            return Ok(None);
        };
        let api = self.api_for(object);
        let patch = json!({ "status": patch });
        self.write_status(&api, object, &patch).await.map(Some)
    }
}
