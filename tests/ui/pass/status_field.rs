//! `status_field` names a machine status field other than `machine`.
#![deny(warnings)]
#![allow(missing_docs)]

use kube::CustomResource;
use kube_fsm::{MachineStatus, StateMachine, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(status_field = fsm, phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub fsm: MachineStatus<JobPhase>,
}

fn main() {
    let job = Job::new("j", JobSpec {});
    assert!(job.machine_status().is_none());
}
