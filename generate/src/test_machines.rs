//! The machine of the crate's unit tests: `specs/stand-in.yaml` (the tests' reference machine), compiled by the macro.

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "../specs/stand-in.yaml")]
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
