//! `Ticket`, one resource in two versions with one machine (`specs/ticket.yaml`): `v1alpha1`
//! and `v1`, `v1` stored. The versions' fields are the same (the API server converts between
//! them by changing `apiVersion` alone), so every object reads back in either version.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The first version.
pub mod v1alpha1 {
    use kube::CustomResource;
    use kube_fsm::{MachineStatus, state_machine};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A ticket, as first served.
    #[state_machine(spec = "specs/ticket.yaml")]
    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "fsm.example.com",
        version = "v1alpha1",
        kind = "Ticket",
        namespaced,
        status = "TicketStatus"
    )]
    pub struct TicketSpec {
        /// What it is about.
        pub title: String,
    }

    /// Status of [`Ticket`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct TicketStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<TicketPhase>,
    }
}

/// The stored version, which the operator runs on.
pub mod v1 {
    use kube::CustomResource;
    use kube_fsm::{MachineStatus, state_machine};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// A ticket.
    #[state_machine(spec = "specs/ticket.yaml")]
    #[derive(
        CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema,
    )]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Ticket",
        namespaced,
        status = "TicketStatus"
    )]
    pub struct TicketSpec {
        /// What it is about.
        pub title: String,
    }

    /// Status of [`Ticket`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct TicketStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<TicketPhase>,
    }
}

/// The CRD serving both versions, `v1` stored, each with the machine.
///
/// # Panics
/// Never: both versions carry the machine of one spec.
#[must_use]
pub fn crd() -> CustomResourceDefinition {
    kube_fsm::crd_versions(
        vec![
            kube_fsm::crd::<v1alpha1::Ticket>(),
            kube_fsm::crd::<v1::Ticket>(),
        ],
        "v1",
    )
    .expect("one machine in both versions")
}
