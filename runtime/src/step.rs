//! The step context a phase handler works through: conditions, requeue, the clock.

use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use crate::conditions::{self, ConditionError};
use crate::machine::{ConditionType, StateMachine};

/// What a handler can do besides choosing the next phase: set conditions (typed by the spec's
/// condition enum) and ask to be reconciled again.
#[derive(Debug)]
pub struct Step<K: StateMachine> {
    conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
    requeue: Option<Duration>,
    _machine: PhantomData<fn() -> K>,
}

impl<K: StateMachine> Step<K> {
    /// A step starting from the object's current conditions.
    pub fn new(conditions: Vec<Condition>, generation: Option<i64>, now: Timestamp) -> Self {
        Step {
            conditions,
            generation,
            now,
            requeue: None,
            _machine: PhantomData,
        }
    }

    /// Sets a condition (apimachinery rules: the transition time moves only when the status
    /// does). Fails, changing nothing, if `reason` is not a valid Kubernetes reason.
    pub fn set_condition(
        &mut self,
        condition: K::Condition,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<(), ConditionError> {
        self.set(
            condition,
            conditions::status_str(status),
            reason,
            message.into(),
        )
    }

    /// Sets a condition to `Unknown`.
    pub fn set_condition_unknown(
        &mut self,
        condition: K::Condition,
        reason: &str,
        message: impl Into<String>,
    ) -> Result<(), ConditionError> {
        self.set(condition, "Unknown", reason, message.into())
    }

    fn set(
        &mut self,
        condition: K::Condition,
        status: &str,
        reason: &str,
        message: String,
    ) -> Result<(), ConditionError> {
        conditions::set(
            &mut self.conditions,
            condition.as_str(),
            status,
            reason,
            message,
            self.generation,
            self.now,
        )
        .map(drop)
    }

    /// `Some(true)`/`Some(false)` for a True/False condition, `None` if absent or Unknown.
    pub fn condition_status(&self, condition: K::Condition) -> Option<bool> {
        conditions::status_of(&self.conditions, condition.as_str())
    }

    /// The full condition, if present.
    pub fn condition(&self, condition: K::Condition) -> Option<&Condition> {
        self.conditions
            .iter()
            .find(|c| c.type_ == condition.as_str())
    }

    /// All conditions as they stand after this step's changes.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// Reconcile again after `after` (overrides the phase's `requeueAfter`).
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue = Some(after);
    }

    /// The requeue the handler asked for.
    pub fn requested_requeue(&self) -> Option<Duration> {
        self.requeue
    }

    /// The time this step runs at.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// The conditions and requeue request, consuming the step.
    pub fn into_parts(self) -> (Vec<Condition>, Option<Duration>) {
        (self.conditions, self.requeue)
    }
}
