//! One controller's recorders ([`MachineMetrics`]): what the engine calls to count reconciles,
//! transitions, writes and connection changes into the shared [`super::Metrics`] families,
//! with the controller's `controller`/`machine` labels. Crate-private: users register
//! [`super::Metrics`] and read the scrape.

use std::sync::Arc;
use std::time::Duration;

use super::{
    ControllerLabels, DriftLabels, EdgeLabels, Families, KindLabels, MachineLabels,
    PermissionLabels, PhaseLabels, ResultLabels,
};
use crate::machine::data::Phase;
use crate::machine::status::PhaseValue;

/// How a reconcile ended, as controller-runtime labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReconcileResult {
    /// Done; waits for the next change.
    Success,
    /// Done; looks again after a delay.
    RequeueAfter,
    /// Failed; retried with backoff.
    Error,
}

impl ReconcileResult {
    /// Every result, for the series that exist from the start.
    pub(super) const ALL: [ReconcileResult; 3] = [
        ReconcileResult::Success,
        ReconcileResult::RequeueAfter,
        ReconcileResult::Error,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::RequeueAfter => "requeue_after",
            ReconcileResult::Error => "error",
        }
    }
}

/// The `phase` label of a stored phase: its name, or [`UNDECLARED`] for any value the spec
/// does not declare, so hand-written values cannot grow the label set without bound.
pub(super) fn phase_label<P: Phase>(phase: &PhaseValue<P>) -> &'static str {
    match phase {
        PhaseValue::Known(phase) => phase.name(),
        PhaseValue::Unknown(_) => UNDECLARED,
    }
}

/// The `phase` label value of every stored phase the spec does not declare.
pub const UNDECLARED: &str = "Unknown";

impl PhaseLabels {
    pub(super) fn new(machine: &'static str, phase: &str) -> Self {
        PhaseLabels {
            machine,
            phase: phase.to_owned(),
        }
    }
}

/// One controller's view of [`Metrics`]: the families plus its `controller`/`machine` labels.
#[derive(Debug)]
pub(crate) struct MachineMetrics {
    pub(super) families: Arc<Families>,
    pub(super) controller: String,
    pub(super) machine: &'static str,
    /// Keeps this controller's `kube_fsm_objects` source registered.
    pub(super) _alive: Arc<()>,
}

impl MachineMetrics {
    /// A recorder of a machine `Test` into families no registry reads (for unit tests of the
    /// parts that record).
    #[cfg(test)]
    pub(crate) fn detached() -> Self {
        MachineMetrics {
            families: Arc::default(),
            controller: "test".to_owned(),
            machine: "Test",
            _alive: Arc::new(()),
        }
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
    pub(crate) fn worker(self: &Arc<Self>) -> WorkerGuard {
        self.families
            .active_workers
            .get_or_create(&self.controller())
            .inc();
        WorkerGuard(self.clone())
    }

    /// Counts a reconcile in `phase` (`None`: no phase yet) that panicked.
    pub(crate) fn panicked<P: Phase>(&self, phase: Option<&PhaseValue<P>>) {
        let phase = phase.map_or("", phase_label);
        (self.families.panics)
            .get_or_create(&PhaseLabels::new(self.machine, phase))
            .inc();
    }

    /// Counts a handler or hook call in `phase` dropped at its deadline.
    pub(crate) fn handler_timed_out(&self, phase: &str) {
        (self.families.timeouts)
            .get_or_create(&PhaseLabels::new(self.machine, phase))
            .inc();
    }

    /// Records a finished reconcile that ran in `phase`.
    pub(crate) fn reconciled<P: Phase>(
        &self,
        result: ReconcileResult,
        took: Duration,
        phase: Option<&PhaseValue<P>>,
    ) {
        let f = &self.families;
        let controller = self.controller();
        f.reconciles
            .get_or_create(&ResultLabels {
                controller: controller.controller.clone(),
                result: result.label(),
            })
            .inc();
        if result == ReconcileResult::Error {
            f.errors.get_or_create(&controller).inc();
        }
        f.reconcile_time
            .get_or_create(&controller)
            .observe(took.as_secs_f64());
        if let Some(phase) = phase {
            f.phase_reconcile_time
                .get_or_create(&PhaseLabels::new(self.machine, phase_label(phase)))
                .observe(took.as_secs_f64());
        }
    }

    /// Records a written transition; `stayed` is the time spent in `from`, when known.
    pub(crate) fn transition<P: Phase>(
        &self,
        from: Option<&PhaseValue<P>>,
        to: &'static str,
        stayed: Option<Duration>,
    ) {
        let from = from.map(phase_label);
        self.families
            .transitions
            .get_or_create(&EdgeLabels {
                machine: self.machine,
                from: from.unwrap_or_default().to_owned(),
                to,
            })
            .inc();
        if let (Some(from), Some(stayed)) = (from, stayed) {
            self.families
                .time_in_phase
                .get_or_create(&PhaseLabels::new(self.machine, from))
                .observe(stayed.as_secs_f64());
        }
    }

    /// Records an accepted status write.
    pub(crate) fn status_written(&self) {
        self.families
            .status_writes
            .get_or_create(&self.machine())
            .inc();
    }

    /// Records a status write refused with 409 Conflict.
    pub(crate) fn conflict(&self) {
        self.families.conflicts.get_or_create(&self.machine()).inc();
    }

    /// Records a transition refused by `before_transition`.
    pub(crate) fn vetoed(&self, from: &str, to: &'static str) {
        self.families
            .vetoed
            .get_or_create(&EdgeLabels {
                machine: self.machine,
                from: from.to_owned(),
                to,
            })
            .inc();
    }

    /// Records an object version the watch could not decode (and skipped).
    pub(crate) fn undecodable(&self) {
        self.families
            .undecodable
            .get_or_create(&self.machine())
            .inc();
    }

    /// Records a failed (and restarted) watch.
    pub(crate) fn watch_restart(&self) {
        self.families
            .watch_restarts
            .get_or_create(&self.machine())
            .inc();
    }

    /// Records whether the watch `watch` delivers, and whether its kind is not served.
    pub(crate) fn watch_state(&self, watch: &str, up: bool, unserved: bool) {
        let labels = KindLabels {
            machine: self.machine,
            kind: watch.to_owned(),
        };
        self.families
            .watch_up
            .get_or_create(&labels)
            .set(i64::from(up));
        self.families
            .watch_not_served
            .get_or_create(&labels)
            .set(i64::from(unserved));
    }

    /// Records whether the API server is reachable.
    pub(crate) fn connected(&self, up: bool) {
        self.families
            .connected
            .get_or_create(&self.machine())
            .set(i64::from(up));
    }

    /// Records how many objects the engine remembers.
    pub(crate) fn remembered(&self, objects: usize) {
        self.families
            .remembered
            .get_or_create(&self.machine())
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// Records whether this replica reconciles: it holds the leader Lease, or runs without
    /// leader election.
    pub(crate) fn leader(&self, leading: bool) {
        self.families
            .leader
            .get_or_create(&self.machine())
            .set(i64::from(leading));
    }

    /// Records how many shards the objects are split into.
    pub(crate) fn shards(&self, shards: u32) {
        self.families
            .shards
            .get_or_create(&self.machine())
            .set(i64::from(shards));
    }

    /// Records how many shards this replica serves.
    pub(crate) fn shards_held(&self, shards: usize) {
        self.families
            .shards_held
            .get_or_create(&self.machine())
            .set(i64::try_from(shards).unwrap_or(i64::MAX));
    }

    /// Records a shard label written.
    pub(crate) fn shard_labelled(&self) {
        self.families
            .shard_labels
            .get_or_create(&self.machine())
            .inc();
    }

    /// Records the limit on reconciles in flight (an unbounded one is not reported).
    pub(crate) fn concurrency_limit(&self, limit: usize) {
        if let Ok(limit) = i64::try_from(limit) {
            self.families
                .concurrency_limit
                .get_or_create(&self.machine())
                .set(limit);
        }
    }

    /// Records a watch of `kind` the API server refused.
    pub(crate) fn watch_refused(&self, kind: &str) {
        self.families
            .watch_refusals
            .get_or_create(&KindLabels {
                machine: self.machine,
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Records a request the API server refused for want of `verb` on `resource`.
    pub(crate) fn request_refused(&self, verb: &str, resource: &str) {
        self.families
            .request_refusals
            .get_or_create(&PermissionLabels {
                machine: self.machine,
                verb: verb.to_owned(),
                resource: resource.to_owned(),
            })
            .inc();
    }

    /// Records how many objects wait for their shard label to be written again.
    pub(crate) fn unlabelled(&self, objects: usize) {
        self.families
            .unlabelled
            .get_or_create(&self.machine())
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
    }

    /// Records an outage that lasted `took`.
    pub(crate) fn disconnected_for(&self, took: Duration) {
        self.families
            .disconnected
            .get_or_create(&self.machine())
            .inc_by(took.as_secs_f64());
    }

    /// Records drift and what was done about it.
    pub(crate) fn drift(&self, action: &'static str) {
        self.families
            .drift
            .get_or_create(&DriftLabels {
                machine: self.machine,
                action,
            })
            .inc();
    }
}

/// Decrements `controller_runtime_active_workers` when dropped.
#[derive(Debug)]
pub(crate) struct WorkerGuard(Arc<MachineMetrics>);

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.0
            .families
            .active_workers
            .get_or_create(&self.0.controller())
            .dec();
    }
}
