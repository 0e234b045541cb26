//! A builder over kube's `Controller`: scope, watcher config, owned children and related
//! resources (with the caches handlers read), concurrency, graceful shutdown, the engine's
//! per-object backoff, metrics and replicas ([`crate::replicas`]); the least-privilege RBAC the
//! configured operator needs ([`rbac`]); and [`owner_reference`] for children a handler makes.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource};

use crate::engine::{EngineConfig, Reconcilable, RecordedEvents};
use crate::handler::context::Caches;
use crate::handler::declared::Wiring;
use crate::metrics::{MachineMetrics, Metrics};
use crate::operator::rbac::{KindNeed, Verb};
use crate::operator::sources::Sources;
use crate::pure::backoff::Backoff;
use crate::replicas::Replicas;
use crate::watch::cache::{Cached, Watched};
use crate::watch::health::Health;

pub(crate) mod machine;
pub mod rbac;
mod reach;
mod run;
mod sources;

/// A graceful-shutdown signal (see [`Operator::shutdown_on`]).
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// Runs a state machine as a Kubernetes controller.
///
/// ```no_run
/// # async fn demo<K, H>(client: kube::Client, handler: H) where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
/// kube_fsm::Operator::<K, H>::new(client, handler)
///     .namespace("default")
///     .concurrency(8)
///     .run()
///     .await;
/// # }
/// ```
pub struct Operator<K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static, H> {
    client: Client,
    handler: H,
    namespace: Option<String>,
    watcher: watcher::Config,
    concurrency: u16,
    write_rate: Option<(f64, u32)>,
    config: EngineConfig,
    sources: Sources<K>,
    shutdown: Option<Shutdown>,
    metrics: Arc<MachineMetrics>,
    store: Arc<OnceLock<Store<K>>>,
    replicas: Replicas,
    health: Health,
    caches: Caches,
    needs: Vec<KindNeed>,
}

impl<K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static, H> std::fmt::Debug
    for Operator<K, H>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("namespace", &self.namespace)
            .field("concurrency", &self.concurrency)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<K, H> Operator<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// A controller for `K` driven by `handler`, watching all namespaces by default.
    pub fn new(client: Client, handler: H) -> Self {
        let mut operator = Operator {
            client,
            handler,
            namespace: None,
            watcher: watcher::Config::default(),
            concurrency: DEFAULT_CONCURRENCY,
            write_rate: None,
            config: EngineConfig::default(),
            sources: Sources::default(),
            shutdown: None,
            metrics: Arc::new(Metrics::default().for_machine::<K>(Arc::new(OnceLock::new()))),
            store: Arc::new(OnceLock::new()),
            replicas: Replicas::One,
            health: Health::default(),
            caches: Caches::default(),
            needs: Vec::new(),
        };
        K::wire_children(&mut operator);
        operator
    }

    /// Watch one namespace only.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The watcher configuration (label/field selectors, page size, ...).
    #[must_use]
    pub fn watcher_config(mut self, config: watcher::Config) -> Self {
        self.watcher = config;
        self
    }

    /// At most this many objects reconciled at once (default [`DEFAULT_CONCURRENCY`]; 0 =
    /// unbounded). The engine lowers the limit while the API server signals overload (429 Too
    /// Many Requests, 5xx: halved at most twice a second), waits out a 429's `Retry-After`
    /// before starting more, and raises the limit back by one per round of successful
    /// reconciles.
    #[must_use]
    pub fn concurrency(mut self, concurrency: u16) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// Client-side rate limit on the operator's writes (status and metadata patches, applies
    /// and deletes through the step, Events): `per_second` on average, `burst` at once, as
    /// client-go's QPS and Burst. Off by default: the adaptive concurrency
    /// ([`Operator::concurrency`]) already backs off when the API server is overloaded; set
    /// it to leave a share of a small API server to other clients.
    ///
    /// # Errors
    /// When `per_second` is not a positive, finite number or `burst` is 0: such a limit would
    /// never let a write through.
    ///
    /// ```no_run
    /// # use kube_fsm::{Operator, StateMachine};
    /// # fn demo<K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static>(operator: Operator<K, H>) -> Result<(), kube_fsm::operator::RateLimitError> {
    /// let operator = operator.rate_limit(20.0, 40)?; // client-go's default QPS is 5, Burst 10
    /// # let _ = operator; Ok(()) }
    /// ```
    pub fn rate_limit(mut self, per_second: f64, burst: u32) -> Result<Self, RateLimitError> {
        if !(per_second.is_finite() && per_second > 0.0) || burst == 0 {
            return Err(RateLimitError { per_second, burst });
        }
        self.write_rate = Some((per_second, burst));
        Ok(self)
    }

    /// Backoff after failed reconciles (per object, exponential, jittered, reset on success).
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.config.backoff = Backoff { base, max };
        self
    }

    /// Status writes retried after conflicts before backing off.
    #[must_use]
    pub fn max_conflict_retries(mut self, retries: u32) -> Self {
        self.config.max_conflict_retries = retries;
        self
    }

    /// Whether a panic in a reconcile — a handler, a hook, a child builder — is caught at the
    /// reconcile boundary (default `true`, as controller-runtime recovers reconcile panics):
    /// the object is `Stalled` with reason `HandlerPanicked` and the panic's message, gets a
    /// Warning Event of that reason, is retried with its backoff and counted in
    /// `kube_fsm_handler_panics_total`, while every other object goes on. `false` lets the
    /// panic unwind through the process (it exits), for those who prefer to crash.
    #[must_use]
    pub fn recover_panics(mut self, recover: bool) -> Self {
        self.config.recover_panics = recover;
        self
    }

    /// How long one call of a phase handler, `before_transition` or `after_transition` may run
    /// (default 5 minutes), unless the phase's `handlerTimeout` says otherwise. A call that
    /// runs past it is dropped at its current `.await`; the object is `Stalled` with reason
    /// `HandlerTimedOut` naming the phase and the deadline, gets a Warning Event of that
    /// reason, is retried with its backoff and counted in `kube_fsm_handler_timeouts_total`.
    /// A handler is never left running past its phase's `timeout:`: the step that follows
    /// takes the timeout. Code that must not be cut at an `.await` belongs in a spawned task.
    #[must_use]
    pub fn handler_timeout(mut self, deadline: Duration) -> Self {
        self.config.handler_timeout = deadline;
        self
    }

    /// How long reconciles under way at the stop signal may go on before they are cancelled
    /// (default 20 s: a Pod's default grace period of 30 s, less the time the Lease release
    /// and the webhook's deregistration may take after it). Reconciles still waiting for a
    /// slot at the signal end at once.
    #[must_use]
    pub fn drain_timeout(mut self, drain: Duration) -> Self {
        self.config.drain = drain;
        self
    }

    /// The controller name recorded on Events.
    #[must_use]
    pub fn reporter(mut self, name: impl Into<String>) -> Self {
        self.config.reporter = name.into();
        self
    }

    /// Which of the engine's own Events to record (default [`RecordedEvents::All`]; see [`RecordedEvents`]).
    #[must_use]
    pub fn record_events(mut self, events: RecordedEvents) -> Self {
        self.config.events = events;
        self
    }

    /// The field manager of every write (default `kube-fsm`): `metadata.managedFields` then
    /// names this controller as the writer of the status.
    #[must_use]
    pub fn field_manager(mut self, name: impl Into<String>) -> Self {
        self.config.field_manager = name.into();
        self
    }

    /// Records this controller's metrics (see [`crate::metrics`]) into `metrics`, which may
    /// serve several controllers; register it in a registry once.
    #[must_use]
    pub fn metrics(mut self, metrics: &Metrics) -> Self {
        machine::Machine::record_into(&mut self, metrics);
        self
    }

    /// The longest wait before a failed watch reconnects (default 30 s, as client-go's
    /// reflector), and before an object whose reconcile failed for want of a connection is
    /// retried. When the connection comes back, objects that failed meanwhile are rescheduled
    /// at once (in batches of 100 per 100 ms).
    #[must_use]
    pub fn reconnect_backoff(mut self, max: Duration) -> Self {
        self.config.reconnect_max = max;
        self
    }

    /// How long a watch may deliver nothing — no event, no bookmark — before it is restarted
    /// (default 1 minute; kube's own is about 5). The API server is asked to end each watch a
    /// few seconds before that (kube then resumes it from its resource version, without a
    /// list), so a healthy watch of a quiet kind is never cut, while one whose connection
    /// hangs open without delivering (a half-open TCP connection, a stuck proxy) is noticed
    /// and replaced within it. A timeout in [`Operator::watcher_config`] is kept.
    #[must_use]
    pub fn watch_stall_timeout(mut self, stall: Duration) -> Self {
        self.config.watch_stall = stall;
        self
    }

    /// The controller's connection state, e.g. for a readiness probe: up, or down since when
    /// and why. Get it before [`Operator::run`].
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// How the operator's replicas share the work: one replica reconciles everything (the
    /// default), or one at a time holds a Lease
    /// ([`LeaderElection`](crate::replicas::LeaderElection)), or each holds a share of the
    /// objects ([`Sharding`](crate::replicas::Sharding)). One setting: the last call decides.
    ///
    /// ```no_run
    /// # fn demo<K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static>(operator: kube_fsm::Operator<K, H>) {
    /// let operator = operator.replicas(kube_fsm::replicas::LeaderElection::new("my-operator", "operators"));
    /// # }
    /// ```
    #[must_use]
    pub fn replicas(mut self, replicas: impl Into<Replicas>) -> Self {
        self.replicas = replicas.into();
        self
    }

    /// Reconcile the owner when a child of type `C` it owns changes, and keep the children in a
    /// cache that handlers read through [`crate::Step::children`] (by owner UID, an index
    /// lookup) and [`crate::Step::child`] (by name), and that [`crate::Step::apply`] compares
    /// against to skip writes that would change nothing. The cache holds whole objects without
    /// `metadata.managedFields`; narrow it with `config`'s label selector. Set the child's
    /// owner with [`crate::Step::apply`] or [`owner_reference`]. A kind both owned and
    /// watched ([`Operator::watches`]) has one watch, with the config of the first call.
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::watcher;
    /// operator.owns::<ConfigMap>(watcher::Config::default().labels("app.kubernetes.io/managed-by=me"))
    /// # }
    /// ```
    #[must_use]
    pub fn owns<C>(mut self, config: watcher::Config) -> Self
    where
        C: Watched,
    {
        self.sources.owns::<C>(&self.caches, config);
        self.need_owned::<C>(&format!("Operator::owns::<{}>", C::kind(&())));
        self
    }

    /// The permissions a child of `C` needs, for `by` (once per kind: the spec's `children:`
    /// and an `owns` of the same kind need the same).
    fn need_owned<C: Watched>(&mut self, by: &str) {
        let need = KindNeed::of::<C>(
            &[
                Verb::List,
                Verb::Watch,
                Verb::Create,
                Verb::Patch,
                Verb::Delete,
            ],
            format!(
                "{by}: watched, applied (an apply of a new child creates it), labelled, deleted"
            ),
        );
        if !self.needs.iter().any(|n| n.grants_as(&need)) {
            self.needs.push(need);
        }
    }

    /// Reconcile the objects `mapper` names when a related object of type `R` changes (e.g.
    /// a shared ConfigMap of settings), and keep the objects of `R` in a cache that handlers
    /// read through [`crate::Step::cache`]. As for [`Operator::owns`], the cache holds whole
    /// objects without `metadata.managedFields`. A kind both watched and owned has one watch,
    /// with the config of the first call: give both the same selector.
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::{reflector::ObjectRef, watcher};
    /// // Every object depends on one settings ConfigMap: a change of it reconciles them all.
    /// operator.watches::<ConfigMap, Vec<ObjectRef<K>>>(
    ///     watcher::Config::default().fields("metadata.name=settings"),
    ///     |_settings| Vec::new(), // list the objects to reconcile
    /// )
    /// # }
    /// ```
    #[must_use]
    pub fn watches<R, I>(
        mut self,
        config: watcher::Config,
        mapper: impl Fn(R) -> I + Send + Sync + 'static,
    ) -> Self
    where
        R: Watched,
        I: IntoIterator<Item = ObjectRef<K>> + 'static,
        I::IntoIter: Send,
    {
        let mapper = Box::new(move |object: &R| mapper(object.clone()).into_iter().collect());
        self.sources.watches::<R>(&self.caches, config, mapper);
        self.needs.push(KindNeed::of::<R>(
            &[Verb::List, Verb::Watch],
            format!("Operator::watches::<{}>: watched", R::kind(&())),
        ));
        self
    }

    /// Reconcile every object of `K` when an object of `R` for which `affects` holds changes
    /// (a shared settings or allow-list object), and keep `R` in a cache as
    /// [`Operator::watches`] does.
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube::runtime::watcher;
    /// operator.watches_shared::<ConfigMap>(
    ///     watcher::Config::default().labels("app.kubernetes.io/part-of=riskengine"),
    ///     |settings| settings.metadata.name.as_deref() == Some("allowed-versions"),
    /// )
    /// # }
    /// ```
    #[must_use]
    pub fn watches_shared<R>(
        mut self,
        config: watcher::Config,
        affects: impl Fn(&R) -> bool + Send + Sync + 'static,
    ) -> Self
    where
        R: Watched,
    {
        let objects = self.store.clone();
        let mapper = Box::new(move |object: &R| {
            if !affects(object) {
                return Vec::new();
            }
            objects.get().map_or_else(Vec::new, |store| {
                store
                    .state()
                    .iter()
                    .map(|o| ObjectRef::from_obj(o.as_ref()))
                    .collect()
            })
        });
        self.sources.watches::<R>(&self.caches, config, mapper);
        self.needs.push(KindNeed::of::<R>(
            &[Verb::List, Verb::Watch],
            format!("Operator::watches_shared::<{}>: watched", R::kind(&())),
        ));
        self
    }

    /// Adds an index to the cache of `R` (wired with [`Operator::owns`] or
    /// [`Operator::watches`]), as controller-runtime's field indexers: `keys` says under
    /// which keys an object is found, and handlers look them up with
    /// [`crate::watch::cache::Cache::indexed`].
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::core::v1::Secret;
    /// operator.index::<Secret>("type", |secret| secret.type_.clone().into_iter().collect())
    /// # }
    /// ```
    #[must_use]
    pub fn index<R>(
        self,
        name: &'static str,
        keys: impl Fn(&R) -> Vec<String> + Send + Sync + 'static,
    ) -> Self
    where
        R: Cached,
    {
        self.caches
            .get_or_create::<R>()
            .add_index(name, Arc::new(keys));
        self
    }

    /// Stop gracefully when `signal` completes (default: SIGTERM or Ctrl-C).
    #[must_use]
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + Sync + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }
}

/// Objects reconciled at once unless [`Operator::concurrency`] says otherwise: enough to keep
/// a 2-core API server saturated at 10 000 objects (see BENCHMARKS.md), few enough that a burst
/// of reconciles cannot queue thousands of requests on it.
pub const DEFAULT_CONCURRENCY: u16 = 32;

/// Why [`Operator::run`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown signal came.
    Signal,
    /// This replica lost the Lease (see [`Operator::replicas`] with
    /// [`LeaderElection`](crate::replicas::LeaderElection)).
    LeaseLost,
}

/// A rate limit that would never let a write through (see [`Operator::rate_limit`]).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error(
    "invalid rate limit {per_second}/s with burst {burst}: both must be positive (and the rate finite)"
)]
pub struct RateLimitError {
    /// The rate asked for.
    pub per_second: f64,
    /// The burst asked for.
    pub burst: u32,
}

/// The controller ownerReference making `owner` own a child (set it on the child's
/// `metadata.ownerReferences`; Kubernetes garbage-collects the child with its owner).
pub fn owner_reference<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    owner.controller_owner_ref(&())
}

/// The declared children's watches, as [`Operator::owns`]; an explicit `owns` of the same kind
/// gives the watch its config (e.g. a label selector).
impl<K, H> Wiring for Operator<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    fn owns<C: Watched>(&mut self) {
        self.sources.owns_declared::<C>(&self.caches);
        self.need_owned::<C>(&format!(
            "a {} declared in the spec's `children:`",
            C::kind(&())
        ));
    }
}
