//! What the operator writes about itself from its wiring and its spec, for tools that deploy and
//! watch it: the kustomize base that deploys it ([`manifests`]) with its RBAC objects
//! ([`rbac`]), Prometheus alerting and recording rules ([`alerts`]) and a Grafana dashboard
//! ([`dashboard`]). Nothing in the engine names this folder: it is the generators' part of the
//! crate.

pub(crate) mod alerts;
pub(crate) mod dashboard;
pub(crate) mod manifests;
pub(crate) mod rbac;
