//! The reference machine with every handler implemented, under `deny(warnings, missing_docs)`.
#![deny(warnings, missing_docs)]

use std::time::Duration;

use kube::CustomResource;
use kube_fsm::{Cleanup, MachineStatus, Next, Step, Verdict, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The spec of a database.
#[state_machine(spec = "ui/pass/database.yaml")]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Database", namespaced, status = "DatabaseStatus")]
pub struct DatabaseSpec {
    /// Engine version.
    pub version: String,
}

/// The status of a database.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct DatabaseStatus {
    /// The machine's fields.
    #[serde(flatten)]
    pub machine: MachineStatus<DatabasePhase>,
}

/// Handler errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A condition could not be set.
    #[error(transparent)]
    Condition(#[from] kube_fsm::machine::ConditionError),
}

struct Handlers;

impl DatabaseHandler for Handlers {
    type Error = Error;

    async fn on_pending(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabasePendingNext, Error> {
        Ok(Next::Fire(DatabasePendingEvent::Accept))
    }

    async fn on_provisioning(&self, db: &Database, step: &mut Step<Database>) -> Result<DatabaseProvisioningNext, Error> {
        step.set_condition(DatabaseCondition::PodsReady, !db.spec.version.is_empty(), "Checked", "")?;
        step.requeue_after(Duration::from_secs(5));
        Ok(Next::Stay)
    }

    async fn on_running(&self, _: &Database, step: &mut Step<Database>) -> Result<DatabaseRunningNext, Error> {
        if step.condition_status(DatabaseCondition::ServiceAvailable) == Some(false) {
            return Ok(DatabaseRunningTarget::Degraded.into());
        }
        Ok(Next::Stay)
    }

    async fn on_degraded(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabaseDegradedNext, Error> {
        Ok(DatabaseDegradedEvent::Fail.into())
    }

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }

    async fn before_transition(&self, _: &Database, _: DatabasePhase, to: DatabasePhase) -> Result<Verdict, Error> {
        Ok(if to == DatabasePhase::Failed { Verdict::Veto("not today".into()) } else { Verdict::Allow })
    }
}

fn main() {
    let _ = Handlers;
    assert!(DatabasePhase::Pending.can_transition_to(DatabasePhase::Provisioning));
    const _: bool = DatabasePhase::Failed.is_terminal();
}
