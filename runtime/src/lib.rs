//! # kube-fsm
//!
//! Declarative state machines for Kubernetes operators written with kube-rs. Describe the
//! phases, conditions and transitions of a custom resource in a spec (a YAML file or inline),
//! put `#[state_machine]` on the resource's spec struct, and get exhaustive phase, condition
//! and event enums, a transition table and a handler trait whose signatures only allow the
//! spec's edges. See the repository README for the spec language.
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

#[cfg(feature = "admission")]
pub mod admission;
pub mod backoff;
pub mod cache;
pub mod children;
mod client;
pub mod conditions;
pub mod context;
pub mod controller;
pub mod crd;
#[doc(hidden)]
pub mod decide;
mod dispatch;
pub mod drift;
mod fence;
mod finalizer;
pub mod health;
pub mod leader;
mod lease;
pub mod machine;
mod memory;
#[doc(hidden)]
pub mod merge_patch;
pub mod metrics;
pub mod next;
mod pace;
mod reconcile;
mod repair;
mod report;
mod scope;
mod selection;
pub mod shard;
mod shard_children;
mod shard_label;
mod shards;
mod slim;
mod sources;
mod state_machine;
pub mod status;
pub mod step;
#[doc(hidden)]
pub mod step_plan;
#[cfg(feature = "otlp")]
pub mod telemetry;
pub mod testing;
mod version;
mod watch;
mod write;

pub use children::Applied;
pub use client::client;
pub use context::{Context, ContextError};
pub use controller::{Operator, Stopped, owner_reference};
pub use crd::crd;
pub use dispatch::Dispatch;
pub use health::{Connection, Health};
pub use kube_fsm_macros::state_machine;
pub use leader::LeaderElection;
pub use machine::{ConditionType, DriftPolicy, MachineData, Phase, RetiredData, UnknownPhase};
pub use next::{Choice, Cleanup, Next, Verdict};
pub use reconcile::{Events, ReconcileError, Reconciled};
pub use scope::Scoped;
pub use shard::{ShardKey, Sharding};
pub use state_machine::StateMachine;
pub use status::{MachineStatus, PhaseValue};
pub use step::Step;

#[doc(hidden)]
pub mod __private {
    //! Every path the generated code names, and only those (a test of the macro checks that
    //! it names nothing else): the runtime's modules may move without breaking users' builds.
    //! Not a public API.
    pub use crate::dispatch::Dispatch;
    pub use crate::machine::UnknownPhase;
    pub use crate::machine::{
        ConditionData, ConditionType, DriftPolicy, EdgeData, MachineData, Phase, PhaseData,
        Requirement, RetiredData, TimeoutData, TriggerData,
    };
    pub use crate::next::{Choice, Cleanup, Next, Verdict};
    pub use crate::state_machine::StateMachine;
    pub use crate::status::MachineStatus;
    pub use crate::step::Step;
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

    /// Erases a handler's typed [`crate::Next`] into the engine's [`crate::Choice`].
    pub fn choice<P, T: Into<P>, E: PhaseEvent<P> + Copy>(
        next: crate::Next<T, E>,
    ) -> crate::Choice<P> {
        match next {
            crate::Next::Stay => crate::Choice::Stay,
            crate::Next::To(target) => crate::Choice::To {
                phase: target.into(),
                event: None,
            },
            crate::Next::Fire(event) => crate::Choice::To {
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
