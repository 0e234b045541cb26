use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(Pending(initial), Creating, Done(terminal)),
    transitions(Pending -> Creating, Creating -> Don),
    retired(Pending -> Creating, Provisioning -> Creatng, Provisioning -> Done),
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
