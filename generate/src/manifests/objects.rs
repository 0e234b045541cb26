//! The operator's own objects: its Namespace, ServiceAccount, Deployment, metrics Service and
//! PodDisruptionBudget.

use serde_json::{Value, json};

use crate::manifests::Deploy;
use kube_fsm::operator::rbac::{Rbac, Scope, Verb};

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
    // With the metrics authorized, the endpoint serves HTTPS (`run --metrics-auth`).
    let scheme = if deploy.metrics_auth { "HTTPS" } else { "HTTP" };
    let probe = |path: &str| {
        json!({
            "httpGet": { "path": path, "port": "metrics", "scheme": scheme },
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

/// What the operator asks the API server when it authorizes scrapers.
pub(crate) fn metrics_auth_rbac() -> Rbac {
    let mut rbac = Rbac::default();
    let why = "serving /metrics to authorized scrapers only (run --metrics-auth)";
    rbac.grant(
        "authentication.k8s.io",
        "tokenreviews",
        Scope::Cluster,
        [Verb::Create],
        why,
    );
    rbac.grant(
        "authorization.k8s.io",
        "subjectaccessreviews",
        Scope::Cluster,
        [Verb::Create],
        why,
    );
    rbac
}

/// The ClusterRole a scraper is bound to.
pub(crate) fn metrics_reader(deploy: &Deploy) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": format!("{}-metrics-reader", deploy.name), "labels": deploy.labels() },
        "rules": [{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }],
    })
}

/// prometheus-operator's ServiceMonitor of the metrics Service. Behind authorization
/// (`metrics_auth`) it scrapes over HTTPS with its own ServiceAccount's token; the operator's
/// certificate is then signed by itself (`run --metrics-auth` without `--metrics-tls`), so
/// the scraper does not verify it, as kubebuilder's scaffold does: give `--metrics-tls` a
/// certificate and the scraper its CA to verify it instead.
pub(crate) fn service_monitor(deploy: &Deploy) -> Value {
    let endpoint = if deploy.metrics_auth {
        json!({
            "port": "metrics",
            "path": "/metrics",
            "scheme": "https",
            "tlsConfig": { "insecureSkipVerify": true },
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        })
    } else {
        json!({ "port": "metrics", "path": "/metrics", "scheme": "http" })
    };
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": { "name": deploy.name, "namespace": deploy.namespace, "labels": deploy.labels() },
        "spec": {
            "selector": { "matchLabels": deploy.labels() },
            "endpoints": [endpoint],
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

#[cfg(test)]
mod tests {
    use crate::manifests::{Deploy, SERVICE_MONITOR};
    use crate::test_machines::Database;
    use kube_fsm::operator::rbac::Rbac;

    #[test]
    fn with_metrics_auth_the_base_grants_the_reviews_and_adds_the_reader_role() {
        let files = |deploy: Deploy| -> Vec<(String, serde_json::Value)> {
            (deploy.manifests::<Database>(&Rbac::default()).into_iter())
                .map(|m| (m.file, m.object))
                .collect()
        };
        let open = files(Deploy::new("db", "ops", "image:1"));
        let names: Vec<&str> = open.iter().map(|(f, _)| f.as_str()).collect();
        assert!(names.contains(&"namespace.yaml"), "{names:?}");
        let open_monitor = &open.iter().find(|(f, _)| f == SERVICE_MONITOR).unwrap().1;
        assert_eq!(open_monitor["spec"]["endpoints"][0]["scheme"], "http");
        let closed = files(Deploy::new("db", "ops", "image:1").metrics_auth(true));
        let file = |name: &str| {
            closed
                .iter()
                .find(|(f, _)| f == name)
                .map(|(_, o)| o.clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let reader = file("metrics-reader-cluster-role.yaml");
        assert_eq!(reader["metadata"]["name"], "db-metrics-reader");
        assert_eq!(
            reader["rules"],
            serde_json::json!([{ "nonResourceURLs": ["/metrics"], "verbs": ["get"] }])
        );
        let monitor = file(SERVICE_MONITOR);
        assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
        assert_eq!(monitor["spec"]["endpoints"][0]["scheme"], "https");
        let deployment = file("deployment.yaml");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
        let plain = open.iter().find(|(f, _)| f == "deployment.yaml").unwrap();
        let container = &plain.1["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["livenessProbe"]["httpGet"]["scheme"], "HTTP");
        let role = file("cluster-role.yaml").to_string();
        for granted in ["tokenreviews", "subjectaccessreviews"] {
            assert!(role.contains(granted), "{role}");
        }
    }
}
