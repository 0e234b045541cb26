//! Phases, conditions and events named like prelude items or like generated items must work.
#![deny(warnings)]
#![allow(missing_docs)]

use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(None(initial), Some, Ok, Err, Default, Result, Option, Phase, Handler, Target, Next,
           Machine, String, Vec, Box, Stay, Final(terminal)),
    conditions(Ok, None, "example.com/Some", Default),
    transitions(
        None -> Some on Some,
        Some -> Ok on None,
        Ok -> Err when Ok,
        Err -> Default when !None && Ok,
        Default -> Result on Ok,
        Result -> Option on Err,
        Option -> Phase, Phase -> Handler, Handler -> Target, Target -> Next, Next -> Machine,
        Machine -> String, String -> Vec, Vec -> Box, Box -> Stay, Stay -> Final on Default,
    ),
)]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Thing", namespaced, status = "ThingStatus")]
pub struct ThingSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ThingStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<ThingPhase>,
}

fn main() {
    let phase: Option<ThingPhase> = Some(ThingPhase::None);
    let result: Result<ThingPhase, ()> = Ok(ThingPhase::Err);
    assert_eq!(phase.and_then(|p| p.fire(ThingEvent::Some)), Some(ThingPhase::Some));
    assert_eq!(result, Ok(ThingPhase::Err));
    assert_eq!(ThingCondition::Some.as_str(), "example.com/Some");
    assert_eq!(ThingPhase::default(), ThingPhase::None);
    let next: ThingStayNext = Next::Fire(ThingStayEvent::Default);
    let _ = next;
    let _ = |step: &mut Step<Thing>| step.condition_status(ThingCondition::Ok);
}
