//! A `retired:` map in both spec forms: the same static data and the same CEL rule.
#![deny(warnings)]
#![allow(missing_docs)]

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "ui/pass/retired.yaml")]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Store", namespaced, status = "StoreStatus")]
pub struct StoreSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct StoreStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<StorePhase>,
}

#[state_machine(
    phases(Pending(initial), Creating, Running, Done(terminal)),
    transitions(Pending -> Creating, Creating -> Running, Running -> Done),
    retired(Provisioning -> Creating, Starting -> Running),
)]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "InlineStore", namespaced, status = "InlineStoreStatus")]
pub struct InlineStoreSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct InlineStoreStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<InlineStorePhase>,
}

fn main() {
    let (yaml, inline) = (StorePhase::MACHINE, InlineStorePhase::MACHINE);
    let retired: Vec<(&str, &str)> = yaml
        .retired
        .iter()
        .map(|r| (r.name, yaml.phases[r.to].name))
        .collect();
    assert_eq!(retired, [("Provisioning", "Creating"), ("Starting", "Running")]);
    assert_eq!(format!("{:?}", yaml.retired), format!("{:?}", inline.retired));
    assert_eq!(yaml.cel_phase_rule, inline.cel_phase_rule);
    assert!(yaml.cel_phase_rule.ends_with(
        " || (oldSelf == 'Provisioning' && self in ['Creating']) \
         || (oldSelf == 'Starting' && self in ['Running']) \
         || !(oldSelf in ['Pending', 'Creating', 'Running', 'Done', 'Provisioning', 'Starting'])"
    ));
    // Retired names are not phases: they do not parse into the enum.
    assert!("Provisioning".parse::<StorePhase>().is_err());
}
