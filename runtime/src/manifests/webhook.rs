//! The admission webhook's deployment: its Service, its registration (the CA injected by
//! cert-manager's CA injector) and a cert-manager Issuer and Certificate whose Secret the
//! operator's Pod mounts.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResourceExt;
use serde_json::json;

use crate::admission::{Endpoint, FailurePolicy, Policy, WebhookOptions};
use crate::manifests::{Deploy, Manifest};

/// Where the Pod finds the serving certificate (`tls.crt`, `tls.key`).
pub(crate) const CERT_DIR: &str = "/etc/webhook/tls";

/// The webhook the operator's Pod serves.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub port: u16,
    pub policy: Policy,
    pub options: WebhookOptions,
}

impl Deploy {
    /// The operator also serves the admission webhook on `port` (HTTPS, with the certificate
    /// in [`Deploy::webhook_cert_dir`]), registered through the webhook's Service with
    /// `failure_policy` for the namespaces `namespaces` selects (all: `None`), its CA injected
    /// by cert-manager; `policy` is the one it serves, whose tiers the registration reflects.
    #[must_use]
    pub fn webhook(
        mut self,
        port: u16,
        policy: Policy,
        failure_policy: FailurePolicy,
        namespaces: Option<LabelSelector>,
    ) -> Self {
        let mut options = WebhookOptions::new(Endpoint::Service {
            namespace: self.namespace.clone(),
            name: service(&self),
            port: Some(443),
        });
        options.failure_policy = failure_policy;
        options.namespace_selector = namespaces;
        self.webhook = Some(Served {
            port,
            policy,
            options,
        });
        self
    }

    /// Where the Pod finds the webhook's serving certificate and key (`tls.crt`, `tls.key`).
    pub fn webhook_cert_dir() -> &'static str {
        CERT_DIR
    }
}

fn service(deploy: &Deploy) -> String {
    format!("{}-webhook", deploy.name)
}

/// The Secret cert-manager writes the serving certificate to.
pub(crate) fn secret(deploy: &Deploy) -> String {
    format!("{}-webhook-tls", deploy.name)
}

pub(crate) fn manifests<K: CustomResourceExt>(deploy: &Deploy, served: &Served) -> Vec<Manifest> {
    let (name, namespace) = (service(deploy), deploy.namespace.as_str());
    let mut registration = serde_json::to_value(
        crate::admission::validating_webhook_configuration::<K>(&served.options, &served.policy),
    )
    .unwrap_or_default();
    registration["metadata"]["annotations"] =
        json!({ "cert-manager.io/inject-ca-from": format!("{namespace}/{name}") });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": namespace, "labels": deploy.labels() },
        "spec": {
            "selector": { "app.kubernetes.io/name": deploy.name },
            "ports": [{ "name": "webhook", "port": 443, "targetPort": "webhook" }],
        },
    });
    let issuer = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "selfSigned": {} },
    });
    let dns: Vec<String> = [
        name.clone(),
        format!("{name}.{namespace}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}.svc.cluster.local"),
    ]
    .into();
    let certificate = json!({
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": { "name": name, "namespace": namespace },
        "spec": {
            "secretName": secret(deploy),
            "dnsNames": dns,
            "issuerRef": { "kind": "Issuer", "name": name },
        },
    });
    [
        ("webhook-service.yaml", service),
        ("webhook-issuer.yaml", issuer),
        ("webhook-certificate.yaml", certificate),
        ("validating-webhook-configuration.yaml", registration),
    ]
    .into_iter()
    .map(|(file, object)| Manifest {
        file: file.into(),
        object,
    })
    .collect()
}
