//! The admission webhook's deployment: its Service, its registration (the CA injected by
//! cert-manager's CA injector), a cert-manager Issuer and Certificate whose Secret the
//! operator's Pod mounts, and a NetworkPolicy that admits only the webhook's and the metrics'
//! ports; for a CRD of several versions, its conversions sent to the same webhook.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::json;

use crate::manifests::{Deploy, Kind, Manifest};
use kube_fsm::admission::{Endpoint, FailurePolicy, Policy, WebhookOptions};

/// Where the Pod finds the serving certificate (`tls.crt`, `tls.key`).
pub(crate) const CERT_DIR: &str = "/etc/webhook/tls";

/// The webhook the operator's Pod serves.
#[derive(Clone, Debug)]
pub(crate) struct Served {
    pub port: u16,
    pub policy: Policy,
    pub options: WebhookOptions,
    /// The address ranges (CIDR) the webhook's port admits; empty: anywhere.
    pub from: Vec<String>,
}

impl Deploy {
    /// The operator also serves the admission webhook on `port` (HTTPS, with the certificate
    /// in [`Deploy::webhook_cert_dir`]), registered through the webhook's Service with
    /// `failure_policy` for the namespaces `namespaces` selects (all: `None`), its CA injected
    /// by cert-manager; `policy` is the one it serves, whose tiers the registration reflects.
    /// Deploy it with at least 2 replicas ([`Deploy::replicas`], with leader election or
    /// sharding in the arguments): the API server calls the webhook for every write of the
    /// kinds, so one Pod's restart or eviction must not refuse them all (`manifests --webhook`
    /// deploys 2).
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
            from: Vec::new(),
        });
        self
    }

    /// The webhook's NetworkPolicy admits its port only from `cidrs` (e.g. the API server's
    /// or the control plane's addresses, `10.0.0.0/24`), instead of from anywhere. On most
    /// clusters the API server is not a Pod (it runs on the host's network, or outside the
    /// cluster), so no Pod or namespace selector can name it: address ranges are all a
    /// NetworkPolicy can say of it, and only where the network plugin applies `ipBlock` to
    /// such traffic. Call it after [`Deploy::webhook`]; without the webhook it does nothing.
    #[must_use]
    pub fn webhook_from(mut self, cidrs: impl IntoIterator<Item = impl Into<String>>) -> Self {
        if let Some(served) = &mut self.webhook {
            served.from = cidrs.into_iter().map(Into::into).collect();
        }
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

/// cert-manager's CA injector fills the `caBundle`s of an object with this annotation from the
/// webhook's Certificate.
const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// `crd` with its conversions sent to the webhook when it serves several versions (the CA
/// injected by cert-manager, as for the registration); as it is otherwise.
pub(crate) fn converting(
    deploy: &Deploy,
    served: &Served,
    crd: CustomResourceDefinition,
) -> CustomResourceDefinition {
    if crd.spec.versions.len() < 2 {
        return crd;
    }
    let mut crd = kube_fsm::admission::conversion_webhook(crd, &served.options);
    crd.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(INJECT_CA_FROM.to_owned(), certificate_ref(deploy));
    crd
}

/// `NAMESPACE/NAME` of the webhook's Certificate.
fn certificate_ref(deploy: &Deploy) -> String {
    format!("{}/{}", deploy.namespace, service(deploy))
}

pub(crate) fn manifests(deploy: &Deploy, served: &Served, kinds: &[Kind]) -> Vec<Manifest> {
    let (name, namespace) = (service(deploy), deploy.namespace.as_str());
    let mut registration = registration(deploy, served, kinds);
    registration["metadata"]["annotations"] = json!({ INJECT_CA_FROM: certificate_ref(deploy) });
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
        (
            "webhook-network-policy.yaml",
            network_policy(deploy, served),
        ),
    ]
    .into_iter()
    .map(|(file, object)| Manifest {
        file: file.into(),
        object,
    })
    .collect()
}

/// One registration with a webhook (or one per tier) for each kind.
fn registration(deploy: &Deploy, served: &Served, kinds: &[Kind]) -> serde_json::Value {
    let kinds: Vec<_> = kinds.iter().map(|k| (&k.crd, &k.policy)).collect();
    let registration = kube_fsm::admission::validating_webhook_configuration_of(
        &kinds,
        &served.options,
        &service(deploy),
    );
    serde_json::to_value(registration).unwrap_or_default()
}

/// The Pod admits ingress only to the webhook's port (from `served.from`, or anywhere) and to
/// the metrics port (from anywhere, as without the policy: Prometheus scrapes it). Probes
/// come from the node's kubelet, which network plugins admit whatever the policy.
fn network_policy(deploy: &Deploy, served: &Served) -> serde_json::Value {
    let mut webhook = json!({ "ports": [{ "protocol": "TCP", "port": served.port }] });
    if !served.from.is_empty() {
        let from: Vec<serde_json::Value> = served
            .from
            .iter()
            .map(|cidr| json!({ "ipBlock": { "cidr": cidr } }))
            .collect();
        webhook["from"] = json!(from);
    }
    let metrics = json!({ "ports": [{ "protocol": "TCP", "port": deploy.metrics_port }] });
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": { "name": service(deploy), "namespace": deploy.namespace, "labels": deploy.labels() },
        "spec": {
            "podSelector": { "matchLabels": { "app.kubernetes.io/name": deploy.name } },
            "policyTypes": ["Ingress"],
            "ingress": [webhook, metrics],
        },
    })
}

#[cfg(test)]
mod tests {
    use crate::manifests::Deploy;
    use crate::test_machines::Database;
    use kube_fsm::admission::{FailurePolicy, Policy};
    use kube_fsm::operator::rbac::Rbac;

    #[test]
    fn a_crd_of_several_versions_converts_through_the_webhook_and_is_reviewed_in_each() {
        let mut older = kube_fsm::crd::<Database>();
        older.spec.versions[0].name = "v1alpha1".into();
        let crd = kube_fsm::crd_versions(vec![older, kube_fsm::crd::<Database>()], "v1").unwrap();
        let deploy = Deploy::new("db", "ops", "image:1").crd(crd).webhook(
            9443,
            Policy::default(),
            FailurePolicy::Fail,
            None,
        );
        let manifests = deploy.manifests::<Database>(&Rbac::default());
        let file = |name: &str| {
            manifests
                .iter()
                .find(|m| m.file == name)
                .map(|m| m.object.clone())
                .unwrap_or_else(|| panic!("no {name}"))
        };
        let crd = file("crd.yaml");
        let conversion = &crd["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        let service = &conversion["webhook"]["clientConfig"]["service"];
        assert_eq!(
            (&service["namespace"], &service["name"], &service["path"]),
            (&"ops".into(), &"db-webhook".into(), &"/convert".into())
        );
        assert_eq!(
            crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "ops/db-webhook"
        );
        let registration = manifests
            .iter()
            .find(|m| m.object["kind"] == "ValidatingWebhookConfiguration")
            .expect("the registration");
        assert_eq!(
            registration.object["webhooks"][0]["rules"][0]["apiVersions"],
            serde_json::json!(["v1", "v1alpha1"])
        );
    }

    #[test]
    fn the_network_policy_admits_the_webhook_port_from_the_given_ranges_and_the_metrics_port() {
        let file = |deploy: Deploy| {
            deploy
                .manifests::<Database>(&Rbac::default())
                .into_iter()
                .find(|m| m.file == "webhook-network-policy.yaml")
                .map(|m| m.object)
                .expect("the NetworkPolicy")
        };
        let deploy = Deploy::new("db", "ops", "image:1")
            .metrics_port(8080)
            .webhook(9443, Policy::default(), FailurePolicy::Fail, None);
        let anywhere = file(deploy.clone());
        assert_eq!(
            anywhere["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
            "db"
        );
        assert_eq!(
            anywhere["spec"]["policyTypes"],
            serde_json::json!(["Ingress"])
        );
        assert_eq!(
            anywhere["spec"]["ingress"],
            serde_json::json!([
                { "ports": [{ "protocol": "TCP", "port": 9443 }] },
                { "ports": [{ "protocol": "TCP", "port": 8080 }] },
            ])
        );
        let narrowed = file(deploy.webhook_from(["10.0.0.0/24", "192.168.1.10/32"]));
        assert_eq!(
            narrowed["spec"]["ingress"][0]["from"],
            serde_json::json!([
                { "ipBlock": { "cidr": "10.0.0.0/24" } },
                { "ipBlock": { "cidr": "192.168.1.10/32" } },
            ])
        );
    }
}
