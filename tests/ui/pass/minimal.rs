//! The smallest machine: one terminal phase, no conditions, no events, no handlers to write.
#![deny(warnings)]
#![allow(missing_docs)]

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(phases(Done(terminal)))]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Noop", status = "NoopStatus")]
pub struct NoopSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct NoopStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<NoopPhase>,
}

struct Nothing;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl NoopHandler for Nothing {
    type Error = Never;
}

fn main() {
    assert_eq!(NoopPhase::ALL, [NoopPhase::Done]);
    assert!(NoopCondition::ALL.is_empty());
    let _ = Nothing;
}
