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

// The layers, bottom to top: model, pure, observe, watch, ha, handler, engine, operator (then
// admission and testing); each names only those below it (checked by `scripts/layers`).
#[cfg(feature = "admission")]
pub mod admission;
mod engine;
mod ha;
mod handler;
mod model;
mod observe;
mod operator;
mod pure;
pub mod testing;
mod watch;

pub use ha::{leader, shard};
#[doc(hidden)]
pub use handler::step_plan;
pub use handler::{children, context, step};
pub use model::{conditions, crd, machine, next, status};
pub use observe::metrics;
#[cfg(feature = "otlp")]
pub use observe::telemetry;
pub use pure::{backoff, drift};
#[doc(hidden)]
pub use pure::{decide, merge_patch};
pub use watch::{cache, health};

/// The builder of an operator and how its run ends.
pub mod controller {
    pub use crate::operator::{
        DEFAULT_CONCURRENCY, Operator, RateLimitError, Replicas, Stopped, owner_reference,
    };
}

pub use children::Applied;
pub use context::{Context, ContextError};
pub use controller::{Operator, Stopped, owner_reference};
pub use crd::crd;
pub use engine::{EngineRequest, Reconcilable, ReconcileError, RecordedEvents};
pub use handler::dispatch::Dispatch;
pub use health::{Connection, Health};
pub use kube_fsm_macros::state_machine;
pub use leader::LeaderElection;
pub use machine::{ConditionType, DriftPolicy, MachineData, Phase, RetiredData, UnknownPhase};
pub use model::state_machine::StateMachine;
pub use next::{Choice, Cleanup, Next, Verdict};
pub use shard::{ShardKey, Sharding};
pub use status::{MachineStatus, PhaseValue};
pub use step::Step;
pub use watch::client::client;
pub use watch::scope::Scoped;

#[doc(hidden)]
pub mod __private {
    //! Every path the generated code names, and only those (a test of the macro checks that
    //! it names nothing else): the runtime's modules may move without breaking users' builds.
    //! Not a public API.
    pub use crate::handler::context::Context;
    pub use crate::handler::dispatch::Dispatch;
    pub use crate::handler::step::Step;
    pub use crate::model::machine::UnknownPhase;
    pub use crate::model::machine::{
        ConditionData, ConditionType, DriftPolicy, EdgeData, MachineData, Phase, PhaseData,
        Requirement, RetiredData, TimeoutData, TriggerData,
    };
    pub use crate::model::next::{Choice, Cleanup, Next, Verdict};
    pub use crate::model::state_machine::StateMachine;
    pub use crate::model::status::MachineStatus;
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
