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
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_tests::resources::*;

use checker::Observer;

/// The run's handlers: Pending accepts, Provisioning and Degraded report both conditions True
/// (so the rules lead to Running), Running stays; `cleanup` is done at once and recorded.
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

    fn healthy(step: &mut Step<Database>) -> Result<(), kube_fsm::conditions::ConditionError> {
        step.set_condition(DatabaseCondition::PodsReady, true, "Up", "")?;
        step.set_condition(DatabaseCondition::ServiceAvailable, true, "Answers", "")
    }
}

impl DatabaseHandler for ChaosHandler {
    type Error = kube_fsm::conditions::ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, Self::Error> {
        self.ran(db);
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, Self::Error> {
        self.ran(db);
        Self::healthy(step)?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, Self::Error> {
        self.ran(db);
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, Self::Error> {
        self.ran(db);
        Self::healthy(step)?;
        Ok(Next::Stay)
    }

    async fn cleanup(&self, db: &Database) -> Result<Cleanup, Self::Error> {
        self.observer.cleaned(&db.uid().unwrap_or_default());
        Ok(Cleanup::Done)
    }
}
