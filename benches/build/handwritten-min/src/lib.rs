//! Build-cost benchmark, minimal hand-written side: only the phase enum `BigPhase` (and
//! `BigEvent`, which `BigPhase::fire` takes) with tables and impls (`machine.rs`, written by
//! `gen-big`) and the same kube CRD as the other bench-build crates; no per-phase types,
//! handler trait or `Dispatch` glue.

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
