//! The conditions the ecosystem reads (kstatus, Flux, Argo CD, `kubectl wait`), kept by the
//! engine next to the spec's own, each with the generation it was computed from:
//! - `Ready` (normal-true), from the spec's `ready:` — only when the spec has one;
//! - `Stalled` (abnormal-true): the object cannot progress without help — a terminal phase that
//!   is not ready (a failure), a vetoed timeout, an undeclared phase held, a handler failing
//!   again and again;
//! - `Reconciling` (abnormal-true): it is still converging — not stalled, not terminal, not
//!   ready (by `ready:`, or by the handlers' own `Ready`).
//!
//! The two abnormal-true conditions are present only while true (removed, not set to `False`),
//! as Flux's controllers keep them: kstatus reads an absent one as false, and the status every
//! write carries stays small.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

pub(crate) use crate::machine::annotations::{READY, RECONCILING, STALLED};
use crate::machine::conditions::{self, status_of};
use crate::machine::data::Phase;
use crate::pure::message;

/// Why an object cannot progress without help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stall {
    /// In a terminal phase that is not ready: the machine gave up.
    TerminalPhase(&'static str),
    /// `before_transition` refused the phase's due timeout.
    TimeoutVetoed(String),
    /// The stored phase is not one the spec declares; the object is held.
    UndeclaredPhase(String),
    /// The handler failed this many times in a row, the last time with this error.
    Failing(u32, String),
    /// The reconcile panicked, saying this.
    Panicked(String),
    /// A handler or hook call ran past its deadline, as this says.
    HandlerTimedOut(String),
}

/// Every reason of a `Stalled` condition the engine writes ([`Stall`]).
pub const STALL_REASONS: [&str; 6] = [
    "TerminalPhase",
    "TimeoutVetoed",
    "UndeclaredPhase",
    "ReconcileFailing",
    "HandlerPanicked",
    "HandlerTimedOut",
];

impl Stall {
    fn reason(&self) -> &'static str {
        match self {
            Stall::TerminalPhase(_) => "TerminalPhase",
            Stall::TimeoutVetoed(_) => "TimeoutVetoed",
            Stall::UndeclaredPhase(_) => "UndeclaredPhase",
            Stall::Failing(..) => "ReconcileFailing",
            Stall::Panicked(_) => "HandlerPanicked",
            Stall::HandlerTimedOut(_) => "HandlerTimedOut",
        }
    }

    fn message(&self) -> String {
        match self {
            Stall::TerminalPhase(phase) => {
                format!("phase {phase} is terminal and not ready: only a person moves it on")
            }
            Stall::TimeoutVetoed(why) => format!("the phase's timeout was vetoed: {why}"),
            Stall::UndeclaredPhase(found) => format!(
                "status.phase is {found:?}, which the spec does not declare; held until it is corrected"
            ),
            Stall::Failing(times, error) => {
                format!("the handler failed {times} times in a row: {error}")
            }
            Stall::Panicked(said) | Stall::HandlerTimedOut(said) => {
                format!("{said}; retried with backoff")
            }
        }
    }
}

/// Whether the spec's `ready:` holds in `phase` with `conditions`; `None` without `ready:`.
pub fn ready<P: Phase>(phase: P, conditions: &[Condition]) -> Option<Result<(), String>> {
    let ready = P::MACHINE.ready.as_ref()?;
    let in_phase = if ready.phases.is_empty() {
        !phase.data().terminal
    } else {
        ready.phases.contains(&phase.index())
    };
    if !in_phase {
        let wanted: Vec<&str> = ready
            .phases
            .iter()
            .map(|&i| P::MACHINE.phases[i].name)
            .collect();
        return Some(Err(if wanted.is_empty() {
            format!("phase {phase} is terminal")
        } else {
            format!("phase {phase} is not {}", wanted.join(" or "))
        }));
    }
    for &c in ready.conditions {
        let name = P::MACHINE.conditions[c].name;
        if status_of(conditions, name) != Some(true) {
            return Some(Err(format!("{name} is not True")));
        }
    }
    Some(Ok(()))
}

/// Sets `Ready` (when the spec has `ready:`), and `Reconciling` and `Stalled` while true
/// (removed otherwise), on `conditions` for an object in `phase` (`None`: an undeclared one),
/// `stall` saying what else holds it.
pub fn maintain<P: Phase>(
    conditions: &mut Vec<Condition>,
    phase: Option<P>,
    stall: Option<Stall>,
    generation: Option<i64>,
    now: Timestamp,
) {
    let verdict = phase.and_then(|p| ready(p, conditions));
    let is_ready = match &verdict {
        Some(verdict) => Some(verdict.is_ok()),
        None => status_of(conditions, READY),
    };
    let mut set = |type_: &str, status: bool, reason: &str, message: String| {
        let status = conditions::status_str(status);
        // Reasons here are constants in the condition-reason format, and messages (a veto's or
        // an error's, of any length) are cut to what a condition holds: this cannot fail.
        let message = message::bounded(message, message::CONDITION_MESSAGE_LIMIT);
        let _ = conditions::set(conditions, type_, status, reason, message, generation, now);
    };
    match &verdict {
        Some(Ok(())) => set(READY, true, "Ready", String::new()),
        Some(Err(why)) => set(READY, false, "NotReady", why.clone()),
        None => {}
    }
    let terminal = phase.is_some_and(|p| p.data().terminal);
    let stall = stall.or_else(|| match phase {
        Some(p) if terminal && is_ready == Some(false) => Some(Stall::TerminalPhase(p.name())),
        _ => None,
    });
    if let Some(stall) = &stall {
        set(STALLED, true, stall.reason(), stall.message());
    }
    let progressing = stall.is_none() && !terminal && is_ready != Some(true);
    if progressing {
        let message = phase.map_or_else(String::new, |p| {
            let description = p.data().description;
            if description.is_empty() {
                format!("phase {p}")
            } else {
                format!("phase {p}: {description}")
            }
        });
        set(RECONCILING, true, "Progressing", message);
    }
    // Abnormal-true conditions are there only while true, as Flux keeps them (kstatus reads an
    // absent one as false): a settled object carries neither, and every write of it is two
    // conditions smaller.
    conditions.retain(|c| match c.type_.as_str() {
        STALLED => stall.is_some(),
        RECONCILING => progressing,
        _ => true,
    });
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::test_machines::DatabasePhase;

    fn conditions(set: &[(&str, bool)]) -> Vec<Condition> {
        let mut out = Vec::new();
        for (name, status) in set {
            let status = conditions::status_str(*status);
            conditions::set(
                &mut out,
                name,
                status,
                "Test",
                String::new(),
                Some(1),
                Timestamp::UNIX_EPOCH,
            )
            .unwrap();
        }
        out
    }

    #[test]
    fn every_stall_reason_is_listed_for_the_metric() {
        let stalls = [
            Stall::TerminalPhase("Failed"),
            Stall::TimeoutVetoed(String::new()),
            Stall::UndeclaredPhase(String::new()),
            Stall::Failing(5, String::new()),
            Stall::Panicked(String::new()),
            Stall::HandlerTimedOut(String::new()),
        ];
        assert_eq!(stalls.map(|s| s.reason()), STALL_REASONS);
    }

    #[test]
    fn a_veto_longer_than_a_condition_holds_still_stalls_the_object() {
        let mut vetoed = Vec::new();
        let stall = Stall::TimeoutVetoed("x".repeat(100_000));
        maintain(
            &mut vetoed,
            Some(DatabasePhase::Provisioning),
            Some(stall),
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        let stalled = vetoed.iter().find(|c| c.type_ == STALLED).expect("Stalled");
        assert_eq!(stalled.status, "True");
        assert_eq!(stalled.message.len(), message::CONDITION_MESSAGE_LIMIT);
    }

    #[test]
    fn abnormal_true_conditions_leave_when_they_stop_being_true() {
        use DatabasePhase::{Provisioning, Running};
        let now = Timestamp::UNIX_EPOCH;
        let mut object = conditions(&[("ServiceAvailable", true)]);
        maintain(&mut object, Some(Provisioning), None, Some(1), now);
        assert_eq!(status(&object, RECONCILING).0, "True");
        let failing = Stall::Failing(5, "the database said no".into());
        maintain(&mut object, Some(Provisioning), Some(failing), Some(1), now);
        assert_eq!(status(&object, STALLED).0, "True");
        assert!(absent(&object, RECONCILING), "stalled is not converging");
        maintain(&mut object, Some(Running), None, Some(1), now);
        assert!(
            absent(&object, STALLED) && absent(&object, RECONCILING),
            "{object:?}"
        );
        assert_eq!(status(&object, READY).0, "True");
    }

    fn absent(conditions: &[Condition], type_: &str) -> bool {
        conditions.iter().all(|c| c.type_ != type_)
    }

    fn status(conditions: &[Condition], type_: &str) -> (String, String) {
        let c = conditions.iter().find(|c| c.type_ == type_).expect(type_);
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn ready_is_the_specs_phases_and_conditions_and_stalled_a_terminal_phase_not_ready() {
        use DatabasePhase::{Failed, Provisioning, Running};
        // The test Database: `ready(phases(Running), conditions(ServiceAvailable))`.
        let now = Timestamp::UNIX_EPOCH;
        let mut up = conditions(&[("ServiceAvailable", true)]);
        maintain(&mut up, Some(Running), None, Some(2), now);
        assert_eq!(status(&up, READY), ("True".into(), "Ready".into()));
        assert!(absent(&up, RECONCILING) && absent(&up, STALLED), "{up:?}");
        let engine = [READY, RECONCILING, STALLED];
        assert!(
            up.iter()
                .filter(|c| engine.contains(&c.type_.as_str()))
                .all(|c| c.observed_generation == Some(2))
        );

        let mut provisioning = conditions(&[("ServiceAvailable", true)]);
        maintain(&mut provisioning, Some(Provisioning), None, Some(1), now);
        assert_eq!(
            status(&provisioning, READY),
            ("False".into(), "NotReady".into())
        );
        assert_eq!(
            status(&provisioning, RECONCILING),
            ("True".into(), "Progressing".into())
        );

        let mut failed = conditions(&[("ServiceAvailable", true)]);
        maintain(&mut failed, Some(Failed), None, Some(1), now);
        assert_eq!(
            status(&failed, STALLED),
            ("True".into(), "TerminalPhase".into())
        );
        assert!(absent(&failed, RECONCILING));

        let mut vetoed = Vec::new();
        let stall = Stall::TimeoutVetoed("a backup runs".into());
        maintain(&mut vetoed, Some(Provisioning), Some(stall), Some(1), now);
        assert_eq!(
            status(&vetoed, STALLED),
            ("True".into(), "TimeoutVetoed".into())
        );
        assert!(absent(&vetoed, RECONCILING));

        let mut held = Vec::new();
        let stall = Stall::UndeclaredPhase("Starting".into());
        maintain::<DatabasePhase>(&mut held, None, Some(stall), Some(1), now);
        assert_eq!(status(&held, STALLED).1, "UndeclaredPhase");
        assert!(
            held.iter().all(|c| c.type_ != READY),
            "no phase, no verdict"
        );
    }
}
