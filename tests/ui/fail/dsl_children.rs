use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(Pending(initial), Running, Done(terminal)),
    children(
        migrate(type = Job, phases(Runing), on_leave = forget),
        report(type = ConfigMap, phases(Running, Done), after(migrate)),
        cleanup(type = ConfigMap, phases(Running)),
    ),
    conditions(JobComplete(from = migrate.Complete), Logged(from = logs.ready)),
    transitions(Pending -> Running, Running -> Done when JobComplete),
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
