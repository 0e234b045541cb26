//! The pure decision core: where an object stands, whether a timeout is due, which `when` rule
//! fires, what the status becomes, whether it must be written and when to look again.
//! No I/O and no clock: the caller passes `now`, so every rule is testable exhaustively and the
//! same code backs the engine and [`crate::testing`].

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::machine::conditions::{status_of, truncate};
use crate::machine::data::{Phase, TriggerData};
use crate::machine::next::{Choice, IllegalTransition};
use crate::machine::status::{MachineStatus, PhaseValue};
use crate::pure::pause;

/// The reason recorded for a transition no event or timeout names.
pub const PHASE_CHANGED: &str = "PhaseChanged";
/// The reason recorded when an undeclared stored phase is reset to the initial phase.
pub const UNKNOWN_PHASE_RESET: &str = "UnknownPhaseReset";

/// Where an object stands before a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position<P> {
    /// The phase the step runs in (the initial phase for a new object).
    pub phase: P,
    /// What `status.phase` holds: `None` for a new object.
    pub stored: Option<PhaseValue<P>>,
    /// When the object entered `phase`, if recorded.
    pub entered_at: Option<Timestamp>,
    /// How long it has been paused in `phase` (a pause ending now included): time that does
    /// not count toward the phase's timeout.
    pub paused: Duration,
}

impl<P: Phase> Position<P> {
    /// Reads the position from a status at `now`. A new object starts in the initial phase; a
    /// stored phase the spec does not declare also restarts there (and is reported as drift).
    ///
    /// The clock's fields are anyone's to write who may write the status, so they are trusted
    /// only as far as they can be: an entry time in the future counts as now, and the time
    /// paused never exceeds the time in the phase (a huge `pausedSeconds`, or a `Paused`
    /// condition dated in the past, cannot push a timeout out forever).
    pub fn of(status: Option<&MachineStatus<P>>, now: Timestamp) -> Self {
        let stored = status.and_then(|s| s.phase.clone());
        let entered_at = status
            .and_then(MachineStatus::entered_at)
            .map(|at| at.min(now));
        let initial = P::initial();
        match &stored {
            Some(PhaseValue::Known(phase)) => Position {
                phase: *phase,
                stored,
                entered_at,
                paused: match (status, entered_at) {
                    (Some(s), Some(entered)) => {
                        pause::paused_for(s.paused_seconds, &s.conditions, now)
                            .min(elapsed(entered, now))
                    }
                    _ => Duration::ZERO,
                },
            },
            _ => Position {
                phase: initial,
                stored,
                entered_at: None,
                paused: Duration::ZERO,
            },
        }
    }

    /// Where the phase's clock starts: its entry time, later by the time spent paused.
    pub fn clock(&self) -> Option<Timestamp> {
        self.entered_at
            .map(|at| at.checked_add(self.paused).unwrap_or(at))
    }

    /// Whether the stored phase is a declared one (otherwise this step also writes the phase).
    pub fn is_settled(&self) -> bool {
        matches!(self.stored, Some(PhaseValue::Known(_)))
    }
}

/// A decided move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition<P> {
    /// The stored phase it leaves (`None` for a new object, `Unknown` for drift).
    pub from: Option<PhaseValue<P>>,
    /// The phase it enters.
    pub to: P,
    /// The Kubernetes Event reason: the event name, the timeout reason, or `PhaseChanged`.
    pub reason: &'static str,
}

/// Time from `since` to `now`: zero if `since` is later, saturated at the longest `Duration`
/// of nanoseconds (584 years) if it is further back, so an absurd entry time makes a timeout
/// due rather than disabling it.
fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    let nanos = now.as_nanosecond().saturating_sub(since.as_nanosecond());
    if nanos <= 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// How much of its phase's timeout an object at `position` has used at `now` (paused time
/// excluded): 0 at entry, 1 when due. `None` without a timeout or a recorded entry time.
pub fn timeout_progress<P: Phase>(position: &Position<P>, now: Timestamp) -> Option<f64> {
    let timeout = position.phase.data().timeout.as_ref()?;
    let clock = position.clock()?;
    let length = Duration::from_millis(timeout.after_ms).as_secs_f64();
    Some(if length > 0.0 {
        elapsed(clock, now).as_secs_f64() / length
    } else {
        1.0
    })
}

/// The timeout of `phase`, if it is due at `now`: its target and reason.
pub fn timeout_due<P: Phase>(
    phase: P,
    entered_at: Option<Timestamp>,
    now: Timestamp,
) -> Option<(P, &'static str)> {
    let timeout = phase.data().timeout.as_ref()?;
    let entered_at = entered_at?;
    (elapsed(entered_at, now) >= Duration::from_millis(timeout.after_ms))
        .then(|| P::from_index(timeout.to).map(|to| (to, timeout.reason)))
        .flatten()
}

/// How long until the timeout of the phase at `position` is due, plus a second so that it is
/// due when looked at; `None` without a timeout or a recorded entry time, or when it is due
/// already (a failing step then keeps its backoff rather than retry every second).
pub fn until_timeout<P: Phase>(position: &Position<P>, now: Timestamp) -> Option<Duration> {
    timeout_left(position, now)
        .filter(|left| !left.is_zero())
        .map(|left| left + Duration::from_secs(1))
}

/// How long the phase at `position` has left before its timeout is due (zero once due);
/// `None` without a timeout or a recorded entry time.
pub fn timeout_left<P: Phase>(position: &Position<P>, now: Timestamp) -> Option<Duration> {
    let timeout = position.phase.data().timeout.as_ref()?;
    let length = Duration::from_millis(timeout.after_ms);
    Some(length.saturating_sub(elapsed(position.clock()?, now)))
}

/// How long the handler of the phase at `position` may run at `now`: the phase's
/// `handlerTimeout`, else `default`, and never past the phase's timeout when that is still to
/// come (a hung handler does not hold the timeout — the way out — back).
pub fn handler_deadline<P: Phase>(
    position: &Position<P>,
    default: Duration,
    now: Timestamp,
) -> HandlerDeadline {
    let own = position
        .phase
        .data()
        .handler_timeout_ms
        .map_or(default, Duration::from_millis);
    match timeout_left(position, now) {
        Some(left) if !left.is_zero() && left < own => HandlerDeadline {
            after: left,
            by_timeout: true,
        },
        _ => HandlerDeadline {
            after: own,
            by_timeout: false,
        },
    }
}

/// How long a handler call may run ([`handler_deadline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandlerDeadline {
    /// From the call's start.
    pub after: Duration,
    /// Whether it is the phase's timeout coming due (rather than the handler's own deadline).
    pub by_timeout: bool,
}

/// The target of the first `when` rule out of `phase` that holds, in spec order.
pub fn first_rule<P: Phase>(phase: P, conditions: &[Condition]) -> Option<P> {
    let machine = P::MACHINE;
    machine
        .edges
        .iter()
        .filter(|edge| edge.from == phase.index())
        .find(|edge| match edge.trigger {
            TriggerData::When(requirements) => requirements.iter().all(|r| {
                status_of(conditions, machine.conditions[r.condition].name) == Some(r.status)
            }),
            _ => false,
        })
        .and_then(|edge| P::from_index(edge.to))
}

/// The move a step makes: the handler's explicit choice, else the first `when` rule that
/// holds on the conditions as the handler left them. Checked against the table again.
pub fn choose<P: Phase>(
    phase: P,
    choice: Choice<P>,
    conditions: &[Condition],
) -> Result<Option<(P, &'static str)>, IllegalTransition> {
    let proposed = match choice {
        Choice::To { phase: to, event } => Some((to, event.unwrap_or(PHASE_CHANGED))),
        Choice::Stay => first_rule(phase, conditions).map(|to| (to, PHASE_CHANGED)),
    };
    match proposed {
        Some((to, _)) if !phase.engine_takes(to) => Err(IllegalTransition {
            from: phase.name(),
            to: to.name(),
        }),
        other => Ok(other),
    }
}

/// The status after a step. The phase entry time moves only when the phase is (re)entered, or
/// when the recorded time belongs to another phase (someone else moved the phase: its clock
/// starts now), so a step that changes nothing produces a status equal to the stored one. A
/// step runs only when the object is not paused: a `Paused` condition still True becomes False,
/// and the time paused is kept (`pausedSeconds`) while the object stays in its phase.
pub fn next_status<P: Phase>(
    stored: Option<&MachineStatus<P>>,
    position: &Position<P>,
    to: Option<P>,
    mut conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
) -> MachineStatus<P> {
    let (entered, paused) = match (to, position.is_settled(), position.entered_at) {
        (None, true, Some(at)) => (Time(at), position.paused.as_secs()),
        _ => (truncate(now), 0),
    };
    pause::resume(&mut conditions, generation, now);
    let phase = to.unwrap_or(position.phase);
    MachineStatus {
        phase: Some(PhaseValue::Known(phase)),
        conditions,
        observed_generation: generation.or_else(|| stored.and_then(|s| s.observed_generation)),
        last_phase_transition_time: Some(entered),
        entered_phase: Some(PhaseValue::Known(phase)),
        paused_seconds: (paused > 0).then(|| i64::try_from(paused).unwrap_or(i64::MAX)),
        last_handled_reconcile_at: stored.and_then(|s| s.last_handled_reconcile_at.clone()),
    }
}

/// When to reconcile again: the handler's request, else the phase's `requeueAfter`; never later
/// than the phase's timeout, counted from `entered_at` (`None`: no timeout to wait for, e.g.
/// because it was vetoed and the engine retries it with backoff). `None` waits for a change.
pub fn requeue<P: Phase>(
    phase: P,
    entered_at: Option<Timestamp>,
    handler: Option<Duration>,
    now: Timestamp,
) -> Option<Duration> {
    let data = phase.data();
    if data.terminal {
        return None;
    }
    let periodic = handler.or(data.requeue_after_ms.map(Duration::from_millis));
    let to_timeout = data
        .timeout
        .as_ref()
        .zip(entered_at)
        .map(|(t, entered_at)| {
            // Wake a moment after the deadline so the timeout is due when we look.
            Duration::from_millis(t.after_ms).saturating_sub(elapsed(entered_at, now))
                + Duration::from_secs(1)
        });
    match (periodic, to_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
