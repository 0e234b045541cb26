//! One reconcile of one object against the API server: the stale-cache guard, then attempts
//! (finalizer gate, owed hooks, drift, the step and one resourceVersion-locked status write)
//! until one is not refused by a conflict. A conflict re-reads the object from the API server
//! and runs the whole attempt again on what it holds now, deletion and finalizer included.
//!
//! Users name what a resource implements to be reconciled ([`Reconcilable`]), its errors
//! ([`ReconcileError`], [`EngineRequest`]) and which Kubernetes Events it records
//! ([`RecordedEvents`]).

use std::fmt::Debug;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::PatchParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

mod bookkeeping;
mod config;
mod error;
mod finalizer;
mod guard;
pub(crate) mod memory;
mod paused;
mod repair;
mod report;
pub(crate) mod stop;
mod write;

use crate::engine::finalizer::Gate;
use crate::engine::memory::{Intent, Memory};
use crate::engine::stop::Stop;
use crate::engine::write::Write;
use crate::handler::context::Context;
use crate::handler::dispatch::Dispatch;
use crate::handler::step_plan::{self, Plan};
use crate::machine::data::Phase;
use crate::machine::next::IllegalTransition;
use crate::machine::state_machine::StateMachine;
use crate::machine::status::PhaseValue;
use crate::metrics::{MachineMetrics, ReconcileResult};
use crate::pure::backoff::Failure;
use crate::pure::decide::{self, Position};
use crate::pure::{message, pause};
use crate::replicas::turn::{self, Turns};
use crate::watch::health::Health;
use crate::watch::pace::Ticket;
use crate::watch::scope::Scoped;

/// What a resource type needs to be reconciled by the engine.
pub trait Reconcilable<H>:
    Dispatch<H> + Scoped + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

impl<K, H> Reconcilable<H> for K where
    K: Dispatch<H> + Scoped + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
}

pub(crate) use config::EngineConfig;
pub use config::RecordedEvents;
pub(crate) use error::During;
pub use error::{EngineRequest, ReconcileError};
pub use guard::{Panic, TimedOut};

/// A failure of the API server itself makes a `ReconcileFailed` Event once it happened this
/// many times in a row to one object.
const FAILURES_WORTH_AN_EVENT: u32 = 3;

/// A reconcile whose writes kept conflicting makes a `ReconcileFailed` Event once that
/// happened this many times in a row to one object.
const CONFLICTS_WORTH_AN_EVENT: u32 = 5;

/// When to look at an object again: after a delay, or on its next change (`None`).
pub(crate) type Requeue = Option<Duration>;

/// How one attempt ended.
pub(crate) enum Attempt {
    /// Finished (or the object is gone): look again then.
    Done(Requeue),
    /// A write met another writer's change: re-read and attempt again.
    Conflict,
}

impl<K> From<Write<K>> for Option<Attempt> {
    /// `None` when the write landed and the attempt goes on.
    fn from(write: Write<K>) -> Self {
        match write {
            Write::Landed(_) => None,
            Write::Conflict => Some(Attempt::Conflict),
            Write::Gone => Some(Attempt::Done(None)),
            Write::Fenced(requeue) => Some(Attempt::Done(requeue)),
        }
    }
}

/// The shared state of a running controller: the handler, the context and what the engine
/// remembers between reconciles.
pub(crate) struct Engine<K: Resource<DynamicType = ()> + StateMachine, H> {
    namespace: Option<String>,
    pub(crate) handler: H,
    /// What handlers reach the cluster through; its recorder also records the engine's Events.
    pub(crate) context: Arc<Context>,
    pub(crate) config: EngineConfig,
    pub(crate) metrics: Arc<MachineMetrics>,
    /// Per-object memory, by UID (see [`crate::engine::memory`]).
    pub(crate) memory: Memory<K, K::Phase>,
    /// The controller's cache, to forget objects that left it.
    cache: Arc<OnceLock<Store<K>>>,
    /// The connection to the API server.
    pub(crate) health: Health,
    /// When its reconciles stop.
    stop: Stop,
}

impl<K: Resource<DynamicType = ()> + StateMachine, H> Debug for Engine<K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// An engine for objects of `K` (in `namespace`, or all namespaces), recording into
    /// `metrics`.
    pub(crate) fn new(
        namespace: Option<String>,
        handler: H,
        config: EngineConfig,
        metrics: Arc<MachineMetrics>,
        cache: Arc<OnceLock<Store<K>>>,
        health: Health,
        context: Arc<Context>,
    ) -> Self {
        Engine {
            namespace,
            handler,
            context,
            config,
            metrics,
            memory: Memory::default(),
            cache,
            health,
            stop: Stop::never(),
        }
    }

    /// This engine, its reconciles stopping on `stop`.
    pub(crate) fn stopping_on(mut self, stop: Stop) -> Self {
        self.stop = stop;
        self
    }

    /// Whose objects this replica reconciles (all, or those of the shards it serves): the
    /// context's, which a step asks too.
    fn turns(&self) -> &Turns {
        self.context.turns()
    }

    fn api_for(&self, object: &K) -> Api<K> {
        let namespace = object.namespace().or_else(|| self.namespace.clone());
        K::api_in(self.context.client().clone(), namespace.as_deref())
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
    ///
    /// Under leader election, the reconcile runs under this replica's leadership, and with
    /// sharding under the holding of the object's shard it started in (see
    /// [`crate::replicas::turn`]): it is cancelled when that turn ends, each of its writes is
    /// sent only while the turn stands, and its outcome is dropped once the turn no longer
    /// stands (the next leader, or the shard's next holder, reconciles the object).
    ///
    /// Its place in line for a slot ([`crate::watch::pace::Ticket`]) is its object's first
    /// change since its last reconcile, looked up here, when kube's controller dispatches it:
    /// waiting reconciles are served in the order their objects changed.
    ///
    /// On the stop signal a reconcile still waiting for its slot ends at once, and one under
    /// way is cancelled once the drain runs out (see [`stop`]).
    pub fn reconcile(
        object: Arc<K>,
        engine: Arc<Self>,
    ) -> impl Future<Output = Result<Action, ReconcileError>> + Send + 'static {
        let ticket = engine
            .context
            .pace()
            .dispatched(&arrival_key(object.as_ref()));
        // Unsharded, the reconcile asks for its slot straight away: in line now, so that
        // kube's order of polling the reconciles it dispatched together does not matter.
        let ticket = if !engine.turns().by_shard() {
            ticket.enlist()
        } else {
            ticket
        };
        let stop = engine.stop.clone();
        let cancelled = object.clone();
        // Boxed (see `reconcile_here`): kube's controller holds this future by value.
        let reconcile = Box::pin(Self::reconcile_in_line(object, engine, ticket));
        async move {
            tokio::select! {
                biased;
                () = stop.drained() => {
                    tracing::warn!(object = %cancelled.name_any(), "reconcile cancelled: the drain after the stop signal ran out");
                    Ok(Action::await_change())
                }
                result = reconcile => result,
            }
        }
    }

    async fn reconcile_in_line(
        object: Arc<K>,
        engine: Arc<Self>,
        ticket: Ticket,
    ) -> Result<Action, ReconcileError> {
        let turn = match engine.turns().take::<K>(object.meta()).await {
            Ok(None) => return Box::pin(engine.reconcile_here(&object, ticket)).await,
            Ok(Some(turn)) => turn,
            Err(action) => return Ok(action),
        };
        // What an earlier holding of the shard remembered is forgotten: another replica may
        // have moved the object since.
        engine.memory.under(&object, turn.holding());
        let result = tokio::select! {
            biased;
            () = turn.ended() => {
                tracing::info!(object = %object.name_any(), "reconcile cancelled: this replica no longer holds the object's Lease or shard");
                return Ok(Action::await_change());
            }
            result = turn.run(Box::pin(engine.reconcile_here(&object, ticket))) => result,
        };
        match result {
            Err(err) if !turn.stands() => {
                tracing::debug!(object = %object.name_any(), %err, "reconcile ended after this replica gave the object's Lease or shard up");
                Ok(Action::await_change())
            }
            result => result,
        }
    }

    /// The reconcile of an object this replica may reconcile now. It first waits for its
    /// place among the reconciles in flight, in the order the objects changed (kube's
    /// controller runs every trigger at once; the bound is here, where waiting is first come,
    /// first served), then goes on with the object as the cache holds it by then.
    async fn reconcile_here(
        &self,
        dispatched: &Arc<K>,
        ticket: Ticket,
    ) -> Result<Action, ReconcileError> {
        let number = ticket.number();
        let slot = tokio::select! {
            slot = self.context.pace().reconcile(ticket) => slot,
            _ = self.stop.requested() => return Ok(Action::await_change()),
        };
        if self.stop.is_requested() {
            // Stopping: what has not started yet is left to the next replica or start.
            return Ok(Action::await_change());
        }
        let latest = match self.cache.get() {
            Some(cache) => match cache.get(&ObjectRef::from_obj(dispatched.as_ref())) {
                Some(latest) => Some(latest),
                // Gone from the cache while it waited (deleted): nothing to do.
                None => return Ok(Action::await_change()),
            },
            None => None,
        };
        let object = latest.as_ref().unwrap_or(dispatched);
        let cached = object.resource_version();
        if self
            .memory
            .with(object, |e| e.versions.is_stale(cached.as_deref()))
        {
            // The cache is behind this engine's own write: the change that write brings back
            // keeps this reconcile's place in line (the echo of an earlier write of the same
            // step, its finalizer, often arrives first).
            self.context
                .pace()
                .continues(arrival_key(object.as_ref()), number);
            return Ok(Action::await_change());
        }
        let key = ObjectRef::from_obj(object.as_ref());
        let span = tracing::info_span!(
            "reconcile",
            object = %key,
            state.from = tracing::field::Empty,
            state.to = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        let waiting = self
            .memory
            .with(object, |e| e.backing_off(cached.as_deref(), Instant::now()));
        if let Some(left) = waiting {
            return Ok(Action::requeue(left));
        }
        if let Some(requeue) = self.unless_served(object) {
            return Ok(requeue.map_or_else(Action::await_change, Action::requeue));
        }
        let _worker = self.metrics.worker();
        let started = Instant::now();
        let began = Timestamp::now();
        let phase = object.machine_status().and_then(|s| s.phase.clone());
        let in_phase = phase.as_ref().map(|p| p.as_str());
        // Boxed, as the step's plan is: the futures around it (the fence, the slot, kube's
        // controller) stay small, so a reconcile's depth on a worker's stack does not grow
        // with what its handler does (see `step_plan::plan`).
        let result = guard::guarded(
            Box::pin(
                self.reconcile_inner(object.as_ref().clone())
                    .instrument(span),
            ),
            self.config.recover_panics,
            in_phase,
        )
        .await;
        if let Err(ReconcileError::Panicked(panic)) = &result {
            tracing::error!(object = %object.name_any(), %panic, "reconcile panicked; the object is Stalled and retried with backoff");
            self.metrics.panicked(phase.as_ref());
        }
        let outcome = match &result {
            Ok(None) => ReconcileResult::Success,
            Ok(Some(_)) => ReconcileResult::RequeueAfter,
            Err(_) => ReconcileResult::Error,
        };
        self.metrics
            .reconciled(outcome, started.elapsed(), phase.as_ref());
        self.context
            .pace()
            .ended(result.as_ref().err().and_then(ReconcileError::overload));
        // The failure's Event is written inside the slot, paced like every other write.
        match &result {
            Ok(_) => {
                self.memory.with(object, |e| e.failures = 0);
                // Every request of a reconcile that succeeded was answered: the requests are up
                // (a reconcile that writes nothing would otherwise never say so).
                self.health.restored();
                // A transition written: the change it brings back keeps this reconcile's place
                // in line, so an object goes on through its steps before later objects start
                // theirs (a machine moves a bounded number of times per outside change).
                let moved = self
                    .memory
                    .read(object, |e| e.accepted.as_ref().map(|(p, _)| *p))
                    .flatten()
                    .is_some_and(|now| phase.as_ref() != Some(&PhaseValue::Known(now)));
                if moved {
                    self.context
                        .pace()
                        .continues(arrival_key(object.as_ref()), number);
                }
            }
            Err(err) => {
                let failures = self.memory.read(object, |e| e.failures).unwrap_or(0) + 1;
                self.failed(object, err, failures, began).await;
                // The watch events of what this reconcile wrote wait out the backoff.
                self.memory
                    .with(object, |e| e.aside = e.versions.newest().map(str::to_owned));
                if self.worth_an_event(err, failures) {
                    let note = message::bounded(message::sentence(err), 1024);
                    let reason = match err {
                        ReconcileError::Panicked(_) => "HandlerPanicked",
                        ReconcileError::HandlerTimedOut(_) => "HandlerTimedOut",
                        _ => "ReconcileFailed",
                    };
                    self.event(object, EventType::Warning, reason, "Reconcile".into(), note)
                        .await;
                }
            }
        }
        drop(slot);
        self.prune();
        result.map(|requeue| requeue.map_or_else(Action::await_change, Action::requeue))
    }

    /// Whether a failed reconcile gets a `ReconcileFailed` Event. A failure of the API server
    /// itself (429, 5xx, transport) does only once it persists ([`FAILURES_WORTH_AN_EVENT`] in
    /// a row): a flaky or overloaded server's sparse refusals tell the object's owner nothing
    /// they can act on, and each Event would be one more write to a server in trouble. So do
    /// conflicts ([`CONFLICTS_WORTH_AN_EVENT`] in a row): a busy co-writer is routine, an
    /// object that loses every race is not. An admission webhook the API server cannot call
    /// always does (it explains a stuck object). `failures` in a row, this one included.
    fn worth_an_event(&self, error: &ReconcileError, failures: u32) -> bool {
        match error.failure() {
            Failure::Server { .. } => failures >= FAILURES_WORTH_AN_EVENT,
            Failure::Conflicted => failures >= CONFLICTS_WORTH_AN_EVENT,
            _ => true,
        }
    }

    /// After a wait: `Some` (when to look again) if the reconcile may not go on, because the
    /// leadership or the holding of the object's shard it runs under no longer serves.
    fn unless_served(&self, object: &K) -> Option<Requeue> {
        (!turn::may_go_on()).then(|| self.turns().again(object.meta()))
    }

    /// Forgets objects that left the cache, or came back under a new UID, once the memory has
    /// grown past twice the cache (plus slack): nothing per reconcile in the steady state.
    fn prune(&self) {
        let Some(cache) = self.cache.get() else {
            return;
        };
        self.memory.prune(2 * cache.len() + 64, |key, uid| {
            cache
                .get(key)
                .is_some_and(|o| o.meta().uid.as_deref() == Some(uid))
        });
        self.metrics.remembered(self.memory.len());
        self.context.pace().prune(2 * cache.len() + 64, |key| {
            cache.get(&arrival_ref(key)).is_some()
        });
    }

    /// The error policy given to kube's `Controller::run`: per-object backoff by the kind of
    /// failure ([`Backoff::retry`](crate::pure::backoff::Backoff::retry)). A failure for want of a
    /// connection waits at most as long as a watch reconnect, and the object is rescheduled
    /// at once when the connection comes back (see the `health` module): an outage does not
    /// leave objects waiting out a backoff that grew meanwhile.
    pub fn error_policy(object: Arc<K>, error: &ReconcileError, engine: Arc<Self>) -> Action {
        let failures = engine.memory.with(&object, |e| {
            e.failures = e.failures.saturating_add(1);
            e.disconnected = error.is_connection();
            e.failures
        });
        let failure = error.failure();
        let backoff = engine.config.backoff.retry(
            failures,
            failure,
            engine.config.reconnect_max,
            fastrand::f64(),
        );
        // A failing handler does not hold the phase's timeout back: it is the way out.
        let now = Timestamp::now();
        let position = Position::of(object.machine_status(), now);
        let delay = decide::until_timeout(&position, now).map_or(backoff, |due| due.min(backoff));
        engine
            .memory
            .with(&object, |e| e.retry_at = Some(Instant::now() + delay));
        if let Some(status) = error.refusal() {
            // Reported (logged once, counted, in readiness) by what it lacks, not per object.
            engine.health.request_refused(status);
            tracing::debug!(object = %object.name_any(), %error, failures, ?delay, "reconcile refused");
        } else if failure == Failure::Other {
            tracing::warn!(object = %object.name_any(), %error, failures, ?delay, "reconcile failed");
        } else {
            if matches!(error, ReconcileError::Request { source, .. } if !matches!(source, kube::Error::Api(_)))
            {
                engine.health.lost(error);
            }
            tracing::debug!(object = %object.name_any(), %error, failures, ?delay, "reconcile failed");
        }
        Action::requeue(delay)
    }

    /// Objects to reconcile again when the connection comes back: every object whose last
    /// reconcile failed for want of a connection (a handler's failure keeps its backoff), at
    /// most `RECOVERY_BATCH` every 100 ms so the recovery does not itself overload the API
    /// server.
    pub(crate) fn recovery(
        self: Arc<Self>,
    ) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
        const RECOVERY_BATCH: usize = 100;
        futures::stream::unfold(
            (self, std::collections::VecDeque::new(), 0usize),
            |(engine, mut queue, mut sent)| async move {
                loop {
                    if let Some(next) = queue.pop_front() {
                        sent += 1;
                        if sent % RECOVERY_BATCH == 0 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        return Some((next, (engine, queue, sent)));
                    }
                    engine.health.wait_restored().await;
                    queue.extend(engine.memory.disconnected());
                    tracing::info!(
                        objects = queue.len(),
                        "rescheduling the objects that failed during the outage"
                    );
                }
            },
        )
    }

    async fn reconcile_inner(&self, mut object: K) -> Result<Requeue, ReconcileError> {
        // Handlers read children from the caches: no step before each has its first list.
        self.context
            .caches()
            .ready(self.config.reconnect_max)
            .await?;
        // With sharding: its children without a shard label get it now, and are cached.
        self.turns()
            .adopt_children(object.meta())
            .await
            .during(EngineRequest::ShardLabel)?;
        let api = self.api_for(&object);
        let mut conflicts = 0;
        loop {
            if let Some(requeue) = self.unless_served(&object) {
                return Ok(requeue);
            }
            match self.attempt(&api, object.clone()).await? {
                Attempt::Done(requeue) => return Ok(requeue),
                Attempt::Conflict => self.metrics.conflict(),
            }
            conflicts += 1;
            if conflicts > self.config.max_conflict_retries {
                return Err(ReconcileError::Conflicts(conflicts));
            }
            // Someone else wrote the object: look again at what the server holds.
            let Some(fresh) = api
                .get_opt(&object.name_any())
                .await
                .during(EngineRequest::ReRead)?
            else {
                self.memory.forget(&object);
                return Ok(None);
            };
            if fresh.meta().uid != object.meta().uid {
                // Deleted and created again under the same name: the new object's own
                // events bring its reconcile.
                self.memory.forget(&object);
                return Ok(None);
            }
            let version = fresh.resource_version();
            self.memory
                .with(&fresh, |e| e.versions.read(version.as_deref()));
            object = fresh;
        }
    }

    /// One attempt on `object` as read: the finalizer gate, a hook still owed, drift, the step.
    async fn attempt(&self, api: &Api<K>, mut object: K) -> Result<Attempt, ReconcileError> {
        if let Some(finalizer) = K::machine().finalizer {
            match self.finalizer(api, object, finalizer).await? {
                Gate::Proceed(ready) => object = ready,
                Gate::Stop(attempt) => return Ok(attempt),
            }
        }
        if object.meta().deletion_timestamp.is_some() {
            // Going away (held by someone else's finalizer): no more transitions.
            return Ok(Attempt::Done(None));
        }
        if let Some(reason) = pause::requested(object.meta()) {
            return self.paused(api, &object, reason, false).await;
        }
        self.settle(&object).await?;
        self.pay_owed_hook(&object).await?;
        if let Some(stop) = self.drift(api, &object).await? {
            return Ok(stop);
        }
        self.step(api, &object).await
    }

    /// Plans one step and writes it.
    async fn step(&self, api: &Api<K>, object: &K) -> Result<Attempt, ReconcileError> {
        let now = Timestamp::now();
        let position = Position::of(object.machine_status(), now);
        let deadline = decide::handler_deadline(&position, self.config.handler_timeout, now);
        let planned = guard::bounded(
            Box::pin(step_plan::plan(&self.handler, object, now, &self.context)),
            deadline.after,
            || format!("the handler of phase {}", position.phase),
        )
        .await;
        let plan = match planned {
            Ok(plan) => plan?,
            Err(timed_out) => {
                self.metrics.handler_timed_out(position.phase.name());
                if deadline.by_timeout {
                    // The phase's timeout is due now: the next step takes it.
                    tracing::warn!(object = %object.name_any(), %timed_out, "the phase's timeout came due while its handler ran");
                    return Ok(Attempt::Done(Some(Duration::ZERO)));
                }
                return Err(ReconcileError::HandlerTimedOut(timed_out));
            }
        };
        let timeout_retry = self.vetoes(object, &plan).await;
        let requeue = match (plan.requeue, timeout_retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(patch) = &plan.patch else {
            return Ok(Attempt::Done(requeue));
        };
        check_legal(&plan)?;
        let patch = serde_json::json!({ "status": patch });
        let entered = plan.machine().entered_at();
        let intent = plan.transition.clone().map(|transition| Intent {
            transition,
            entered,
            stayed: plan.position.entered_at.map(|t| {
                Timestamp::now()
                    .duration_since(t)
                    .try_into()
                    .unwrap_or_default()
            }),
        });
        // Recorded before the write: a write that lands but whose answer is lost (a 504, a
        // reset connection) still reports its transition, from the next read (see `settle`).
        self.memory.with(object, |e| e.intent.clone_from(&intent));
        let written = self.write_step_status(api, object, &patch).await?;
        // Answered: settled here (a conflict's re-read settles it on the next attempt).
        if !matches!(written, Write::Conflict) {
            self.memory.with(object, |e| e.intent = None);
        }
        if let Some(stop) = written.into() {
            return Ok(stop);
        }
        self.resumed(object).await;
        if let Some(PhaseValue::Known(phase)) = &plan.machine().phase {
            self.memory
                .with(object, |e| e.accepted = Some((*phase, entered)));
        }
        if let Some(intent) = intent {
            self.transitioned(object, &intent.transition, intent.stayed)
                .await?;
        }
        Ok(Attempt::Done(requeue))
    }
}

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Settles a transition whose write was not answered as landed: if `object` (as read now)
    /// holds its phase with the entry time that write carried (to the second, as stored), the
    /// write landed, and the
    /// transition is reported (Event, metrics, `after_transition`) as if it had been answered;
    /// otherwise it did not land and is forgotten.
    async fn settle(&self, object: &K) -> Result<(), ReconcileError> {
        let Some(intent) = self.memory.with(object, |e| e.intent.take()) else {
            return Ok(());
        };
        let status = object.machine_status();
        let landed = matches!(
            status.and_then(|s| s.phase.as_ref()),
            Some(PhaseValue::Known(phase)) if *phase == intent.transition.to
        ) && status.and_then(|s| s.entered_at()).map(|t| t.as_second())
            == intent.entered.map(|t| t.as_second());
        if landed {
            self.memory.with(object, |e| {
                e.accepted = Some((intent.transition.to, intent.entered));
            });
            tracing::info!(object = %object.name_any(), to = intent.transition.to.name(), "a status write whose answer was lost had landed");
            self.transitioned(object, &intent.transition, intent.stayed)
                .await?;
        }
        Ok(())
    }
}

/// Defence in depth: the resourceVersion lock guarantees the stored phase is the one the plan
/// read, so this checks the planned write against the spec once more.
fn check_legal<K: StateMachine>(plan: &Plan<K>) -> Result<(), IllegalTransition> {
    match &plan.machine().phase {
        Some(PhaseValue::Known(to))
            if !step_plan::legal_over(plan.position.stored.as_ref(), *to) =>
        {
            Err(IllegalTransition {
                from: match plan.position.stored.as_ref() {
                    Some(PhaseValue::Known(from)) => from.name(),
                    _ => "(none)",
                },
                to: to.name(),
            })
        }
        _ => Ok(()),
    }
}

/// The object an [`arrival_key`] names.
fn arrival_ref<K: Resource<DynamicType = ()>>(key: &str) -> ObjectRef<K> {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let object = ObjectRef::new(name);
    if namespace.is_empty() {
        object
    } else {
        object.within(namespace)
    }
}

/// The key of an object in the line for slots (`Pace::arrived`): `namespace/name`.
pub(crate) fn arrival_key<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}
