//! An independent watch of a kind's objects: every phase each object is seen in, in order, as
//! the API server's watch delivers them — what a test judges moves by, rather than the
//! engine's own counters (which count what the engine believes it wrote).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

/// The phases seen per object name; stops watching when dropped.
#[derive(Debug)]
pub struct Phases {
    seen: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Phases {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Phases {
    /// Starts watching `api`'s objects (of `K`) now; each object's phases are recorded as it
    /// changes (repeats of the same phase once).
    #[must_use]
    pub fn watch<K>(api: Api<K>) -> Self
    where
        K: kube_fsm::StateMachine
            + kube::Resource
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + 'static,
    {
        let seen: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
        let recording = seen.clone();
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default()).applied_objects();
            futures::pin_mut!(stream);
            while let Some(event) = stream.next().await {
                let Ok(object) = event else { continue };
                let Some(phase) = crate::cluster::phase_of(&object) else {
                    continue;
                };
                let mut seen = recording.lock().unwrap_or_else(PoisonError::into_inner);
                let phases = seen.entry(object.name_any()).or_default();
                if phases.last() != Some(&phase) {
                    phases.push(phase);
                }
            }
        });
        Phases { seen, task }
    }

    /// Every object seen and its phases, in order.
    #[must_use]
    pub fn seen(&self) -> BTreeMap<String, Vec<String>> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
