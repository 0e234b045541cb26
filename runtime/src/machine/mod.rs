//! The spec as data, and what the generated code implements: [`MachineData`] (phases, edges,
//! timeouts, conditions), a stored phase ([`PhaseValue`]: declared or not), what a handler
//! returns ([`Choice`]), the condition enum's trait and its errors, the machine's
//! [`Description`] and diagrams, the annotations the engine reads and the conditions it keeps,
//! and with the `cel` feature the CRD's update rules evaluated without a cluster
//! (`validate_update`). Plain data and traits, no I/O: the bottom layer, naming no other.

pub(crate) mod annotations;
pub(crate) mod conditions;
pub(crate) mod crd;
pub(crate) mod data;
pub(crate) mod description;
pub(crate) mod diagram;
pub(crate) mod next;
pub(crate) mod state_machine;
pub(crate) mod status;
pub(crate) mod versions;

pub use annotations::{
    PAUSED as PAUSED_CONDITION, PAUSED_ANNOTATION, READY, RECONCILE_ANNOTATION, RECONCILING,
    STALLED, paused_for, requested as pause_requested,
};
pub use conditions::ConditionError;
pub use crd::crd;
#[cfg(feature = "cel")]
pub use crd::{CrdError, validate_update};
pub use data::{
    ConditionData, ConditionType, DriftPolicy, EdgeData, MachineData, Phase, PhaseData,
    PictureData, ReadyData, Requirement, RetiredData, TimeoutData, TriggerData, UnknownPhase,
};
pub use description::{
    ChildDescription, Described, Description, MACHINE_ANNOTATION, Move, PhaseDescription,
    ReadyDescription, RequirementDescription, TimeoutDescription, TransitionDescription,
    TriggerDescription, no_such_transition,
};
pub use diagram::{DiagramError, DiagramFormat};
pub use next::{Choice, Cleanup, IllegalTarget, IllegalTransition, Next, Verdict};
pub use state_machine::StateMachine;
pub use status::{MachineStatus, PhaseValue};
pub use versions::{VersionsError, crd_versions};
