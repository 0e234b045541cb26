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
//! | `kube_fsm_drift_total` | `machine`, `action` (`adopted`, `reverted`, `reset`) |
//!
//! `controller` is the kind in lower case (controller-runtime's default name), `machine` the
//! kind. Register them with [`crate::Operator::metrics`] and serve the registry with
//! `prometheus_client::encoding::text::encode`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kube::Resource;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::machine::StateMachine;

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

/// How a reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; waits for the next change.
    Success,
    /// Done; looks again after a delay.
    RequeueAfter,
    /// Failed; retried with backoff.
    Error,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Error => "error",
        }
    }
}

/// The metrics of one machine's controller. Always recorded; exported once registered.
#[derive(Debug)]
pub struct Metrics {
    controller: String,
    machine: &'static str,
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
}

impl Metrics {
    /// The metrics of the controller of `K`.
    pub fn new<K: StateMachine>() -> Self {
        let machine = K::machine().kind;
        Metrics {
            controller: machine.to_lowercase(),
            machine,
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
        }
    }

    /// Registers every metric in `registry` (names without a prefix of their own).
    pub fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "controller_runtime_reconcile",
            "Reconciliations per controller and result",
            self.reconciles.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Reconciliations that returned an error",
            self.errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Time per reconciliation",
            self.reconcile_time.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Reconciliations running now",
            self.active_workers.clone(),
        );
        r.register(
            "kube_fsm_transitions",
            "Phase transitions written, by source and target phase",
            self.transitions.clone(),
        );
        r.register(
            "kube_fsm_time_in_phase_seconds",
            "Time objects spent in a phase, observed when they leave it",
            self.time_in_phase.clone(),
        );
        r.register(
            "kube_fsm_reconcile_duration_seconds",
            "Time per reconciliation, by the phase it ran in",
            self.phase_reconcile_time.clone(),
        );
        r.register(
            "kube_fsm_status_writes",
            "Status writes that the API server accepted",
            self.status_writes.clone(),
        );
        r.register(
            "kube_fsm_status_conflicts",
            "Status writes refused with 409 Conflict (each is re-read and redone)",
            self.conflicts.clone(),
        );
        r.register(
            "kube_fsm_vetoed_transitions",
            "Transitions refused by before_transition",
            self.vetoed.clone(),
        );
        r.register(
            "kube_fsm_drift",
            "Stored phases this controller did not write and that do not follow its last one",
            self.drift.clone(),
        );
    }

    fn controller(&self) -> ControllerLabels {
        ControllerLabels {
            controller: self.controller.clone(),
        }
    }

    fn machine(&self) -> MachineLabels {
        MachineLabels {
            machine: self.machine,
        }
    }

    /// Counts a running reconcile until the guard is dropped.
    pub fn worker(self: &Arc<Self>) -> WorkerGuard {
        self.active_workers.get_or_create(&self.controller()).inc();
        WorkerGuard(self.clone())
    }

    /// Records a finished reconcile that ran in `phase`.
    pub fn reconciled(&self, result: ReconcileResult, took: Duration, phase: Option<&str>) {
        let controller = self.controller();
        self.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result: result.label(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.errors.get_or_create(&controller).inc();
        }
        self.reconcile_time
            .get_or_create(&controller)
            .observe(took.as_secs_f64());
        if let Some(phase) = phase {
            self.phase_reconcile_time
                .get_or_create(&PhaseLabels {
                    machine: self.machine,
                    phase: phase.to_owned(),
                })
                .observe(took.as_secs_f64());
        }
    }

    /// Records a written transition; `stayed` is the time spent in `from`, when known.
    pub fn transition(&self, from: Option<&str>, to: &'static str, stayed: Option<Duration>) {
        self.transitions
            .get_or_create(&EdgeLabels {
                machine: self.machine,
                from: from.unwrap_or_default().to_owned(),
                to,
            })
            .inc();
        if let (Some(from), Some(stayed)) = (from, stayed) {
            self.time_in_phase
                .get_or_create(&PhaseLabels {
                    machine: self.machine,
                    phase: from.to_owned(),
                })
                .observe(stayed.as_secs_f64());
        }
    }

    /// Records an accepted status write.
    pub fn status_written(&self) {
        self.status_writes.get_or_create(&self.machine()).inc();
    }

    /// Records a status write refused with 409 Conflict.
    pub fn conflict(&self) {
        self.conflicts.get_or_create(&self.machine()).inc();
    }

    /// Records a transition refused by `before_transition`.
    pub fn vetoed(&self, from: &str, to: &'static str) {
        self.vetoed
            .get_or_create(&EdgeLabels {
                machine: self.machine,
                from: from.to_owned(),
                to,
            })
            .inc();
    }

    /// Records drift and what was done about it.
    pub fn drift(&self, action: &'static str) {
        self.drift
            .get_or_create(&DriftLabels {
                machine: self.machine,
                action,
            })
            .inc();
    }
}

/// Decrements `controller_runtime_active_workers` when dropped.
#[derive(Debug)]
pub struct WorkerGuard(Arc<Metrics>);

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.0
            .active_workers
            .get_or_create(&self.0.controller())
            .dec();
    }
}

/// `kube_fsm_objects{machine,phase}`: objects per phase, counted in the controller's cache at
/// scrape time (so deletions need no bookkeeping). Every declared phase is reported, at 0 when
/// empty; an object without a phase yet counts under `phase=""`.
pub(crate) struct ObjectsCollector<K: Resource<DynamicType = ()> + 'static> {
    pub(crate) store: Arc<OnceLock<Store<K>>>,
}

impl<K: Resource<DynamicType = ()>> std::fmt::Debug for ObjectsCollector<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectsCollector").finish_non_exhaustive()
    }
}

impl<K> Collector for ObjectsCollector<K>
where
    K: Resource<DynamicType = ()> + StateMachine + Clone + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let machine = K::machine();
        let family = Family::<PhaseLabels, Gauge>::default();
        let labels = |phase: &str| PhaseLabels {
            machine: machine.kind,
            phase: phase.to_owned(),
        };
        for phase in machine.phases {
            let _ = family.get_or_create(&labels(phase.name));
        }
        if let Some(store) = self.store.get() {
            for object in store.state() {
                let phase = object
                    .machine_status()
                    .and_then(|s| s.phase.as_ref())
                    .map_or("", |p| p.as_str());
                family.get_or_create(&labels(phase)).inc();
            }
        }
        let metric = encoder.encode_descriptor(
            "kube_fsm_objects",
            "Objects per phase, in the controller's cache",
            None,
            family.metric_type(),
        )?;
        family.encode(metric)
    }
}
