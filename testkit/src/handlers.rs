//! Phase handlers shared by the integration tests.

use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, Next, Step};

use crate::resources::{
    Database, DatabaseCondition, DatabaseDegradedNext, DatabaseHandler, DatabasePendingEvent,
    DatabasePendingNext, DatabasePhase, DatabaseProvisioningNext, DatabaseRunningNext,
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

/// What runs before each phase handler call of [`Preceded`]: a delay, a gate, a hang, a panic,
/// a count.
pub trait BeforeEach: Send + Sync + 'static {
    /// Runs before the handler of `phase` for `db`.
    fn before(&self, db: &Database, phase: DatabasePhase) -> impl Future<Output = ()> + Send;
}

/// The plain [`Databases`] handlers, each phase handler call preceded by `.0`'s
/// [`BeforeEach::before`].
#[derive(Clone, Debug, Default)]
pub struct Preceded<B>(pub B);

impl<B: BeforeEach> DatabaseHandler for Preceded<B> {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        self.0.before(db, DatabasePhase::Pending).await;
        Databases.on_pending(db, step).await
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        self.0.before(db, DatabasePhase::Provisioning).await;
        Databases.on_provisioning(db, step).await
    }

    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        self.0.before(db, DatabasePhase::Running).await;
        Databases.on_running(db, step).await
    }

    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        self.0.before(db, DatabasePhase::Degraded).await;
        Databases.on_degraded(db, step).await
    }

    async fn cleanup(
        &self,
        db: &Database,
        context: &kube_fsm::Context,
    ) -> Result<Cleanup, ConditionError> {
        Databases.cleanup(db, context).await
    }
}
