//! kstatus's rules (`sigs.k8s.io/cli-utils/pkg/kstatus/status`, what kpt, Flux and Argo CD
//! read), on an object as the API server serves it: whether a child is ready. Pure: no
//! client, no clock but the one passed in. A table test in the repository's cluster tests
//! checks every verdict against kstatus itself on recorded objects of each built-in kind.

use k8s_openapi::jiff::{self, Timestamp};
use serde_json::Value;

/// kstatus's status of an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Reconciled and as desired: ready.
    Current,
    /// Still converging.
    InProgress,
    /// Cannot make progress without help.
    Failed,
    /// Being deleted.
    Terminating,
    /// kstatus cannot tell (an unknown Pod phase, where kstatus itself gives an error).
    Unknown,
}

impl Status {
    /// The name kstatus prints.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Current => "Current",
            Status::InProgress => "InProgress",
            Status::Failed => "Failed",
            Status::Terminating => "Terminating",
            Status::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// kstatus's verdict on one object: its status, the reason kstatus gives (its `Reconciling`
/// or `Stalled` condition's, or the status's name when it gives none) and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Health {
    /// The status.
    pub status: Status,
    /// A CamelCase reason, e.g. `LessReady`.
    pub reason: String,
    /// kstatus's message, e.g. `Ready: 1/3`.
    pub message: String,
}

impl Health {
    /// Whether the object is ready (`Current`).
    pub fn is_ready(&self) -> bool {
        self.status == Status::Current
    }

    fn new(status: Status, reason: &str, message: impl Into<String>) -> Self {
        Health {
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    fn current(message: impl Into<String>) -> Self {
        Self::new(Status::Current, "Current", message)
    }

    fn in_progress(reason: &str, message: impl Into<String>) -> Self {
        Self::new(Status::InProgress, reason, message)
    }

    fn failed(reason: &str, message: impl Into<String>) -> Self {
        Self::new(Status::Failed, reason, message)
    }
}

/// How long kstatus gives a Pod that the scheduler cannot place before it calls it `Failed`.
const SCHEDULE_WINDOW_SECONDS: i64 = 15;

/// kstatus's verdict on `object` (with its `apiVersion` and `kind`, as served) at `now`.
pub fn compute(object: &Value, now: Timestamp) -> Health {
    if let Some(generic) = generic(object) {
        return generic;
    }
    let kind = text(object, &["kind"]).unwrap_or_default();
    let group = text(object, &["apiVersion"])
        .and_then(|v| v.split_once('/').map(|(group, _)| group))
        .unwrap_or_default();
    match (group, kind) {
        ("", "Service") => service(object),
        ("", "Pod") => pod(object, now),
        ("", "PersistentVolumeClaim") => pvc(object),
        ("", "Secret" | "ConfigMap") | ("batch", "CronJob") => always_ready(),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps" | "extensions", "DaemonSet") => daemon_set(object),
        ("apps" | "extensions", "Deployment") => deployment(object),
        ("apps" | "extensions", "ReplicaSet") => replica_set(object),
        ("policy", "PodDisruptionBudget") => {
            Health::current("AllowedDisruptions has been computed.")
        }
        ("batch", "Job") => job(object),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(object),
        _ => ready_condition(object).unwrap_or_else(|| Health::current("Resource is current")),
    }
}

/// A condition of an object's `status.conditions`.
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

fn conditions(object: &Value) -> impl Iterator<Item = Condition<'_>> {
    field(object, &["status", "conditions"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| Condition {
            type_: c.get("type").and_then(Value::as_str).unwrap_or_default(),
            status: c.get("status").and_then(Value::as_str).unwrap_or_default(),
            reason: c.get("reason").and_then(Value::as_str).unwrap_or_default(),
            message: c.get("message").and_then(Value::as_str).unwrap_or_default(),
        })
}

fn field<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |value, key| value.get(key))
}

fn text<'a>(object: &'a Value, path: &[&str]) -> Option<&'a str> {
    field(object, path).and_then(Value::as_str)
}

/// An integer field, or `default` when it is absent or not an integer (as kstatus reads).
fn int(object: &Value, path: &[&str], default: i64) -> i64 {
    field(object, path)
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

/// The rules for every kind: deletion, an unobserved generation, `Reconciling`/`Stalled`.
fn generic(object: &Value) -> Option<Health> {
    if text(object, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_empty()) {
        return Some(Health::new(
            Status::Terminating,
            "Terminating",
            "Resource scheduled for deletion",
        ));
    }
    let generation = field(object, &["metadata", "generation"]).and_then(Value::as_i64);
    let observed = field(object, &["status", "observedGeneration"]).and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && generation != observed
    {
        let kind = text(object, &["kind"]).unwrap_or_default();
        return Some(Health::in_progress(
            "LatestGenerationNotObserved",
            format!(
                "{kind} generation is {generation}, but latest observed generation is {observed}"
            ),
        ));
    }
    for c in conditions(object) {
        if c.type_ == "Reconciling" && c.status == "True" {
            return Some(Health::in_progress(c.reason, c.message));
        }
        if c.type_ == "Stalled" && c.status == "True" {
            return Some(Health::failed(c.reason, c.message));
        }
    }
    None
}

fn always_ready() -> Health {
    Health::current("Resource is always ready")
}

fn stateful_set(o: &Value) -> Health {
    if text(o, &["spec", "updateStrategy", "type"]) == Some("OnDelete") {
        return Health::current("StatefulSet is using the ondelete update strategy");
    }
    let spec = int(o, &["spec", "replicas"], 1);
    let ready = int(o, &["status", "readyReplicas"], 0);
    let current = int(o, &["status", "currentReplicas"], 0);
    let updated = int(o, &["status", "updatedReplicas"], 0);
    let replicas = int(o, &["status", "replicas"], 0);
    let partition = int(
        o,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
        -1,
    );
    if spec > replicas {
        return Health::in_progress("LessReplicas", format!("Replicas: {replicas}/{spec}"));
    }
    if spec > ready {
        return Health::in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if replicas > spec {
        return Health::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        );
    }
    if partition != -1 {
        if updated < spec - partition {
            return Health::in_progress(
                "PartitionRollout",
                format!("updated: {updated}/{}", spec - partition),
            );
        }
        return Health::current(format!("Partition rollout complete. updated: {updated}"));
    }
    if spec > current {
        return Health::in_progress("LessCurrent", format!("current: {current}/{spec}"));
    }
    let current_revision = text(o, &["status", "currentRevision"]).unwrap_or_default();
    let update_revision = text(o, &["status", "updateRevision"]).unwrap_or_default();
    if current_revision != update_revision {
        return Health::in_progress(
            "RevisionMismatch",
            "Waiting for updated revision to match current",
        );
    }
    Health::current(format!(
        "All replicas scheduled as expected. Replicas: {replicas}"
    ))
}

fn deployment(o: &Value) -> Health {
    let mut progressing =
        int(o, &["spec", "progressDeadlineSeconds"], i64::from(i32::MAX)) == i64::from(i32::MAX);
    let mut available = false;
    for c in conditions(o) {
        match c.type_ {
            "Progressing" => {
                if c.reason == "ProgressDeadlineExceeded" {
                    return Health::failed(c.reason, "Progress deadline exceeded");
                }
                if c.status == "True" && c.reason == "NewReplicaSetAvailable" {
                    progressing = true;
                }
            }
            "Available" if c.status == "True" => available = true,
            _ => {}
        }
    }
    let spec = int(o, &["spec", "replicas"], 1);
    let replicas = int(o, &["status", "replicas"], 0);
    let updated = int(o, &["status", "updatedReplicas"], 0);
    let ready = int(o, &["status", "readyReplicas"], 0);
    let available_replicas = int(o, &["status", "availableReplicas"], 0);
    if spec > replicas {
        return Health::in_progress("LessReplicas", format!("Replicas: {replicas}/{spec}"));
    }
    if spec > updated {
        return Health::in_progress("LessUpdated", format!("Updated: {updated}/{spec}"));
    }
    if replicas > spec {
        return Health::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        );
    }
    if updated > available_replicas {
        return Health::in_progress(
            "LessAvailable",
            format!("Available: {available_replicas}/{updated}"),
        );
    }
    if spec > ready {
        return Health::in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if !progressing {
        return Health::in_progress("ReplicaSetNotAvailable", "ReplicaSet not Available");
    }
    if !available {
        return Health::in_progress("DeploymentNotAvailable", "Deployment not Available");
    }
    Health::current(format!("Deployment is available. Replicas: {replicas}"))
}

fn replica_set(o: &Value) -> Health {
    if conditions(o).any(|c| c.type_ == "ReplicaFailure" && c.status == "True") {
        return Health::in_progress("ReplicaFailure", "Replica Failure condition. Check Pods");
    }
    let spec = int(o, &["spec", "replicas"], 1);
    let replicas = int(o, &["status", "replicas"], 0);
    let ready = int(o, &["status", "readyReplicas"], 0);
    let available = int(o, &["status", "availableReplicas"], 0);
    let labelled = int(o, &["status", "fullyLabeledReplicas"], 0);
    if spec > labelled {
        return Health::in_progress("LessLabelled", format!("Labelled: {labelled}/{spec}"));
    }
    if spec > available {
        return Health::in_progress("LessAvailable", format!("Available: {available}/{spec}"));
    }
    if spec > ready {
        return Health::in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if replicas > spec {
        return Health::in_progress(
            "ExtraPods",
            format!("Pending termination: {}", replicas - spec),
        );
    }
    Health::current(format!("ReplicaSet is available. Replicas: {replicas}"))
}

fn daemon_set(o: &Value) -> Health {
    let kind = text(o, &["kind"]).unwrap_or_default();
    if field(o, &["metadata", "generation"])
        .and_then(Value::as_i64)
        .is_none()
    {
        return Health::in_progress(
            "NoGeneration",
            format!("{kind} metadata.generation not found"),
        );
    }
    if field(o, &["status", "observedGeneration"])
        .and_then(Value::as_i64)
        .is_none()
    {
        return Health::in_progress(
            "NoObservedGeneration",
            format!("{kind} status.observedGeneration not found"),
        );
    }
    let desired = int(o, &["status", "desiredNumberScheduled"], -1);
    let current = int(o, &["status", "currentNumberScheduled"], 0);
    let updated = int(o, &["status", "updatedNumberScheduled"], 0);
    let available = int(o, &["status", "numberAvailable"], 0);
    let ready = int(o, &["status", "numberReady"], 0);
    if desired == -1 {
        return Health::in_progress("NoDesiredNumber", "Missing .status.desiredNumberScheduled");
    }
    if desired > current {
        return Health::in_progress("LessCurrent", format!("Current: {current}/{desired}"));
    }
    if desired > updated {
        return Health::in_progress("LessUpdated", format!("Updated: {updated}/{desired}"));
    }
    if desired > available {
        return Health::in_progress("LessAvailable", format!("Available: {available}/{desired}"));
    }
    if desired > ready {
        return Health::in_progress("LessReady", format!("Ready: {ready}/{desired}"));
    }
    Health::current(format!(
        "All replicas scheduled as expected. Replicas: {desired}"
    ))
}

fn pvc(o: &Value) -> Health {
    let phase = text(o, &["status", "phase"]).unwrap_or("unknown");
    if phase != "Bound" {
        return Health::in_progress("NotBound", format!("PVC is not Bound. phase: {phase}"));
    }
    Health::current("PVC is Bound")
}

fn pod(o: &Value, now: Timestamp) -> Health {
    match text(o, &["status", "phase"]).unwrap_or_default() {
        "Succeeded" => Health::current("Pod has completed successfully"),
        "Failed" => Health::current("Pod has completed, but not successfully"),
        "Running" => {
            if conditions(o).any(|c| c.type_ == "Ready" && c.status == "True") {
                return Health::current("Pod is Ready");
            }
            let looping: Vec<&str> = field(o, &["status", "containerStatuses"])
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|s| {
                    field(s, &["state", "waiting", "reason"]).and_then(Value::as_str)
                        == Some("CrashLoopBackOff")
                })
                .filter_map(|s| s.get("name").and_then(Value::as_str))
                .collect();
            if !looping.is_empty() {
                return Health::failed(
                    "ContainerCrashLooping",
                    format!("Containers in CrashLoop state: {}", looping.join(",")),
                );
            }
            Health::in_progress("PodRunningNotReady", "Pod is running but is not Ready")
        }
        "Pending" => {
            let unschedulable = conditions(o).any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason == "Unschedulable"
            });
            if !unschedulable {
                return Health::in_progress("PodPending", "Pod is in the Pending phase");
            }
            let created = text(o, &["metadata", "creationTimestamp"])
                .and_then(|t| t.parse::<Timestamp>().ok());
            let window = jiff::SignedDuration::from_secs(SCHEDULE_WINDOW_SECONDS);
            match created {
                Some(created) if now.checked_sub(window).is_ok_and(|t| t < created) => {
                    Health::in_progress("PodNotScheduled", "Pod has not been scheduled")
                }
                _ => Health::failed("PodUnschedulable", "Pod could not be scheduled"),
            }
        }
        "" => Health::in_progress("PodNotObserved", "Pod phase not available"),
        other => Health::new(
            Status::Unknown,
            "UnknownPhase",
            format!("Pod phase {other} is not one kstatus knows"),
        ),
    }
}

fn job(o: &Value) -> Health {
    let parallelism = int(o, &["spec", "parallelism"], 1);
    let completions = int(o, &["spec", "completions"], parallelism);
    let succeeded = int(o, &["status", "succeeded"], 0);
    let active = int(o, &["status", "active"], 0);
    let failed = int(o, &["status", "failed"], 0);
    for c in conditions(o) {
        match c.type_ {
            "Complete" if c.status == "True" => {
                return Health::current(format!(
                    "Job Completed. succeeded: {succeeded}/{completions}"
                ));
            }
            "Failed" if c.status == "True" => {
                return Health::failed(
                    "JobFailed",
                    format!("Job Failed. failed: {failed}/{completions}"),
                );
            }
            _ => {}
        }
    }
    if text(o, &["status", "startTime"]).is_none_or(str::is_empty) {
        return Health::in_progress("JobNotStarted", "Job not started");
    }
    Health::current(format!(
        "Job in progress. success:{succeeded}, active: {active}, failed: {failed}"
    ))
}

fn service(o: &Value) -> Health {
    let load_balancer = text(o, &["spec", "type"]) == Some("LoadBalancer");
    if load_balancer && text(o, &["spec", "clusterIP"]).is_none_or(str::is_empty) {
        return Health::in_progress(
            "NoIPAssigned",
            "ClusterIP not set. Service type: LoadBalancer",
        );
    }
    Health::current("Service is ready")
}

fn crd(o: &Value) -> Health {
    for c in conditions(o) {
        if c.type_ == "NamesAccepted" && c.status == "False" {
            return Health::failed(c.reason, c.message);
        }
        if c.type_ == "Established" {
            if c.status == "False" && c.reason != "Installing" {
                return Health::failed(c.reason, c.message);
            }
            if c.status == "True" {
                return Health::current("CRD is established");
            }
        }
    }
    Health::in_progress("Installing", "Install in progress")
}

/// Any other kind: its `Ready` condition, when it has one.
fn ready_condition(o: &Value) -> Option<Health> {
    let ready = conditions(o).find(|c| c.type_ == "Ready")?;
    match ready.status {
        "True" => Some(Health::current("Resource is Ready")),
        "False" | "Unknown" => Some(Health::in_progress(ready.reason, ready.message)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
