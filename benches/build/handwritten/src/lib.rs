//! Build-cost benchmark, hand-written side: the same items `#[state_machine]` generates for
//! `benches/specs/big.yaml`, as plain source in `machine.rs` (written by `gen-big`), and the
//! same kube CRD as the generated side, without the macro.

use kube::CustomResource;
use kube_fsm::MachineStatus;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod machine;
pub use machine::*;

/// A resource with a big machine.
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
