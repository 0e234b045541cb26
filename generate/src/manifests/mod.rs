//! The manifests that deploy an operator: a kustomize base with the CRDs, its Namespace, the
//! ServiceAccount, the least-privilege RBAC of [`kube_fsm::Operator::rbac`], the Deployment
//! (probes, metrics port, a hardened security context, a termination grace longer than the Lease's
//! renew deadline), a metrics Service, a PodDisruptionBudget when there is more than one replica,
//! and with the webhook its Service, registration, cert-manager certificate and a NetworkPolicy
//! admitting only the webhook's and the metrics' ports. Beside the base, `prometheus/` holds
//! prometheus-operator's ServiceMonitor (`kubectl apply -k DIR/prometheus` too where
//! prometheus-operator runs; the base applies anywhere).

mod objects;
mod webhook;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use kube_fsm::StateMachine;
use kube_fsm::operator::rbac::Rbac;

use crate::rbac::RbacObjects;

/// The ServiceMonitor's file, in the `prometheus/` kustomization beside the base.
pub(crate) const SERVICE_MONITOR: &str = "prometheus/service-monitor.yaml";

/// One file of a kustomize base: its name and the object it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// The file's path in the output folder, e.g. `deployment.yaml` or
    /// `prometheus/service-monitor.yaml`.
    pub file: String,
    /// The object (or, for `kustomization.yaml`, the kustomization).
    pub object: Value,
}

/// One kind an operator deploys ([`Deploy::manifests_of`]): its CRD and, with the webhook,
/// the policy it serves for the kind.
#[derive(Clone, Debug)]
pub struct Kind {
    crd: CustomResourceDefinition,
    policy: kube_fsm::admission::Policy,
}

impl Kind {
    /// The kind `crd` defines (its webhook, if deployed, serving the default policy).
    pub fn new(crd: CustomResourceDefinition) -> Self {
        Kind {
            crd,
            policy: kube_fsm::admission::Policy::default(),
        }
    }

    /// Its webhook serves `policy` (whose tiers the registration reflects).
    #[must_use]
    pub fn policy(mut self, policy: kube_fsm::admission::Policy) -> Self {
        self.policy = policy;
        self
    }
}

/// How the operator is deployed ([`Deploy::manifests`]).
#[derive(Clone, Debug)]
pub struct Deploy {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) image: String,
    pub(crate) command: Vec<String>,
    pub(crate) args: Vec<String>,
    pub(crate) replicas: u32,
    pub(crate) metrics_port: u16,
    pub(crate) renew_deadline: Duration,
    /// The CRD deployed instead of `crd::<K>()` (several versions, say).
    pub(crate) crd: Option<CustomResourceDefinition>,
    /// `/metrics` serves only authorized scrapers.
    pub(crate) metrics_auth: bool,
    pub(crate) webhook: Option<webhook::Served>,
    /// ValidatingAdmissionPolicies and their bindings, as JSON.
    pub(crate) admission_policies: Vec<Value>,
}

impl Deploy {
    /// The operator `name` (names the ServiceAccount, the roles, the Deployment and the
    /// Services) in `namespace`, running `image`. Defaults: one replica, the image's own
    /// entrypoint and arguments, metrics on port 8080, client-go's 10 s renew deadline.
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        image: impl Into<String>,
    ) -> Self {
        Deploy {
            name: name.into(),
            namespace: namespace.into(),
            image: image.into(),
            command: Vec::new(),
            args: Vec::new(),
            replicas: 1,
            metrics_port: 8080,
            renew_deadline: Duration::from_secs(10),
            crd: None,
            metrics_auth: false,
            webhook: None,
            admission_policies: Vec::new(),
        }
    }

    /// Deploys `crd` instead of [`kube_fsm::crd()`] of the resource, e.g. its several versions
    /// ([`kube_fsm::crd_versions`]). With the webhook ([`Deploy::webhook`]) and more than one
    /// version, the CRD's conversions go to the webhook's Service (`/convert`, the CA injected
    /// by cert-manager), and the registration reviews every served version.
    #[must_use]
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crd = Some(crd);
        self
    }

    /// The container's command (its entrypoint when empty).
    #[must_use]
    pub fn command(mut self, command: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.command = command.into_iter().map(Into::into).collect();
        self
    }

    /// The container's arguments. `$(POD_NAME)` is the Pod's name (set in its environment),
    /// the identity a replica gives its Leases.
    #[must_use]
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// How many replicas (more than one: give the operator leader election or sharding).
    #[must_use]
    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// The port of `/metrics`, `/healthz` and `/readyz`.
    #[must_use]
    pub fn metrics_port(mut self, port: u16) -> Self {
        self.metrics_port = port;
        self
    }

    /// The operator serves `/metrics` only to scrapers the API server authorizes (`run
    /// --metrics-auth`, `serve::Endpoints::authorize` with the `serve` feature): its
    /// role may create TokenReviews and SubjectAccessReviews, a `NAME-metrics-reader`
    /// ClusterRole allows `get` on `/metrics` (bind your Prometheus's ServiceAccount to it),
    /// and the `ServiceMonitor` (in `prometheus/`) scrapes over HTTPS with its
    /// ServiceAccount's token.
    #[must_use]
    pub fn metrics_auth(mut self, on: bool) -> Self {
        self.metrics_auth = on;
        self
    }

    /// The base also installs these ValidatingAdmissionPolicies and bindings
    /// (`admission::validating_admission_policies_for`, Kubernetes 1.30+), one file each.
    #[must_use]
    pub fn admission_policies(mut self, objects: Vec<Value>) -> Self {
        self.admission_policies.extend(objects);
        self
    }

    /// The Lease's renew deadline: the Pod's termination grace is longer, so a replica
    /// stopping gives its Lease up before it is killed.
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// The kustomize base for `K`'s operator with the permissions `rbac`
    /// ([`kube_fsm::Operator::rbac`] of the operator as the Deployment runs it), in order, with
    /// `kustomization.yaml` last, then `prometheus/` (a kustomization of its ServiceMonitor).
    pub fn manifests<K: StateMachine + CustomResourceExt>(&self, rbac: &Rbac) -> Vec<Manifest> {
        let kind = Kind::new(self.crd.clone().unwrap_or_else(kube_fsm::crd::<K>));
        let kind = match &self.webhook {
            Some(served) => kind.policy(served.policy.clone()),
            None => kind,
        };
        self.manifests_of(&[kind], rbac)
    }

    /// The kustomize base of an operator running several machines in one process (a
    /// [`kube_fsm::Manager`]): every kind's CRD (`crd-PLURAL.GROUP.yaml`), one ServiceAccount with
    /// `rbac` (the union of the machines' [`kube_fsm::Operator::rbac`], [`Rbac::merge`]), one
    /// Deployment, and with the webhook one Service, one certificate and one registration
    /// with a webhook per kind; in order, with `kustomization.yaml` last, then
    /// `prometheus/`. One kind: the same files as [`Deploy::manifests`].
    pub fn manifests_of(&self, kinds: &[Kind], rbac: &Rbac) -> Vec<Manifest> {
        let kinds: Vec<Kind> = match &self.webhook {
            Some(served) => kinds
                .iter()
                .map(|kind| Kind {
                    crd: webhook::converting(self, served, kind.crd.clone()),
                    ..kind.clone()
                })
                .collect(),
            None => kinds.to_vec(),
        };
        let crds = kinds.iter().map(|kind| match kinds.len() {
            1 => manifest("crd.yaml", &kind.crd),
            _ => manifest(
                &format!(
                    "crd-{}.yaml",
                    kind.crd.metadata.name.as_deref().unwrap_or_default()
                ),
                &kind.crd,
            ),
        });
        let mut manifests: Vec<Manifest> = crds.collect();
        manifests.push(manifest("namespace.yaml", objects::namespace(self)));
        manifests.push(manifest(
            "service-account.yaml",
            objects::service_account(self),
        ));
        let mut rbac = rbac.clone();
        if self.metrics_auth {
            rbac.merge(&objects::metrics_auth_rbac());
        }
        let roles = RbacObjects::new(&rbac, &self.name, &self.name, &self.namespace);
        let rbac_files: [(&str, Vec<Value>); 4] = [
            ("cluster-role", values(&roles.cluster_roles)),
            ("cluster-role-binding", values(&roles.cluster_role_bindings)),
            ("role", values(&roles.roles)),
            ("role-binding", values(&roles.role_bindings)),
        ];
        for (file, objects) in rbac_files {
            let many = objects.len() > 1;
            for object in objects {
                let file = match (many, object["metadata"]["namespace"].as_str()) {
                    (true, Some(namespace)) => format!("{file}-{namespace}.yaml"),
                    _ => format!("{file}.yaml"),
                };
                manifests.push(Manifest { file, object });
            }
        }
        manifests.push(manifest("deployment.yaml", objects::deployment(self)));
        manifests.push(manifest(
            "metrics-service.yaml",
            objects::metrics_service(self),
        ));
        if self.metrics_auth {
            manifests.push(manifest(
                "metrics-reader-cluster-role.yaml",
                objects::metrics_reader(self),
            ));
        }
        if self.replicas > 1 {
            manifests.push(manifest(
                "pod-disruption-budget.yaml",
                objects::disruption_budget(self),
            ));
        }
        if let Some(served) = &self.webhook {
            manifests.extend(webhook::manifests(self, served, &kinds));
        }
        for object in &self.admission_policies {
            let kind = match object["kind"].as_str() {
                Some("ValidatingAdmissionPolicyBinding") => "validating-admission-policy-binding",
                _ => "validating-admission-policy",
            };
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            manifests.push(Manifest {
                file: format!("{kind}-{name}.yaml"),
                object: object.clone(),
            });
        }
        let resources: Vec<&str> = manifests.iter().map(|m| m.file.as_str()).collect();
        let base = kustomization("kustomization.yaml", &resources);
        manifests.push(base);
        // prometheus-operator's kinds exist only where it runs, and `kubectl apply -k` of a
        // base naming an unknown kind fails: the ServiceMonitor is a kustomization of its own
        // beside the base (one inside the base's folder may not name the base: kustomize
        // refuses the cycle).
        manifests.push(manifest(SERVICE_MONITOR, objects::service_monitor(self)));
        manifests.push(kustomization(
            "prometheus/kustomization.yaml",
            &["service-monitor.yaml"],
        ));
        manifests
    }

    /// The labels of the operator's Pods.
    pub(crate) fn labels(&self) -> Value {
        json!({ "app.kubernetes.io/name": self.name, "app.kubernetes.io/managed-by": "kube-fsm" })
    }
}

/// A kustomization of `resources` (paths relative to its own folder), written as `file`.
fn kustomization(file: &str, resources: &[&str]) -> Manifest {
    manifest(
        file,
        json!({
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": resources,
        }),
    )
}

fn manifest(file: &str, object: impl serde::Serialize) -> Manifest {
    Manifest {
        file: file.into(),
        object: serde_json::to_value(object).unwrap_or_default(),
    }
}

fn values<T: serde::Serialize>(objects: &[T]) -> Vec<Value> {
    objects
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
}
