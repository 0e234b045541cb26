use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::{Status, compute};

fn now() -> Timestamp {
    "2026-12-07T10:00:00Z".parse().unwrap()
}

#[test]
fn a_stateful_set_is_ready_once_every_replica_is_ready_and_current() {
    let mut set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db", "generation": 2 },
        "spec": { "replicas": 3 },
        "status": { "observedGeneration": 2, "replicas": 3, "readyReplicas": 1,
                    "currentReplicas": 3, "currentRevision": "a", "updateRevision": "a" },
    });
    let health = compute(&set, now());
    assert_eq!(
        (
            health.status,
            health.reason.as_str(),
            health.message.as_str()
        ),
        (Status::InProgress, "LessReady", "Ready: 1/3")
    );
    set["status"]["readyReplicas"] = json!(3);
    assert!(compute(&set, now()).is_ready());
    set["metadata"]["generation"] = json!(3);
    let health = compute(&set, now());
    assert_eq!(health.reason, "LatestGenerationNotObserved");
    assert_eq!(
        health.message,
        "StatefulSet generation is 3, but latest observed generation is 2"
    );
}

#[test]
fn a_job_is_current_once_started_and_failed_when_its_failed_condition_holds() {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "m", "generation": 1 },
        "spec": { "completions": 1 },
        "status": {},
    });
    assert_eq!(compute(&job, now()).reason, "JobNotStarted");
    job["status"] = json!({ "startTime": "2026-12-07T09:59:00Z", "active": 1 });
    assert_eq!(
        compute(&job, now()).message,
        "Job in progress. success:0, active: 1, failed: 0"
    );
    job["status"]["failed"] = json!(1);
    job["status"]["conditions"] =
        json!([{ "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded" }]);
    let health = compute(&job, now());
    assert_eq!(health.status, Status::Failed);
    assert_eq!(health.message, "Job Failed. failed: 1/1");
}

#[test]
fn an_unschedulable_pod_fails_only_after_the_schedule_window() {
    let pod = |created: &str| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "p", "creationTimestamp": created },
            "status": { "phase": "Pending", "conditions": [
                { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" }] },
        })
    };
    assert_eq!(
        compute(&pod("2026-12-07T09:59:50Z"), now()).status,
        Status::InProgress
    );
    assert_eq!(
        compute(&pod("2026-12-07T09:59:00Z"), now()).status,
        Status::Failed
    );
}

#[test]
fn deletion_comes_first_and_a_custom_resource_reads_its_ready_condition() {
    let mut object = json!({
        "apiVersion": "example.com/v1", "kind": "Cache",
        "metadata": { "name": "c" },
        "status": { "conditions": [
            { "type": "Ready", "status": "False", "reason": "Warming", "message": "Filling." }] },
    });
    let health = compute(&object, now());
    assert_eq!(
        (health.status, health.reason.as_str()),
        (Status::InProgress, "Warming")
    );
    object["status"] = json!({});
    assert!(compute(&object, now()).is_ready());
    object["metadata"]["deletionTimestamp"] = json!("2026-12-07T09:00:00Z");
    assert_eq!(compute(&object, now()).status, Status::Terminating);
}
