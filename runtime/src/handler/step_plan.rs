//! One step of one object, without Kubernetes I/O: timeout, phase handler, `when` rules,
//! `before_transition`, the new status and the requeue. The reconciler runs it and writes the
//! result; [`crate::testing`] runs it to test handlers without a cluster.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use serde_json::Value;

use crate::handler::context::Context;
use crate::handler::dispatch::Dispatch;
use crate::handler::step::Step;
use crate::handler::step_error::StepError;
use crate::machine::data::Phase;
use crate::machine::next::Verdict;
use crate::machine::state_machine::StateMachine;
use crate::machine::status::{MachineStatus, PhaseValue};
use crate::pure::decide::{self, Position, Transition, UNKNOWN_PHASE_RESET};
use crate::pure::readiness::{self, Stall};
use crate::pure::{merge_patch, pause};

/// What a step decided.
pub struct Plan<K: StateMachine> {
    /// Where the object stood.
    pub position: Position<K::Phase>,
    /// The status the object should have after the step: the handler's fields and the
    /// machine's.
    pub status: K::Status,
    /// The merge patch from the stored status to `status` (`None`: nothing to write).
    pub patch: Option<Value>,
    /// The transition, if the phase changes (or is set for the first time).
    pub transition: Option<Transition<K::Phase>>,
    /// Transitions `before_transition` refused in this step: a due timeout, the handler's or a
    /// rule's move, or both.
    pub vetoed: Vec<Veto<K::Phase>>,
    /// When to reconcile again (`None`: wait for a change). A vetoed timeout is not in it: the
    /// engine retries it with backoff.
    pub requeue: Option<Duration>,
}

impl<K: StateMachine> std::fmt::Debug for Plan<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("position", &self.position)
            .field("status", &self.status)
            .field("patch", &self.patch)
            .field("transition", &self.transition)
            .field("vetoed", &self.vetoed)
            .field("requeue", &self.requeue)
            .finish()
    }
}

/// A transition `before_transition` refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Veto<P> {
    /// The phase the object stays in.
    pub from: P,
    /// The refused target.
    pub to: P,
    /// Why, as `before_transition` said.
    pub message: String,
    /// Whether it was the phase's timeout that was refused.
    pub timeout: bool,
}

impl<K: StateMachine> Plan<K> {
    /// Whether the phase's due timeout was vetoed (the engine retries it with backoff).
    pub fn timeout_vetoed(&self) -> bool {
        self.vetoed.iter().any(|v| v.timeout)
    }

    /// The machine's fields of [`Plan::status`].
    pub fn machine(&self) -> &MachineStatus<K::Phase> {
        K::machine_in(&self.status)
    }
}

/// Asks `before_transition` about `proposal`; a refusal is recorded in `vetoed`.
async fn ask<K, H>(
    handler: &H,
    object: &K,
    from: K::Phase,
    proposal: (K::Phase, &'static str),
    timeout: bool,
    vetoed: &mut Vec<Veto<K::Phase>>,
) -> Result<Option<(K::Phase, &'static str)>, StepError<K::Error>>
where
    K: Dispatch<H>,
{
    let to = proposal.0;
    match Box::pin(K::before_transition(handler, object, from, to))
        .await
        .map_err(StepError::Handler)?
    {
        Verdict::Allow => Ok(Some(proposal)),
        Verdict::Veto(message) => {
            vetoed.push(Veto {
                from,
                to,
                message,
                timeout,
            });
            Ok(None)
        }
    }
}

/// Runs one step of `object` at `now`: a due timeout first; if there is none, or
/// `before_transition` vetoes it, the phase handler and the `when` rules, as in any step.
/// The handler reaches the cluster through `context`.
pub async fn plan<K, H>(
    handler: &H,
    object: &K,
    now: Timestamp,
    context: &Arc<Context>,
) -> Result<Plan<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource<DynamicType = ()>,
{
    let stored = object.machine_status();
    let position = Position::of(stored, now);
    let generation = object.meta().generation;
    let phase = position.phase;

    // The declared children first, in every phase (a terminal one prunes those it does not
    // keep), so that the conditions derived from them are in the step's status before the
    // timeout, the handler and the `when` rules.
    let mut step = Step::<K>::new(object, now, context.clone());
    Box::pin(K::children(handler, object, &mut step, phase)).await?;
    step.derive_declared();

    let mut vetoed = Vec::new();
    let mut proposal = None;
    if let Some(due) = decide::timeout_due(phase, position.clock(), now) {
        proposal = ask(handler, object, phase, due, true, &mut vetoed).await?;
    }
    let mut handler_requeue = None;
    if proposal.is_none() && !phase.data().terminal {
        // Boxed: the handler's future (its children, its requests) lives on the heap, and the
        // engine's futures around it stay small. In a debug build each layer's poll frame
        // holds the futures it awaits by value, so unboxed they added up: a handler applying
        // a StatefulSet overflowed a worker thread's 2 MiB stack with leader election on
        // (measured with gdb: 2.09 MB deep, 1.6 MB of it the engine's frames).
        let choice = Box::pin(K::handle(handler, phase, object, &mut step))
            .await
            .map_err(StepError::Handler)?;
        handler_requeue = step.requested_requeue();
        if let Some(chosen) = decide::choose(phase, choice, step.conditions())? {
            proposal = ask(handler, object, phase, chosen, false, &mut vetoed).await?;
        }
    }

    let to = proposal.map(|(to, _)| to);
    let (mut status, _) = step.into_parts();
    let machine = K::machine_in_mut(&mut status);
    let conditions = std::mem::take(&mut machine.conditions);
    *machine = decide::next_status(stored, &position, to, conditions, generation, now);
    let timeout_vetoed = to.is_none() && vetoed.iter().any(|v| v.timeout);
    let stall = vetoed
        .iter()
        .find(|v| timeout_vetoed && v.timeout)
        .map(|v| Stall::TimeoutVetoed(v.message.clone()));
    let new_phase = to.unwrap_or(phase);
    readiness::maintain(
        &mut machine.conditions,
        Some(new_phase),
        stall,
        generation,
        now,
    );
    if let Some(requested) = pause::reconcile_requested(object.meta()) {
        machine.last_handled_reconcile_at = Some(requested);
    }
    // The phase's clock, for the requeue: entered, later by the time paused in it.
    let entered = Position::of(Some(&*machine), now).clock().unwrap_or(now);
    let patch = merge_patch::status_diff(object.status_of(), &status)?;
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
    let requeue = decide::requeue(
        new_phase,
        (!timeout_vetoed).then_some(entered),
        if to.is_some() { None } else { handler_requeue },
        now,
    );
    Ok(Plan {
        position,
        status,
        patch,
        transition,
        vetoed,
        requeue,
    })
}

/// Whether the engine may write `to` over the stored phase `stored`: staying, or an edge it
/// takes (never a manual one: only people take those).
pub fn legal_over<P: Phase>(stored: Option<&PhaseValue<P>>, to: P) -> bool {
    match stored {
        Some(PhaseValue::Known(from)) => *from == to || from.engine_takes(to),
        // A new object (or drift) may take the initial phase or one of its direct successors.
        _ => {
            let initial = P::initial();
            initial == to || initial.engine_takes(to)
        }
    }
}

#[cfg(test)]
mod tests;
