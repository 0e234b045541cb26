//! # kube-fsm-generate
//!
//! What a kube-fsm operator writes about itself, from its wiring and its spec, for the tools
//! that deploy and watch it: the kustomize base that deploys it ([`manifests`]) with its RBAC
//! objects ([`rbac`]), Prometheus alerting and recording rules ([`alerts`]) and a Grafana
//! dashboard ([`dashboard`]). These are controller-gen's and kube-prometheus's jobs elsewhere;
//! here they are computed from the same machine and the same operator the process runs, so they
//! cannot drift from it. The operator's command line (`kube-fsm-app`) calls them; an operator
//! binary links this crate only if it generates.
#![deny(missing_docs)]

pub mod alerts;
pub mod dashboard;
pub mod manifests;
pub mod rbac;

#[cfg(test)]
mod test_machines;
