//! gate_removed's change made compatible: the spec passes its lock once the renamed phase is
//! retired and the condition kept.
use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "ui/pass/gate_retired.yaml")]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,
}

fn main() {
    // Both retired names of the released spec still lead somewhere.
    let retired: Vec<_> = JobPhase::MACHINE.retired.iter().map(|r| r.name).collect();
    assert_eq!(retired, ["Queued", "Starting"]);
}
