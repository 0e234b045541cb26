//! One step of one object, without Kubernetes I/O: timeout, phase handler, `when` rules,
//! `before_transition`, the new status and the requeue. The reconciler runs it and writes the
//! result; [`crate::testing`] runs it to test handlers without a cluster.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::Dispatch;
use crate::decide::{self, IllegalTransition, Position, Transition, UNKNOWN_PHASE_RESET};
use crate::machine::Phase;
use crate::next::Verdict;
use crate::status::{MachineStatus, PhaseValue};
use crate::step::Step;

/// What a step decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<P> {
    /// Where the object stood.
    pub position: Position<P>,
    /// The status the object should have after the step.
    pub status: MachineStatus<P>,
    /// Whether `status` differs from the stored status (if not, nothing is written).
    pub write: bool,
    /// The transition, if the phase changes (or is set for the first time).
    pub transition: Option<Transition<P>>,
    /// A transition `before_transition` refused: (from, to, message).
    pub vetoed: Option<(P, P, String)>,
    /// When to reconcile again (`None`: wait for a change).
    pub requeue: Option<Duration>,
}

/// Errors of a step.
#[derive(Debug, thiserror::Error)]
pub enum StepError<E: std::error::Error + 'static> {
    /// A phase handler or hook failed.
    #[error("handler failed: {0}")]
    Handler(#[source] E),
    /// A handler chose a target the spec does not allow.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
}

/// Runs one step of `object` at `now`.
pub async fn plan<K, H>(
    handler: &H,
    object: &K,
    now: Timestamp,
) -> Result<Plan<K::Phase>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource,
{
    let stored = object.machine_status();
    let position = Position::of(stored);
    let generation = object.meta().generation;
    let conditions = stored.map(|s| s.conditions.clone()).unwrap_or_default();
    let phase = position.phase;

    let mut handler_requeue = None;
    let (proposal, conditions) =
        if let Some(due) = decide::timeout_due(phase, position.entered_at, now) {
            (Some(due), conditions)
        } else if phase.data().terminal {
            (None, conditions)
        } else {
            let mut step = Step::<K>::new(conditions, generation, now);
            let choice = K::handle(handler, phase, object, &mut step)
                .await
                .map_err(StepError::Handler)?;
            let (conditions, requeue) = step.into_parts();
            handler_requeue = requeue;
            (decide::choose(phase, choice, &conditions)?, conditions)
        };

    let mut vetoed = None;
    let proposal = match proposal {
        Some((to, reason)) => match K::before_transition(handler, object, phase, to)
            .await
            .map_err(StepError::Handler)?
        {
            Verdict::Allow => Some((to, reason)),
            Verdict::Veto(message) => {
                vetoed = Some((phase, to, message));
                None
            }
        },
        None => None,
    };

    let to = proposal.map(|(to, _)| to);
    let status = decide::next_status(stored, &position, to, conditions, generation, now);
    let write = decide::needs_write(stored, &status);
    let transition = match proposal {
        Some((to, reason)) => Some(Transition {
            from: position.stored.clone(),
            to,
            reason,
        }),
        None if !position.is_settled() => Some(Transition {
            from: position.stored.clone(),
            to: phase,
            reason: if position.stored.is_some() {
                UNKNOWN_PHASE_RESET
            } else {
                decide::PHASE_CHANGED
            },
        }),
        None => None,
    };
    let new_phase = to.unwrap_or(phase);
    let entered = status
        .last_phase_transition_time
        .as_ref()
        .map_or(now, |t| t.0);
    let requeue = decide::requeue(
        new_phase,
        entered,
        if to.is_some() { None } else { handler_requeue },
        now,
    );
    Ok(Plan {
        position,
        status,
        write,
        transition,
        vetoed,
        requeue,
    })
}

/// Whether `from -> to` is allowed for a write over the stored phase `stored`.
pub fn legal_over<P: Phase>(stored: Option<&PhaseValue<P>>, to: P) -> bool {
    match stored {
        Some(PhaseValue::Known(from)) => *from == to || from.can_transition_to(to),
        // A new object (or drift) may take the initial phase or one of its direct successors.
        _ => {
            let initial = P::initial();
            initial == to || initial.can_transition_to(to)
        }
    }
}
