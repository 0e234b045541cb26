//! `Ticket`, one resource in two versions with one machine (`specs/ticket.yaml`): `v1alpha1`
//! and `v1`, `v1` stored (the hub). `v1` renamed and restructured the spec (`title` →
//! `summary`, `assignee` → `owner.name`) and added `priority`; [`converter`] converts between
//! them, and the CRD
//! ([`crd`]) sends the API server's conversions to it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_fsm::admission::Converter;

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
        /// Who works on it.
        pub assignee: Option<String>,
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
        /// What it is about (`title` in `v1alpha1`).
        pub summary: String,
        /// Who owns it (`assignee` in `v1alpha1`).
        pub owner: Owner,
        /// How urgent it is: only `v1` has it (kept beside a `v1alpha1` object by the converter).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub priority: Option<u8>,
    }

    /// Who owns a ticket.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct Owner {
        /// Their name, if someone does.
        pub name: Option<String>,
    }

    /// Status of [`Ticket`].
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
    pub struct TicketStatus {
        /// The machine's fields.
        #[serde(flatten)]
        pub machine: MachineStatus<TicketPhase>,
    }
}

impl From<v1alpha1::TicketSpec> for v1::TicketSpec {
    fn from(old: v1alpha1::TicketSpec) -> Self {
        v1::TicketSpec {
            summary: old.title,
            owner: v1::Owner { name: old.assignee },
            priority: None,
        }
    }
}

impl From<v1::TicketSpec> for v1alpha1::TicketSpec {
    fn from(new: v1::TicketSpec) -> Self {
        v1alpha1::TicketSpec {
            title: new.summary,
            assignee: new.owner.name,
        }
    }
}

/// The conversions between the versions, through `v1`.
#[must_use]
pub fn converter() -> Converter {
    Converter::hub::<v1::Ticket>()
        .spoke::<v1alpha1::Ticket>()
        .build()
}

/// The CRD serving both versions, `v1` stored, each with the machine (conversions still to be
/// pointed at a webhook: `kube_fsm::admission::conversion_webhook`).
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

/// Starts every ticket, then closes it.
#[derive(Clone, Copy, Debug)]
pub struct Desk;

impl v1::TicketHandler for Desk {
    type Error = std::convert::Infallible;

    async fn on_open(
        &self,
        _: &v1::Ticket,
        _: &mut kube_fsm::Step<v1::Ticket>,
    ) -> Result<v1::TicketOpenNext, Self::Error> {
        Ok(v1::TicketOpenEvent::Start.into())
    }

    async fn on_working(
        &self,
        _: &v1::Ticket,
        _: &mut kube_fsm::Step<v1::Ticket>,
    ) -> Result<v1::TicketWorkingNext, Self::Error> {
        Ok(v1::TicketWorkingEvent::Close.into())
    }
}
