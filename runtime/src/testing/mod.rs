//! Testing phase handlers as pure state functions, without a cluster: put an object in a
//! phase, run one step (timeout, handler, `when` rules, hooks) exactly as the engine does, and
//! assert the phase, conditions, status fields and requeue it leads to. A handler that reads
//! children or sends requests gets them from a [`Context`] you build ([`step_in`]): caches
//! filled with [`crate::watch::cache::Cache::from_objects`], a client over a canned service.
//!
//! ```no_run
//! # async fn demo<K: kube_fsm::handler::Dispatch<H> + kube::Resource<DynamicType = ()>, H>(handler: H, object: K, phase: K::Phase) {
//! use kube_fsm::testing;
//! let object = testing::in_phase(object, phase);
//! let outcome = testing::step(&handler, &object).await.expect("handler succeeds");
//! assert_eq!(outcome.phase, phase);
//! # }
//! ```

pub mod scenario;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::handler::context::Context;
use crate::handler::dispatch::Dispatch;
pub use crate::handler::step_error::StepError;
pub use crate::handler::step_plan::Veto;
use crate::handler::step_plan::{self, Plan};
use crate::machine::conditions::{status_of, truncate};
use crate::machine::data::{ConditionType, Phase};
use crate::machine::state_machine::StateMachine;
use crate::machine::status::{MachineStatus, PhaseValue};
pub use crate::pure::decide::Transition;

/// What one step did.
#[derive(Debug, Clone)]
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
    /// The merge patch the engine would write to the status (`None`: no write).
    pub patch: Option<serde_json::Value>,
    /// The full status after the step: the handler's fields and the machine's.
    pub status: K::Status,
}

impl<K: StateMachine> Outcome<K> {
    /// The machine's fields of the status after the step.
    pub fn machine(&self) -> &MachineStatus<K::Phase> {
        K::machine_in(&self.status)
    }

    /// The status of a condition after the step (`None`: absent or Unknown).
    pub fn condition(&self, condition: K::Condition) -> Option<bool> {
        status_of(self.conditions(), condition.as_str())
    }

    /// The conditions after the step.
    pub fn conditions(&self) -> &[Condition] {
        &self.machine().conditions
    }
}

/// Whether the engine may write phase `to` over the stored phase `stored`: staying, a declared
/// edge that is not manual (only people take those), or, for a new object (or one without a declared phase), the initial phase or one of
/// its successors. What a checker of a run's observed writes holds each one to.
pub fn is_legal<P: Phase>(stored: Option<&PhaseValue<P>>, to: P) -> bool {
    step_plan::legal_over(stored, to)
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

/// Runs one step now, with no cluster behind the step: the handler's requests through it fail
/// with a message saying so, and it has no caches (use [`step_in`] for those).
pub async fn step<K, H>(handler: &H, object: &K) -> Result<Outcome<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource<DynamicType = ()>,
{
    step_at(handler, object, Timestamp::now()).await
}

/// Runs one step at `now`, with no cluster behind the step (see [`step`]).
pub async fn step_at<K, H>(
    handler: &H,
    object: &K,
    now: Timestamp,
) -> Result<Outcome<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource<DynamicType = ()>,
{
    step_in(handler, object, now, &no_cluster()).await
}

/// Runs one step at `now` through `context`: its caches and its client (e.g. a
/// `kube::Client::new` over a `tower::service_fn` that answers as the test needs).
///
/// ```no_run
/// # async fn demo<K: kube_fsm::handler::Dispatch<H> + kube::Resource<DynamicType = ()>, H>(handler: H, object: K, client: kube::Client, children: Vec<k8s_openapi::api::core::v1::ConfigMap>) {
/// use std::sync::Arc;
/// use kube_fsm::{Context, testing, watch::Cache};
/// let context = Arc::new(Context::new(client).with_cache(Cache::from_objects(children)));
/// let outcome = testing::step_in(&handler, &object, k8s_openapi::jiff::Timestamp::now(), &context).await;
/// # }
/// ```
pub async fn step_in<K, H>(
    handler: &H,
    object: &K,
    now: Timestamp,
    context: &Arc<Context>,
) -> Result<Outcome<K>, StepError<K::Error>>
where
    K: Dispatch<H> + Resource<DynamicType = ()>,
{
    let plan = step_plan::plan(handler, object, now, context).await?;
    Ok(Outcome::from(plan))
}

impl<K: StateMachine> From<Plan<K>> for Outcome<K> {
    fn from(plan: Plan<K>) -> Self {
        let phase = match plan.machine().phase {
            Some(PhaseValue::Known(phase)) => phase,
            _ => plan.position.phase,
        };
        Outcome {
            phase,
            transition: plan.transition,
            vetoed: plan.vetoed,
            requeue: plan.requeue,
            writes_status: plan.patch.is_some(),
            patch: plan.patch,
            status: plan.status,
        }
    }
}

/// A context with no cluster behind it: no caches, and a client whose every request fails,
/// saying that the test has no API server (to build a [`crate::Step`] by hand).
pub fn no_cluster() -> Arc<Context> {
    Arc::new(Context::new(no_cluster_client()))
}

/// A client whose every request fails, saying that the test has no API server: for a
/// [`Context`] of your own, with caches of the children a step reads
/// (`Context::new(no_cluster_client()).with_cache(Cache::from_objects(children))`).
pub fn no_cluster_client() -> kube::Client {
    let service = tower::service_fn(|request: http::Request<kube::client::Body>| {
        let message = format!(
            "{} {}: kube_fsm::testing::step has no API server; give the step a Context with a \
             client and caches through testing::step_in",
            request.method(),
            request.uri().path()
        );
        std::future::ready(Err::<http::Response<kube::client::Body>, _>(
            std::io::Error::other(message),
        ))
    });
    kube::Client::new(service, "default")
}

/// Applies an outcome's status to the object, as the engine's write would, to chain steps.
pub fn apply<K: StateMachine>(object: &mut K, outcome: &Outcome<K>) {
    *object.status_of_mut() = outcome.status.clone();
}
