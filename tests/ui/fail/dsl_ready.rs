use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(Pending(initial), Done(terminal)),
    conditions(Available),
    transitions(Pending -> Done when Available),
    ready(phase(Done), conditions(Available)),
)]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,
}

fn main() {}
