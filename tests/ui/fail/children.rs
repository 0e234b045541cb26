use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "ui/fail/children.yaml")]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,
}

fn main() {}
