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

// The layers, bottom to top: model, pure, observe, watch, ha, handling, engine, operator (then
// admission, manager, serve and testing); each names only those below it (checked by
// `scripts/layers`). The generators (`kube-fsm-generate`) and the command line
// (`kube-fsm-app`) are crates above this one. What users see is below: about fifteen items at the root and
// a module per topic, each item reachable by one path.
#[cfg(feature = "admission")]
pub mod admission;
mod engine;
mod ha;
mod handling;
mod manager;
mod model;
mod observe;
mod operator;
mod pure;
#[cfg(feature = "serve")]
pub mod serve;
pub mod testing;
mod watch;

// The generated code names `::kube_fsm::__private`: this makes that path resolve inside this
// crate too, for its own unit tests of generated machines.
#[cfg(test)]
extern crate self as kube_fsm;
#[cfg(test)]
mod test_machines;

// Describing a machine.
pub use kube_fsm_macros::state_machine;
pub use model::crd::crd;
pub use model::machine::Phase;
pub use model::state_machine::StateMachine;
pub use model::status::MachineStatus;
pub use model::versions::{VersionsError, crd_versions};

// Writing handlers.
pub use handling::context::Context;
pub use handling::step::Step;
pub use model::next::{Cleanup, Next, Verdict};

// Running an operator.
pub use engine::{Reconcilable, ReconcileError};
pub use manager::Manager;
pub use operator::{Operator, Stopped};
pub use watch::client::client;

pub mod machine {
    //! The spec as data, and what the generated code implements: [`MachineData`] (phases,
    //! edges, timeouts, conditions), the condition enum's trait, a stored phase
    //! ([`PhaseValue`]: declared or not), the handler glue ([`Dispatch`]) and, with the `cel`
    //! feature, the CRD's update rules evaluated without a cluster (`validate_update`).
    pub use crate::handling::dispatch::Dispatch;
    #[cfg(feature = "cel")]
    pub use crate::model::crd::{CrdError, validate_update};
    pub use crate::model::description::{
        Described, Description, MACHINE_ANNOTATION, Move, PhaseDescription, ReadyDescription,
        RequirementDescription, TimeoutDescription, TransitionDescription, TriggerDescription,
        no_such_transition,
    };
    pub use crate::model::diagram::{DiagramError, DiagramFormat};
    pub use crate::model::machine::{
        ConditionData, ConditionType, DriftPolicy, EdgeData, MachineData, PhaseData, PictureData,
        ReadyData, Requirement, RetiredData, TimeoutData, TriggerData, UnknownPhase,
    };
    pub use crate::model::next::{Choice, IllegalTarget};
    pub use crate::model::status::PhaseValue;
    pub use crate::pure::decide::IllegalTransition;
    /// The annotations the engine reads and the conditions it keeps, for tools that read or
    /// set them on stored objects (`kubectl fsm`): the engine's own definitions.
    pub use crate::pure::pause::{
        PAUSED as PAUSED_CONDITION, PAUSED_ANNOTATION, RECONCILE_ANNOTATION, paused_for,
        requested as pause_requested,
    };
    pub use crate::pure::readiness::{READY, RECONCILING, STALLED};
}

pub mod handler {
    //! What a phase handler works with besides its [`crate::Step`] and [`crate::Context`]:
    //! children ([`Applied`]), the caches of owned and watched kinds ([`Cache`]) and the
    //! errors of both ([`ContextError`], [`ConditionError`]).
    pub use crate::handling::children::Applied;
    pub use crate::handling::context::ContextError;
    pub use crate::model::conditions::ConditionError;
    pub use crate::watch::cache::{Cache, Cached, Watched};
    pub use crate::watch::scope::{Scoped, ScopedApi};
}

pub mod controller {
    //! Running more than the defaults: replicas ([`LeaderElection`], [`Sharding`]), the
    //! operator's health ([`Health`]), which Kubernetes Events it records, and what its
    //! errors name.
    pub use crate::engine::{EngineRequest, RecordedEvents};
    pub use crate::ha::leader::LeaderElection;
    pub use crate::ha::shard::{ShardKey, Sharding, shard_of};
    pub use crate::manager::Readiness;
    pub use crate::operator::{DEFAULT_CONCURRENCY, RateLimitError, Replicas, owner_reference};
    pub use crate::pure::label::dns_label;
    pub use crate::watch::health::{Connection, Health};
}

pub mod rbac {
    //! Least privilege: the RBAC permissions an operator needs, computed from its own wiring
    //! ([`crate::Operator::rbac`], [`crate::Operator::needs`]); `kube-fsm-generate` writes them
    //! as Roles, ClusterRoles and bindings for its ServiceAccount.
    pub use crate::operator::rbac::{Permission, Rbac, Scope, Verb};
}

pub mod metrics {
    //! Prometheus metrics: controller-runtime's names and `kube_fsm_*` ([`Metrics`]);
    //! `kube-fsm-generate` writes alerting and recording rules and a Grafana dashboard over them.
    pub use crate::observe::metrics::{DEFAULT_NEAR_TIMEOUT, Metrics, UNDECLARED};
}

#[cfg(feature = "otlp")]
pub mod telemetry {
    //! Traces exported over OTLP (feature `otlp`).
    pub use crate::observe::telemetry::{Otlp, TelemetryError};
}

#[doc(hidden)]
pub mod __private {
    //! Every path the generated code names, and only those (a test of the macro checks that
    //! it names nothing else): the runtime's modules may move without breaking users' builds.
    //! Not a public API.
    pub use crate::handling::context::Context;
    pub use crate::handling::dispatch::Dispatch;
    pub use crate::handling::step::Step;
    pub use crate::model::machine::UnknownPhase;
    pub use crate::model::machine::{
        ConditionData, ConditionType, DriftPolicy, EdgeData, MachineData, Phase, PhaseData,
        PictureData, ReadyData, Requirement, RetiredData, TimeoutData, TriggerData,
    };
    pub use crate::model::next::{Choice, Cleanup, IllegalTarget, Next, Verdict};
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

    /// Erases a handler's typed [`crate::Next`] into the engine's [`crate::model::next::Choice`].
    pub fn choice<P, T: Into<P>, E: PhaseEvent<P> + Copy>(
        next: crate::Next<T, E>,
    ) -> crate::model::next::Choice<P> {
        match next {
            crate::Next::Stay => crate::model::next::Choice::Stay,
            crate::Next::To(target) => crate::model::next::Choice::To {
                phase: target.into(),
                event: None,
            },
            crate::Next::Fire(event) => crate::model::next::Choice::To {
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
