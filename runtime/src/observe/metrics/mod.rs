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
//! | `kube_fsm_objects` (read from the controller's cache at scrape time) | `machine`, `phase` |
//! | `kube_fsm_time_in_phase_seconds` (histogram, observed when a phase is left) | `machine`, `phase` |
//! | `kube_fsm_reconcile_duration_seconds` (histogram) | `machine`, `phase` |
//! | `kube_fsm_status_writes_total` | `machine` |
//! | `kube_fsm_status_conflicts_total` | `machine` |
//! | `kube_fsm_vetoed_transitions_total` | `machine`, `from`, `to` |
//! | `kube_fsm_undecodable_objects_total` | `machine` |
//! | `kube_fsm_watch_restarts_total` | `machine` |
//! | `kube_fsm_disconnected_seconds_total` | `machine` |
//! | `kube_fsm_connected` (1 or 0) | `machine` |
//! | `kube_fsm_remembered_objects` | `machine` |
//! | `kube_fsm_shards_held` (with [`crate::Operator::replicas`] with [`crate::controller::Sharding`]) | `machine` |
//! | `kube_fsm_shard_labels_written_total` | `machine` |
//! | `kube_fsm_unlabelled_objects` (objects whose shard label write failed and is retried) | `machine` |
//! | `kube_fsm_concurrency_limit` (reconciles allowed at once now: cut by sustained overload) | `machine` |
//! | `kube_fsm_watch_refusals_total` (a watch the API server refused: 401, 403) | `machine`, `kind` |
//! | `kube_fsm_request_refusals_total` (a request refused for want of a permission: 403, 401) | `machine`, `verb`, `resource` |
//! | `kube_fsm_drift_total` | `machine`, `action` (`adopted`, `reverted`, `held`, `migrated`, `reset`) |
//!
//! A `phase` or `from` label is a declared phase name, `""` for none yet, or `Unknown` for any
//! value the spec does not declare (one label for all of them).
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

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kube::Resource;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::state_machine::StateMachine;

mod recorder;

use recorder::phase_label;
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
    vetoed: Family<EdgeLabels, Counter>,
    drift: Family<DriftLabels, Counter>,
    undecodable: Family<MachineLabels, Counter>,
    watch_restarts: Family<MachineLabels, Counter>,
    disconnected: Family<MachineLabels, Counter<f64, AtomicU64>>,
    connected: Family<MachineLabels, Gauge>,
    remembered: Family<MachineLabels, Gauge>,
    shards_held: Family<MachineLabels, Gauge>,
    shard_labels: Family<MachineLabels, Counter>,
    unlabelled: Family<MachineLabels, Gauge>,
    watch_refusals: Family<KindLabels, Counter>,
    request_refusals: Family<PermissionLabels, Counter>,
    concurrency_limit: Family<MachineLabels, Gauge>,
    objects: ObjectsCollector,
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
            vetoed: Family::default(),
            drift: Family::default(),
            undecodable: Family::default(),
            watch_restarts: Family::default(),
            disconnected: Family::default(),
            connected: Family::default(),
            remembered: Family::default(),
            shards_held: Family::default(),
            shard_labels: Family::default(),
            unlabelled: Family::default(),
            watch_refusals: Family::default(),
            request_refusals: Family::default(),
            concurrency_limit: Family::default(),
            objects: ObjectsCollector::default(),
        }
    }
}

/// The metrics of the controllers of a process: register once, give to every
/// [`crate::Operator`]. Cloning shares the families.
#[derive(Clone, Debug, Default)]
pub struct Metrics(Arc<Families>);

impl Metrics {
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
        r.register_collector(Box::new(f.objects.clone()));
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
        self.0.objects.add(move |family| {
            if handle.strong_count() == 0 {
                return false;
            }
            for phase in machine.phases {
                let _ = family.get_or_create(&PhaseLabels::new(machine.kind, phase.name));
            }
            for object in store.get().map(Store::state).unwrap_or_default() {
                let phase = object
                    .machine_status()
                    .and_then(|s| s.phase.as_ref())
                    .map_or("", phase_label);
                family
                    .get_or_create(&PhaseLabels::new(machine.kind, phase))
                    .inc();
            }
            true
        });
        MachineMetrics {
            families: self.0.clone(),
            controller: machine.kind.to_lowercase(),
            machine: machine.kind,
            _alive: alive,
        }
    }
}

/// Adds one controller's objects to the family; `false` once that controller is gone.
type ObjectSource = Box<dyn Fn(&Family<PhaseLabels, Gauge>) -> bool + Send + Sync>;

/// `kube_fsm_objects{machine,phase}`: objects per phase, counted in each controller's cache at
/// scrape time (so deletions need no bookkeeping). Every declared phase is reported, at 0 when
/// empty; an object without a phase yet counts under `phase=""`.
#[derive(Clone, Default)]
struct ObjectsCollector(Arc<Mutex<Vec<ObjectSource>>>);

impl ObjectsCollector {
    fn add(&self, source: impl Fn(&Family<PhaseLabels, Gauge>) -> bool + Send + Sync + 'static) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(source));
    }
}

impl std::fmt::Debug for ObjectsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectsCollector").finish_non_exhaustive()
    }
}

impl Collector for ObjectsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let family = Family::<PhaseLabels, Gauge>::default();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|source| source(&family));
        let metric = encoder.encode_descriptor(
            "kube_fsm_objects",
            "Objects per phase, in the controllers' caches",
            None,
            family.metric_type(),
        )?;
        family.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(collector: &ObjectsCollector) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn a_source_whose_controller_is_gone_no_longer_counts() {
        let collector = ObjectsCollector::default();
        let count_one = |alive: std::sync::Weak<()>| {
            move |family: &Family<PhaseLabels, Gauge>| {
                if alive.strong_count() == 0 {
                    return false;
                }
                family.get_or_create(&PhaseLabels::new("K", "A")).inc();
                true
            }
        };
        let first = Arc::new(());
        let second = Arc::new(());
        collector.add(count_one(Arc::downgrade(&first)));
        collector.add(count_one(Arc::downgrade(&second)));
        assert!(scrape(&collector).contains("kube_fsm_objects{machine=\"K\",phase=\"A\"} 2"));
        // The first controller is replaced (e.g. re-created after a lost Lease).
        drop(first);
        assert!(scrape(&collector).contains("kube_fsm_objects{machine=\"K\",phase=\"A\"} 1"));
        assert_eq!(collector.0.lock().unwrap().len(), 1, "its source is gone");
    }
}
