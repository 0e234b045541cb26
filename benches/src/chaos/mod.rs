//! The chaos run (see `src/bin/chaos.rs`): faults between the operator and the API server,
//! crashing leaders, a restarted API server, compaction, and external writers, with an
//! independent observer checking the engine's guarantees.

pub mod audit;
pub mod checker;
pub mod faults;
pub mod writers;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use kube::ResourceExt;
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_testkit::resources::*;

use checker::Observer;

/// The run's handlers (see `chaos_handler!`), for both kinds of the run.
/// Counts handler runs per object; each step may take a while (`delay`), and the steps under
/// way are kept per object with their replica, so that two replicas handling one object at
/// once are seen.
#[derive(Clone, Debug)]
pub struct ChaosHandler {
    /// Where cleanups are recorded.
    pub observer: Arc<Observer>,
    /// Handler runs per object UID.
    pub runs: Arc<Mutex<HashMap<String, u64>>>,
    /// All handler runs.
    pub total: Arc<AtomicU64>,
    /// How long each step takes.
    pub delay: std::time::Duration,
    /// The replica these handlers run in.
    pub replica: String,
    /// The steps under way: object UID → replica; and the overlaps found.
    pub active: Arc<Mutex<Active>>,
}

/// The steps under way, every time a second replica stepped an object while one did, and
/// every step's window.
#[derive(Debug, Default)]
pub struct Active {
    by_object: HashMap<String, String>,
    /// "object by A and B".
    pub overlaps: Vec<String>,
    /// Every step that ended (or was dropped with its killed replica), by wall clock, to
    /// hold the API server's record of writes against.
    pub windows: Vec<Window>,
}

/// One handler step of one object by one replica.
#[derive(Clone, Debug)]
pub struct Window {
    /// `namespace/name`.
    pub object: String,
    /// The replica's identity.
    pub replica: String,
    /// When the step began.
    pub start: SystemTime,
    /// When it ended.
    pub end: SystemTime,
    /// The object's shard label when the step began.
    pub label: Option<String>,
}

/// A step under way; leaves [`Active`] when dropped (also when a killed replica's step is).
struct Stepping {
    active: Arc<Mutex<Active>>,
    uid: String,
    object: String,
    replica: String,
    start: SystemTime,
    label: Option<String>,
}

impl Drop for Stepping {
    fn drop(&mut self) {
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        if active.by_object.get(&self.uid) == Some(&self.replica) {
            active.by_object.remove(&self.uid);
        }
        active.windows.push(Window {
            object: std::mem::take(&mut self.object),
            replica: self.replica.clone(),
            start: self.start,
            end: SystemTime::now(),
            label: self.label.take(),
        });
    }
}

impl ChaosHandler {
    /// Handlers recording into `observer`, each step taking `delay`.
    pub fn new(observer: Arc<Observer>, delay: std::time::Duration) -> Self {
        ChaosHandler {
            observer,
            runs: Arc::default(),
            total: Arc::default(),
            delay,
            replica: String::new(),
            active: Arc::default(),
        }
    }

    /// The same handlers (and records) in replica `identity`.
    #[must_use]
    pub fn in_replica(&self, identity: &str) -> Self {
        ChaosHandler {
            replica: identity.to_owned(),
            ..self.clone()
        }
    }

    async fn ran(&self, db: &impl kube::Resource) -> Stepping {
        self.total.fetch_add(1, Ordering::Relaxed);
        let uid = db.uid().unwrap_or_default();
        *self
            .runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(uid.clone())
            .or_default() += 1;
        {
            let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(other) = active.by_object.insert(uid.clone(), self.replica.clone())
                && other != self.replica
            {
                let overlap = format!("{} by {other} and {}", db.name_any(), self.replica);
                active.overlaps.push(overlap);
            }
        }
        let stepping = Stepping {
            active: self.active.clone(),
            uid,
            object: format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any()),
            replica: self.replica.clone(),
            start: SystemTime::now(),
            label: db.labels().get(audit::SHARD_LABEL).cloned(),
        };
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        stepping
    }
}

/// The run's handlers for a kind of the Database machine (`Database`, and `InlineDatabase`,
/// the same machine under another kind, run beside it by each replica's Manager): Pending
/// accepts, Provisioning and Degraded report both conditions True (so the rules lead to
/// Running), Running stays; `cleanup` is recorded.
macro_rules! chaos_handler {
    ($handler:ident for $kind:ident: $event:ident, $condition:ident,
     $pending:ident, $provisioning:ident, $running:ident, $degraded:ident) => {
        impl $handler for ChaosHandler {
            type Error = ConditionError;

            async fn on_pending(
                &self,
                object: &$kind,
                _: &mut Step<$kind>,
            ) -> Result<$pending, ConditionError> {
                let _stepping = self.ran(object).await;
                Ok($event::Accept.into())
            }

            async fn on_provisioning(
                &self,
                object: &$kind,
                step: &mut Step<$kind>,
            ) -> Result<$provisioning, ConditionError> {
                let _stepping = self.ran(object).await;
                both_conditions_true!(step, $condition);
                Ok(Next::Stay)
            }

            async fn on_running(
                &self,
                object: &$kind,
                _: &mut Step<$kind>,
            ) -> Result<$running, ConditionError> {
                let _stepping = self.ran(object).await;
                Ok(Next::Stay)
            }

            async fn on_degraded(
                &self,
                object: &$kind,
                step: &mut Step<$kind>,
            ) -> Result<$degraded, ConditionError> {
                let _stepping = self.ran(object).await;
                both_conditions_true!(step, $condition);
                Ok(Next::Stay)
            }

            async fn cleanup(
                &self,
                object: &$kind,
                _: &kube_fsm::Context,
            ) -> Result<Cleanup, ConditionError> {
                self.observer.cleaned(&object.uid().unwrap_or_default());
                Ok(Cleanup::Done)
            }
        }
    };
}

macro_rules! both_conditions_true {
    ($step:ident, $condition:ident) => {
        $step.set_condition($condition::PodsReady, true, "Up", "")?;
        $step.set_condition($condition::ServiceAvailable, true, "Answers", "")?;
    };
}

chaos_handler!(DatabaseHandler for Database: DatabasePendingEvent, DatabaseCondition,
    DatabasePendingNext, DatabaseProvisioningNext, DatabaseRunningNext, DatabaseDegradedNext);
chaos_handler!(InlineDatabaseHandler for InlineDatabase: InlineDatabasePendingEvent,
    InlineDatabaseCondition, InlineDatabasePendingNext, InlineDatabaseProvisioningNext,
    InlineDatabaseRunningNext, InlineDatabaseDegradedNext);
