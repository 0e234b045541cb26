//! Testing phase handlers as pure state functions, without a cluster: put an object in a
//! phase, run one step (timeout, handler, `when` rules, hooks) exactly as the engine does, and
//! assert the phase, conditions and requeue it leads to.
//!
//! ```no_run
//! # async fn demo<K: kube_fsm::Dispatch<H> + kube::Resource, H>(handler: H, object: K, phase: K::Phase) {
//! use kube_fsm::testing;
//! let object = testing::in_phase(object, phase);
//! let outcome = testing::step(&handler, &object).await.expect("handler succeeds");
//! assert_eq!(outcome.phase, phase);
//! # }
//! ```

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::Dispatch;
use crate::conditions::{status_of, truncate};
use crate::decide::Transition;
use crate::machine::{ConditionType, StateMachine};
use crate::status::{MachineStatus, PhaseValue};
use crate::step_plan::{self, StepError, Veto};

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<K: StateMachine> {
    /// The phase after the step.
    pub phase: K::Phase,
    /// The transition taken, if any.
    pub transition: Option<Transition<K::Phase>>,
    /// Transitions `before_transition` refused.
    pub vetoed: Vec<Veto<K::Phase>>,
    /// When the engine would reconcile again (a vetoed timeout is retried with backoff on top).
    pub requeue: Option<Duration>,
    /// Whether the engine would write the status.
    pub writes_status: bool,
    /// The full status after the step.
    pub status: MachineStatus<K::Phase>,
}

impl<K: StateMachine> Outcome<K> {
    /// The status of a condition after the step (`None`: absent or Unknown).
    pub fn condition(&self, condition: K::Condition) -> Option<bool> {
        status_of(&self.status.conditions, condition.as_str())
    }

    /// The conditions after the step.
    pub fn conditions(&self) -> &[Condition] {
        &self.status.conditions
    }
}

/// `object` placed in `phase`, entered now.
pub fn in_phase<K: StateMachine>(object: K, phase: K::Phase) -> K {
    in_phase_since(object, phase, Timestamp::now())
}

/// `object` placed in `phase`, entered at `since` (to test timeouts).
pub fn in_phase_since<K: StateMachine>(mut object: K, phase: K::Phase, since: Timestamp) -> K {
    let status = object.machine_status_mut();
    status.phase = Some(PhaseValue::Known(phase));
    status.last_phase_transition_time = Some(truncate(since));
    status.entered_phase = Some(PhaseValue::Known(phase));
    object
}

/// Runs one step now.
pub async fn step<K, H>(handler: &H, object: &K) -> Result<Outcome<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource,
{
    step_at(handler, object, Timestamp::now()).await
}

/// Runs one step at `now`.
pub async fn step_at<K, H>(
    handler: &H,
    object: &K,
    now: Timestamp,
) -> Result<Outcome<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource,
{
    let plan = step_plan::plan(handler, object, now).await?;
    let phase = match plan.status.phase {
        Some(PhaseValue::Known(phase)) => phase,
        _ => plan.position.phase,
    };
    Ok(Outcome {
        phase,
        transition: plan.transition,
        vetoed: plan.vetoed,
        requeue: plan.requeue,
        writes_status: plan.write,
        status: plan.status,
    })
}

/// Applies an outcome's status to the object, as the engine's write would, to chain steps.
pub fn apply<K: StateMachine>(object: &mut K, outcome: &Outcome<K>) {
    *object.machine_status_mut() = outcome.status.clone();
}
