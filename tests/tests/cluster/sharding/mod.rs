//! Sharding on the real API server: replicas split the shards through their Leases, each
//! reconciles only its shards' objects, never two replicas one object at once (also while
//! they rebalance), a killed replica's shards are taken over, and each object's shard label is
//! written once.
//!
//! The scenarios are in the submodules: `split` (replicas splitting the shards), `handover`
//! (shards changing hands across deployments) and `labels` (the shard label); the replicas'
//! handlers, their ledger and the helpers shared by the scenarios are here.

mod handover;
mod labels;
mod split;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_fsm::handler::ContextError;
use kube_fsm::machine::ConditionError;
use kube_fsm::replicas::Sharding;
use kube_fsm::{Cleanup, Step};
use kube_fsm_testkit::cluster::{eventually, phase_of};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

pub(super) const SHARDS: u32 = 6;
/// The shard label of the tests' sharding (`Sharding::new("fsm-shards", …)`).
pub(super) const LABEL: &str = "shard.kube-fsm.io/fsm-shards";

/// Who is reconciling which object right now, and who ever did; shared by the replicas of
/// one test (they run in one process).
#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) active: HashMap<String, &'static str>,
    pub(super) overlaps: Vec<String>,
    pub(super) by: HashMap<String, BTreeSet<&'static str>>,
    /// Replicas whose steps wait (their objects stay mid-way) until taken out.
    pub(super) stalled: BTreeSet<&'static str>,
    /// Running objects a replica reconciled without seeing their child in its cache.
    pub(super) child_unseen: Vec<String>,
}

/// The plain Database handlers of one replica, each step taking `delay` (so that overlapping
/// reconciles would be seen) and noted in the ledger.
#[derive(Clone)]
pub(super) struct Noted {
    pub(super) replica: &'static str,
    pub(super) ledger: Arc<Mutex<Ledger>>,
    pub(super) delay: Duration,
}

impl Noted {
    async fn around<T>(&self, db: &Database, step: impl Future<Output = T>) -> T {
        let uid = db.uid().unwrap_or_default();
        while self
            .ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stalled
            .contains(self.replica)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        {
            let mut ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(other) = ledger.active.insert(uid.clone(), self.replica) {
                let overlap = format!("{} by {other} and {}", db.name_any(), self.replica);
                ledger.overlaps.push(overlap);
            }
            ledger
                .by
                .entry(uid.clone())
                .or_default()
                .insert(self.replica);
        }
        // Leaves the ledger also when the step is dropped half-way (a killed replica).
        let _leave = Leave {
            ledger: self.ledger.clone(),
            uid,
        };
        tokio::time::sleep(self.delay).await;
        step.await
    }
}

/// Takes an object out of the ledger's reconciles in flight when dropped.
struct Leave {
    ledger: Arc<Mutex<Ledger>>,
    uid: String,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active
            .remove(&self.uid);
    }
}

/// A step's failure: a condition, or the child's apply.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotedError {
    #[error(transparent)]
    Condition(#[from] ConditionError),
    #[error(transparent)]
    Context(#[from] ContextError),
}

/// The child every Database gets in Provisioning.
fn child(db: &Database) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(db.name_any()),
            labels: Some([("app".to_owned(), CHILDREN.to_owned())].into()),
            ..ObjectMeta::default()
        },
        data: Some([("version".to_owned(), db.spec.version.clone())].into()),
        ..ConfigMap::default()
    }
}

pub(super) const CHILDREN: &str = "fsm-shards-test";

impl DatabaseHandler for Noted {
    type Error = NotedError;

    async fn on_pending(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, NotedError> {
        Ok(self.around(db, Databases.on_pending(db, step)).await?)
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, NotedError> {
        self.around(db, async {
            step.apply(child(db)).await?;
            Ok(Databases.on_provisioning(db, step).await?)
        })
        .await
    }

    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, NotedError> {
        // Every Running object has its child (applied in Provisioning): a replica that does
        // not see it reads a cache that has not listed the object's shard yet.
        let seen = step.child::<ConfigMap>(&db.name_any())?.is_some();
        if !seen {
            let unseen = format!("{} by {}", db.name_any(), self.replica);
            self.ledger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .child_unseen
                .push(unseen);
        }
        Ok(self.around(db, Databases.on_running(db, step)).await?)
    }

    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, NotedError> {
        Ok(Databases.on_degraded(db, step).await?)
    }

    async fn cleanup(
        &self,
        db: &Database,
        context: &kube_fsm::Context,
    ) -> Result<Cleanup, NotedError> {
        Ok(Databases.cleanup(db, context).await?)
    }
}

/// One replica: an operator with `sharding` as `replica`, its metrics and its run; each step
/// takes 30 ms.
pub(super) fn replica(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
) -> (Running, Recorded) {
    slow_replica(client, ns, replica, ledger, Duration::from_millis(30))
}

/// One replica whose steps take `delay` each.
pub(super) fn slow_replica(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
    delay: Duration,
) -> (Running, Recorded) {
    replica_of(client, ns, replica, ledger, delay, SHARDS)
}

/// One replica of `shards` shards whose steps take `delay` each.
pub(super) fn replica_of(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
    delay: Duration,
    shards: u32,
) -> (Running, Recorded) {
    let sharding = Sharding::new("fsm-shards", ns, shards)
        .identity(replica)
        .duration(Duration::from_secs(4));
    replica_with(client, ns, replica, ledger, delay, sharding)
}

/// One replica sharded by `sharding` whose steps take `delay` each.
pub(super) fn replica_with(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
    delay: Duration,
    sharding: Sharding,
) -> (Running, Recorded) {
    let recorded = Recorded::default();
    let handler = Noted {
        replica,
        ledger: ledger.clone(),
        delay,
    };
    // Lists in pages of 2: a new shard's objects arrive over many requests, as thousands do;
    // the children in pages of 1, so that their list ends after the objects' one.
    let operator = operator::in_namespace::<Database, _>(client, ns, handler)
        .watcher_config(watcher::Config::default().page_size(2))
        .owns::<ConfigMap>(
            watcher::Config::default()
                .labels(&format!("app={CHILDREN}"))
                .page_size(1),
        )
        .replicas(sharding)
        .metrics(recorded.metrics());
    (Running::spawn(operator), recorded)
}

/// Waits until every object of `api` (there are `count`) is Running at its generation.
pub(super) async fn all_running(api: &Api<Database>, count: usize) -> Vec<Database> {
    eventually(Duration::from_secs(60), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let done = list.items.len() == count
            && list.items.iter().all(|db| {
                phase_of(db).as_deref() == Some("Running")
                    && db
                        .status
                        .as_ref()
                        .and_then(|s| s.machine.observed_generation)
                        == db.metadata.generation
            });
        done.then_some(list.items)
    })
    .await
    .expect("every object reached Running at its generation")
}

/// Every object carries the label of its shard (the FNV-1a hash of its UID), and so does its
/// child, so that only the replica holding the shard watches it.
pub(super) async fn assert_labelled(client: &kube::Client, objects: &[Database]) {
    for db in objects {
        let expected = kube_fsm::replicas::shard_of(&db.uid().unwrap_or_default(), SHARDS);
        assert_eq!(
            db.labels().get(LABEL),
            Some(&expected.to_string()),
            "{}",
            db.name_any()
        );
        let children: Api<ConfigMap> =
            Api::namespaced(client.clone(), &db.namespace().unwrap_or_default());
        let child = children.get(&db.name_any()).await.expect("the child");
        assert_eq!(
            child.labels().get(LABEL),
            Some(&expected.to_string()),
            "child of {}",
            db.name_any()
        );
    }
}

/// Changes the spec of every object of `api` (a new generation each, so a reconcile each).
pub(super) async fn change_every_spec(api: &Api<Database>) {
    for db in api.list(&ListParams::default()).await.expect("list") {
        api.patch(
            &db.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "version": "17" } })),
        )
        .await
        .expect("spec change");
    }
}

pub(super) async fn create(api: &Api<Database>, prefix: &str, count: usize) {
    for i in 0..count {
        api.create(&PostParams::default(), &sample(&format!("{prefix}-{i}")))
            .await
            .expect("create");
    }
}
