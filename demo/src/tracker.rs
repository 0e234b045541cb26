//! Watches the Databases of a namespace from the outside, as a user would: prints each phase
//! transition as it happens (and what `PodsReady` says of the replicas), and counts the
//! distinct statuses the API server stored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use kube_fsm_examples::database::{Database, DatabasePhase, DatabaseStatus};

/// What the tracker has seen so far.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Objects present, by name: their last status (`None` before the first status write).
    pub objects: BTreeMap<String, Option<DatabaseStatus>>,
    /// Status changes observed (each is one stored status write that changed something).
    pub status_changes: u64,
    /// Phase changes observed.
    pub transitions: u64,
    /// Objects seen deleted.
    pub deleted: u64,
    /// Whether the watch's first list is done: what happens after it is seen as it happens.
    pub listed: bool,
}

impl Snapshot {
    /// How many objects are in `phase`.
    pub fn count(&self, phase: DatabasePhase) -> usize {
        self.objects
            .values()
            .filter(|s| phase_of(s.as_ref()) == Some(phase))
            .count()
    }

    /// Objects per phase, e.g. `Provisioning 3, Running 197`.
    pub fn summary(&self) -> String {
        let mut by_phase: BTreeMap<String, usize> = BTreeMap::new();
        for status in self.objects.values() {
            let name = status
                .as_ref()
                .and_then(|s| s.machine.phase.as_ref())
                .map_or_else(|| "(no status)".to_owned(), ToString::to_string);
            *by_phase.entry(name).or_default() += 1;
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
}

fn phase_of(status: Option<&DatabaseStatus>) -> Option<DatabasePhase> {
    status.and_then(|s| s.machine.phase())
}

fn phase_text(status: Option<&DatabaseStatus>) -> Option<String> {
    status.and_then(|s| s.machine.phase.as_ref().map(ToString::to_string))
}

/// A running tracker: its snapshots, and the task feeding them.
#[derive(Debug)]
pub struct Tracker {
    /// The latest snapshot; `wait_for` on it to block until a condition holds.
    pub snapshots: watch::Receiver<Snapshot>,
    task: JoinHandle<()>,
}

impl Tracker {
    /// Starts watching the Databases of `namespace`; with `print`, each transition is printed
    /// with the time since `start`.
    pub fn start(client: &Client, namespace: &str, print: bool, start: Instant) -> Self {
        let api: Api<Database> = Api::namespaced(client.clone(), namespace);
        let (tx, snapshots) = watch::channel(Snapshot::default());
        let task = tokio::spawn(async move {
            let mut state = State {
                print,
                start,
                listed: None,
            };
            let mut events = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => tx.send_modify(|snapshot| state.apply(snapshot, event)),
                    Err(err) => tracing::warn!(%err, "watch of Databases failed; retrying"),
                }
            }
        });
        Tracker { snapshots, task }
    }

    /// Waits until the watch's first list is done, so that objects created afterwards are
    /// seen from their creation on (created before it, a fast operator's objects are listed
    /// already converged: "found in Running", no transition seen).
    pub async fn listed(&self) {
        let mut snapshots = self.snapshots.clone();
        let _ = snapshots.wait_for(|s| s.listed).await;
    }

    /// The latest snapshot.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshots.borrow().clone()
    }

    /// Stops watching.
    pub fn stop(self) {
        self.task.abort();
    }
}

struct State {
    print: bool,
    start: Instant,
    /// Names listed since the last `Init` (a relist), to drop objects deleted meanwhile.
    listed: Option<BTreeSet<String>>,
}

impl State {
    fn say(&self, line: &str) {
        if self.print {
            println!("[{:7.3}s] {line}", self.start.elapsed().as_secs_f64());
        }
    }

    fn apply(&mut self, snapshot: &mut Snapshot, event: watcher::Event<Database>) {
        match event {
            watcher::Event::Init => self.listed = Some(BTreeSet::new()),
            watcher::Event::InitApply(db) => {
                if let Some(listed) = &mut self.listed {
                    listed.insert(db.name_any());
                }
                self.observe(snapshot, db);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listed.take() {
                    snapshot.objects.retain(|name, _| listed.contains(name));
                }
                snapshot.listed = true;
            }
            watcher::Event::Apply(db) => self.observe(snapshot, db),
            watcher::Event::Delete(db) => {
                if snapshot.objects.remove(&db.name_any()).is_some() {
                    snapshot.deleted += 1;
                    self.say(&format!("{}: deleted", db.name_any()));
                }
            }
        }
    }

    fn observe(&self, snapshot: &mut Snapshot, db: Database) {
        let name = db.name_any();
        let status = db.status;
        let Some(previous) = snapshot.objects.get(&name) else {
            match phase_text(status.as_ref()) {
                // No status yet: the engine treats it as the initial phase.
                None => self.say(&format!("{name}: created ({})", DatabasePhase::INITIAL)),
                Some(phase) => self.say(&format!("{name}: found in {phase}")),
            }
            snapshot.objects.insert(name, status);
            return;
        };
        if *previous == status {
            return;
        }
        snapshot.status_changes += 1;
        let pods = |status: Option<&DatabaseStatus>| {
            status
                .and_then(|s| s.machine.condition("PodsReady"))
                .map(|c| c.message.clone())
        };
        if let Some(message) = pods(status.as_ref())
            && pods(previous.as_ref()).as_ref() != Some(&message)
        {
            self.say(&format!("{name}: {message}"));
        }
        let (before, after) = (phase_text(previous.as_ref()), phase_text(status.as_ref()));
        if before != after {
            snapshot.transitions += 1;
            let before = before.unwrap_or_else(|| DatabasePhase::INITIAL.to_string());
            let after = after.unwrap_or_else(|| "(no phase)".into());
            self.say(&format!("{name}: {before} → {after}"));
        }
        snapshot.objects.insert(name, status);
    }
}
