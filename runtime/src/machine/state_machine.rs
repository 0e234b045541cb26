//! The trait that ties a custom resource to its machine: where the machine's fields live in
//! its status.

use std::fmt::Debug;

use crate::machine::data::{ConditionType, MachineData, Phase};
use crate::machine::status::MachineStatus;

/// Implemented by `#[state_machine]` on the custom resource: its status type and where the
/// machine's fields live in it.
pub trait StateMachine: Send + Sync + Sized + 'static {
    /// The generated phase enum.
    type Phase: Phase;
    /// The generated condition enum.
    type Condition: ConditionType;
    /// The resource's status struct (`#[kube(status = "...")]`): the flattened
    /// [`MachineStatus`] plus the operator's own fields.
    type Status: Clone
        + Debug
        + Default
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// The object's status, if it has one yet.
    fn status_of(&self) -> Option<&Self::Status>;
    /// The object's status, creating a default one first if needed.
    fn status_of_mut(&mut self) -> &mut Self::Status;
    /// The machine's fields in a status.
    fn machine_in(status: &Self::Status) -> &MachineStatus<Self::Phase>;
    /// The machine's fields in a status, to change them.
    fn machine_in_mut(status: &mut Self::Status) -> &mut MachineStatus<Self::Phase>;
    /// The machine's status fields, if the object has a status yet.
    fn machine_status(&self) -> Option<&MachineStatus<Self::Phase>> {
        self.status_of().map(Self::machine_in)
    }
    /// The machine's status fields, creating a default status first if needed.
    fn machine_status_mut(&mut self) -> &mut MachineStatus<Self::Phase> {
        Self::machine_in_mut(self.status_of_mut())
    }
    /// The machine's static data.
    fn machine() -> &'static MachineData {
        <Self::Phase as Phase>::MACHINE
    }
}
