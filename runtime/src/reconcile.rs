//! One reconcile of one object against the API server (DESIGN §4): finalizer, drift, the step,
//! one resourceVersion-locked status write when something changed, conflict recovery, Events,
//! metrics and a tracing span.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::Dispatch;
use crate::backoff::{Backoff, FailureCounts};
use crate::decide::{IllegalTransition, Transition};
use crate::drift::{Drift, Remedy};
use crate::finalizer::Gate;
use crate::machine::Phase;
use crate::metrics::{MachineMetrics, ReconcileResult};
use crate::scope::ScopedApi;
use crate::status::PhaseValue;
use crate::step_plan::{self, Plan, StepError};

/// What a resource type needs to be reconciled by the engine.
pub trait Reconciled<H>:
    Dispatch<H>
    + Resource<DynamicType = ()>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
where
    Self::Scope: ScopedApi,
{
}

impl<K, H> Reconciled<H> for K
where
    K: Dispatch<H>
        + Resource<DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::Scope: ScopedApi,
{
}

/// Errors of one reconcile. Each leaves the stored status as it was (nothing illegal is
/// written); the controller retries with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The API server refused a request or could not be reached.
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    /// A phase handler, hook or cleanup failed.
    #[error("handler failed: {0}")]
    Handler(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A handler chose a target the spec does not allow.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// Every status write conflicted with another writer; the object is retried later.
    #[error("status write conflicted {0} times in a row; backing off")]
    Conflicts(u32),
    /// The status could not be encoded.
    #[error("cannot encode the status patch: {0}")]
    Encode(#[from] serde_json::Error),
}

impl<E: std::error::Error + Send + Sync + 'static> From<StepError<E>> for ReconcileError {
    fn from(err: StepError<E>) -> Self {
        match err {
            StepError::Handler(e) => ReconcileError::Handler(Box::new(e)),
            StepError::Illegal(e) => ReconcileError::Illegal(e),
        }
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Status writes retried after a 409 Conflict (each after a fresh GET) before backing off.
    pub max_conflict_retries: u32,
    /// Backoff after failed reconciles.
    pub backoff: Backoff,
    /// The reporting controller name on Events.
    pub reporter: String,
    /// The field manager of every write (`metadata.managedFields` names who wrote what).
    pub field_manager: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_conflict_retries: 3,
            backoff: Backoff::default(),
            reporter: "kube-fsm".into(),
            field_manager: "kube-fsm".into(),
        }
    }
}

/// When to look at an object again: after a delay, or on its next change (`None`).
type Requeue = Option<Duration>;

/// The shared state of a running controller: the handler, the client and what the engine
/// remembers between reconciles.
pub struct Engine<K: Resource<DynamicType = ()> + crate::StateMachine, H> {
    client: Client,
    namespace: Option<String>,
    pub(crate) handler: H,
    recorder: Recorder,
    config: EngineConfig,
    metrics: Arc<MachineMetrics>,
    /// The resourceVersions our writes were based on, per object: while the cache still shows
    /// one of them it is stale (our write has not arrived yet), and acting on it would redo the
    /// step and collide with our own write. Forgotten once the cache shows another version.
    based_on: Mutex<HashMap<ObjectRef<K>, Vec<String>>>,
    /// The phase this controller last wrote or accepted, per object: a stored phase that is
    /// neither it nor one of its successors is drift. Empty after a restart.
    accepted: Mutex<HashMap<ObjectRef<K>, K::Phase>>,
    failures: FailureCounts<ObjectRef<K>>,
    /// The controller's cache, to forget objects that left it (see [`Engine::prune`]).
    cache: Arc<OnceLock<Store<K>>>,
}

impl<K: Resource<DynamicType = ()> + crate::StateMachine, H> Debug for Engine<K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K, H> Engine<K, H>
where
    K: Reconciled<H>,
    K::Scope: ScopedApi,
    H: Send + Sync + 'static,
{
    /// An engine for objects of `K` (in `namespace`, or all namespaces), recording into
    /// `metrics`.
    pub fn new(
        client: Client,
        namespace: Option<String>,
        handler: H,
        config: EngineConfig,
        metrics: Arc<MachineMetrics>,
        cache: Arc<OnceLock<Store<K>>>,
    ) -> Self {
        let recorder = Recorder::new(client.clone(), config.reporter.clone().into());
        Engine {
            client,
            namespace,
            handler,
            recorder,
            config,
            metrics,
            based_on: Mutex::new(HashMap::new()),
            accepted: Mutex::new(HashMap::new()),
            failures: FailureCounts::default(),
            cache,
        }
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    fn api_for(&self, object: &K) -> Api<K> {
        let namespace = object.namespace().or_else(|| self.namespace.clone());
        K::Scope::api(self.client.clone(), namespace.as_deref())
    }

    pub(crate) fn patch_params(&self) -> PatchParams {
        PatchParams {
            field_manager: Some(self.config.field_manager.clone()),
            ..PatchParams::default()
        }
    }

    /// Reconciles one object (the function given to kube's `Controller::run`), in a span
    /// `reconcile` with `object`, and, when the phase moves, `state.from`, `state.to` and
    /// `reason`.
    pub async fn reconcile(object: Arc<K>, engine: Arc<Self>) -> Result<Action, ReconcileError> {
        let key = ObjectRef::from_obj(object.as_ref());
        if engine.is_stale(&key, object.as_ref()) {
            return Ok(Action::await_change());
        }
        let span = tracing::info_span!(
            "reconcile",
            object = %key,
            state.from = tracing::field::Empty,
            state.to = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let _worker = engine.metrics.worker();
        let started = Instant::now();
        let phase = object
            .machine_status()
            .and_then(|s| s.phase.as_ref())
            .map(|p| p.as_str().to_owned());
        let result = engine
            .reconcile_inner(object.as_ref().clone())
            .instrument(span)
            .await;
        let outcome = match &result {
            Ok(None) => ReconcileResult::Success,
            Ok(Some(_)) => ReconcileResult::RequeueAfter,
            Err(_) => ReconcileResult::Error,
        };
        engine
            .metrics
            .reconciled(outcome, started.elapsed(), phase.as_deref());
        match &result {
            Ok(_) => engine.failures.reset(&key),
            Err(err) => {
                let note = err.to_string().chars().take(1024).collect();
                engine
                    .event(
                        &object,
                        EventType::Warning,
                        "ReconcileFailed",
                        "Reconcile".into(),
                        note,
                    )
                    .await;
            }
        }
        engine.prune();
        result.map(|requeue| requeue.map_or_else(Action::await_change, Action::requeue))
    }

    /// Forgets what the engine remembers about objects that left the cache: kube's
    /// `Controller` does not reconcile a deletion, so an object deleted without a finalizer
    /// would be remembered forever. Runs only when the memory has grown past twice the cache
    /// (plus slack), so it costs nothing per reconcile in the steady state.
    fn prune(&self) {
        let Some(cache) = self.cache.get() else {
            return;
        };
        let live = |key: &ObjectRef<K>| cache.get(key).is_some();
        let limit = 2 * cache.len() + 64;
        forget_gone(
            &mut self.accepted.lock().unwrap_or_else(PoisonError::into_inner),
            limit,
            live,
        );
        forget_gone(
            &mut self.based_on.lock().unwrap_or_else(PoisonError::into_inner),
            limit,
            live,
        );
    }

    /// The error policy given to kube's `Controller::run`: per-object exponential backoff.
    pub fn error_policy(object: Arc<K>, error: &ReconcileError, engine: Arc<Self>) -> Action {
        let failures = engine.failures.fail(ObjectRef::from_obj(object.as_ref()));
        let delay = engine.config.backoff.delay(failures, fastrand::f64());
        tracing::warn!(object = %object.name_any(), %error, failures, ?delay, "reconcile failed");
        Action::requeue(delay)
    }

    fn is_stale(&self, key: &ObjectRef<K>, object: &K) -> bool {
        let mut based_on = self.based_on.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(versions) = based_on.get(key) else {
            return false;
        };
        if object
            .meta()
            .resource_version
            .as_ref()
            .is_some_and(|rv| versions.contains(rv))
        {
            return true;
        }
        // The cache has moved past our writes: forget them.
        based_on.remove(key);
        false
    }

    async fn reconcile_inner(&self, mut object: K) -> Result<Requeue, ReconcileError> {
        let api = self.api_for(&object);
        if let Some(finalizer) = K::machine().finalizer {
            match self.finalizer(&api, object, finalizer).await? {
                Gate::Proceed(ready) => object = ready,
                Gate::Done(requeue) => return Ok(requeue),
            }
        }
        if object.meta().deletion_timestamp.is_some() {
            // Going away (held by someone else's finalizer): no more transitions.
            return Ok(None);
        }
        let mut conflicts = 0;
        loop {
            let done = match self.drift(&api, &object).await? {
                DriftStep::Reverted => Some(None),
                DriftStep::Conflict => None,
                DriftStep::Continue => self.step(&api, &object).await?,
            };
            if let Some(requeue) = done {
                return Ok(requeue);
            }
            conflicts += 1;
            if conflicts > self.config.max_conflict_retries {
                return Err(ReconcileError::Conflicts(conflicts));
            }
            // Someone else wrote the object: look again at what the server holds.
            object = api.get(&object.name_any()).await?;
        }
    }

    /// Plans one step and writes it. `None` when the write conflicted.
    async fn step(&self, api: &Api<K>, object: &K) -> Result<Option<Requeue>, ReconcileError> {
        let plan = step_plan::plan(&self.handler, object, Timestamp::now()).await?;
        if let Some((from, to, message)) = &plan.vetoed {
            self.metrics.vetoed(from.name(), to.name());
            self.event(
                object,
                EventType::Warning,
                "TransitionVetoed",
                format!("{from}To{to}"),
                format!("{from} → {to}: {message}"),
            )
            .await;
        }
        if !plan.write {
            return Ok(Some(plan.requeue));
        }
        if self.write_status(api, object, &plan).await?.is_none() {
            return Ok(None);
        }
        if let Some(PhaseValue::Known(phase)) = &plan.status.phase {
            self.accept(object, *phase);
        }
        if let Some(transition) = &plan.transition {
            let stayed = plan.position.entered_at.map(|t| {
                Timestamp::now()
                    .duration_since(t)
                    .try_into()
                    .unwrap_or_default()
            });
            self.after_transition(object, transition, stayed).await?;
        }
        Ok(Some(plan.requeue))
    }
}

/// What the drift check leaves to do.
enum DriftStep {
    /// No drift, or drift adopted: run the step.
    Continue,
    /// The last phase was written back; the next change of the object brings the next step.
    Reverted,
    /// The revert conflicted with another write: look again.
    Conflict,
}

impl<K, H> Engine<K, H>
where
    K: Reconciled<H>,
    K::Scope: ScopedApi,
    H: Send + Sync + 'static,
{
    /// Detects drift (see [`crate::drift`]) and applies the spec's policy.
    async fn drift(&self, api: &Api<K>, object: &K) -> Result<DriftStep, ReconcileError> {
        let stored = object.machine_status().and_then(|s| s.phase.as_ref());
        let last = self.accepted(object);
        let Some(drift) = Drift::detect(last, stored) else {
            if let Some(PhaseValue::Known(phase)) = stored {
                self.accept(object, *phase);
            }
            return Ok(DriftStep::Continue);
        };
        let mut remedy = drift.remedy(K::machine().drift);
        let mut step = DriftStep::Continue;
        if let Remedy::Revert(phase) = remedy {
            match self.revert(api, object, phase).await {
                Ok(()) => step = DriftStep::Reverted,
                Err(ReconcileError::Kube(kube::Error::Api(status))) if status.is_conflict() => {
                    self.metrics.conflict();
                    return Ok(DriftStep::Conflict);
                }
                // The API server refuses the way back (its CEL rule): adopt instead.
                Err(ReconcileError::Kube(kube::Error::Api(status))) if status.code == 422 => {
                    tracing::warn!(object = %object.name_any(), message = %status.message, "revert refused; adopting");
                    remedy = match &drift {
                        Drift::Illegal { found, .. } => Remedy::Adopt(*found),
                        Drift::Undeclared { .. } => Remedy::Reset,
                    };
                }
                Err(err) => return Err(err),
            }
        }
        match remedy {
            Remedy::Adopt(phase) | Remedy::Revert(phase) => self.accept(object, phase),
            Remedy::Reset => self.forget(object),
        }
        self.metrics.drift(remedy.label());
        let note = drift.describe(remedy);
        tracing::warn!(object = %object.name_any(), %note, "phase drift");
        self.event(
            object,
            EventType::Warning,
            "PhaseDrift",
            "Drift".into(),
            note,
        )
        .await;
        Ok(step)
    }

    /// Writes `phase` back over a drifted status (entry time now), locked on the
    /// resourceVersion read. Deliberately not checked against the edges: it restores the
    /// controller's own record.
    async fn revert(
        &self,
        api: &Api<K>,
        object: &K,
        phase: K::Phase,
    ) -> Result<(), ReconcileError> {
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": object.resource_version() },
            "status": {
                "phase": phase.name(),
                "lastPhaseTransitionTime": Time(Timestamp::now()),
            },
        });
        api.patch_status(
            &object.name_any(),
            &self.patch_params(),
            &Patch::Merge(&patch),
        )
        .await?;
        self.metrics.status_written();
        self.remember_write(object);
        Ok(())
    }

    fn accepted(&self, object: &K) -> Option<K::Phase> {
        let accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        accepted.get(&ObjectRef::from_obj(object)).copied()
    }

    fn accept(&self, object: &K, phase: K::Phase) {
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        accepted.insert(ObjectRef::from_obj(object), phase);
    }

    /// Forgets what the engine remembers about `object` (it is gone, or starts over).
    pub(crate) fn forget(&self, object: &K) {
        let key = ObjectRef::from_obj(object);
        let mut accepted = self.accepted.lock().unwrap_or_else(PoisonError::into_inner);
        accepted.remove(&key);
    }

    /// Remembers that we wrote over `object` as read, so a cache still showing it is stale.
    /// (A finalizer patch and a status write in one reconcile leave two such versions.)
    pub(crate) fn remember_write(&self, object: &K) {
        if let Some(rv) = object.resource_version() {
            let key = ObjectRef::from_obj(object);
            let mut based_on = self.based_on.lock().unwrap_or_else(PoisonError::into_inner);
            let versions = based_on.entry(key).or_default();
            if versions.len() >= 8 {
                versions.remove(0);
            }
            versions.push(rv);
        }
    }

    /// One status-subresource merge patch carrying the resourceVersion the plan was based on.
    /// `Ok(None)` on 409 Conflict.
    async fn write_status(
        &self,
        api: &Api<K>,
        object: &K,
        plan: &Plan<K::Phase>,
    ) -> Result<Option<()>, ReconcileError> {
        // Defence in depth: the lock guarantees the stored phase is the one the plan read, so
        // this checks the planned write against the spec once more.
        if let Some(PhaseValue::Known(to)) = &plan.status.phase
            && !step_plan::legal_over(plan.position.stored.as_ref(), *to)
        {
            let from = match plan.position.stored.as_ref() {
                Some(PhaseValue::Known(from)) => from.name(),
                _ => "(none)",
            };
            return Err(IllegalTransition {
                from,
                to: to.name(),
            }
            .into());
        }
        let rv = object.resource_version();
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": rv },
            "status": serde_json::to_value(&plan.status)?,
        });
        match api
            .patch_status(
                &object.name_any(),
                &self.patch_params(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                self.metrics.status_written();
                self.remember_write(object);
                Ok(Some(()))
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => {
                self.metrics.conflict();
                Ok(None)
            }
            Err(err) => Err(err.into()),
        }
    }

    async fn after_transition(
        &self,
        object: &K,
        transition: &Transition<K::Phase>,
        stayed: Option<Duration>,
    ) -> Result<(), ReconcileError> {
        // A new object starts in the initial phase: its first move reads `Pending → X`.
        let initial = K::Phase::initial().name();
        let (from, to) = (
            transition.from.as_ref().map_or(initial, PhaseValue::as_str),
            transition.to.name(),
        );
        let note = if transition.from.is_none() && to == initial {
            format!("initialised in {initial}")
        } else {
            format!("{from} → {to}")
        };
        let stored = transition.from.as_ref().map(PhaseValue::as_str);
        self.metrics.transition(stored, to, stayed);
        let span = tracing::Span::current();
        span.record("state.from", stored.unwrap_or_default());
        span.record("state.to", to);
        span.record("reason", transition.reason);
        tracing::info!(
            state.from = stored.unwrap_or_default(),
            state.to = to,
            reason = transition.reason,
            "transition"
        );
        let action: String = format!("{from}To{to}").chars().take(128).collect();
        self.event(object, EventType::Normal, transition.reason, action, note)
            .await;
        if let Some(PhaseValue::Known(from)) = transition.from {
            K::after_transition(&self.handler, object, from, transition.to)
                .await
                .map_err(|e| ReconcileError::Handler(Box::new(e)))?;
        }
        Ok(())
    }

    /// Publishes an Event; a failure to record it is logged, never fatal. kube's Recorder
    /// folds repeats of the same (type, reason, action) into one series, so `action` names
    /// what happened (e.g. `RunningToDegraded`), keeping different transitions apart.
    pub(crate) async fn event(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: String,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action,
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(object = %object.name_any(), %err, "could not record event");
        }
    }
}

/// Keeps only the live keys of `memory`, once it holds more than `limit` of them.
fn forget_gone<K, V>(
    memory: &mut HashMap<ObjectRef<K>, V>,
    limit: usize,
    live: impl Fn(&ObjectRef<K>) -> bool,
) where
    K: Resource<DynamicType = ()>,
{
    if memory.len() > limit {
        memory.retain(|key, _| live(key));
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn memory_of_objects_gone_from_the_cache_is_dropped_past_the_limit() {
        let key = |i: usize| ObjectRef::<ConfigMap>::new(&format!("cm-{i}")).within("ns");
        let mut memory: HashMap<_, ()> = (0..10).map(|i| (key(i), ())).collect();
        let live = |k: &ObjectRef<ConfigMap>| k.name.ends_with(['0', '1']);
        forget_gone(&mut memory, 10, live);
        assert_eq!(memory.len(), 10, "at the limit: untouched");
        forget_gone(&mut memory, 9, live);
        let mut kept: Vec<_> = memory.keys().map(|k| k.name.clone()).collect();
        kept.sort();
        assert_eq!(kept, ["cm-0", "cm-1"]);
    }
}
