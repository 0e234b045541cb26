//! # kube-fsm
//!
//! Declarative state machines for Kubernetes operators written with kube-rs. Describe the
//! phases, conditions and transitions of a custom resource in a spec (a YAML file or inline),
//! put `#[state_machine]` on the resource's spec struct, and get exhaustive phase, condition
//! and event enums, a transition table and a handler trait whose signatures only allow the
//! spec's edges. See the book (`book/` in the repository) for the spec language.
//!
//! ```no_run
//! use kube::CustomResource;
//! use kube_fsm::{MachineStatus, state_machine};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[state_machine(
//!     phases(Pending(initial), Running, Done(terminal)),
//!     transitions(Pending -> Running on Start, Running -> Done),
//! )]
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
//! pub struct JobSpec {}
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! pub struct JobStatus {
//!     #[serde(flatten)]
//!     pub machine: MachineStatus<JobPhase>,
//! }
//!
//! assert!(JobPhase::Pending.can_transition_to(JobPhase::Running));
//! assert_eq!(JobPhase::Pending.fire(JobEvent::Start), Some(JobPhase::Running));
//! ```
#![deny(missing_docs)]

// The layers, bottom to top: machine, pure, children, metrics, telemetry, watch, replicas, handler,
// engine, operator (then admission, manager, serve and testing); each names only those below
// it (checked by `scripts/layers`). Each public module is the folder of the same name: every
// public item has its folder's path (its `mod.rs` re-exports what users name from the files),
// and the root re-exports the items every operator names. The decision core (`pure`) is
// private. The generators (`kube-fsm-generate`) and the
// command line (`kube-fsm-app`) are crates above this one.
#[cfg(feature = "admission")]
pub mod admission;
pub mod children;
pub mod engine;
pub mod handler;
pub mod machine;
pub mod manager;
pub mod metrics;
pub mod operator;
mod pure;
pub mod replicas;
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(feature = "otlp")]
pub mod telemetry;
pub mod testing;
pub mod watch;

// The generated code names `::kube_fsm::__private`: this makes that path resolve inside this
// crate too, for its own unit tests of generated machines.
#[cfg(test)]
extern crate self as kube_fsm;
#[cfg(test)]
mod test_machines;

// The items every operator names, also at the root. Describing a machine:
pub use kube_fsm_macros::state_machine;
pub use machine::{MachineStatus, Phase, StateMachine, VersionsError, crd, crd_versions};

// Writing handlers:
pub use handler::{Context, Step};
pub use machine::{Cleanup, Next, Verdict};

// Running an operator:
pub use engine::{Reconcilable, ReconcileError};
pub use manager::Manager;
pub use operator::{Operator, Stopped};
pub use watch::client;

#[doc(hidden)]
pub mod __private {
    //! Every path the generated code names, and only those (a test of the macro checks that
    //! it names nothing else): the runtime's modules may move without breaking users' builds.
    //! Not a public API.
    pub use crate::handler::context::Context;
    pub use crate::handler::declared::Wiring;
    pub use crate::handler::dispatch::Dispatch;
    pub use crate::handler::step::Step;
    pub use crate::handler::step_error::StepError;
    pub use crate::machine::data::UnknownPhase;
    pub use crate::machine::data::{
        ChildData, ConditionData, ConditionType, DerivedData, DriftPolicy, EdgeData, MachineData,
        Phase, PhaseData, PictureData, ReadyData, Requirement, RetiredData, SourceData,
        TimeoutData, TriggerData, type_meta,
    };
    pub use crate::machine::next::{Choice, Cleanup, IllegalTarget, Next, Verdict};
    pub use crate::machine::state_machine::StateMachine;
    pub use crate::machine::status::MachineStatus;
    pub use core;
    pub use futures::future::BoxFuture;
    pub use kube::core::object::HasStatus;
    pub use schemars;
    pub use serde;
    pub use std::string::String;
    pub use std::vec::Vec;

    /// Implemented by the generated per-phase event enums.
    pub trait PhaseEvent<P> {
        /// Where the event leads from its phase.
        fn target(self) -> P;
        /// The event name.
        fn name(self) -> &'static str;
    }

    /// Erases a handler's typed [`crate::Next`] into the engine's [`crate::machine::next::Choice`].
    pub fn choice<P, T: Into<P>, E: PhaseEvent<P> + Copy>(
        next: crate::Next<T, E>,
    ) -> crate::machine::next::Choice<P> {
        match next {
            crate::Next::Stay => crate::machine::next::Choice::Stay,
            crate::Next::To(target) => crate::machine::next::Choice::To {
                phase: target.into(),
                event: None,
            },
            crate::Next::Fire(event) => crate::machine::next::Choice::To {
                event: Some(event.name()),
                phase: event.target(),
            },
        }
    }

    /// The JSON schema of a string enum with the given values.
    pub fn string_enum_schema(values: &[&str]) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "enum": values })
    }
}
