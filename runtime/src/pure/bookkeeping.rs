//! The engine's own status fields that must not wait for a step to succeed: a pause that has
//! ended (`Paused` False, the time paused settled into `pausedSeconds`, so the phase's timeout
//! runs again), the reconcile request handled (`lastHandledReconcileAt`, as Flux records it
//! whether or not the reconcile succeeded), `Stalled` with the generation it was said of, and
//! with it, for a new object, its initial phase with its entry time: an object stalled in its
//! first step is in its initial phase all the same, and the phase's timeout runs from there (a
//! handler that fails or hangs on every call does not hold the way out back). A failed first
//! step that stalls nothing writes nothing (an API server in trouble gets no extra writes).
//! A successful step writes the same fields itself (see `decide::next_status`).

use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use crate::machine::data::Phase;
use crate::machine::status::MachineStatus;
use crate::pure::decide::{self, Position};
use crate::pure::pause;
use crate::pure::readiness::{self, Stall};

/// The machine's status of an object whose step failed or did not run, from the `stored` one:
/// a pause that `meta` no longer asks for ended, the reconcile request `meta` carries handled,
/// `stall` (when something holds the object) said of the current generation, with a new
/// object's initial phase, entered when the step that failed `began`. `None` when the stored
/// status already says all that.
pub fn kept<P: Phase>(
    stored: Option<&MachineStatus<P>>,
    meta: &ObjectMeta,
    stall: Option<Stall>,
    began: Timestamp,
    now: Timestamp,
) -> Option<MachineStatus<P>> {
    let before = stored.cloned().unwrap_or_default();
    let mut status = before.clone();
    let generation = meta.generation;
    if status.phase.is_none() && stall.is_some() && pause::requested(meta).is_none() {
        let position = Position::of(stored, now);
        let conditions = std::mem::take(&mut status.conditions);
        status = decide::next_status(stored, &position, None, conditions, generation, began);
    }
    if pause::requested(meta).is_none() && pause::paused_since(&status.conditions).is_some() {
        let position = Position::of(stored, now);
        if position.is_settled() && position.entered_at.is_some() {
            let paused = i64::try_from(position.paused.as_secs()).unwrap_or(i64::MAX);
            status.paused_seconds = (paused > 0).then_some(paused);
        }
        pause::resume(&mut status.conditions, generation, now);
    }
    if let Some(requested) = pause::reconcile_requested(meta) {
        status.last_handled_reconcile_at = Some(requested);
    }
    if let Some(stall) = stall {
        let phase = status.phase();
        readiness::maintain(&mut status.conditions, phase, Some(stall), generation, now);
        status.observed_generation = generation.or(status.observed_generation);
    }
    (status != before).then_some(status)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::machine::status::PhaseValue;
    use crate::test_machines::DatabasePhase;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn meta(generation: i64, annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            generation: Some(generation),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    /// In `Provisioning` since `at(0)`, paused at `at(10)`.
    fn paused() -> MachineStatus<DatabasePhase> {
        let mut status = MachineStatus {
            phase: Some(PhaseValue::Known(DatabasePhase::Provisioning)),
            observed_generation: Some(1),
            last_phase_transition_time: Some(Time(at(0))),
            entered_phase: Some(PhaseValue::Known(DatabasePhase::Provisioning)),
            ..MachineStatus::default()
        };
        assert!(pause::pause(
            &mut status.conditions,
            "why".into(),
            Some(1),
            at(10)
        ));
        status
    }

    #[test]
    fn a_pause_that_ended_is_settled_without_a_step() {
        let kept = kept(Some(&paused()), &meta(1, &[]), None, at(70), at(70)).expect("resumed");
        assert_eq!(pause::paused_since(&kept.conditions), None);
        assert_eq!(kept.paused_seconds, Some(60));
        // The phase's clock runs again from now: at(0) + 60 s paused.
        let position = Position::of(Some(&kept), at(100));
        assert_eq!(position.clock(), Some(at(60)));
        assert_eq!(position.clock(), Position::of(Some(&kept), at(200)).clock());
    }

    #[test]
    fn a_pause_still_asked_for_is_kept() {
        let still = meta(1, &[(pause::PAUSED_ANNOTATION, "true")]);
        assert_eq!(kept(Some(&paused()), &still, None, at(70), at(70)), None);
    }

    #[test]
    fn a_new_object_whose_first_step_failed_is_in_its_initial_phase_from_then() {
        let stall = Stall::HandlerTimedOut("the handler did not finish".into());
        let entered = kept::<DatabasePhase>(None, &meta(1, &[]), Some(stall.clone()), at(1), at(3))
            .expect("written");
        assert_eq!(
            entered.phase,
            Some(PhaseValue::Known(DatabasePhase::Pending))
        );
        assert_eq!(
            Position::of(Some(&entered), at(9)).clock(),
            Some(at(1)),
            "entered when the step began"
        );
        assert!(entered.conditions.iter().any(|c| c.type_ == "Stalled"));
        assert_eq!(
            kept(
                Some(&entered),
                &meta(1, &[]),
                Some(stall.clone()),
                at(9),
                at(9)
            ),
            None,
            "nothing more to say"
        );
        let paused = meta(1, &[(pause::PAUSED_ANNOTATION, "true")]);
        assert_eq!(
            kept::<DatabasePhase>(None, &paused, Some(stall), at(3), at(3)).and_then(|s| s.phase),
            None,
            "a paused object is not stepped into its phase"
        );
    }

    #[test]
    fn a_reconcile_request_is_recorded_once() {
        let asked = meta(1, &[(pause::RECONCILE_ANNOTATION, "now-1")]);
        let stored = MachineStatus::<DatabasePhase>::default();
        let recorded = kept(Some(&stored), &asked, None, at(0), at(0)).expect("recorded");
        assert_eq!(recorded.last_handled_reconcile_at.as_deref(), Some("now-1"));
        assert_eq!(kept(Some(&recorded), &asked, None, at(5), at(5)), None);
        assert!(
            kept::<DatabasePhase>(None, &asked, None, at(0), at(0)).is_some(),
            "no status yet"
        );
        assert_eq!(
            kept::<DatabasePhase>(None, &meta(1, &[]), None, at(0), at(0)),
            None,
            "nothing to keep: a failed step that stalls nothing writes nothing"
        );
    }

    #[test]
    fn stalled_is_said_of_the_current_generation_and_only_once() {
        let stored = paused();
        let mut running = stored.clone();
        pause::resume(&mut running.conditions, Some(1), at(20));
        let failing = Stall::Failing(5, "the database said no".into());
        let stalled = kept(
            Some(&running),
            &meta(3, &[]),
            Some(failing.clone()),
            at(30),
            at(30),
        )
        .expect("stalled");
        assert_eq!(stalled.observed_generation, Some(3));
        let condition = stalled
            .conditions
            .iter()
            .find(|c| c.type_ == readiness::STALLED)
            .expect("Stalled");
        assert_eq!(
            (condition.status.as_str(), condition.observed_generation),
            ("True", Some(3))
        );
        assert_eq!(
            kept(
                Some(&stalled),
                &meta(3, &[]),
                Some(failing),
                at(39),
                at(30) + SignedDuration::from_secs(9)
            ),
            None,
            "said already"
        );
    }
}
