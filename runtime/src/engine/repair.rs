//! Drift on the API server: detect it (see [`crate::pure::drift`]), apply the spec's policy,
//! and say what was found and done (a Warning Event `PhaseDrift`, or a Normal `PhaseMigrated`
//! for a retired phase; `kube_fsm_drift_total`). A person's move along a manual edge is no
//! drift: it is announced (`ManualTransition`, naming who wrote the phase) and followed.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::engine::write::Write;
use crate::engine::{Attempt, Engine, Reconcilable, ReconcileError};
use crate::machine::conditions::truncate;
use crate::machine::data::Phase;
use crate::machine::status::PhaseValue;
use crate::pure::drift::{Drift, Remedy, manual_move};
use crate::pure::readiness::Stall;
use crate::pure::writer::phase_writer;

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Detects drift and applies the spec's policy. `None`: go on with the step.
    pub(crate) async fn drift(
        &self,
        api: &Api<K>,
        object: &K,
    ) -> Result<Option<Attempt>, ReconcileError> {
        let status = object.machine_status();
        let stored = status.and_then(|s| s.phase.as_ref());
        let last = self
            .memory
            .read(object, |e| e.accepted.map(|(phase, _)| phase))
            .flatten();
        let Some(drift) = Drift::detect(last, stored) else {
            if let Some(PhaseValue::Known(phase)) = stored {
                let left = status.and_then(|s| s.entered_phase.as_ref());
                if let Some(from) = manual_move(last, left, *phase) {
                    self.moved_by_hand(api, object, from, *phase).await;
                }
                let entered = status.and_then(|s| s.entered_at());
                self.memory.with(object, |e| {
                    e.accepted = Some((*phase, entered));
                    e.held = None;
                });
            }
            return Ok(None);
        };
        let mut remedy = drift.remedy(K::machine().drift);
        let found = stored.map(|p| p.as_str().to_owned()).unwrap_or_default();
        let insists = matches!(remedy, Remedy::Revert(_))
            && self
                .memory
                .read(object, |e| e.reverted.as_deref() == Some(found.as_str()))
                == Some(true);
        if insists {
            // Reverted once already: another writer insists. Never revert in a loop.
            remedy = drift.unrevertable();
        }
        let written = match remedy {
            Remedy::Revert(phase) => Some(self.revert(api, object, phase).await),
            Remedy::Migrate(phase) => Some(self.migrate(api, object, phase).await),
            _ => None,
        };
        let mut stop = None;
        match written {
            None => {}
            Some(Ok(Write::Landed(_))) => {
                if matches!(remedy, Remedy::Revert(_)) {
                    self.memory
                        .with(object, |e| e.reverted = Some(found.clone()));
                }
                stop = Some(Attempt::Done(None));
            }
            Some(Ok(write)) => return Ok(Option::<Attempt>::from(write)),
            // The API server refuses the way back (its CEL rule).
            Some(Err(ReconcileError::Request {
                source: kube::Error::Api(status),
                ..
            })) if status.code == 422 => {
                tracing::warn!(object = %object.name_any(), message = %status.message, "write refused");
                remedy = drift.unrevertable();
            }
            Some(Err(err)) => return Err(err),
        }
        let entered = status.and_then(|s| s.entered_at());
        match remedy {
            Remedy::Adopt(phase) => self.memory.with(object, |e| {
                e.accepted = Some((phase, entered));
            }),
            Remedy::Revert(phase) | Remedy::Migrate(phase) => {
                let entered = self.entry_time_of(object, phase);
                self.memory.with(object, |e| {
                    e.accepted = Some((phase, entered));
                });
            }
            Remedy::Reset => self.memory.with(object, |e| e.accepted = None),
            Remedy::Hold => return self.hold(object, &drift, found).await.map(Some),
        }
        self.report_drift(object, &drift, remedy, insists).await;
        Ok(stop)
    }

    /// Says that a person moved the object along a manual edge (a Normal `ManualTransition`
    /// Event naming the field manager that wrote the phase, read from the object's
    /// managedFields, which the cache does not keep) and counts the transition. The phase's
    /// clock starts with the step that follows.
    async fn moved_by_hand(&self, api: &Api<K>, object: &K, from: K::Phase, to: K::Phase) {
        let read = api.get(&object.name_any()).await;
        let writer = match &read {
            Ok(fresh) => phase_writer(fresh.meta()).map(str::to_owned),
            Err(err) => {
                tracing::debug!(object = %object.name_any(), %err, "could not read who moved the phase");
                None
            }
        };
        // A field manager is the client's own word, kept in managedFields (which anyone who
        // may write the object can rewrite): the Event says so. Who it was for certain is in
        // the API server's audit log, or the webhook's `manualBy` decided it.
        let by = writer.map_or_else(|| "someone".to_owned(), |w| format!("field manager {w}"));
        let note = format!(
            "{from} → {to} by {by}: a manual transition of the spec, which only people take; \
             {to} starts now (the writer as the object's managedFields name it; the audit log \
             has the authenticated user)"
        );
        tracing::info!(object = %object.name_any(), state.from = from.name(), state.to = to.name(), %by, "manual transition");
        self.metrics
            .transition(Some(&PhaseValue::Known(from)), to.name(), None);
        let action = format!("{from}To{to}");
        self.event(object, EventType::Normal, "ManualTransition", action, note)
            .await;
    }

    /// Leaves an object with an undeclared phase as it is (its phase unwritten), says so once
    /// per distinct value (an Event, and `Stalled`), and looks again with backoff.
    async fn hold(
        &self,
        object: &K,
        drift: &Drift<K::Phase>,
        found: String,
    ) -> Result<Attempt, ReconcileError> {
        let value = found.clone();
        let (first, count) = self.memory.with(object, |e| match &mut e.held {
            Some((value, count)) if *value == found => {
                *count = count.saturating_add(1);
                (false, *count)
            }
            held => {
                *held = Some((found, 1));
                (true, 1)
            }
        });
        if first {
            self.report_drift(object, drift, Remedy::Hold, false).await;
            let stall = Stall::UndeclaredPhase(value);
            let written = self.keep(object, Some(stall), Timestamp::now()).await?;
            if let Some(stop) = written.and_then(Option::<Attempt>::from) {
                // Written over by someone meanwhile: look again at what they wrote.
                self.memory.with(object, |e| e.held = None);
                return Ok(stop);
            }
        }
        Ok(Attempt::Done(Some(self.config.backoff.jittered(count))))
    }

    /// Counts and announces drift; `insists` when a value written back once came again.
    async fn report_drift(
        &self,
        object: &K,
        drift: &Drift<K::Phase>,
        remedy: Remedy<K::Phase>,
        insists: bool,
    ) {
        self.metrics.drift(remedy.label());
        let mut note = drift.describe(remedy);
        if insists {
            note.push_str(
                " instead of writing it back again: another writer insists on it, and \
                 the controller does not fight over the phase in a loop",
            );
        }
        let (type_, reason, action) = match remedy {
            Remedy::Migrate(_) => (EventType::Normal, "PhaseMigrated", "Migrate"),
            _ => (EventType::Warning, "PhaseDrift", "Drift"),
        };
        tracing::warn!(object = %object.name_any(), %note, "{reason}");
        self.event(object, type_, reason, action.into(), note).await;
    }

    /// When `phase` was entered, as far as this controller knows (for a revert: the entry
    /// time it had, so repeated hand edits never postpone its timeout).
    fn entry_time_of(&self, object: &K, phase: K::Phase) -> Option<Timestamp> {
        self.memory
            .read(object, |e| match e.accepted {
                Some((accepted, entered)) if accepted == phase => entered,
                _ => None,
            })
            .flatten()
    }

    /// Writes `phase` back over a drifted status with the entry time it had, locked on the
    /// resourceVersion read. Deliberately not checked against the edges: it restores the
    /// controller's own record.
    async fn revert(
        &self,
        api: &Api<K>,
        object: &K,
        phase: K::Phase,
    ) -> Result<Write<K>, ReconcileError> {
        let entered = self
            .entry_time_of(object, phase)
            .unwrap_or_else(Timestamp::now);
        let patch = json!({ "status": {
            "phase": phase.name(),
            "enteredPhase": phase.name(),
            "lastPhaseTransitionTime": truncate(entered),
        }});
        self.write_status(api, object, &patch).await
    }

    /// Moves a retired phase to its successor. The entry time stays when it belonged to the
    /// retired phase (or to no phase in particular): the object has been in the renamed phase
    /// since then.
    async fn migrate(
        &self,
        api: &Api<K>,
        object: &K,
        phase: K::Phase,
    ) -> Result<Write<K>, ReconcileError> {
        let status = object.machine_status();
        let kept = status.is_some_and(|s| {
            s.last_phase_transition_time.is_some()
                && (s.entered_phase.is_none() || s.entered_phase == s.phase)
        });
        let mut patch =
            json!({ "status": { "phase": phase.name(), "enteredPhase": phase.name() } });
        if !kept {
            patch["status"]["lastPhaseTransitionTime"] = json!(truncate(Timestamp::now()));
        }
        self.write_status(api, object, &patch).await
    }
}
