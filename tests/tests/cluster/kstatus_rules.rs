//! `kube_fsm::children::kstatus` against kstatus itself (the cli-utils binary the other tests
//! run): on a table of objects of every kind it has rules for — each in the states its
//! controller writes (rolling out, short of ready, pending termination, partitioned, failed,
//! complete, being deleted, generation not observed) — both give the same status and message.

use k8s_openapi::jiff::Timestamp;
use kube_fsm::children::kstatus;
use kube_fsm_testkit::kstatus::verdicts;
use serde_json::{Value, json};

fn with(mut base: Value, patch: Value) -> Value {
    merge(&mut base, patch);
    base
}

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}

fn object(api_version: &str, kind: &str, spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": { "name": "x", "namespace": "ns", "generation": 2,
                      "creationTimestamp": "2000-01-01T00:00:00Z" },
        "spec": spec, "status": status,
    })
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({ "type": type_, "status": status, "reason": reason, "message": message })
}

fn table() -> Vec<Value> {
    let sts = object(
        "apps/v1",
        "StatefulSet",
        json!({ "replicas": 3 }),
        json!({ "observedGeneration": 2, "replicas": 3, "readyReplicas": 3, "currentReplicas": 3,
                "updatedReplicas": 3, "currentRevision": "r1", "updateRevision": "r1" }),
    );
    let deploy = object(
        "apps/v1",
        "Deployment",
        json!({ "replicas": 2 }),
        json!({ "observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                "availableReplicas": 2, "conditions": [
                    condition("Available", "True", "MinimumReplicasAvailable", "ok"),
                    condition("Progressing", "True", "NewReplicaSetAvailable", "done")] }),
    );
    let rs = object(
        "apps/v1",
        "ReplicaSet",
        json!({ "replicas": 2 }),
        json!({ "observedGeneration": 2, "replicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                "fullyLabeledReplicas": 2 }),
    );
    let ds = object(
        "apps/v1",
        "DaemonSet",
        json!({}),
        json!({ "observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                "updatedNumberScheduled": 3, "numberAvailable": 3, "numberReady": 3 }),
    );
    let job = object(
        "batch/v1",
        "Job",
        json!({ "completions": 2, "parallelism": 1 }),
        json!({}),
    );
    let pod = object("v1", "Pod", json!({}), json!({}));
    vec![
        sts.clone(),
        with(sts.clone(), json!({ "status": { "replicas": 2 } })),
        with(sts.clone(), json!({ "status": { "readyReplicas": 1 } })),
        with(sts.clone(), json!({ "status": { "replicas": 4 } })),
        with(sts.clone(), json!({ "status": { "currentReplicas": 1 } })),
        with(sts.clone(), json!({ "status": { "updateRevision": "r2" } })),
        with(
            sts.clone(),
            json!({ "spec": { "updateStrategy": { "type": "OnDelete" } } }),
        ),
        with(
            sts.clone(),
            json!({ "spec": { "updateStrategy": { "rollingUpdate": { "partition": 1 } } },
                    "status": { "updatedReplicas": 1 } }),
        ),
        with(
            sts.clone(),
            json!({ "spec": { "updateStrategy": { "rollingUpdate": { "partition": 1 } } } }),
        ),
        with(
            sts.clone(),
            json!({ "status": { "observedGeneration": 1 } }),
        ),
        with(
            sts.clone(),
            json!({ "metadata": { "deletionTimestamp": "2026-01-01T00:00:00Z" } }),
        ),
        deploy.clone(),
        with(deploy.clone(), json!({ "status": { "replicas": 1 } })),
        with(
            deploy.clone(),
            json!({ "status": { "updatedReplicas": 1 } }),
        ),
        with(deploy.clone(), json!({ "status": { "replicas": 3 } })),
        with(
            deploy.clone(),
            json!({ "status": { "availableReplicas": 1 } }),
        ),
        with(deploy.clone(), json!({ "status": { "readyReplicas": 1 } })),
        with(
            deploy.clone(),
            json!({ "spec": { "progressDeadlineSeconds": 600 }, "status": { "conditions": [
                condition("Available", "True", "MinimumReplicasAvailable", "ok"),
                condition("Progressing", "True", "ReplicaSetUpdated", "rolling")] } }),
        ),
        with(
            deploy.clone(),
            json!({ "status": { "conditions": [
                condition("Progressing", "False", "ProgressDeadlineExceeded", "too slow")] } }),
        ),
        with(
            deploy.clone(),
            json!({ "status": { "conditions": [
                condition("Available", "False", "MinimumReplicasUnavailable", "no")] } }),
        ),
        with(
            deploy.clone(),
            json!({ "status": { "conditions": [
                condition("Reconciling", "True", "Busy", "Working on it.")] } }),
        ),
        rs.clone(),
        with(
            rs.clone(),
            json!({ "status": { "fullyLabeledReplicas": 1 } }),
        ),
        with(rs.clone(), json!({ "status": { "availableReplicas": 1 } })),
        with(rs.clone(), json!({ "status": { "readyReplicas": 1 } })),
        with(rs.clone(), json!({ "status": { "replicas": 3 } })),
        with(
            rs.clone(),
            json!({ "status": { "conditions": [condition("ReplicaFailure", "True", "FailedCreate", "quota")] } }),
        ),
        ds.clone(),
        with(
            ds.clone(),
            json!({ "status": { "currentNumberScheduled": 2 } }),
        ),
        with(
            ds.clone(),
            json!({ "status": { "updatedNumberScheduled": 2 } }),
        ),
        with(ds.clone(), json!({ "status": { "numberAvailable": 2 } })),
        with(ds.clone(), json!({ "status": { "numberReady": 2 } })),
        with(
            ds.clone(),
            json!({ "status": { "desiredNumberScheduled": null } }),
        ),
        object("apps/v1", "DaemonSet", json!({}), json!({})),
        job.clone(),
        with(
            job.clone(),
            json!({ "status": { "startTime": "2026-01-01T00:00:00Z", "active": 1 } }),
        ),
        with(
            job.clone(),
            json!({ "status": { "startTime": "2026-01-01T00:00:00Z", "succeeded": 2,
                    "conditions": [condition("Complete", "True", "Completed", "")] } }),
        ),
        with(
            job.clone(),
            json!({ "status": { "startTime": "2026-01-01T00:00:00Z", "failed": 1,
                    "conditions": [condition("Failed", "True", "BackoffLimitExceeded", "limit")] } }),
        ),
        pod.clone(),
        with(pod.clone(), json!({ "status": { "phase": "Pending" } })),
        with(
            pod.clone(),
            json!({ "status": { "phase": "Pending", "conditions": [
                condition("PodScheduled", "False", "Unschedulable", "0/3 nodes")] } }),
        ),
        with(
            pod.clone(),
            json!({ "metadata": { "creationTimestamp": "2999-01-01T00:00:00Z" },
                    "status": { "phase": "Pending", "conditions": [
                condition("PodScheduled", "False", "Unschedulable", "0/3 nodes")] } }),
        ),
        with(
            pod.clone(),
            json!({ "status": { "phase": "Running", "conditions": [condition("Ready", "True", "", "")] } }),
        ),
        with(pod.clone(), json!({ "status": { "phase": "Running" } })),
        with(
            pod.clone(),
            json!({ "status": { "phase": "Running", "containerStatuses": [
                { "name": "a", "state": { "waiting": { "reason": "CrashLoopBackOff" } } },
                { "name": "b", "state": { "running": {} } }] } }),
        ),
        with(pod.clone(), json!({ "status": { "phase": "Succeeded" } })),
        with(pod.clone(), json!({ "status": { "phase": "Failed" } })),
        object(
            "v1",
            "PersistentVolumeClaim",
            json!({}),
            json!({ "phase": "Bound" }),
        ),
        object(
            "v1",
            "PersistentVolumeClaim",
            json!({}),
            json!({ "phase": "Pending" }),
        ),
        object("v1", "PersistentVolumeClaim", json!({}), json!({})),
        object("v1", "Service", json!({ "type": "ClusterIP" }), json!({})),
        object(
            "v1",
            "Service",
            json!({ "type": "LoadBalancer" }),
            json!({}),
        ),
        object(
            "v1",
            "Service",
            json!({ "type": "LoadBalancer", "clusterIP": "10.0.0.1" }),
            json!({}),
        ),
        object("v1", "Secret", json!({}), json!({})),
        object("v1", "ConfigMap", json!({}), json!({})),
        object("batch/v1", "CronJob", json!({}), json!({})),
        object("policy/v1", "PodDisruptionBudget", json!({}), json!({})),
        object(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({}),
            json!({ "conditions": [condition("Established", "True", "InitialNamesAccepted", "")] }),
        ),
        object(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({}),
            json!({ "conditions": [condition("NamesAccepted", "False", "NameConflict", "taken")] }),
        ),
        object(
            "example.com/v1",
            "Cache",
            json!({}),
            json!({ "conditions": [condition("Ready", "True", "Warm", "")] }),
        ),
        object(
            "example.com/v1",
            "Cache",
            json!({}),
            json!({ "conditions": [condition("Ready", "False", "Warming", "Filling the cache.")] }),
        ),
        object(
            "example.com/v1",
            "Cache",
            json!({}),
            json!({ "conditions": [condition("Stalled", "True", "Broken", "It cannot recover.")] }),
        ),
        object("example.com/v1", "Cache", json!({}), json!({})),
    ]
}

#[tokio::test]
async fn the_runtimes_kstatus_rules_give_kstatus_verdict_on_every_kind_and_state() {
    let objects = table();
    let Some(expected) =
        verdicts("the_runtimes_kstatus_rules_give_kstatus_verdict", &objects).await
    else {
        return;
    };
    let now = Timestamp::now();
    let mut disagreements = Vec::new();
    for (object, kstatus) in objects.iter().zip(&expected) {
        let ours = kstatus::compute(object, now);
        if (ours.status.name(), ours.message.as_str())
            != (kstatus.status.as_str(), kstatus.message.as_str())
        {
            disagreements.push(format!(
                "{} {}: kstatus says {} {:?}, kube-fsm {} {:?}",
                object["kind"],
                object["status"],
                kstatus.status,
                kstatus.message,
                ours.status,
                ours.message
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} verdicts differ:\n{}",
        disagreements.len(),
        objects.len(),
        disagreements.join("\n")
    );
}
