use kube::CustomResource;
use kube_fsm::state_machine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced)]
pub struct JobSpec {}

fn main() {}
