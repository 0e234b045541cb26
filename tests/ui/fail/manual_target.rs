use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(Pending(initial), Running, Degraded, Failed(terminal)),
    transitions(
        Pending -> Running,
        Running -> Degraded,
        Degraded -> Running,
        Degraded -> Failed,
        Degraded -> Pending manual,
        Failed -> Pending manual,
    ),
)]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
pub struct Error;

struct Handlers;

impl JobHandler for Handlers {
    type Error = Error;

    async fn on_pending(&self, _: &Job, _: &mut Step<Job>) -> Result<JobPendingNext, Error> {
        Ok(Next::To(JobPendingTarget::Running))
    }

    async fn on_running(&self, _: &Job, _: &mut Step<Job>) -> Result<JobRunningNext, Error> {
        Ok(Next::To(JobRunningTarget::Degraded))
    }

    async fn on_degraded(&self, _: &Job, _: &mut Step<Job>) -> Result<JobDegradedNext, Error> {
        // `Degraded -> Pending` is manual: only people take it, so no handler can return it.
        Ok(Next::To(JobDegradedTarget::Pending))
    }
}

fn main() {}
