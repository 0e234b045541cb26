//! The chaos run (see `src/bin/chaos.rs`): faults between the operator and the API server,
//! crashing leaders, a restarted API server, compaction, and external writers, with an
//! independent observer checking the engine's guarantees.

pub mod checker;
pub mod faults;
pub mod writers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use kube::ResourceExt;
use kube_fsm::conditions::ConditionError;
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_tests::handlers::Databases;
use kube_fsm_tests::resources::*;

use checker::Observer;

/// The run's handlers: the plain ones ([`Databases`]), except that Degraded reports both
/// conditions True like Provisioning (so the rules lead back to Running); `cleanup` is recorded.
/// Counts handler runs per object.
#[derive(Clone, Debug)]
pub struct ChaosHandler {
    /// Where cleanups are recorded.
    pub observer: Arc<Observer>,
    /// Handler runs per object UID.
    pub runs: Arc<Mutex<HashMap<String, u64>>>,
    /// All handler runs.
    pub total: Arc<AtomicU64>,
}

impl ChaosHandler {
    /// Handlers recording into `observer`.
    pub fn new(observer: Arc<Observer>) -> Self {
        ChaosHandler {
            observer,
            runs: Arc::default(),
            total: Arc::default(),
        }
    }

    fn ran(&self, db: &Database) {
        self.total.fetch_add(1, Ordering::Relaxed);
        *self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(db.uid().unwrap_or_default())
            .or_default() += 1;
    }
}

impl DatabaseHandler for ChaosHandler {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        self.ran(db);
        Databases.on_pending(db, step).await
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        self.ran(db);
        Databases.on_provisioning(db, step).await
    }

    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        self.ran(db);
        Databases.on_running(db, step).await
    }

    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        self.ran(db);
        // Unlike the plain handlers, report both conditions True, so `when` leads back to Running.
        Databases.on_provisioning(db, step).await?;
        Ok(Next::Stay)
    }

    async fn cleanup(&self, db: &Database) -> Result<Cleanup, ConditionError> {
        self.observer.cleaned(&db.uid().unwrap_or_default());
        Databases.cleanup(db).await
    }
}
