//! Build-cost benchmark, generated side: the 150-phase / 320-edge machine of
//! `benches/specs/big.yaml` compiled by `#[state_machine]`. The kube CRD is the same in all
//! bench-build crates, so kube's derive costs each of them the same.

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A resource with a big machine.
#[state_machine(spec = "../../specs/big.yaml")]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bench.kube-fsm.dev",
    version = "v1",
    kind = "Big",
    namespaced,
    status = "BigStatus"
)]
pub struct BigSpec {
    /// The image to run.
    pub image: String,
    /// How many replicas to run.
    pub replicas: i32,
}

/// Status of [`Big`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct BigStatus {
    /// The machine's fields.
    #[serde(flatten)]
    pub machine: MachineStatus<BigPhase>,
}
