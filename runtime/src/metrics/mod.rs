//! Prometheus metrics of a running machine (prometheus-client): controller-runtime's names for
//! the controller, and the machine's own.
//!
//! | metric | labels |
//! |---|---|
//! | `controller_runtime_reconcile_total` | `controller`, `result` (`success`, `requeue_after`, `error`) |
//! | `controller_runtime_reconcile_errors_total` | `controller` |
//! | `controller_runtime_reconcile_time_seconds` (histogram) | `controller` |
//! | `controller_runtime_active_workers` | `controller` |
//! | `kube_fsm_transitions_total` | `machine`, `from`, `to` (`from` is `""` for a new object) |
//! | `kube_fsm_objects` (read from the controller's cache at scrape time, as every gauge below up to `kube_fsm_child_conditions`) | `machine`, `phase` |
//! | `kube_fsm_namespace_objects` (only the pairs that have objects) | `machine`, `object_namespace`, `phase` |
//! | `kube_fsm_phase_oldest_seconds` (age of the phase's longest-resident object; 0 when empty) | `machine`, `phase` |
//! | `kube_fsm_phase_timeout_seconds` (each phase with a timeout) | `machine`, `phase` |
//! | `kube_fsm_phase_timeout_progress` (the largest fraction of the timeout an object has used, paused time excluded; 1: due) | `machine`, `phase` |
//! | `kube_fsm_objects_near_timeout` (objects past [`Metrics::near_timeout`] of it, default 0.8) | `machine`, `phase` |
//! | `kube_fsm_unconverged_objects` (`status.observedGeneration` behind `metadata.generation`) | `machine`, `object_namespace` |
//! | `kube_fsm_convergence_lag_seconds` (the longest such wait: since creation, or since this process first saw the newer generation) | `machine`, `object_namespace` |
//! | `kube_fsm_stalled_objects` (`Stalled` True; `Other` for a reason the engine does not write) | `machine`, `reason` |
//! | `kube_fsm_paused_objects` | `machine` |
//! | `kube_fsm_child_conditions` (each condition derived from a declared child, every status from 0: how many objects' `PodsReady` from `db` is `False`) | `machine`, `child`, `condition`, `status` |
//! | `kube_fsm_time_in_phase_seconds` (histogram, observed when a phase is left) | `machine`, `phase` |
//! | `kube_fsm_reconcile_duration_seconds` (histogram) | `machine`, `phase` |
//! | `kube_fsm_status_writes_total` | `machine` |
//! | `kube_fsm_status_conflicts_total` | `machine` |
//! | `kube_fsm_handler_panics_total` (reconciles that panicked, caught: see [`crate::Operator::recover_panics`]) | `machine`, `phase` |
//! | `kube_fsm_handler_timeouts_total` (handler and hook calls dropped at their deadline: see [`crate::Operator::handler_timeout`]) | `machine`, `phase` |
//! | `kube_fsm_vetoed_transitions_total` | `machine`, `from`, `to` |
//! | `kube_fsm_undecodable_objects_total` | `machine` |
//! | `kube_fsm_watch_restarts_total` | `machine` |
//! | `kube_fsm_disconnected_seconds_total` | `machine` |
//! | `kube_fsm_connected` (1 or 0: every watch delivers, and requests are answered) | `machine` |
//! | `kube_fsm_watch_up` (1 or 0, each watch once it has failed: `kind` is the kind and its selection) | `machine`, `kind` |
//! | `kube_fsm_watch_not_served` (1 while the watch's kind or version is not served: `404`) | `machine`, `kind` |
//! | `kube_fsm_remembered_objects` | `machine` |
//! | `kube_fsm_leader` (1 while this replica reconciles: it holds the Lease, or runs without election; 0 while it waits or is sharded) | `machine` |
//! | `kube_fsm_shards` (the shard count, with sharding) | `machine` |
//! | `kube_fsm_shards_held` (with [`crate::Operator::replicas`] with [`crate::replicas::Sharding`]) | `machine` |
//! | `kube_fsm_shard_labels_written_total` | `machine` |
//! | `kube_fsm_unlabelled_objects` (objects whose shard label write failed and is retried) | `machine` |
//! | `kube_fsm_concurrency_limit` (reconciles allowed at once now: cut by sustained overload) | `machine` |
//! | `kube_fsm_watch_refusals_total` (a watch the API server refused: 401, 403) | `machine`, `kind` |
//! | `kube_fsm_request_refusals_total` (a request refused for want of a permission: 403, 401) | `machine`, `verb`, `resource` |
//! | `kube_fsm_drift_total` | `machine`, `action` (`adopted`, `reverted`, `held`, `migrated`, `reset`) |
//!
//! A `phase` or `from` label is a declared phase name, `""` for none yet, or `Unknown` for any
//! value the spec does not declare (one label for all of them). No label names an object, so
//! the series are bounded by the spec and the namespaces. The namespace label is
//! `object_namespace`, not `namespace`, which Prometheus's Kubernetes discovery gives the
//! scraped pod. `kube-fsm-generate`'s alerting rules and dashboard are written over these
//! series.
//!
//! `controller` is the kind in lower case (controller-runtime's default name), `machine` the
//! kind. One [`Metrics`] serves every controller of a process (each adds its labels):
//!
//! ```no_run
//! # fn demo<K, H>(a: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H>
//! # where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
//! let mut registry = prometheus_client::registry::Registry::default();
//! let metrics = kube_fsm::metrics::Metrics::default();
//! metrics.register(&mut registry); // once
//! let a = a.metrics(&metrics); // and so on for each Operator
//! // serve `registry` with prometheus_client::encoding::text::encode
//! # a }
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kube::Resource;
use kube::runtime::reflector::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::machine::state_machine::StateMachine;
use crate::pure::drift::DRIFT_ACTIONS;

mod cache;
mod recorder;
mod tally;

use cache::CacheCollector;
pub use recorder::UNDECLARED;
pub(crate) use recorder::{MachineMetrics, ReconcileResult};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineLabels {
    machine: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    machine: &'static str,
    phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EdgeLabels {
    machine: &'static str,
    from: String,
    to: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    machine: &'static str,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PermissionLabels {
    machine: &'static str,
    verb: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriftLabels {
    machine: &'static str,
    action: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

fn phase_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}
/// The metric families, shared by every controller that records into them.
#[derive(Debug)]
struct Families {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    reconcile_time: Histograms<ControllerLabels>,
    active_workers: Family<ControllerLabels, Gauge>,
    transitions: Family<EdgeLabels, Counter>,
    time_in_phase: Histograms<PhaseLabels>,
    phase_reconcile_time: Histograms<PhaseLabels>,
    status_writes: Family<MachineLabels, Counter>,
    conflicts: Family<MachineLabels, Counter>,
    panics: Family<PhaseLabels, Counter>,
    timeouts: Family<PhaseLabels, Counter>,
    vetoed: Family<EdgeLabels, Counter>,
    drift: Family<DriftLabels, Counter>,
    undecodable: Family<MachineLabels, Counter>,
    watch_restarts: Family<MachineLabels, Counter>,
    disconnected: Family<MachineLabels, Counter<f64, AtomicU64>>,
    connected: Family<MachineLabels, Gauge>,
    watch_up: Family<KindLabels, Gauge>,
    watch_not_served: Family<KindLabels, Gauge>,
    remembered: Family<MachineLabels, Gauge>,
    shards_held: Family<MachineLabels, Gauge>,
    shard_labels: Family<MachineLabels, Counter>,
    unlabelled: Family<MachineLabels, Gauge>,
    watch_refusals: Family<KindLabels, Counter>,
    request_refusals: Family<PermissionLabels, Counter>,
    concurrency_limit: Family<MachineLabels, Gauge>,
    leader: Family<MachineLabels, Gauge>,
    shards: Family<MachineLabels, Gauge>,
    cache: CacheCollector,
    /// The fraction of a timeout past which an object counts as near it (an `f64`'s bits).
    near_timeout: AtomicU64,
}

impl Default for Families {
    fn default() -> Self {
        Families {
            reconciles: Family::default(),
            errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_buckets),
            active_workers: Family::default(),
            transitions: Family::default(),
            time_in_phase: Family::new_with_constructor(phase_buckets),
            phase_reconcile_time: Family::new_with_constructor(reconcile_buckets),
            status_writes: Family::default(),
            conflicts: Family::default(),
            panics: Family::default(),
            timeouts: Family::default(),
            vetoed: Family::default(),
            drift: Family::default(),
            undecodable: Family::default(),
            watch_restarts: Family::default(),
            disconnected: Family::default(),
            connected: Family::default(),
            watch_up: Family::default(),
            watch_not_served: Family::default(),
            remembered: Family::default(),
            shards_held: Family::default(),
            shard_labels: Family::default(),
            unlabelled: Family::default(),
            watch_refusals: Family::default(),
            request_refusals: Family::default(),
            concurrency_limit: Family::default(),
            leader: Family::default(),
            shards: Family::default(),
            cache: CacheCollector::default(),
            near_timeout: AtomicU64::new(DEFAULT_NEAR_TIMEOUT.to_bits()),
        }
    }
}

/// The default of [`Metrics::near_timeout`].
pub const DEFAULT_NEAR_TIMEOUT: f64 = 0.8;

/// The metrics of the controllers of a process: register once, give to every
/// [`crate::Operator`]. Cloning shares the families.
#[derive(Clone, Debug, Default)]
pub struct Metrics(Arc<Families>);

impl Metrics {
    /// `kube_fsm_objects_near_timeout` counts the objects that have used at least `fraction`
    /// (0 to 1, default 0.8) of their phase's timeout. Shared by every clone.
    #[must_use]
    pub fn near_timeout(self, fraction: f64) -> Self {
        self.0
            .near_timeout
            .store(fraction.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        self
    }

    /// The objects per phase of `machine` (its kind) in this process's controllers' caches,
    /// as `kube_fsm_objects` reports them now: every declared phase (0 when empty), `""` for
    /// objects with no phase yet, `Unknown` for values the spec does not declare. Empty while
    /// no controller of the machine runs here (before `run`, or on a replica waiting for the
    /// Lease).
    #[must_use]
    pub fn objects(&self, machine: &str) -> BTreeMap<String, usize> {
        self.0
            .cache
            .objects(machine)
            .into_iter()
            .map(|(phase, n)| (phase.to_owned(), usize::try_from(n).unwrap_or(0)))
            .collect()
    }

    /// Registers every metric in `registry` (once per registry).
    pub fn register(&self, registry: &mut Registry) {
        let f = &self.0;
        let r = registry;
        r.register(
            "controller_runtime_reconcile",
            "Reconciliations per controller and result",
            f.reconciles.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Reconciliations that returned an error",
            f.errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Time per reconciliation",
            f.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Reconciliations running now",
            f.active_workers.clone(),
        );
        r.register(
            "kube_fsm_transitions",
            "Phase transitions written, by source and target phase",
            f.transitions.clone(),
        );
        r.register(
            "kube_fsm_time_in_phase_seconds",
            "Time objects spent in a phase, observed when they leave it",
            f.time_in_phase.clone(),
        );
        r.register(
            "kube_fsm_reconcile_duration_seconds",
            "Time per reconciliation, by the phase it ran in",
            f.phase_reconcile_time.clone(),
        );
        r.register(
            "kube_fsm_status_writes",
            "Status writes that the API server accepted",
            f.status_writes.clone(),
        );
        r.register(
            "kube_fsm_status_conflicts",
            "Status writes refused with 409 Conflict (each is re-read and redone)",
            f.conflicts.clone(),
        );
        r.register(
            "kube_fsm_handler_panics",
            "Reconciles that panicked (caught at the reconcile boundary), by the phase they ran in",
            f.panics.clone(),
        );
        r.register(
            "kube_fsm_handler_timeouts",
            "Handler and hook calls dropped at their deadline, by the phase they ran in",
            f.timeouts.clone(),
        );
        r.register(
            "kube_fsm_vetoed_transitions",
            "Transitions refused by before_transition",
            f.vetoed.clone(),
        );
        r.register(
            "kube_fsm_drift",
            "Stored phases this controller did not write and that do not follow its last one",
            f.drift.clone(),
        );
        r.register(
            "kube_fsm_undecodable_objects",
            "Object versions the watch could not decode and skipped",
            f.undecodable.clone(),
        );
        r.register(
            "kube_fsm_watch_restarts",
            "Watches that failed and were restarted with backoff",
            f.watch_restarts.clone(),
        );
        r.register(
            "kube_fsm_disconnected_seconds",
            "Time the controller could not reach the API server, counted when it is back",
            f.disconnected.clone(),
        );
        r.register(
            "kube_fsm_remembered_objects",
            "Objects the engine keeps per-object memory for (bounded by twice the cache)",
            f.remembered.clone(),
        );
        r.register(
            "kube_fsm_shards_held",
            "Shards whose Leases this replica holds and serves",
            f.shards_held.clone(),
        );
        r.register(
            "kube_fsm_shard_labels_written",
            "Objects this replica wrote the shard label on (once per object)",
            f.shard_labels.clone(),
        );
        r.register(
            "kube_fsm_concurrency_limit",
            "Reconciles allowed at once now (the configured concurrency, halved under sustained overload)",
            f.concurrency_limit.clone(),
        );
        r.register(
            "kube_fsm_watch_refusals",
            "Watches the API server refused (401, 403: a verb missing from the RBAC), by kind",
            f.watch_refusals.clone(),
        );
        r.register(
            "kube_fsm_request_refusals",
            "Requests the API server refused for want of a permission (403 naming it, 401), by verb and resource",
            f.request_refusals.clone(),
        );
        r.register(
            "kube_fsm_unlabelled_objects",
            "Objects without a valid shard label whose label write failed and is being retried",
            f.unlabelled.clone(),
        );
        r.register(
            "kube_fsm_connected",
            "1 while the controller reaches the API server, 0 while it does not",
            f.connected.clone(),
        );
        r.register(
            "kube_fsm_watch_up",
            "1 while the watch (a kind and its selection) delivers, 0 since it failed",
            f.watch_up.clone(),
        );
        r.register(
            "kube_fsm_watch_not_served",
            "1 while the API server does not serve the watch's kind or version (404: its CustomResourceDefinition is missing)",
            f.watch_not_served.clone(),
        );
        r.register(
            "kube_fsm_leader",
            "1 while this replica reconciles (holds the leader Lease, or runs without election)",
            f.leader.clone(),
        );
        r.register(
            "kube_fsm_shards",
            "The number of shards the objects are split into",
            f.shards.clone(),
        );
        r.register_collector(Box::new(f.cache.clone()));
    }

    /// The handle through which the controller of `K` records, counting the objects of
    /// `store` (its cache, once it runs) for `kube_fsm_objects`.
    pub(crate) fn for_machine<K>(&self, store: Arc<OnceLock<Store<K>>>) -> MachineMetrics
    where
        K: Resource<DynamicType = ()> + StateMachine + Clone + Send + Sync + 'static,
    {
        let machine = K::machine();
        // The source lives as long as the returned handle: once it is dropped (its Operator
        // replaced, e.g. after a lost Lease, or `.metrics()` called again), the source goes
        // away instead of counting a frozen cache next to its successor's.
        let alive = Arc::new(());
        let handle = Arc::downgrade(&alive);
        let families = Arc::downgrade(&self.0);
        let lag = Mutex::new(tally::Lag::default());
        self.0.cache.add(machine.kind, move |now| {
            if handle.strong_count() == 0 {
                return None;
            }
            let near = families.upgrade().map_or(DEFAULT_NEAR_TIMEOUT, |f| {
                f64::from_bits(f.near_timeout.load(Ordering::Relaxed))
            });
            let objects = store.get().map(Store::state).unwrap_or_default();
            let mut lag = lag.lock().unwrap_or_else(PoisonError::into_inner);
            Some(tally::Tally::of(
                objects.iter().map(|o| (o.meta(), o.machine_status())),
                now,
                near,
                &mut lag,
            ))
        });
        // Counters an alert takes the increase of exist from the start (at 0), so that the
        // first increment is an increase; the holdings read 0 until the replica holds any.
        let labels = MachineLabels {
            machine: machine.kind,
        };
        for action in DRIFT_ACTIONS {
            let _ = self.0.drift.get_or_create(&DriftLabels {
                machine: machine.kind,
                action,
            });
        }
        let controller = ControllerLabels {
            controller: machine.kind.to_lowercase(),
        };
        let _ = self.0.errors.get_or_create(&controller);
        for result in ReconcileResult::ALL {
            let _ = self.0.reconciles.get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result: result.label(),
            });
        }
        for counter in [
            &self.0.status_writes,
            &self.0.conflicts,
            &self.0.undecodable,
            &self.0.watch_restarts,
        ] {
            let _ = counter.get_or_create(&labels);
        }
        let _ = self.0.leader.get_or_create(&labels);
        let _ = self.0.shards_held.get_or_create(&labels);
        MachineMetrics {
            families: self.0.clone(),
            controller: machine.kind.to_lowercase(),
            machine: machine.kind,
            _alive: alive,
        }
    }
}
