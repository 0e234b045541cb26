//! The step a phase handler works through: the object's status (its own fields and the
//! machine's conditions), requeue, the clock, and the operator's context (client, caches,
//! children, Events; see [`crate::handler::children`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::children::Seen;
use crate::handler::context::Context;
use crate::machine::conditions::{self, ConditionError};
use crate::machine::data::ConditionType;
use crate::machine::state_machine::StateMachine;

/// What a handler can do besides choosing the next phase: change the status's own fields, set
/// conditions (typed by the spec's condition enum), ask to be reconciled again, and reach the
/// cluster through the operator's context. Everything it changes in the status is written in
/// the engine's single status patch, together with the phase.
pub struct Step<K: StateMachine> {
    status: K::Status,
    generation: Option<i64>,
    now: Timestamp,
    requeue: Option<Duration>,
    pub(crate) context: Arc<Context>,
    pub(crate) object: ObjectInfo,
    /// What this step saw of each declared child, in spec order (see `handler::declared`).
    pub(crate) seen: Vec<Option<Seen>>,
}

impl<K: StateMachine> std::fmt::Debug for Step<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("status", &self.status)
            .field("now", &self.now)
            .field("requeue", &self.requeue)
            .finish_non_exhaustive()
    }
}

/// What the step's I/O needs to know of its object.
#[derive(Clone, Debug)]
pub(crate) struct ObjectInfo {
    pub(crate) namespace: Option<String>,
    pub(crate) uid: Option<String>,
    pub(crate) as_owner: Option<OwnerReference>,
    pub(crate) reference: ObjectReference,
    /// With sharding: the object's shard label, for its children.
    pub(crate) shard_label: Option<(String, String)>,
}

impl<K: StateMachine> Step<K> {
    /// A step of `object` at `now`, starting from its stored status (or a default one).
    pub fn new(object: &K, now: Timestamp, context: Arc<Context>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Step {
            status: object.status_of().cloned().unwrap_or_default(),
            generation: object.meta().generation,
            now,
            requeue: None,
            object: ObjectInfo {
                namespace: object.meta().namespace.clone(),
                uid: object.meta().uid.clone(),
                as_owner: object.controller_owner_ref(&()),
                reference: object.object_ref(&()),
                shard_label: context.turns().child_label(object.meta()),
            },
            context,
            seen: vec![None; K::machine().children.len()],
        }
    }

    pub(crate) fn generation(&self) -> Option<i64> {
        self.generation
    }

    /// The status as it stands after this step's changes so far.
    pub fn status(&self) -> &K::Status {
        &self.status
    }

    /// The status, to change the operator's own fields (`endpoint`, `readyReplicas`, ...).
    /// They are written with the phase in the engine's one status patch, only if something
    /// changed; a field set to `None` is removed; fields this step does not touch are left as
    /// stored (also those another writer set). The machine's fields in it belong to the
    /// engine: it overwrites `phase`, `observedGeneration` and the entry time after the step;
    /// set conditions with [`Step::set_condition`].
    ///
    /// ```no_run
    /// # use kube::CustomResource;
    /// # use kube_fsm::{MachineStatus, Step, state_machine};
    /// # use schemars::JsonSchema;
    /// # use serde::{Deserialize, Serialize};
    /// # #[state_machine(phases(Pending(initial), Ready(terminal)), transitions(Pending -> Ready))]
    /// # #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
    /// # #[kube(group = "example.com", version = "v1", kind = "Db", namespaced, status = "DbStatus")]
    /// # pub struct DbSpec {}
    /// #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// pub struct DbStatus {
    ///     #[serde(flatten)]
    ///     pub machine: MachineStatus<DbPhase>,
    ///     #[serde(default, skip_serializing_if = "Option::is_none")]
    ///     pub endpoint: Option<String>,
    /// }
    /// # fn demo(step: &mut Step<Db>) {
    /// step.status_mut().endpoint = Some("db.tenant-a.svc:5432".into()); // written with the phase
    /// step.status_mut().endpoint = None; // or removed from the stored status
    /// # }
    /// ```
    pub fn status_mut(&mut self) -> &mut K::Status {
        &mut self.status
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
            &mut K::machine_in_mut(&mut self.status).conditions,
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
        conditions::status_of(self.conditions(), condition.as_str())
    }

    /// The full condition, if present.
    pub fn condition(&self, condition: K::Condition) -> Option<&Condition> {
        self.conditions()
            .iter()
            .find(|c| c.type_ == condition.as_str())
    }

    /// All conditions as they stand after this step's changes.
    pub fn conditions(&self) -> &[Condition] {
        &K::machine_in(&self.status).conditions
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

    /// The status and requeue request, consuming the step.
    pub fn into_parts(self) -> (K::Status, Option<Duration>) {
        (self.status, self.requeue)
    }

    /// The operator's context: client, recorder, caches.
    pub fn context(&self) -> &Context {
        &self.context
    }
}
