//! Server-side enforcement on every API server version: a validating admission webhook
//! generated from the spec (feature `admission`).
//!
//! The CRD's CEL rules ([`crate::crd()`]) keep `status.phase` on the spec's edges only on API
//! servers from 1.25 on. The webhook applies the same rules, from the same machine data and
//! with the same messages, on any version that has `admissionregistration.k8s.io/v1` (1.16
//! on), to every writer: users, other controllers, and the operator itself (defence in
//! depth). A refusal reaches the client as `422 Invalid` with one cause on `status.phase`:
//!
//! ```text
//! admission webhook "phase.databases.fsm.example.com" denied the request:
//! cannot move from Pending to Succeeded: the Database state machine has no such transition
//! ```
//!
//! Then optional [`Policy`] layers (a platform baseline everywhere, tenant tiers by namespace
//! label), from which the operator is exempt.
//!
//! The parts: [`Validator`] decides one review (pure); [`Webhook`] serves it over HTTPS with a
//! [`ServingCertificate`] (PEM files, re-read when they change, or a development CA made in
//! memory), within [`Limits`] that keep any client, or a flood of them, from holding it away
//! from the API server, and reports through [`WebhookHealth`] (`live` for a liveness probe,
//! `ready` for a readiness one) and [`WebhookMetrics`]; [`validating_webhook_configuration`]
//! registers it, next to [`crate::crd()`].
//!
//! From Kubernetes 1.30 the API server enforces the policy layers itself: the same
//! [`Policy`] as ValidatingAdmissionPolicies ([`validating_admission_policies_for`]), with no
//! webhook process to fail, be attacked or be unavailable; the edges stay the CRD's CEL rule.
//!
//! The same server converts a resource served in several versions ([`crate::crd_versions`]):
//! a [`Converter`] (pure, hub-and-spoke over the user's `From` impls between the versions'
//! specs; status passes through) given to [`Webhook::converter`], registered in the CRD by
//! [`conversion_webhook`].

mod admission_policy;
mod configuration;
mod conversion;
mod owned;
mod policy;
mod review;
mod rules;
mod server;
mod steering;
mod tls;

pub use admission_policy::validating_admission_policies_for;
pub use configuration::{
    Endpoint, FailurePolicy, PATH, TIER_PATH, WebhookOptions, conversion_webhook,
    validating_webhook_configuration, validating_webhook_configuration_for,
    validating_webhook_configuration_of,
};
pub use conversion::{CONVERSION_DATA, CONVERSION_ERROR, CONVERT_PATH, Conversions, Converter};
pub use policy::{OperatorIdentity, People, Policy, PolicyError, PolicyRule, Requester, Tier};
pub use review::Validator;
pub use rules::{Move, NOT_SUPPORTED, PHASE_FIELD, Violation, check, classify, is_manual};
pub(crate) use server::acceptor;
pub use server::{Limits, ServeError, Webhook, WebhookHealth, WebhookMetrics};
pub use tls::{ServingCertificate, TlsError};

#[cfg(test)]
pub(crate) mod tests_support {
    use crate::machine::data::{
        DriftPolicy, EdgeData, MachineData, PhaseData, RetiredData, TriggerData,
    };

    const fn phase(name: &'static str) -> PhaseData {
        PhaseData {
            name,
            description: "",
            terminal: false,
            requeue_after_ms: None,
            handler_timeout_ms: None,
            timeout: None,
        }
    }

    const fn edge(from: usize, to: usize) -> EdgeData {
        EdgeData {
            from,
            to,
            trigger: TriggerData::Handler,
        }
    }

    /// The AdmissionReview (as JSON) of a status-subresource update of a Job from `old` to
    /// `new` by `alice` with field manager `manager`.
    pub fn status_update(old: Option<&str>, new: Option<&str>, manager: &str) -> serde_json::Value {
        let object = |phase: Option<&str>| {
            serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "Job",
                "metadata": { "name": "job", "namespace": "ns" },
                "status": { "phase": phase },
            })
        };
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "42",
                "kind": { "group": "example.com", "version": "v1", "kind": "Job" },
                "resource": { "group": "example.com", "version": "v1", "resource": "jobs" },
                "subResource": "status",
                "name": "job",
                "namespace": "ns",
                "operation": "UPDATE",
                "userInfo": { "username": "alice" },
                "object": object(new),
                "oldObject": object(old),
                "options": { "kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": manager },
            },
        })
    }

    /// An approval gate: people approve (`Pending -> Approved`, a manual edge out of the
    /// initial phase) or the engine rejects (`Pending -> Rejected`).
    pub static GATED: MachineData = MachineData {
        kind: "Change",
        phases: &[phase("Pending"), phase("Approved"), phase("Rejected")],
        conditions: &[],
        children: &[],
        events: &[],
        edges: &[
            EdgeData {
                from: 0,
                to: 1,
                trigger: TriggerData::Manual,
            },
            edge(0, 2),
        ],
        initial: 0,
        finalizer: None,
        ready: None,
        drift: DriftPolicy::Adopt,
        retired: &[],
        mermaid: "",
        dot: "",
        picture: Err("not drawn"),
        cel_phase_rule: "",
        cel_first_phase_rule: "",
        source: "inline",
    };

    /// Pending -> Running -> Done, Pending -> Failed, and people retry Failed -> Pending (a
    /// manual edge); `Starting` was renamed `Running`.
    pub static MACHINE: MachineData = MachineData {
        kind: "Job",
        phases: &[
            phase("Pending"),
            phase("Running"),
            phase("Done"),
            phase("Failed"),
        ],
        conditions: &[],
        children: &[],
        events: &[],
        edges: &[
            edge(0, 1),
            edge(1, 2),
            edge(0, 3),
            EdgeData {
                from: 3,
                to: 0,
                trigger: TriggerData::Manual,
            },
        ],
        initial: 0,
        finalizer: None,
        ready: None,
        drift: DriftPolicy::Adopt,
        retired: &[RetiredData {
            name: "Starting",
            to: 1,
        }],
        mermaid: "",
        dot: "",
        picture: Err("not drawn"),
        cel_phase_rule: "",
        cel_first_phase_rule: "",
        source: "inline",
    };
}
