//! A Grafana dashboard (its JSON model) written from the spec ([`Dashboard`]): one row per
//! machine with the phase funnel, objects per phase per namespace, the oldest object of each
//! phase and how far into its timeout, transitions per edge, reconcile latency and errors,
//! drift, convergence lag, the API writes and the pacing limit, and the replicas' holdings.
//! Every panel's query reads a metric of [`kube_fsm::metrics`].

use serde_json::{Value, json};

use crate::alerts::Selectors;
use kube_fsm::StateMachine;
use kube_fsm::machine::Description;
use kube_fsm::replicas::dns_label;

/// The dashboard of one or more machines.
///
/// ```no_run
/// # fn demo<K: kube_fsm::StateMachine>() -> serde_json::Result<()> {
/// let dashboard = kube_fsm_generate::dashboard::Dashboard::new("Databases").machine::<K>();
/// std::fs::write("dashboard.json", serde_json::to_string_pretty(&dashboard.json())?)
///     .expect("written"); // import it in Grafana, or provision it
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Dashboard {
    title: String,
    machines: Vec<Description>,
    matchers: String,
}

/// One panel: its title, unit and queries (PromQL with `legendFormat`).
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    /// The panel's title.
    pub title: String,
    /// Grafana's unit (`short`, `s`, `percentunit`, `reqps`).
    pub unit: &'static str,
    /// `(expr, legendFormat)` per query. `$namespace` is the dashboard's namespace variable
    /// (a regular expression, `.*` for all).
    pub queries: Vec<(String, String)>,
}

impl Dashboard {
    /// An empty dashboard titled `title`.
    pub fn new(title: impl Into<String>) -> Self {
        Dashboard {
            title: title.into(),
            machines: Vec::new(),
            matchers: String::new(),
        }
    }

    /// Adds a row for the machine of `K`.
    #[must_use]
    pub fn machine<K: StateMachine>(self) -> Self {
        self.description(Description::of(K::machine()))
    }

    /// Adds a row for a machine given as data.
    #[must_use]
    pub fn description(mut self, machine: Description) -> Self {
        self.machines.push(machine);
        self
    }

    /// Label matchers added to every selector (as [`crate::alerts::Alerts::matchers`]).
    #[must_use]
    pub fn matchers(mut self, matchers: impl Into<String>) -> Self {
        self.matchers = matchers.into();
        self
    }

    /// Every panel, by machine.
    pub fn panels(&self) -> Vec<(String, Vec<Panel>)> {
        self.machines
            .iter()
            .map(|machine| {
                let m = Selectors::new(machine, &self.matchers);
                (machine.kind.clone(), panels(&m))
            })
            .collect()
    }

    /// The dashboard's JSON model (Grafana's schema 39), with a Prometheus data-source variable
    /// and a namespace variable.
    pub fn json(&self) -> Value {
        let mut grid = Vec::new();
        let mut id = 0;
        let mut y = 0;
        for (kind, panels) in self.panels() {
            id += 1;
            grid.push(json!({
                "type": "row", "id": id, "title": kind, "collapsed": false,
                "gridPos": { "h": 1, "w": 24, "x": 0, "y": y },
                "panels": [],
            }));
            y += 1;
            for (i, panel) in panels.iter().enumerate() {
                id += 1;
                let x = if i % 2 == 0 { 0 } else { 12 };
                grid.push(panel_json(panel, id, x, y));
                if i % 2 == 1 {
                    y += 8;
                }
            }
            if panels.len() % 2 == 1 {
                y += 8;
            }
        }
        let namespaces = self.machines.first().map_or_else(String::new, |machine| {
            Selectors::new(machine, &self.matchers).with("kube_fsm_namespace_objects", "")
        });
        json!({
            "title": self.title,
            "uid": uid(&self.title),
            "tags": ["kube-fsm"],
            "schemaVersion": 39,
            "editable": true,
            "refresh": "30s",
            "time": { "from": "now-6h", "to": "now" },
            "templating": { "list": [
                {
                    "name": "datasource", "label": "Data source", "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "namespace", "label": "Namespace", "type": "query",
                    "datasource": { "type": "prometheus", "uid": "${datasource}" },
                    "query": format!("label_values({namespaces}, object_namespace)"),
                    "multi": true, "includeAll": true, "allValue": ".*", "refresh": 2,
                },
            ]},
            "panels": grid,
        })
    }
}

fn panel_json(panel: &Panel, id: usize, x: usize, y: usize) -> Value {
    let targets: Vec<Value> = panel
        .queries
        .iter()
        .zip('A'..)
        .map(|((expr, legend), ref_id)| {
            json!({
                "expr": expr, "legendFormat": legend, "refId": ref_id.to_string(),
                "datasource": { "type": "prometheus", "uid": "${datasource}" },
            })
        })
        .collect();
    json!({
        "type": "timeseries", "id": id, "title": panel.title,
        "gridPos": { "h": 8, "w": 12, "x": x, "y": y },
        "datasource": { "type": "prometheus", "uid": "${datasource}" },
        "fieldConfig": { "defaults": { "unit": panel.unit }, "overrides": [] },
        "options": { "legend": { "displayMode": "list", "placement": "bottom" } },
        "targets": targets,
    })
}

fn panels(m: &Selectors) -> Vec<Panel> {
    let ns = "object_namespace=~\"$namespace\"";
    let machine_ns = format!("machine=\"{}\",{ns}", m.kind);
    let controller = format!("controller=\"{}\"", m.controller);
    let panel = |title: &str, unit, queries: Vec<(String, &str)>| Panel {
        title: title.to_owned(),
        unit,
        queries: queries
            .into_iter()
            .map(|(expr, legend)| (expr, legend.to_owned()))
            .collect(),
    };
    vec![
        panel(
            "Phase funnel",
            "short",
            vec![(
                format!("sum by (phase) ({})", m.machine("kube_fsm_objects")),
                "{{phase}}",
            )],
        ),
        panel(
            "Objects per phase and namespace",
            "short",
            vec![(
                format!(
                    "sum by (object_namespace, phase) ({})",
                    m.with("kube_fsm_namespace_objects", &machine_ns)
                ),
                "{{object_namespace}} {{phase}}",
            )],
        ),
        panel(
            "Time in phase (oldest object)",
            "s",
            vec![(
                format!(
                    "max by (phase) ({})",
                    m.machine("kube_fsm_phase_oldest_seconds")
                ),
                "{{phase}}",
            )],
        ),
        panel(
            "Timeout used (most advanced object)",
            "percentunit",
            vec![
                (
                    format!(
                        "max by (phase) ({})",
                        m.machine("kube_fsm_phase_timeout_progress")
                    ),
                    "{{phase}}",
                ),
                (
                    format!(
                        "sum by (phase) ({})",
                        m.machine("kube_fsm_objects_near_timeout")
                    ),
                    "{{phase}} near",
                ),
            ],
        ),
        panel(
            "Transitions per edge",
            "ops",
            vec![(
                format!(
                    "sum by (from, to) (rate({}[5m]))",
                    m.machine("kube_fsm_transitions_total")
                ),
                "{{from}} → {{to}}",
            )],
        ),
        panel(
            "Reconcile latency by phase",
            "s",
            vec![
                (
                    format!(
                        "histogram_quantile(0.99, sum by (le, phase) (rate({}[5m])))",
                        m.machine("kube_fsm_reconcile_duration_seconds_bucket")
                    ),
                    "p99 {{phase}}",
                ),
                (
                    format!(
                        "histogram_quantile(0.5, sum by (le, phase) (rate({}[5m])))",
                        m.machine("kube_fsm_reconcile_duration_seconds_bucket")
                    ),
                    "p50 {{phase}}",
                ),
            ],
        ),
        panel(
            "Reconciles by result",
            "ops",
            vec![(
                format!(
                    "sum by (result) (rate({}[5m]))",
                    m.with("controller_runtime_reconcile_total", &controller)
                ),
                "{{result}}",
            )],
        ),
        panel(
            "Drift and held objects",
            "short",
            vec![
                (
                    format!(
                        "sum by (action) (increase({}[5m]))",
                        m.machine("kube_fsm_drift_total")
                    ),
                    "drift {{action}}",
                ),
                (
                    format!(
                        "sum by (reason) ({})",
                        m.machine("kube_fsm_stalled_objects")
                    ),
                    "stalled {{reason}}",
                ),
                (
                    format!("sum ({})", m.machine("kube_fsm_paused_objects")),
                    "paused",
                ),
            ],
        ),
        panel(
            "Convergence lag by namespace",
            "s",
            vec![
                (
                    format!(
                        "max by (object_namespace) ({})",
                        m.with("kube_fsm_convergence_lag_seconds", &machine_ns)
                    ),
                    "{{object_namespace}}",
                ),
                (
                    format!(
                        "sum by (object_namespace) ({})",
                        m.with("kube_fsm_unconverged_objects", &machine_ns)
                    ),
                    "{{object_namespace}} behind",
                ),
            ],
        ),
        panel(
            "API writes and pacing",
            "short",
            vec![
                (
                    format!(
                        "sum (rate({}[5m]))",
                        m.machine("kube_fsm_status_writes_total")
                    ),
                    "status writes/s",
                ),
                (
                    format!(
                        "sum (rate({}[5m]))",
                        m.machine("kube_fsm_status_conflicts_total")
                    ),
                    "conflicts/s",
                ),
                (
                    format!("sum ({})", m.machine("kube_fsm_concurrency_limit")),
                    "concurrency limit",
                ),
                (
                    format!(
                        "sum ({})",
                        m.with("controller_runtime_active_workers", &controller)
                    ),
                    "reconciling now",
                ),
            ],
        ),
        panel(
            "Replicas",
            "short",
            vec![
                (format!("sum ({})", m.machine("kube_fsm_leader")), "leaders"),
                (
                    format!("sum ({})", m.machine("kube_fsm_shards_held")),
                    "shards held",
                ),
                (
                    format!("sum ({})", m.machine("kube_fsm_connected")),
                    "connected",
                ),
            ],
        ),
    ]
}

/// Grafana's uid (at most 40 characters): `kube-fsm-` and the title as a DNS label.
fn uid(title: &str) -> String {
    const PREFIX: &str = "kube-fsm-";
    format!("{PREFIX}{}", dns_label(title, 40 - PREFIX.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machines::Database;

    #[test]
    fn one_row_per_machine_and_every_target_a_query_of_its_panel() {
        let dashboard = Dashboard::new("Databases").machine::<Database>();
        let model = dashboard.json();
        let panels = model["panels"].as_array().unwrap();
        assert_eq!(panels[0]["type"], "row");
        assert_eq!(panels[0]["title"], "Database");
        let queries: usize = dashboard.panels()[0]
            .1
            .iter()
            .map(|p| p.queries.len())
            .sum();
        let targets: usize = panels
            .iter()
            .map(|p| p["targets"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(targets, queries);
        assert_eq!(model["uid"], "kube-fsm-databases");
        for panel in &dashboard.panels()[0].1 {
            for (expr, _) in &panel.queries {
                assert!(
                    expr.contains("machine=\"Database\"")
                        || expr.contains("controller=\"database\""),
                    "{expr}"
                );
            }
        }
    }
}
