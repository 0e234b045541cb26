//! Phase handlers shared by the integration tests.

use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, Next, Step};

use crate::resources::{
    Database, DatabaseCondition, DatabaseDegradedNext, DatabaseHandler, DatabasePendingEvent,
    DatabasePendingNext, DatabaseProvisioningNext, DatabaseRunningNext,
};

/// The plainest Database handlers: Pending accepts, Provisioning reports both conditions True
/// (so `when PodsReady` moves to Running), Running and Degraded stay, cleanup is done at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct Databases;

impl DatabaseHandler for Databases {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        step.set_condition(DatabaseCondition::PodsReady, true, "Up", "")?;
        step.set_condition(DatabaseCondition::ServiceAvailable, true, "Answers", "")?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<Cleanup, ConditionError> {
        Ok(Cleanup::Done)
    }
}
