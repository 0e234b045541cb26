//! One reconcile of one object against the API server (DESIGN §4): finalizer, the step, one
//! resourceVersion-locked status write when something changed, conflict recovery, Events.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Dispatch;
use crate::backoff::{Backoff, FailureCounts};
use crate::decide::{IllegalTransition, Transition};
use crate::machine::Phase;
use crate::next::Cleanup;
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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_conflict_retries: 3,
            backoff: Backoff::default(),
            reporter: "kube-fsm".into(),
        }
    }
}

/// The shared state of a running controller: the handler, the client and what the engine
/// remembers between reconciles.
pub struct Engine<K: Resource<DynamicType = ()>, H> {
    client: Client,
    namespace: Option<String>,
    handler: H,
    recorder: Recorder,
    config: EngineConfig,
    /// The resourceVersions our writes were based on, per object: while the cache still shows
    /// one of them it is stale (our write has not arrived yet), and acting on it would redo the
    /// step and collide with our own write. Forgotten once the cache shows another version.
    based_on: Mutex<HashMap<ObjectRef<K>, Vec<String>>>,
    failures: FailureCounts<ObjectRef<K>>,
}

impl<K: Resource<DynamicType = ()>, H> Debug for Engine<K, H> {
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
    /// An engine for objects of `K` (in `namespace`, or all namespaces).
    pub fn new(
        client: Client,
        namespace: Option<String>,
        handler: H,
        config: EngineConfig,
    ) -> Self {
        let recorder = Recorder::new(client.clone(), config.reporter.clone().into());
        Engine {
            client,
            namespace,
            handler,
            recorder,
            config,
            based_on: Mutex::new(HashMap::new()),
            failures: FailureCounts::default(),
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

    /// Reconciles one object (the function given to kube's `Controller::run`).
    pub async fn reconcile(object: Arc<K>, engine: Arc<Self>) -> Result<Action, ReconcileError> {
        let key = ObjectRef::from_obj(object.as_ref());
        if engine.is_stale(&key, object.as_ref()) {
            return Ok(Action::await_change());
        }
        let result = engine.reconcile_inner(object.as_ref().clone()).await;
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
        result
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

    async fn reconcile_inner(&self, mut object: K) -> Result<Action, ReconcileError> {
        let api = self.api_for(&object);
        if let Some(finalizer) = K::machine().finalizer {
            match self.finalizer(&api, object, finalizer).await? {
                Ok(ready) => object = ready,
                Err(action) => return Ok(action),
            }
        }
        if object.meta().deletion_timestamp.is_some() {
            // Going away (held by someone else's finalizer): no more transitions.
            return Ok(Action::await_change());
        }
        let mut conflicts = 0;
        loop {
            let plan = step_plan::plan(&self.handler, &object, Timestamp::now()).await?;
            if let Some((from, to, message)) = &plan.vetoed {
                self.event(
                    &object,
                    EventType::Warning,
                    "TransitionVetoed",
                    format!("{from}To{to}"),
                    format!("{from} → {to}: {message}"),
                )
                .await;
            }
            if !plan.write {
                return Ok(action(plan.requeue));
            }
            match self.write_status(&api, &object, &plan).await? {
                Some(()) => {
                    if let Some(transition) = &plan.transition {
                        self.after_transition(&object, transition).await?;
                    }
                    return Ok(action(plan.requeue));
                }
                None => {
                    conflicts += 1;
                    if conflicts > self.config.max_conflict_retries {
                        return Err(ReconcileError::Conflicts(conflicts));
                    }
                    // Someone else wrote the object: redo the step on what the server holds.
                    object = api.get(&object.name_any()).await?;
                }
            }
        }
    }

    /// Adds the finalizer before any handler runs, and runs cleanup on deletion. Returns the
    /// object to continue with, or the action to return now.
    async fn finalizer(
        &self,
        api: &Api<K>,
        object: K,
        finalizer: &str,
    ) -> Result<Result<K, Action>, ReconcileError> {
        let present = object.finalizers().iter().any(|f| f == finalizer);
        if object.meta().deletion_timestamp.is_some() {
            if !present {
                return Ok(Err(Action::await_change()));
            }
            let cleanup = K::cleanup(&self.handler, &object)
                .await
                .map_err(|e| ReconcileError::Handler(Box::new(e)))?;
            return match cleanup {
                Cleanup::Pending(after) => Ok(Err(Action::requeue(after))),
                Cleanup::Done => {
                    let rest: Vec<&String> = object
                        .finalizers()
                        .iter()
                        .filter(|f| *f != finalizer)
                        .collect();
                    match self.patch_finalizers(api, &object, &rest).await {
                        Ok(_) => {}
                        // Already gone (a stale duplicate of this step removed it), or changed
                        // meanwhile (look again).
                        Err(ReconcileError::Kube(kube::Error::Api(status)))
                            if status.is_not_found() =>
                        {
                            return Ok(Err(Action::await_change()));
                        }
                        Err(ReconcileError::Kube(kube::Error::Api(status)))
                            if status.is_conflict() =>
                        {
                            return Ok(Err(Action::requeue(Duration::from_millis(100))));
                        }
                        Err(err) => return Err(err),
                    }
                    self.event(
                        &object,
                        EventType::Normal,
                        "CleanupDone",
                        "Cleanup".to_owned(),
                        format!("removed finalizer {finalizer}"),
                    )
                    .await;
                    Ok(Err(Action::await_change()))
                }
            };
        }
        if present {
            return Ok(Ok(object));
        }
        let mut all: Vec<&String> = object.finalizers().iter().collect();
        let owned = finalizer.to_owned();
        all.push(&owned);
        Ok(Ok(self.patch_finalizers(api, &object, &all).await?))
    }

    /// Replaces `metadata.finalizers`, locked on the resourceVersion we read.
    async fn patch_finalizers(
        &self,
        api: &Api<K>,
        object: &K,
        finalizers: &[&String],
    ) -> Result<K, ReconcileError> {
        let patch = serde_json::json!({
            "metadata": { "finalizers": finalizers, "resourceVersion": object.resource_version() }
        });
        let patched = api
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        self.remember_write(object);
        Ok(patched)
    }

    /// Remembers that we wrote over `object` as read, so a cache still showing it is stale.
    /// (A finalizer patch and a status write in one reconcile leave two such versions.)
    fn remember_write(&self, object: &K) {
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
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                self.remember_write(object);
                Ok(Some(()))
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(None),
            Err(err) => Err(err.into()),
        }
    }

    async fn after_transition(
        &self,
        object: &K,
        transition: &Transition<K::Phase>,
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
        tracing::info!(object = %object.name_any(), state.from = ?transition.from.as_ref().map(ToString::to_string), state.to = %transition.to, reason = transition.reason, "transition");
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
    async fn event(
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

fn action(requeue: Option<Duration>) -> Action {
    requeue.map_or_else(Action::await_change, Action::requeue)
}
