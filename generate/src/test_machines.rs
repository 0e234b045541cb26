//! The machine of the crate's unit tests: `specs/database.yaml`, compiled by the macro.

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "../specs/database.yaml")]
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

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct DatabaseStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<DatabasePhase>,
}
