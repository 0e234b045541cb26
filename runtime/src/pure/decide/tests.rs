//! The pure decision core, exhaustively over the example machines: every (phase, target) pair,
//! every combination of condition statuses for the `when` rules, time-in-phase boundaries,
//! self-loops, status diffs and requeue choices.

use std::time::Duration;

use crate::machine::data::Phase;
use crate::machine::next::Choice;
use crate::machine::status::{MachineStatus, PhaseValue};
use crate::pure::decide::{self, Position};
use crate::test_machines::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

fn condition(type_: &str, status: Option<bool>) -> Option<Condition> {
    let status = status?;
    Some(Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: "Test".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(at(0)),
    })
}

/// Every assignment of True / False / absent to the given condition types.
fn assignments(types: &[&'static str]) -> Vec<Vec<(&'static str, Option<bool>)>> {
    let mut out = vec![Vec::new()];
    for t in types {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                [None, Some(true), Some(false)].map(|s| {
                    let mut v = prefix.clone();
                    v.push((*t, s));
                    v
                })
            })
            .collect();
    }
    out
}

fn conditions(assignment: &[(&'static str, Option<bool>)]) -> Vec<Condition> {
    assignment
        .iter()
        .filter_map(|(t, s)| condition(t, *s))
        .collect()
}

fn get(assignment: &[(&str, Option<bool>)], t: &str) -> Option<bool> {
    assignment
        .iter()
        .find(|(n, _)| *n == t)
        .and_then(|(_, s)| *s)
}

#[test]
fn explicit_choices_are_legal_exactly_on_declared_edges_the_engine_takes() {
    fn check<P: Phase>(all: &[P]) {
        for &from in all {
            for &to in all {
                let result = decide::choose(
                    from,
                    Choice::To {
                        phase: to,
                        event: None,
                    },
                    &[],
                );
                // A manual edge (Database's Failed -> Pending) is only people's to take.
                if from.can_transition_to(to) && !from.is_manual_edge(to) {
                    assert_eq!(
                        result,
                        Ok(Some((to, decide::PHASE_CHANGED))),
                        "{from} -> {to}"
                    );
                } else {
                    let err = result.unwrap_err();
                    assert_eq!((err.from, err.to), (from.name(), to.name()));
                }
            }
        }
    }
    check(&DatabasePhase::ALL);
    check(&PipelinePhase::ALL);
    assert!(DatabasePhase::Failed.is_manual_edge(DatabasePhase::Pending));
    assert!(!DatabasePhase::Failed.engine_takes(DatabasePhase::Pending));
    check(&RetrierPhase::ALL);
    let fired = decide::choose(
        DatabasePhase::Pending,
        Choice::To {
            phase: DatabasePhase::Provisioning,
            event: Some("Accept"),
        },
        &[],
    );
    assert_eq!(fired, Ok(Some((DatabasePhase::Provisioning, "Accept"))));
}

#[test]
fn database_rules_for_every_condition_combination() {
    use DatabasePhase::*;
    for assignment in assignments(&["PodsReady", "ServiceAvailable"]) {
        let conds = conditions(&assignment);
        let pods = get(&assignment, "PodsReady");
        let svc = get(&assignment, "ServiceAvailable");
        let expected = |phase| match phase {
            Provisioning if pods == Some(true) => Some(Running),
            Running if svc == Some(false) => Some(Degraded),
            Degraded if svc == Some(true) && pods == Some(true) => Some(Running),
            _ => None,
        };
        for phase in DatabasePhase::ALL {
            assert_eq!(
                decide::first_rule(phase, &conds),
                expected(phase),
                "{phase} with {assignment:?}"
            );
            // Stay + rules through `choose`, as the engine calls it.
            let chosen = decide::choose(phase, Choice::Stay, &conds)
                .unwrap()
                .map(|(to, _)| to);
            assert_eq!(chosen, expected(phase));
        }
    }
}

#[test]
fn pipeline_rules_are_tried_in_spec_order() {
    use PipelinePhase::*;
    for assignment in assignments(&["Scheduled", "Complete", "Failed"]) {
        let conds = conditions(&assignment);
        let (scheduled, complete, failed) = (
            get(&assignment, "Scheduled"),
            get(&assignment, "Complete"),
            get(&assignment, "Failed"),
        );
        // Pending: `Scheduled` (listed first) wins over `Failed`.
        let pending = if scheduled == Some(true) {
            Some(Running)
        } else if failed == Some(true) {
            Some(Failed)
        } else {
            None
        };
        // Running: Succeeded needs Complete and !Failed, then Failed.
        let running = if complete == Some(true) && failed == Some(false) {
            Some(Succeeded)
        } else if failed == Some(true) {
            Some(Failed)
        } else {
            None
        };
        assert_eq!(
            decide::first_rule(Pending, &conds),
            pending,
            "{assignment:?}"
        );
        assert_eq!(
            decide::first_rule(Running, &conds),
            running,
            "{assignment:?}"
        );
        assert_eq!(decide::first_rule(Succeeded, &conds), None);
    }
}

#[test]
fn timeouts_fire_at_the_boundary_and_not_before() {
    let after = 600; // Provisioning: 10m -> Failed
    let entered = at(0);
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, Some(entered), at(after - 1)),
        None
    );
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, Some(entered), at(after)),
        Some((DatabasePhase::Failed, "ProvisioningTimedOut"))
    );
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, Some(entered), at(after + 3600)),
        Some((DatabasePhase::Failed, "ProvisioningTimedOut"))
    );
    let just_before = at(after) - SignedDuration::from_millis(1);
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, Some(entered), just_before),
        None
    );
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, None, at(after * 10)),
        None,
        "no entry time, no timeout"
    );
    for phase in [
        DatabasePhase::Pending,
        DatabasePhase::Running,
        DatabasePhase::Failed,
    ] {
        assert_eq!(
            decide::timeout_due(phase, Some(entered), at(1_000_000)),
            None,
            "{phase} has no timeout"
        );
    }
    // The default reason is `<Phase>TimedOut`.
    assert_eq!(
        decide::timeout_due(RetrierPhase::Waiting, Some(entered), at(300)),
        Some((RetrierPhase::GaveUp, "WaitingTimedOut"))
    );
}

fn status<P: Copy>(phase: P, entered: i64, conditions: Vec<Condition>) -> MachineStatus<P> {
    MachineStatus {
        phase: Some(PhaseValue::Known(phase)),
        conditions,
        observed_generation: Some(1),
        last_phase_transition_time: Some(Time(at(entered))),
        entered_phase: Some(PhaseValue::Known(phase)),
        ..MachineStatus::default()
    }
}

/// Whether the engine writes `new` over `stored`: whether the merge patch between their JSON
/// forms is not empty (as the step plan computes it). Times are stored at whole seconds, and compare so.
fn needs_write<P: Phase>(stored: Option<&MachineStatus<P>>, new: &MachineStatus<P>) -> bool {
    let Some(stored) = stored else { return true };
    let encode = |status: &MachineStatus<P>| serde_json::to_value(status).unwrap_or_default();
    crate::pure::merge_patch::diff(&encode(stored), &encode(new)).is_some()
}

#[test]
fn the_entry_time_belongs_to_the_phase_it_was_stamped_for() {
    // Stamped for Pending at 0; someone else then wrote Provisioning (10 min timeout).
    let mut edited = status(DatabasePhase::Pending, 0, Vec::new());
    edited.phase = Some(PhaseValue::Known(DatabasePhase::Provisioning));
    let position = Position::of(Some(&edited), at(0));
    assert_eq!(
        position.entered_at, None,
        "Pending's time is not Provisioning's"
    );
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, position.entered_at, at(900)),
        None
    );
    let next = decide::next_status(Some(&edited), &position, None, Vec::new(), Some(1), at(900));
    assert_eq!(
        next.last_phase_transition_time,
        Some(Time(at(900))),
        "clock starts now"
    );
    assert_eq!(
        next.entered_phase,
        Some(PhaseValue::Known(DatabasePhase::Provisioning))
    );
    assert!(needs_write(Some(&edited), &next));
    // Written before `enteredPhase` existed: the time is taken as the current phase's.
    let mut legacy = status(DatabasePhase::Provisioning, 0, Vec::new());
    legacy.entered_phase = None;
    assert_eq!(Position::of(Some(&legacy), at(0)).entered_at, Some(at(0)));
}

#[test]
fn unchanged_steps_write_nothing_and_keep_the_entry_time() {
    let stored = status(
        DatabasePhase::Running,
        10,
        conditions(&[("PodsReady", Some(true))]),
    );
    let position = Position::of(Some(&stored), at(500));
    assert_eq!(
        (position.phase, position.entered_at),
        (DatabasePhase::Running, Some(at(10)))
    );
    let next = decide::next_status(
        Some(&stored),
        &position,
        None,
        stored.conditions.clone(),
        Some(1),
        at(500),
    );
    assert_eq!(next, stored);
    assert!(!needs_write(Some(&stored), &next));
    // Sub-second differences in stored times are not changes.
    let mut jittered = next.clone();
    jittered.conditions[0].last_transition_time = Time(at(0) + SignedDuration::from_millis(400));
    assert!(!needs_write(Some(&stored), &jittered));
    // A new generation is a change.
    let next = decide::next_status(
        Some(&stored),
        &position,
        None,
        stored.conditions.clone(),
        Some(2),
        at(500),
    );
    assert!(needs_write(Some(&stored), &next));
}

#[test]
fn transitions_and_self_loops_restart_the_phase_clock() {
    let stored = status(RetrierPhase::Waiting, 10, Vec::new());
    let position = Position::of(Some(&stored), at(0));
    let chosen = decide::choose(
        RetrierPhase::Waiting,
        Choice::To {
            phase: RetrierPhase::Waiting,
            event: Some("Retry"),
        },
        &[],
    );
    assert_eq!(chosen, Ok(Some((RetrierPhase::Waiting, "Retry"))));
    let next = decide::next_status(
        Some(&stored),
        &position,
        Some(RetrierPhase::Waiting),
        Vec::new(),
        Some(1),
        at(100),
    );
    assert_eq!(next.last_phase_transition_time, Some(Time(at(100))));
    assert!(needs_write(Some(&stored), &next));
    // A self-loop is not declared for Working: refused.
    assert!(
        decide::choose(
            RetrierPhase::Working,
            Choice::To {
                phase: RetrierPhase::Working,
                event: None
            },
            &[]
        )
        .is_err()
    );
}

#[test]
fn new_and_drifted_objects_start_in_the_initial_phase() {
    let fresh = Position::<DatabasePhase>::of(None, at(0));
    assert_eq!(
        (fresh.phase, fresh.stored.clone(), fresh.is_settled()),
        (DatabasePhase::Pending, None, false)
    );
    let next = decide::next_status(None, &fresh, None, Vec::new(), Some(1), at(5));
    assert_eq!(next.phase, Some(PhaseValue::Known(DatabasePhase::Pending)));
    assert_eq!(next.last_phase_transition_time, Some(Time(at(5))));
    assert!(needs_write(None, &next));

    let mut drifted = status(DatabasePhase::Running, 1, Vec::new());
    drifted.phase = Some(PhaseValue::Unknown("Frobnicating".into()));
    let position = Position::of(Some(&drifted), at(0));
    assert_eq!(position.phase, DatabasePhase::Pending);
    assert!(!position.is_settled());
    let next = decide::next_status(Some(&drifted), &position, None, Vec::new(), Some(1), at(7));
    assert_eq!(next.phase, Some(PhaseValue::Known(DatabasePhase::Pending)));
    assert!(needs_write(Some(&drifted), &next));
}

#[test]
fn requeue_prefers_the_handler_then_the_phase_and_never_misses_a_timeout() {
    let entered = at(0);
    // Provisioning: requeueAfter 10s, timeout 10m.
    assert_eq!(
        decide::requeue(DatabasePhase::Provisioning, Some(entered), None, at(0)),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        decide::requeue(
            DatabasePhase::Provisioning,
            Some(entered),
            Some(Duration::from_secs(3)),
            at(0)
        ),
        Some(Duration::from_secs(3))
    );
    // Close to the timeout, wake for it (one second after the deadline).
    assert_eq!(
        decide::requeue(DatabasePhase::Provisioning, Some(entered), None, at(595)),
        Some(Duration::from_secs(6))
    );
    assert_eq!(
        decide::requeue(DatabasePhase::Degraded, Some(entered), None, at(0)),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        decide::requeue(DatabasePhase::Running, Some(entered), None, at(0)),
        None,
        "wait for change"
    );
    assert_eq!(
        decide::requeue(
            DatabasePhase::Failed,
            Some(entered),
            Some(Duration::from_secs(1)),
            at(0)
        ),
        None,
        "terminal"
    );
    // Waiting: requeueAfter 30s, timeout 5m (no requeue from a handler).
    assert_eq!(
        decide::requeue(RetrierPhase::Waiting, Some(entered), None, at(290)),
        Some(Duration::from_secs(11))
    );
}

#[test]
fn time_paused_in_a_phase_does_not_count_toward_its_timeout() {
    use crate::pure::pause;
    // Provisioning (10 min timeout) since 0, paused for 300 s earlier, paused again since 400.
    let mut stored = status(DatabasePhase::Provisioning, 0, Vec::new());
    stored.paused_seconds = Some(300);
    pause::pause(&mut stored.conditions, "why".into(), Some(1), at(400));
    let position = Position::of(Some(&stored), at(900));
    assert_eq!(position.paused, Duration::from_secs(800));
    assert_eq!(position.clock(), Some(at(800)));
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, position.clock(), at(900)),
        None,
        "100 s of the phase's 600 counted"
    );
    assert!(
        decide::timeout_due(DatabasePhase::Provisioning, position.clock(), at(1_400)).is_some()
    );
    // The step that resumes it keeps the time paused and says it is not paused any more.
    let conditions = stored.conditions.clone();
    let next = decide::next_status(Some(&stored), &position, None, conditions, Some(1), at(900));
    assert_eq!(next.paused_seconds, Some(800));
    assert_eq!(pause::paused_since(&next.conditions), None);
    assert_eq!(next.conditions[0].status, "False");
    assert_eq!(next.last_phase_transition_time, Some(Time(at(0))));
    // Leaving the phase leaves its paused time behind.
    let moved = decide::next_status(
        Some(&stored),
        &position,
        Some(DatabasePhase::Running),
        Vec::new(),
        Some(1),
        at(900),
    );
    assert_eq!(moved.paused_seconds, None);
}

#[test]
fn the_wait_for_a_timeout_counts_from_the_clock_and_ends_when_it_is_due() {
    let position = |entered: Option<i64>, paused: u64| Position {
        phase: DatabasePhase::Provisioning,
        stored: Some(PhaseValue::Known(DatabasePhase::Provisioning)),
        entered_at: entered.map(at),
        paused: Duration::from_secs(paused),
    };
    // Provisioning: 10m -> Failed; looked at a second after the deadline.
    assert_eq!(
        decide::until_timeout(&position(Some(0), 0), at(100)),
        Some(Duration::from_secs(501))
    );
    assert_eq!(
        decide::until_timeout(&position(Some(0), 60), at(100)),
        Some(Duration::from_secs(561)),
        "the time paused does not count"
    );
    assert_eq!(
        decide::until_timeout(&position(Some(0), 0), at(600)),
        None,
        "due"
    );
    assert_eq!(decide::until_timeout(&position(None, 0), at(0)), None);
    let running = Position {
        phase: DatabasePhase::Running,
        ..position(Some(0), 0)
    };
    assert_eq!(decide::until_timeout(&running, at(0)), None, "no timeout");
}

#[test]
fn a_clock_written_by_anyone_is_trusted_only_as_far_as_it_can_be() {
    // Entered "tomorrow", paused for a century: the timeout is not pushed out forever.
    let mut stored = status(DatabasePhase::Provisioning, 86_400, Vec::new());
    stored.paused_seconds = Some(3_000_000_000);
    let now = at(0);
    let position = Position::of(Some(&stored), now);
    assert_eq!(
        position.entered_at,
        Some(now),
        "a future entry time counts as now"
    );
    assert_eq!(
        position.paused,
        Duration::ZERO,
        "no time in phase, no time paused"
    );
    // In the phase 100 s, "paused" for 10 000 s: at most the 100 s count.
    let mut stored = status(DatabasePhase::Provisioning, 0, Vec::new());
    stored.paused_seconds = Some(10_000);
    let position = Position::of(Some(&stored), at(100));
    assert_eq!(position.paused, Duration::from_secs(100));
    assert_eq!(
        decide::timeout_due(DatabasePhase::Provisioning, position.clock(), at(700)),
        Some((DatabasePhase::Failed, "ProvisioningTimedOut")),
        "due 600 s after the clock, which started at the latest now"
    );
}

#[test]
fn a_handler_may_run_its_deadline_but_never_past_the_phase_timeout() {
    let five_minutes = Duration::from_secs(300);
    let provisioning = Position {
        phase: DatabasePhase::Provisioning,
        stored: Some(PhaseValue::Known(DatabasePhase::Provisioning)),
        entered_at: Some(at(0)),
        paused: Duration::ZERO,
    };
    // Provisioning: no handlerTimeout (the default), timeout 10m.
    let own = |after: u64| decide::HandlerDeadline {
        after: Duration::from_secs(after),
        by_timeout: false,
    };
    assert_eq!(
        decide::handler_deadline(&provisioning, five_minutes, at(0)),
        own(300)
    );
    assert_eq!(
        decide::handler_deadline(&provisioning, five_minutes, at(420)),
        decide::HandlerDeadline {
            after: Duration::from_secs(180),
            by_timeout: true
        },
        "the timeout comes first"
    );
    assert_eq!(
        decide::handler_deadline(&provisioning, five_minutes, at(700)),
        own(300),
        "the timeout is due already: the step takes it, a vetoed one leaves the handler its own deadline"
    );
    // Waiting: handlerTimeout 20s, timeout 5m.
    let waiting = Position {
        phase: RetrierPhase::Waiting,
        stored: Some(PhaseValue::Known(RetrierPhase::Waiting)),
        entered_at: Some(at(0)),
        paused: Duration::ZERO,
    };
    assert_eq!(
        decide::handler_deadline(&waiting, five_minutes, at(0)),
        own(20)
    );
    assert_eq!(
        decide::handler_deadline(&waiting, five_minutes, at(290)),
        decide::HandlerDeadline {
            after: Duration::from_secs(10),
            by_timeout: true
        }
    );
}
