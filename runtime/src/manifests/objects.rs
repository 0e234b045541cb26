//! The operator's own objects: its Namespace, ServiceAccount, Deployment, metrics Service and
//! PodDisruptionBudget.

use serde_json::{Value, json};

use crate::manifests::Deploy;

/// The operator's namespace, so that the base applies to a fresh cluster.
pub(crate) fn namespace(deploy: &Deploy) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": deploy.namespace, "labels": deploy.labels() },
    })
}

pub(crate) fn service_account(deploy: &Deploy) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": deploy.name, "namespace": deploy.namespace, "labels": deploy.labels() },
    })
}

pub(crate) fn deployment(deploy: &Deploy) -> Value {
    let probe = |path: &str| {
        json!({
            "httpGet": { "path": path, "port": "metrics" },
            "periodSeconds": 10,
            "failureThreshold": 3,
        })
    };
    let (webhook_ports, mounts, volumes) = webhook_parts(deploy);
    let mut ports = vec![json!({ "name": "metrics", "containerPort": deploy.metrics_port })];
    ports.extend(webhook_ports);
    let mut container = json!({
        "name": "operator",
        "image": deploy.image,
        "env": [
            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
            { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
        ],
        "ports": ports,
        "livenessProbe": probe("/healthz"),
        "readinessProbe": probe("/readyz"),
        "resources": {
            "requests": { "cpu": "50m", "memory": "64Mi" },
            "limits": { "memory": "256Mi" },
        },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "capabilities": { "drop": ["ALL"] },
        },
        "volumeMounts": mounts,
    });
    if !deploy.command.is_empty() {
        container["command"] = json!(deploy.command);
    }
    if !deploy.args.is_empty() {
        container["args"] = json!(deploy.args);
    }
    // Longer than the renew deadline: a stopping replica releases its Lease before the kill.
    let grace = deploy.renew_deadline.as_secs().max(20) + 10;
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": deploy.name, "namespace": deploy.namespace, "labels": deploy.labels() },
        "spec": {
            "replicas": deploy.replicas,
            "selector": { "matchLabels": { "app.kubernetes.io/name": deploy.name } },
            "template": {
                "metadata": { "labels": deploy.labels() },
                "spec": {
                    "serviceAccountName": deploy.name,
                    "terminationGracePeriodSeconds": grace,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    })
}

pub(crate) fn metrics_service(deploy: &Deploy) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": format!("{}-metrics", deploy.name),
            "namespace": deploy.namespace,
            "labels": deploy.labels(),
        },
        "spec": {
            "selector": { "app.kubernetes.io/name": deploy.name },
            "ports": [{ "name": "metrics", "port": deploy.metrics_port, "targetPort": "metrics" }],
        },
    })
}

pub(crate) fn disruption_budget(deploy: &Deploy) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "name": deploy.name, "namespace": deploy.namespace, "labels": deploy.labels() },
        "spec": {
            "maxUnavailable": 1,
            "selector": { "matchLabels": { "app.kubernetes.io/name": deploy.name } },
        },
    })
}

/// The webhook's port, certificate mount and volume in the Pod (none without a webhook).
#[cfg(feature = "admission")]
fn webhook_parts(deploy: &Deploy) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    use super::webhook::{CERT_DIR, secret};
    let Some(served) = &deploy.webhook else {
        return Default::default();
    };
    (
        vec![json!({ "name": "webhook", "containerPort": served.port })],
        vec![json!({ "name": "webhook-tls", "mountPath": CERT_DIR, "readOnly": true })],
        vec![json!({ "name": "webhook-tls", "secret": { "secretName": secret(deploy) } })],
    )
}

#[cfg(not(feature = "admission"))]
fn webhook_parts(_: &Deploy) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    Default::default()
}
