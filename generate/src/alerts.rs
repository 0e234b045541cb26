//! Prometheus alerting and recording rules written from the spec ([`Alerts`]): each alert's
//! text comes from the machine (the phase's description, its timeout, the edges that should
//! have moved the object), each query reads a metric of [`kube_fsm::metrics`]. The same
//! rules as a rules file ([`Alerts::rules`]) or as prometheus-operator's `PrometheusRule`
//! ([`Alerts::prometheus_rule`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use kube_fsm::StateMachine;
use kube_fsm::machine::{Description, PhaseDescription, TriggerDescription};

/// A Prometheus rules file: `groups:` of rules.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleFile {
    /// The rule groups, one pair (recording, alerting) per machine.
    pub groups: Vec<RuleGroup>,
}

/// One group of rules, evaluated together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuleGroup {
    /// The group's name.
    pub name: String,
    /// Its rules, in order.
    pub rules: Vec<AlertRule>,
}

/// A recording or an alerting rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AlertRule {
    /// Records `expr` as a new series named `record`.
    Record {
        /// The recorded series' name.
        record: String,
        /// The PromQL expression.
        expr: String,
    },
    /// Fires while `expr` returns a series, once it has for `for`.
    Alert {
        /// The alert's name.
        alert: String,
        /// The PromQL expression.
        expr: String,
        /// How long `expr` must hold before the alert fires (pending until then).
        #[serde(rename = "for", default, skip_serializing_if = "Option::is_none")]
        for_: Option<String>,
        /// Labels added to the alert (`severity`, `machine`).
        labels: BTreeMap<String, String>,
        /// `summary`, `description`, `runbook` (and `runbook_url` when configured).
        annotations: BTreeMap<String, String>,
    },
}

impl AlertRule {
    /// The alert's or the recorded series' name.
    pub fn name(&self) -> &str {
        match self {
            AlertRule::Record { record, .. } => record,
            AlertRule::Alert { alert, .. } => alert,
        }
    }

    /// The PromQL expression.
    pub fn expr(&self) -> &str {
        match self {
            AlertRule::Record { expr, .. } | AlertRule::Alert { expr, .. } => expr,
        }
    }
}

/// The alerts and recording rules of one or more machines.
///
/// ```no_run
/// # fn demo<K: kube_fsm::StateMachine>() -> serde_json::Result<()> {
/// use std::time::Duration;
/// let alerts = kube_fsm_generate::alerts::Alerts::new()
///     .machine::<K>()
///     .near_timeout(0.8, Duration::from_secs(60))
///     .stuck_after(Duration::from_secs(3600))
///     .webhook(true);
/// // For `rule_files:` (JSON is YAML; any YAML serializer writes it more readably).
/// let file = serde_json::to_string_pretty(&alerts.rules())?;
/// let object = alerts.prometheus_rule("database-operator", "monitoring"); // for prometheus-operator
/// # let _ = (file, object); Ok(()) }
/// ```
///
/// Per machine (`K` its kind), the alerts are:
///
/// | alert | fires when |
/// |---|---|
/// | `K{Phase}NearTimeout` (each phase with a timeout) | an object has used the near fraction of the phase's timeout (paused time excluded) |
/// | `K{Phase}Stuck` (each phase that is neither terminal, nor steady by `ready:`, nor timed) | an object has been in it longer than the stuck bound |
/// | `KReconcileErrors` | reconciles keep failing |
/// | `KDrift` | a writer other than the operator moved a phase off the spec's edges (a hand edit) |
/// | `KHeldInUndeclaredPhase` | objects hold a phase the spec does not declare |
/// | `KStalled` | objects report `Stalled` (by reason) |
/// | `KConvergenceLag` | an object of a namespace has not been reconciled at its generation for longer than the lag bound |
/// | `KNotReconciling` | no replica holds the Lease (or any shard) |
/// | `KShardsUnserved` | shards without a replica |
/// | `KDisconnected` | a replica cannot reach the API server |
///
/// and with [`Alerts::webhook`] one `KubeFsmWebhookDown`. The recording rules are
/// `kube_fsm:objects:sum` (the phase funnel), `kube_fsm:namespace_objects:sum`,
/// `kube_fsm:phase_oldest_seconds:max`, `kube_fsm:transitions:rate5m` and
/// `kube_fsm:reconcile_errors:rate5m`.
#[derive(Clone, Debug)]
pub struct Alerts {
    machines: Vec<Description>,
    near_fraction: f64,
    near_for: Duration,
    stuck_after: Duration,
    lag_after: Duration,
    sustained: Duration,
    matchers: String,
    webhook: bool,
    runbook_url: Option<String>,
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts::new()
    }
}

impl Alerts {
    /// No machine yet. Defaults: near a timeout at 80 % of it for 1 minute, stuck after an
    /// hour, a convergence lag of 10 minutes, other conditions sustained for 5 minutes, no
    /// extra label matchers, no webhook.
    pub fn new() -> Self {
        Alerts {
            machines: Vec::new(),
            near_fraction: 0.8,
            near_for: Duration::from_secs(60),
            stuck_after: Duration::from_secs(3600),
            lag_after: Duration::from_secs(600),
            sustained: Duration::from_secs(300),
            matchers: String::new(),
            webhook: false,
            runbook_url: None,
        }
    }

    /// Adds the machine of `K`.
    #[must_use]
    pub fn machine<K: StateMachine>(self) -> Self {
        self.description(Description::of(K::machine()))
    }

    /// Adds a machine given as data (e.g. read from a CRD's `kube-fsm.dev/machine` annotation).
    #[must_use]
    pub fn description(mut self, machine: Description) -> Self {
        self.machines.push(machine);
        self
    }

    /// An object is near its phase's timeout once it has used `fraction` of it (0 to 1); the
    /// alert fires after that has held for `for_`.
    #[must_use]
    pub fn near_timeout(mut self, fraction: f64, for_: Duration) -> Self {
        self.near_fraction = fraction.clamp(0.0, 1.0);
        self.near_for = for_;
        self
    }

    /// An object is stuck in a phase without a timeout after this long.
    #[must_use]
    pub fn stuck_after(mut self, after: Duration) -> Self {
        self.stuck_after = after;
        self
    }

    /// An object's convergence lag alerts after this long.
    #[must_use]
    pub fn lag_after(mut self, after: Duration) -> Self {
        self.lag_after = after;
        self
    }

    /// How long the other conditions (errors, held, stalled, no leader, disconnected, webhook
    /// down) must hold before their alerts fire.
    #[must_use]
    pub fn sustained(mut self, for_: Duration) -> Self {
        self.sustained = for_;
        self
    }

    /// Label matchers added to every selector, e.g. `job="database-operator"` when several
    /// operators of one kind report to one Prometheus.
    #[must_use]
    pub fn matchers(mut self, matchers: impl Into<String>) -> Self {
        self.matchers = matchers.into();
        self
    }

    /// Whether the operator serves the admission webhook (adds `KubeFsmWebhookDown`).
    #[must_use]
    pub fn webhook(mut self, served: bool) -> Self {
        self.webhook = served;
        self
    }

    /// A page every alert links to as `runbook_url` (the book's "Operating" chapter, say).
    #[must_use]
    pub fn runbook_url(mut self, url: impl Into<String>) -> Self {
        self.runbook_url = Some(url.into());
        self
    }

    /// The rules file.
    pub fn rules(&self) -> RuleFile {
        let mut groups = Vec::new();
        for machine in &self.machines {
            let m = Selectors::new(machine, &self.matchers);
            groups.push(RuleGroup {
                name: format!("kube-fsm-{}.rules", m.controller),
                rules: recording(&m),
            });
            groups.push(RuleGroup {
                name: format!("kube-fsm-{}.alerts", m.controller),
                rules: self.alerts(machine, &m),
            });
        }
        if self.webhook {
            let selector = braces(&self.matchers);
            groups.push(RuleGroup {
                name: "kube-fsm-webhook.alerts".to_owned(),
                rules: vec![self.alert(
                    "KubeFsmWebhookDown",
                    format!(
                        "max(kube_fsm_webhook_serving{selector}) < 1 or absent(kube_fsm_webhook_serving{selector})"
                    ),
                    Some(self.sustained),
                    "critical",
                    None,
                    "The operator's admission webhook is not serving".to_owned(),
                    "No replica's admission webhook accepts connections with a current certificate. \
                     With failurePolicy Fail the API server refuses every write to the resources it \
                     guards; with Ignore, writes go unchecked."
                        .to_owned(),
                    "Check the operator's `/healthz` (it names the reason) and its certificate \
                     Secret; `kubectl get validatingwebhookconfiguration` shows where the API server \
                     calls."
                        .to_owned(),
                )],
            });
        }
        RuleFile { groups }
    }

    /// The rules as a `monitoring.coreos.com/v1` `PrometheusRule` named `name` in `namespace`.
    pub fn prometheus_rule(&self, name: &str, namespace: &str) -> Value {
        json!({
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": { "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "kube-fsm" },
            },
            "spec": self.rules(),
        })
    }

    fn alerts(&self, machine: &Description, m: &Selectors) -> Vec<AlertRule> {
        let kind = &machine.kind;
        // "A Database", "An Overdue"; "a" as the kind's article in a sentence.
        let (an, a) = article(kind);
        let mut rules = Vec::new();
        let steady: Vec<&str> = machine
            .ready
            .iter()
            .flat_map(|r| &r.phases)
            .map(String::as_str)
            .collect();
        for phase in &machine.phases {
            let name = &phase.name;
            let what = phase_text(phase);
            let moves = moves_out(machine, name);
            if let Some(timeout) = &phase.timeout {
                let after = duration(Duration::from_millis(timeout.after_ms));
                let percent = (self.near_fraction * 100.0).round();
                rules.push(self.alert(
                    &format!("{kind}{name}NearTimeout"),
                    format!(
                        "max by (machine, phase) ({}) >= {}",
                        m.phase("kube_fsm_phase_timeout_progress", name),
                        self.near_fraction
                    ),
                    Some(self.near_for),
                    "warning",
                    Some(kind),
                    format!("{an} {kind} has used {percent}% of its {name} timeout ({after})"),
                    format!(
                        "{what}{an} {kind} has used {{{{ $value | humanizePercentage }}}} of the {after} \
                         it may spend in {name} (time paused excluded). When that runs out the \
                         operator moves it to {to} (reason {reason}). {moves}",
                        to = timeout.to,
                        reason = timeout.reason,
                    ),
                    runbook(m, name, true),
                ));
            } else if !phase.terminal && !steady.contains(&name.as_str()) {
                let bound = duration(self.stuck_after);
                rules.push(self.alert(
                    &format!("{kind}{name}Stuck"),
                    format!(
                        "max by (machine, phase) ({}) > {}",
                        m.phase("kube_fsm_phase_oldest_seconds", name),
                        self.stuck_after.as_secs()
                    ),
                    Some(self.sustained),
                    "warning",
                    Some(kind),
                    format!("{an} {kind} has been in {name} for longer than {bound}"),
                    format!(
                        "{what}{an} {kind} has been in {name} for {{{{ $value | humanizeDuration }}}}; \
                         {name} has no timeout. {moves}"
                    ),
                    runbook(m, name, false),
                ));
            }
        }
        let c = &m.controller;
        rules.push(self.alert(
            &format!("{kind}ReconcileErrors"),
            format!(
                "sum by (controller) (rate({}[5m])) > 0",
                m.with("controller_runtime_reconcile_errors_total", &format!("controller=\"{c}\""))
            ),
            Some(self.sustained),
            "warning",
            Some(kind),
            format!("Reconciles of {kind} objects keep failing"),
            format!(
                "The {kind} controller's reconciles have failed {{{{ printf \"%.2f\" $value }}}} times a second \
                 for {}. Each failure is retried with backoff; after 5 in a row an object reports \
                 Stalled (ReconcileFailing).",
                duration(self.sustained)
            ),
            format!(
                "The `ReconcileFailed` Events name the objects and errors: `kubectl get events \
                 --field-selector reason=ReconcileFailed`; `kubectl fsm explain {c}/NAME` shows one \
                 object's last error."
            ),
        ));
        rules.push(self.alert(
            &format!("{kind}Drift"),
            format!(
                "sum by (machine, action) (increase({}[10m])) > 0",
                m.machine("kube_fsm_drift_total")
            ),
            None,
            "warning",
            Some(kind),
            format!("{an} {kind}'s phase was moved off the machine's edges"),
            format!(
                "A writer other than the operator set status.phase of {a} {kind} to a phase the \
                 spec does not allow from where it was; the operator {{{{ $labels.action }}}} it \
                 (the spec's drift policy)."
            ),
            format!(
                "The `PhaseDrift` Events name the object, the phase found and what was done; a person moves objects \
                 with `kubectl fsm move {c}/NAME PHASE --reason TEXT`, which takes only edges."
            ),
        ));
        rules.push(self.alert(
            &format!("{kind}HeldInUndeclaredPhase"),
            format!(
                "sum by (machine) ({}) > 0",
                m.phase("kube_fsm_objects", kube_fsm::metrics::UNDECLARED)
            ),
            Some(self.sustained),
            "warning",
            Some(kind),
            format!("{kind} objects hold a phase the spec does not declare"),
            format!(
                "{{{{ $value }}}} {kind} objects have a status.phase that is none of {}; the \
                 operator holds them (no step) until it is corrected.",
                machine
                    .phases
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            format!(
                "`kubectl fsm get {c}` lists them; move each to a declared phase with `kubectl fsm \
                 move {c}/NAME PHASE --reason TEXT`, or add the old name to the spec's `retired:`."
            ),
        ));
        rules.push(self.alert(
            &format!("{kind}Stalled"),
            format!(
                "sum by (machine, reason) ({}) > 0",
                m.machine("kube_fsm_stalled_objects")
            ),
            Some(self.sustained),
            "warning",
            Some(kind),
            format!("{kind} objects cannot progress without help"),
            format!(
                "{{{{ $value }}}} {kind} objects report Stalled with reason {{{{ $labels.reason }}}}: \
                 TerminalPhase (the machine gave up: {}), TimeoutVetoed, UndeclaredPhase, \
                 ReconcileFailing, HandlerPanicked or HandlerTimedOut.",
                terminal_text(machine)
            ),
            format!(
                "`kubectl fsm explain {c}/NAME` says why; a manual edge out of a terminal phase is \
                 taken with `kubectl fsm move {c}/NAME PHASE --reason TEXT`."
            ),
        ));
        rules.push(self.alert(
            &format!("{kind}ConvergenceLag"),
            format!(
                "max by (machine, object_namespace) ({}) > {}",
                m.machine("kube_fsm_convergence_lag_seconds"),
                self.lag_after.as_secs()
            ),
            None,
            "warning",
            Some(kind),
            format!(
                "{kind} objects of a namespace have not converged for over {}",
                duration(self.lag_after)
            ),
            format!(
                "{an} {kind} in namespace {{{{ $labels.object_namespace }}}} has had status.observedGeneration \
                 behind metadata.generation for {{{{ $value | humanizeDuration }}}}: its latest spec \
                 has not been reconciled."
            ),
            format!(
                "`kubectl fsm get {c} -n NAMESPACE` shows the objects; a paused one \
                 (`kubectl fsm resume`) or a stalled one (`kubectl fsm explain`) does not converge."
            ),
        ));
        rules.push(self.alert(
            &format!("{kind}NotReconciling"),
            format!(
                "absent({} == 1) and absent({} > 0)",
                m.machine("kube_fsm_leader"),
                m.machine("kube_fsm_shards_held")
            ),
            Some(self.sustained),
            "critical",
            Some(kind),
            format!("No replica reconciles {kind} objects"),
            format!(
                "No replica of the {kind} operator reports holding its leader Lease or a shard: \
                 no object moves, no timeout fires."
            ),
            "Check that the operator's pods run and reach the API server (`/readyz`), and who \
             holds the Lease: `kubectl get lease -n NAMESPACE`."
                .to_owned(),
        ));
        rules.push(self.alert(
            &format!("{kind}ShardsUnserved"),
            format!(
                "sum by (machine) ({}) < max by (machine) ({})",
                m.machine("kube_fsm_shards_held"),
                m.machine("kube_fsm_shards")
            ),
            Some(self.sustained),
            "critical",
            Some(kind),
            format!("Some {kind} shards have no replica"),
            format!(
                "The {kind} operator's replicas hold {{{{ $value }}}} shards, fewer than it has: the \
                 objects of the others do not move."
            ),
            "Compare the replicas with the shard count; `kubectl get lease -n NAMESPACE` shows \
             which shard Leases are held."
                .to_owned(),
        ));
        rules.push(self.alert(
            &format!("{kind}Disconnected"),
            format!("{} == 0", m.machine("kube_fsm_connected")),
            Some(self.sustained),
            "warning",
            Some(kind),
            format!("{an} {kind} operator replica cannot reach the API server"),
            format!(
                "A replica of the {kind} operator has not reached the API server for {}; it takes \
                 no step meanwhile.",
                duration(self.sustained)
            ),
            "The replica's `/readyz` says since when and why; check its network path and \
             credentials."
                .to_owned(),
        ));
        rules
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one call per alert reads as the table it builds"
    )]
    fn alert(
        &self,
        name: &str,
        expr: String,
        for_: Option<Duration>,
        severity: &str,
        machine: Option<&str>,
        summary: String,
        description: String,
        runbook: String,
    ) -> AlertRule {
        let mut labels = BTreeMap::from([("severity".to_owned(), severity.to_owned())]);
        if let Some(machine) = machine {
            labels.insert("machine".to_owned(), machine.to_owned());
        }
        let mut annotations = BTreeMap::from([
            ("summary".to_owned(), summary),
            ("description".to_owned(), description),
            ("runbook".to_owned(), runbook),
        ]);
        if let Some(url) = &self.runbook_url {
            annotations.insert("runbook_url".to_owned(), url.clone());
        }
        AlertRule::Alert {
            alert: name.to_owned(),
            expr,
            for_: for_.filter(|d| !d.is_zero()).map(duration),
            labels,
            annotations,
        }
    }
}

/// The indefinite article of `word`, capitalised and not: ("An", "an") before a vowel.
fn article(word: &str) -> (&'static str, &'static str) {
    if word.starts_with(['A', 'E', 'I', 'O', 'U', 'a', 'e', 'i', 'o', 'u']) {
        ("An", "an")
    } else {
        ("A", "a")
    }
}

fn recording(m: &Selectors) -> Vec<AlertRule> {
    let c = &m.controller;
    let record = |record: &str, expr: String| AlertRule::Record {
        record: record.to_owned(),
        expr,
    };
    vec![
        record(
            "kube_fsm:objects:sum",
            format!(
                "sum by (machine, phase) ({})",
                m.machine("kube_fsm_objects")
            ),
        ),
        record(
            "kube_fsm:namespace_objects:sum",
            format!(
                "sum by (machine, object_namespace, phase) ({})",
                m.machine("kube_fsm_namespace_objects")
            ),
        ),
        record(
            "kube_fsm:phase_oldest_seconds:max",
            format!(
                "max by (machine, phase) ({})",
                m.machine("kube_fsm_phase_oldest_seconds")
            ),
        ),
        record(
            "kube_fsm:transitions:rate5m",
            format!(
                "sum by (machine, from, to) (rate({}[5m]))",
                m.machine("kube_fsm_transitions_total")
            ),
        ),
        record(
            "kube_fsm:reconcile_errors:rate5m",
            format!(
                "sum by (controller) (rate({}[5m]))",
                m.with(
                    "controller_runtime_reconcile_errors_total",
                    &format!("controller=\"{c}\"")
                )
            ),
        ),
    ]
}

/// The selectors of one machine's series.
pub(crate) struct Selectors {
    pub(crate) kind: String,
    /// controller-runtime's `controller` label: the kind in lower case.
    pub(crate) controller: String,
    matchers: String,
}

impl Selectors {
    pub(crate) fn new(machine: &Description, matchers: &str) -> Self {
        Selectors {
            kind: machine.kind.clone(),
            controller: machine.kind.to_lowercase(),
            matchers: matchers.to_owned(),
        }
    }

    /// `metric{<labels>,<matchers>}`.
    pub(crate) fn with(&self, metric: &str, labels: &str) -> String {
        let all: Vec<&str> = [labels, self.matchers.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if all.is_empty() {
            metric.to_owned()
        } else {
            format!("{metric}{{{}}}", all.join(","))
        }
    }

    /// `metric{machine="K",<matchers>}`.
    pub(crate) fn machine(&self, metric: &str) -> String {
        self.with(metric, &format!("machine=\"{}\"", self.kind))
    }

    /// `metric{machine="K",phase="P",<matchers>}`.
    pub(crate) fn phase(&self, metric: &str, phase: &str) -> String {
        self.with(
            metric,
            &format!("machine=\"{}\",phase=\"{phase}\"", self.kind),
        )
    }
}

fn braces(matchers: &str) -> String {
    if matchers.is_empty() {
        String::new()
    } else {
        format!("{{{matchers}}}")
    }
}

/// "Provisioning: Child resources are being created. " (or "" without a description).
fn phase_text(phase: &PhaseDescription) -> String {
    if phase.description.is_empty() {
        String::new()
    } else {
        format!("{}: {} ", phase.name, phase.description)
    }
}

/// What should move an object out of `phase`: the engine's edges out of it, in words.
fn moves_out(machine: &Description, phase: &str) -> String {
    let moves: Vec<String> = machine
        .out_of(phase)
        .filter_map(|edge| {
            let by = match &edge.trigger {
                TriggerDescription::Manual => return None,
                TriggerDescription::Handler => "its handler".to_owned(),
                TriggerDescription::On(event) => format!("the handler firing {event}"),
                TriggerDescription::When(requirements) => format!(
                    "{} True",
                    requirements
                        .iter()
                        .map(|r| if r.status {
                            r.condition.clone()
                        } else {
                            format!("not {}", r.condition)
                        })
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            };
            Some(format!("{} (by {by})", edge.to))
        })
        .collect();
    if moves.is_empty() {
        format!("Nothing but a person moves it out of {phase}.")
    } else {
        format!("What moves it on: {}.", moves.join("; "))
    }
}

fn terminal_text(machine: &Description) -> String {
    let terminal: Vec<String> = machine
        .phases
        .iter()
        .filter(|p| p.terminal)
        .map(|p| {
            if p.description.is_empty() {
                p.name.clone()
            } else {
                format!("{} ({})", p.name, p.description.trim_end_matches('.'))
            }
        })
        .collect();
    if terminal.is_empty() {
        "no phase is terminal".to_owned()
    } else {
        terminal.join("; ")
    }
}

fn runbook(m: &Selectors, phase: &str, timed: bool) -> String {
    let c = &m.controller;
    let mut text = format!(
        "`kubectl fsm get {c}` lists the objects in {phase} and for how long; `kubectl fsm explain \
         {c}/NAME` names the condition each rule out of {phase} waits for, and the handler's last error."
    );
    if timed {
        text.push_str(&format!(
            " To investigate without the timeout firing: `kubectl fsm pause {c}/NAME` (paused time \
             does not count), then `kubectl fsm resume {c}/NAME`."
        ));
    }
    text
}

/// A Prometheus duration: `90s`, `10m`, `1h30m`.
pub(crate) fn duration(d: Duration) -> String {
    let mut secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_machines::Database;

    fn alerts() -> RuleFile {
        Alerts::new().machine::<Database>().webhook(true).rules()
    }

    fn alert<'a>(file: &'a RuleFile, name: &str) -> &'a AlertRule {
        file.groups
            .iter()
            .flat_map(|g| &g.rules)
            .find(|r| r.name() == name)
            .unwrap_or_else(|| panic!("no rule {name}"))
    }

    #[test]
    fn every_phase_gets_the_alert_its_kind_calls_for() {
        let file = alerts();
        let names: Vec<&str> = file.groups[1].rules.iter().map(AlertRule::name).collect();
        assert!(names.contains(&"DatabaseProvisioningNearTimeout"));
        // Pending and Degraded have no timeout and are not steady; Running is ready, Failed terminal.
        assert!(names.contains(&"DatabasePendingStuck"));
        assert!(names.contains(&"DatabaseDegradedStuck"));
        assert!(!names.iter().any(|n| n.starts_with("DatabaseRunning")));
        assert!(!names.iter().any(|n| n.starts_with("DatabaseFailed")));
        assert_eq!(file.groups[2].rules[0].name(), "KubeFsmWebhookDown");
    }

    #[test]
    fn the_texts_come_from_the_spec() {
        let file = alerts();
        let AlertRule::Alert {
            expr,
            for_,
            annotations,
            ..
        } = alert(&file, "DatabaseProvisioningNearTimeout")
        else {
            panic!("an alert")
        };
        assert_eq!(
            expr,
            "max by (machine, phase) (kube_fsm_phase_timeout_progress{machine=\"Database\",phase=\"Provisioning\"}) >= 0.8"
        );
        assert_eq!(for_.as_deref(), Some("1m"));
        let description = &annotations["description"];
        assert!(description.starts_with("Provisioning: Child resources are being created."));
        assert!(description.contains("the 10m it may spend in Provisioning"));
        assert!(description.contains("moves it to Failed (reason ProvisioningTimedOut)"));
        assert!(description.contains("Running (by PodsReady True)"));
        assert!(description.contains("Failed (by the handler firing Fail)"));
        assert!(annotations["runbook"].contains("kubectl fsm pause database/NAME"));
    }

    #[test]
    fn matchers_reach_every_selector_and_the_prometheus_rule_wraps_the_same_groups() {
        let alerts = Alerts::new()
            .machine::<Database>()
            .matchers("job=\"db\"")
            .webhook(true);
        for rule in alerts.rules().groups.iter().flat_map(|g| &g.rules) {
            assert!(rule.expr().contains("job=\"db\""), "{}", rule.expr());
        }
        let object = alerts.prometheus_rule("database-operator", "monitoring");
        assert_eq!(object["kind"], "PrometheusRule");
        assert_eq!(
            object["spec"],
            serde_json::to_value(alerts.rules()).unwrap()
        );
    }

    #[test]
    fn durations_are_written_as_prometheus_reads_them() {
        assert_eq!(duration(Duration::from_secs(600)), "10m");
        assert_eq!(duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(duration(Duration::from_secs(45)), "45s");
        assert_eq!(duration(Duration::from_millis(500)), "500ms");
    }
}
