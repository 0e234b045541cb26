//! The harness's own watch of the Databases of one namespace, untyped (`DynamicObject`, so
//! the bench does not compile the example): which objects exist, their stored status, and how
//! many times a stored status changed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kube_fsm_testkit::cluster;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::example::BoxError;

/// What the watch has seen so far.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Objects present, by name: their last stored status (`Null` before the first write).
    pub objects: BTreeMap<String, Value>,
    /// Status changes observed: each is a stored status that differs from the previous one.
    pub status_changes: u64,
}

impl Snapshot {
    /// How many objects are in `phase`.
    #[must_use]
    pub fn count(&self, phase: &str) -> usize {
        self.objects
            .values()
            .filter(|status| status["phase"] == phase)
            .count()
    }

    /// Objects per phase, e.g. `Provisioning 3, Running 197`.
    #[must_use]
    pub fn summary(&self) -> String {
        let mut by_phase: BTreeMap<&str, usize> = BTreeMap::new();
        for status in self.objects.values() {
            *by_phase
                .entry(status["phase"].as_str().unwrap_or("(no status)"))
                .or_default() += 1;
        }
        if by_phase.is_empty() {
            return "no objects".into();
        }
        by_phase
            .iter()
            .map(|(phase, n)| format!("{phase} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Applies one event of the watch.
    fn apply(
        &mut self,
        listed: &mut Option<BTreeSet<String>>,
        event: watcher::Event<DynamicObject>,
    ) {
        match event {
            watcher::Event::Init => *listed = Some(BTreeSet::new()),
            watcher::Event::InitApply(object) => {
                if let Some(listed) = listed {
                    listed.insert(object.name_any());
                }
                self.observe(&object);
            }
            watcher::Event::InitDone => {
                // A relist: objects deleted meanwhile are gone.
                if let Some(listed) = listed.take() {
                    self.objects.retain(|name, _| listed.contains(name));
                }
            }
            watcher::Event::Apply(object) => self.observe(&object),
            watcher::Event::Delete(object) => {
                self.objects.remove(&object.name_any());
            }
        }
    }

    fn observe(&mut self, object: &DynamicObject) {
        let status = object.data.get("status").cloned().unwrap_or(Value::Null);
        match self.objects.insert(object.name_any(), status.clone()) {
            Some(previous) if previous != status => self.status_changes += 1,
            _ => {}
        }
    }
}

/// A running watch: its snapshots, and the task feeding them.
#[derive(Debug)]
pub struct Databases {
    /// The latest snapshot.
    pub snapshots: watch::Receiver<Snapshot>,
    task: JoinHandle<()>,
}

impl Databases {
    /// Starts watching the example's Databases in `namespace`.
    #[must_use]
    pub fn start(client: &Client, namespace: &str) -> Self {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &cluster::example_databases());
        let (tx, snapshots) = watch::channel(Snapshot::default());
        let task = tokio::spawn(async move {
            let mut listed = None;
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => tx.send_modify(|snapshot| snapshot.apply(&mut listed, event)),
                    Err(err) => {
                        eprintln!("api-economy: the watch of Databases failed ({err}); retrying")
                    }
                }
            }
        });
        Databases { snapshots, task }
    }

    /// The latest snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        self.snapshots.borrow().clone()
    }

    /// Waits up to `timeout` until `done` holds for a snapshot.
    ///
    /// # Errors
    /// On the timeout (naming `what` and where the objects are) or when the watch ended.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        done: impl FnMut(&Snapshot) -> bool,
    ) -> Result<(), BoxError> {
        let mut snapshots = self.snapshots.clone();
        match tokio::time::timeout(timeout, snapshots.wait_for(done)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err("the watch of Databases ended".into()),
            Err(_) => Err(format!(
                "timed out after {timeout:?} waiting for {what}: {}",
                self.snapshot().summary()
            )
            .into()),
        }
    }

    /// Stops watching.
    pub fn stop(self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn database(name: &str, status: Option<Value>) -> DynamicObject {
        let mut object = DynamicObject::new(name, &cluster::example_databases());
        object.data = match status {
            Some(status) => json!({ "spec": {}, "status": status }),
            None => json!({ "spec": {} }),
        };
        object
    }

    #[test]
    fn counts_status_changes_and_phases() {
        let mut snapshot = Snapshot::default();
        let mut listed = None;
        let provisioning = json!({ "phase": "Provisioning" });
        let running = json!({ "phase": "Running", "endpoint": "a" });
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(database("a", None)),
            watcher::Event::InitApply(database("gone", None)),
            watcher::Event::InitDone,
            watcher::Event::Apply(database("a", Some(provisioning.clone()))),
            watcher::Event::Apply(database("a", Some(provisioning))),
            watcher::Event::Apply(database("a", Some(running.clone()))),
            watcher::Event::Apply(database("b", Some(running))),
        ] {
            snapshot.apply(&mut listed, event);
        }
        assert_eq!(
            snapshot.status_changes, 2,
            "first status, then Running; a repeat is none"
        );
        assert_eq!(snapshot.count("Running"), 2);
        assert_eq!(snapshot.summary(), "(no status) 1, Running 2");
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(database("b", None)),
            watcher::Event::InitDone,
        ] {
            snapshot.apply(&mut listed, event);
        }
        assert_eq!(
            snapshot.objects.len(),
            1,
            "a relist drops what it did not list"
        );
        snapshot.apply(&mut listed, watcher::Event::Delete(database("b", None)));
        assert_eq!(snapshot.summary(), "no objects");
    }
}
