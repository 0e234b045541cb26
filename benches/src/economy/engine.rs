//! What the example operator's engine counted, read from the operator's own `/metrics` (the
//! families of `runtime/src/metrics`): reconciles by the phase they ran in, failed reconciles,
//! status writes, conflicts and transitions. Each process counts from zero, so readings of
//! several processes in turn are added up ([`Engine`] is `+` and `-`).

use std::collections::BTreeMap;
use std::ops::{Add, Sub};

use kube_fsm_testkit::prometheus::{samples, sum};

/// The example machine's kind (the `machine` label) and controller (the `controller` label).
const MACHINE: &str = "Database";
const CONTROLLER: &str = "database";

/// The phases of `specs/database.yaml`, in the order the report lists them.
pub const PHASES: [&str; 5] = ["Pending", "Provisioning", "Running", "Degraded", "Failed"];

/// One reading of the engine's counters (or the difference of two).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Engine {
    /// Finished reconciles, every result (`controller_runtime_reconcile_total`).
    pub reconciles: u64,
    /// Reconciles that failed and are retried with backoff (`result="error"`).
    pub errors: u64,
    /// Reconciles by the phase stored when they started
    /// (`kube_fsm_reconcile_duration_seconds_count`); an object without a status yet has none.
    pub by_phase: BTreeMap<String, u64>,
    /// Status writes the API server accepted (`kube_fsm_status_writes_total`).
    pub status_writes: u64,
    /// Status writes refused with 409 Conflict (`kube_fsm_status_conflicts_total`).
    pub conflicts: u64,
    /// Phase transitions written (`kube_fsm_transitions_total`).
    pub transitions: u64,
}

/// A counter's value (whole numbers: exact in f64 far beyond a run's).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn whole(value: f64) -> u64 {
    value as u64
}

impl Engine {
    /// Reads the counters from the text of the operator's `/metrics`.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let machine = [("machine", MACHINE)];
        let reconciles = "controller_runtime_reconcile_total";
        let controller = ("controller", CONTROLLER);
        let mut by_phase = BTreeMap::new();
        for (labels, value) in samples(text, "kube_fsm_reconcile_duration_seconds_count") {
            if labels.get("machine").map(String::as_str) == Some(MACHINE)
                && let Some(phase) = labels.get("phase")
            {
                *by_phase.entry(phase.clone()).or_insert(0) += whole(value);
            }
        }
        Engine {
            reconciles: whole(sum(text, reconciles, &[controller])),
            errors: whole(sum(text, reconciles, &[controller, ("result", "error")])),
            by_phase,
            status_writes: whole(sum(text, "kube_fsm_status_writes_total", &machine)),
            conflicts: whole(sum(text, "kube_fsm_status_conflicts_total", &machine)),
            transitions: whole(sum(text, "kube_fsm_transitions_total", &machine)),
        }
    }

    /// Reconciles that started in `phase`.
    #[must_use]
    pub fn phase(&self, phase: &str) -> u64 {
        self.by_phase.get(phase).copied().unwrap_or(0)
    }

    /// Reconciles of objects without a stored phase (a new object's first).
    #[must_use]
    pub fn without_phase(&self) -> u64 {
        self.reconciles
            .saturating_sub(self.by_phase.values().sum::<u64>())
    }

    /// `no status / Pending / Provisioning / ...` for the report, with any phase label beyond
    /// [`PHASES`] (e.g. `Unknown`) appended as `label: count`.
    #[must_use]
    pub fn per_phase(&self) -> String {
        let mut cells = vec![self.without_phase().to_string()];
        cells.extend(PHASES.iter().map(|p| self.phase(p).to_string()));
        cells.extend(
            self.by_phase
                .iter()
                .filter(|(p, n)| !PHASES.contains(&p.as_str()) && **n > 0)
                .map(|(p, n)| format!("{p}: {n}")),
        );
        cells.join(" / ")
    }
}

impl Add for &Engine {
    type Output = Engine;

    fn add(self, other: &Engine) -> Engine {
        let mut by_phase = self.by_phase.clone();
        for (phase, n) in &other.by_phase {
            *by_phase.entry(phase.clone()).or_insert(0) += n;
        }
        Engine {
            reconciles: self.reconciles + other.reconciles,
            errors: self.errors + other.errors,
            by_phase,
            status_writes: self.status_writes + other.status_writes,
            conflicts: self.conflicts + other.conflicts,
            transitions: self.transitions + other.transitions,
        }
    }
}

impl Sub for &Engine {
    type Output = Engine;

    /// What was counted between two readings.
    fn sub(self, earlier: &Engine) -> Engine {
        Engine {
            reconciles: self.reconciles.saturating_sub(earlier.reconciles),
            errors: self.errors.saturating_sub(earlier.errors),
            by_phase: self
                .by_phase
                .iter()
                .map(|(phase, n)| (phase.clone(), n.saturating_sub(earlier.phase(phase))))
                .collect(),
            status_writes: self.status_writes.saturating_sub(earlier.status_writes),
            conflicts: self.conflicts.saturating_sub(earlier.conflicts),
            transitions: self.transitions.saturating_sub(earlier.transitions),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example operator's `/metrics` as prometheus-client encodes it (abridged).
    const METRICS: &str = r#"# HELP controller_runtime_reconcile Reconciliations per controller and result.
# TYPE controller_runtime_reconcile counter
controller_runtime_reconcile_total{controller="database",result="success"} 600
controller_runtime_reconcile_total{controller="database",result="requeue_after"} 3
controller_runtime_reconcile_total{controller="database",result="error"} 2
controller_runtime_reconcile_total{controller="riskengine",result="success"} 50
# HELP controller_runtime_reconcile_time_seconds Time per reconciliation.
# TYPE controller_runtime_reconcile_time_seconds histogram
controller_runtime_reconcile_time_seconds_count{controller="database"} 605
# TYPE kube_fsm_transitions counter
kube_fsm_transitions_total{machine="Database",from="Pending",to="Provisioning"} 200
kube_fsm_transitions_total{machine="Database",from="Provisioning",to="Running"} 200
# TYPE kube_fsm_reconcile_duration_seconds histogram
kube_fsm_reconcile_duration_seconds_sum{machine="Database",phase="Provisioning"} 1.5
kube_fsm_reconcile_duration_seconds_count{machine="Database",phase="Provisioning"} 201
kube_fsm_reconcile_duration_seconds_bucket{le="0.005",machine="Database",phase="Provisioning"} 100
kube_fsm_reconcile_duration_seconds_count{machine="Database",phase="Running"} 200
kube_fsm_reconcile_duration_seconds_count{machine="Database",phase="Unknown"} 1
kube_fsm_reconcile_duration_seconds_count{machine="RiskEngine",phase="Active"} 50
# TYPE kube_fsm_status_writes counter
kube_fsm_status_writes_total{machine="Database"} 400
# TYPE kube_fsm_status_conflicts counter
kube_fsm_status_conflicts_total{machine="Database"} 1
# EOF
"#;

    #[test]
    fn reads_the_engine_counters_of_the_database_machine() {
        let engine = Engine::parse(METRICS);
        assert_eq!(engine.reconciles, 605);
        assert_eq!(engine.errors, 2);
        assert_eq!(engine.phase("Provisioning"), 201);
        assert_eq!(engine.phase("Running"), 200);
        assert_eq!(engine.phase("Pending"), 0);
        assert_eq!(engine.without_phase(), 605 - 201 - 200 - 1);
        assert_eq!(engine.status_writes, 400);
        assert_eq!(engine.conflicts, 1);
        assert_eq!(engine.transitions, 400);
        assert_eq!(
            engine.per_phase(),
            "203 / 0 / 201 / 200 / 0 / 0 / Unknown: 1"
        );
        assert_eq!(Engine::parse(""), Engine::default(), "a fresh process");
    }

    #[test]
    fn readings_of_two_processes_add_up_and_subtract() {
        let first = Engine::parse(METRICS);
        let second = Engine::parse(
            "kube_fsm_reconcile_duration_seconds_count{machine=\"Database\",phase=\"Running\"} 200\n\
             controller_runtime_reconcile_total{controller=\"database\",result=\"success\"} 200\n",
        );
        let both = &first + &second;
        assert_eq!(both.phase("Running"), 400);
        assert_eq!(both.reconciles, 805);
        let delta = &both - &first;
        assert_eq!(delta.phase("Running"), 200);
        assert_eq!(delta.phase("Provisioning"), 0);
        assert_eq!(delta.without_phase(), 0);
        assert_eq!(delta.per_phase(), "0 / 0 / 0 / 200 / 0 / 0");
    }
}
