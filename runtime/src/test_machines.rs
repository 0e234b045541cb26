//! Machines for the crate's own unit tests, compiled by the macro inside this crate (the
//! specs of `specs/` written inline, so the crate's tests need no file outside it).
#![allow(
    dead_code,
    reason = "each machine is declared whole; a test uses some of its items"
)]

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::machine::status::MachineStatus;

/// Held by a test that measures the process's memory, and by the tests that churn through
/// allocations (the property tests), so that one does not count the other's.
pub static MEMORY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `specs/database.yaml`.
#[kube_fsm_macros::state_machine(
    phases(
        Pending(initial, description = "Accepted, waiting to be provisioned."),
        Provisioning(description = "Child resources are being created.", requeue_after = "10s",
                     timeout = "10m" -> Failed as ProvisioningTimedOut),
        Running(description = "Serving."),
        Degraded(description = "Serving, but not every part is healthy.", requeue_after = "30s"),
        Failed(description = "Gave up; needs a human.", terminal),
    ),
    conditions(
        PodsReady(description = "All database pods are ready."),
        ServiceAvailable(description = "The service answers."),
    ),
    transitions(
        Pending -> Provisioning on Accept,
        Provisioning -> Running when PodsReady,
        Running -> Degraded when !ServiceAvailable,
        Degraded -> Running when ServiceAvailable && PodsReady,
        [Provisioning, Running, Degraded] -> Failed on Fail,
        Failed -> Pending manual,
    ),
    finalizer = "example.com/cleanup",
    ready(phases(Running), conditions(ServiceAvailable)),
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fsm.example.com",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus"
)]
pub struct DatabaseSpec {
    pub version: String,
}

impl Database {
    pub fn sample(name: &str) -> Self {
        Database::new(
            name,
            DatabaseSpec {
                version: "16".into(),
            },
        )
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct DatabaseStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<DatabasePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// `specs/pipeline.yaml`.
#[kube_fsm_macros::state_machine(
    phases(
        Pending(initial, requeue_after = "5s", timeout = "15m" -> Failed as SchedulingTimedOut),
        Running(requeue_after = "30s", timeout = "6h" -> Failed as DeadlineExceeded),
        Succeeded(terminal),
        Failed(terminal),
    ),
    conditions(Scheduled, Complete, Failed),
    transitions(
        Pending -> Running when Scheduled,
        Pending -> Failed when Failed,
        [Pending, Running] -> Failed on Cancel,
        Running -> Succeeded when Complete && !Failed,
        Running -> Failed when Failed,
    ),
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fsm.example.com",
    version = "v1",
    kind = "Pipeline",
    namespaced,
    status = "PipelineStatus"
)]
pub struct PipelineSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct PipelineStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<PipelinePhase>,
}

/// A self-loop and a handler-only edge.
#[kube_fsm_macros::state_machine(
    phases(Waiting(initial, requeue_after = "30s", handler_timeout = "20s", timeout = "5m" -> GaveUp), Working, GaveUp(terminal), Done(terminal)),
    conditions(Ready),
    transitions(
        Waiting -> Waiting on Retry,
        Waiting -> Working when Ready,
        Waiting -> GaveUp,
        Working -> Done on Finish,
        Working -> Waiting when !Ready,
    ),
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fsm.example.com",
    version = "v1",
    kind = "Retrier",
    namespaced,
    status = "RetrierStatus"
)]
pub struct RetrierSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct RetrierStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<RetrierPhase>,
}

/// A machine with a declared child (a Job) and conditions derived from it.
#[kube_fsm_macros::state_machine(
    phases(Running(initial), Succeeded(terminal), Failed(terminal)),
    children(job(type = k8s_openapi::api::batch::v1::Job, phases(Running), on_leave = keep)),
    conditions(JobComplete(from = job.Complete), JobFailed(from = job.Failed)),
    transitions(
        Running -> Succeeded when JobComplete,
        Running -> Failed when JobFailed,
    ),
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fsm.example.com",
    version = "v1",
    kind = "Batch",
    namespaced,
    status = "BatchStatus"
)]
pub struct BatchSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct BatchStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<BatchPhase>,
}
