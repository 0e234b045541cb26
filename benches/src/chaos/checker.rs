//! The independent observer of a chaos run: a watch without faults of every stored version of
//! the run's objects. It attributes each phase change to its writer (the field manager owning
//! `status.phase` in that version) and counts every operator move that is not an edge, every
//! finalizer removed before `cleanup` said Done, and the versions it could not see (a relist).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use kube_fsm::Phase;
use kube_fsm::StateMachine;
use kube_fsm::machine::PhaseValue;
use kube_fsm_testkit::resources::DatabasePhase;
use serde::de::DeserializeOwned;

/// The counts the run reports.
#[derive(Debug, Default, Clone)]
pub struct Findings {
    /// Phase changes written by the operator.
    pub operator_moves: u64,
    /// ... of which were not an edge of the spec (must be 0).
    pub illegal_operator_moves: u64,
    /// Phase changes written by anyone else (the external writers).
    pub other_moves: u64,
    /// ... of which were not an edge of the spec (0 where the admission webhook runs).
    pub illegal_other_moves: u64,
    /// Finalizers removed without a recorded Done from `cleanup` (must be 0).
    pub finalizer_before_cleanup: u64,
    /// Relists of the observer's own watch: moves across one are not judged.
    pub relists: u64,
    /// Examples of violations, for the report.
    pub examples: Vec<String>,
}

#[derive(Debug)]
struct Seen {
    phase: Option<String>,
    had_finalizer: bool,
}

/// Shared state: what the observer saw, and which objects `cleanup` finished.
#[derive(Debug, Default)]
pub struct Observer {
    seen: Mutex<HashMap<String, Seen>>,
    findings: Mutex<Findings>,
    cleaned: Mutex<HashSet<String>>,
}

/// The manager owning `status.phase` in this version.
fn phase_writer(object: &impl Resource) -> Option<String> {
    object.managed_fields().iter().find_map(|entry| {
        let fields = &entry.fields_v1.as_ref()?.0;
        fields.get("f:status")?.get("f:phase")?;
        entry.manager.clone()
    })
}

/// Whether `from` → `to` is a move `K`'s machine allows.
fn legal<K: StateMachine>(from: Option<&str>, to: &str) -> bool {
    let to = PhaseValue::<K::Phase>::parse(to);
    let PhaseValue::Known(to) = to else {
        return false;
    };
    let from = from.map(PhaseValue::<K::Phase>::parse);
    kube_fsm::testing::is_legal(from.as_ref(), to)
}

impl Observer {
    /// Records that `cleanup` returned Done for the object `uid`.
    pub fn cleaned(&self, uid: &str) {
        self.cleaned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(uid.to_owned());
    }

    /// What was found so far.
    pub fn findings(&self) -> Findings {
        self.findings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn violation(findings: &mut Findings, text: String) {
        if findings.examples.len() < 10 {
            findings.examples.push(text);
        }
    }

    fn observe<K: StateMachine + Resource>(&self, db: &K, operator: &str, deleted: bool) {
        let uid = db.uid().unwrap_or_default();
        let phase = db
            .machine_status()
            .and_then(|s| s.phase.as_ref())
            .map(|p| p.as_str().to_owned());
        let has_finalizer = !db.finalizers().is_empty();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let mut findings = self.findings.lock().unwrap_or_else(PoisonError::into_inner);
        let previous = seen.get(&uid);
        if let Some(prev) = previous
            && prev.had_finalizer
            && (!has_finalizer || deleted)
            && db.meta().deletion_timestamp.is_some()
            && !self
                .cleaned
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&uid)
        {
            findings.finalizer_before_cleanup += 1;
            Self::violation(
                &mut findings,
                format!("{}: finalizer removed before cleanup", db.name_any()),
            );
        }
        // Only a change between two versions seen in a row is a move: the first sight of an
        // object (its creation, or any version after a relist) is not judged, since versions
        // in between were not seen. The run's objects are created without a status, so every
        // first phase write is seen as a change.
        if let Some(prev) = previous
            && prev.phase != phase
            && let Some(to) = &phase
        {
            let from = prev.phase.clone();
            if phase_writer(db).as_deref() == Some(operator) {
                findings.operator_moves += 1;
                if !legal::<K>(from.as_deref(), to) {
                    findings.illegal_operator_moves += 1;
                    Self::violation(
                        &mut findings,
                        format!("{}: the operator wrote {from:?} -> {to}", db.name_any()),
                    );
                }
            } else {
                findings.other_moves += 1;
                if !legal::<K>(from.as_deref(), to) {
                    findings.illegal_other_moves += 1;
                }
            }
        }
        if deleted {
            seen.remove(&uid);
        } else {
            seen.insert(
                uid,
                Seen {
                    phase,
                    had_finalizer: has_finalizer,
                },
            );
        }
    }

    /// Watches `api` until the task is dropped, judging every version it sees.
    pub async fn run<K>(self: Arc<Self>, api: Api<K>, config: watcher::Config, operator: String)
    where
        K: StateMachine + Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(db) | watcher::Event::InitApply(db)) => {
                    self.observe(&db, &operator, false);
                }
                Ok(watcher::Event::Delete(db)) => self.observe(&db, &operator, true),
                Ok(watcher::Event::Init) => {
                    self.findings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .relists += 1;
                    // Versions were missed: judge the next move of each object from scratch.
                    self.seen
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clear();
                }
                Ok(watcher::Event::InitDone) => {}
                Err(err) => {
                    tracing::debug!(%err, "observer watch error");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// Whether `phase` is a declared phase of the run's machine.
pub fn declared(phase: &str) -> bool {
    DatabasePhase::ALL.iter().any(|p| p.name() == phase)
}
