//! Sharding on the real API server: replicas split the shards through their Leases, each
//! reconciles only its shards' objects, never two replicas one object at once (also while
//! they rebalance), a killed replica's shards are taken over, and each object's shard label is
//! written once.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_fsm::controller::Sharding;
use kube_fsm::handler::ConditionError;
use kube_fsm::handler::ContextError;
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, phase_of};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

const SHARDS: u32 = 6;
/// The shard label of the tests' sharding (`Sharding::new("fsm-shards", …)`).
const LABEL: &str = "shard.kube-fsm.io/fsm-shards";

/// Who is reconciling which object right now, and who ever did; shared by the replicas of
/// one test (they run in one process).
#[derive(Debug, Default)]
struct Ledger {
    active: HashMap<String, &'static str>,
    overlaps: Vec<String>,
    by: HashMap<String, BTreeSet<&'static str>>,
    /// Replicas whose steps wait (their objects stay mid-way) until taken out.
    stalled: BTreeSet<&'static str>,
    /// Running objects a replica reconciled without seeing their child in its cache.
    child_unseen: Vec<String>,
}

/// The plain Database handlers of one replica, each step taking `delay` (so that overlapping
/// reconciles would be seen) and noted in the ledger.
#[derive(Clone)]
struct Noted {
    replica: &'static str,
    ledger: Arc<Mutex<Ledger>>,
    delay: Duration,
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
enum NotedError {
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

const CHILDREN: &str = "fsm-shards-test";

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
fn replica(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
) -> (Running, Recorded) {
    slow_replica(client, ns, replica, ledger, Duration::from_millis(30))
}

/// One replica whose steps take `delay` each.
fn slow_replica(
    client: &kube::Client,
    ns: &str,
    replica: &'static str,
    ledger: &Arc<Mutex<Ledger>>,
    delay: Duration,
) -> (Running, Recorded) {
    replica_of(client, ns, replica, ledger, delay, SHARDS)
}

/// One replica of `shards` shards whose steps take `delay` each.
fn replica_of(
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
fn replica_with(
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

fn held(recorded: &Recorded) -> f64 {
    recorded.sum("kube_fsm_shards_held", &[("machine", "Database")])
}

fn labels_written(recorded: &Recorded) -> f64 {
    recorded.sum(
        "kube_fsm_shard_labels_written_total",
        &[("machine", "Database")],
    )
}

/// Waits until every object of `api` (there are `count`) is Running at its generation.
async fn all_running(api: &Api<Database>, count: usize) -> Vec<Database> {
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
async fn assert_labelled(client: &kube::Client, objects: &[Database]) {
    for db in objects {
        let expected = kube_fsm::controller::shard_of(&db.uid().unwrap_or_default(), SHARDS);
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
async fn change_every_spec(api: &Api<Database>) {
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

async fn create(api: &Api<Database>, prefix: &str, count: usize) {
    for i in 0..count {
        api.create(&PostParams::default(), &sample(&format!("{prefix}-{i}")))
            .await
            .expect("create");
    }
}

#[tokio::test]
async fn two_replicas_split_the_shards_and_never_reconcile_one_object_at_once() {
    let Some((client, ns)) = cluster::prepare(
        "two_replicas_split_the_shards_and_never_reconcile_one_object_at_once",
        "fsm-shards",
    )
    .await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, a_metrics) = replica(&client, &ns, "replica-a", &ledger);
    create(&api, "first", 30).await;
    eventually(Duration::from_secs(20), || async {
        (held(&a_metrics) == f64::from(SHARDS)).then_some(())
    })
    .await
    .expect("a lone replica holds every shard");
    // The second replica joins while objects are mid-way: the shards are rebalanced under load.
    let (b, b_metrics) = replica(&client, &ns, "replica-b", &ledger);
    create(&api, "second", 30).await;
    eventually(Duration::from_secs(30), || async {
        (held(&a_metrics) == 3.0 && held(&b_metrics) == 3.0).then_some(())
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the shards split 3 + 3, not {} + {}",
            held(&a_metrics),
            held(&b_metrics)
        )
    });
    // A spec change of every object: a reconcile each, on whichever replica holds it.
    change_every_spec(&api).await;
    let objects = all_running(&api, 60).await;
    {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(ledger.overlaps.is_empty(), "{:?}", ledger.overlaps);
        let b_objects = ledger
            .by
            .values()
            .filter(|r| r.contains("replica-b"))
            .count();
        eprintln!("replica-b reconciled {b_objects} of 60 objects");
        assert!(b_objects > 0, "the second replica took on work");
    }
    assert_labelled(&client, &objects).await;
    let written = labels_written(&a_metrics) + labels_written(&b_metrics);
    assert_eq!(written, 60.0, "one label write per object");

    // B leaves gracefully: A takes its shards back at once (released, not expired) and
    // relabels nothing.
    b.stop().await;
    eventually(Duration::from_secs(10), || async {
        (held(&a_metrics) == f64::from(SHARDS)).then_some(())
    })
    .await
    .expect("the remaining replica holds every shard again");
    create(&api, "third", 5).await;
    let objects = all_running(&api, 65).await;
    assert_labelled(&client, &objects).await;
    assert_eq!(
        labels_written(&a_metrics) + labels_written(&b_metrics),
        65.0,
        "no object labelled twice"
    );
    {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(ledger.overlaps.is_empty(), "{:?}", ledger.overlaps);
    }
    a.stop().await;
}

#[tokio::test]
async fn a_killed_replicas_shards_are_taken_over_within_the_lease_duration() {
    let Some((client, ns)) =
        cluster::prepare("a_killed_replicas_shards_are_taken_over", "fsm-shards-kill").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, a_metrics) = replica(&client, &ns, "replica-a", &ledger);
    let (b, b_metrics) = replica(&client, &ns, "replica-b", &ledger);
    eventually(Duration::from_secs(30), || async {
        (held(&a_metrics) == 3.0 && held(&b_metrics) == 3.0).then_some(())
    })
    .await
    .expect("the shards split 3 + 3");
    create(&api, "before", 10).await;
    all_running(&api, 10).await;
    // A's steps stall: the objects created now that fall into its shards stay mid-way in it
    // (listed, labelled, not Running) when it dies. B must pick them up from its new watch's
    // list: nothing else will ever trigger them.
    ledger
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .stalled
        .insert("replica-a");
    create(&api, "stranded", 20).await;
    eventually(Duration::from_secs(20), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|db| db.labels().contains_key(LABEL))
            .then_some(())
    })
    .await
    .expect("every object labelled");
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A dies without releasing anything; objects created now fall into its shards too (and
    // whoever holds shard 0 labels them).
    a.crash().await;
    let killed = std::time::Instant::now();
    create(&api, "after", 20).await;
    let taken = eventually(Duration::from_secs(30), || async {
        (held(&b_metrics) == f64::from(SHARDS)).then(|| killed.elapsed())
    })
    .await
    .expect("B takes every shard");
    // The promise: A's shard Leases and its membership expire their duration (4 s) after A's
    // last renewal, on B's clock; B sees that within one of its rounds (the retry period, 0.8 s
    // for a 4 s duration, jittered by up to 20 %) and acquires in the next. 1 s of slack for
    // the requests of those rounds on a loaded test machine.
    let round = Duration::from_millis(960);
    let limit = Duration::from_secs(4) + 2 * round + Duration::from_secs(1);
    assert!(
        taken <= limit,
        "B held every shard {taken:?} after the kill; at most {limit:?}"
    );
    let objects = all_running(&api, 50).await;
    let took = killed.elapsed();
    eprintln!(
        "B held every shard {taken:?} and all 50 were Running {took:?} after the kill (Lease duration 4 s)"
    );
    assert_eq!(held(&b_metrics), f64::from(SHARDS), "B holds every shard");
    assert_labelled(&client, &objects).await;
    let after_by_a = {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(ledger.overlaps.is_empty(), "{:?}", ledger.overlaps);
        assert!(ledger.child_unseen.is_empty(), "{:?}", ledger.child_unseen);
        objects
            .iter()
            .filter(|db| db.name_any().starts_with("after"))
            .filter(|db| {
                ledger
                    .by
                    .get(&db.uid().unwrap_or_default())
                    .is_some_and(|r| r.contains("replica-a"))
            })
            .count()
    };
    assert_eq!(after_by_a, 0, "the killed replica reconciled nothing more");
    b.stop().await;
}

#[tokio::test]
async fn a_shard_given_up_mid_handler_is_not_handled_by_two_replicas() {
    let Some((client, ns)) =
        cluster::prepare("a_shard_given_up_mid_handler", "fsm-shards-slow").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // Steps of 3 s, far longer than the grace a shard given up leaves its reconciles (half of
    // the Lease duration's 4 s minus the renew deadline's 2.7 s: 0.7 s).
    let slow = Duration::from_secs(3);
    let (a, a_metrics) = slow_replica(&client, &ns, "replica-a", &ledger, slow);
    eventually(Duration::from_secs(20), || async {
        (held(&a_metrics) == f64::from(SHARDS)).then_some(())
    })
    .await
    .expect("a lone replica holds every shard");
    create(&api, "slow", 24).await;
    // A's steps are under way on every object when B joins and A gives half the shards up.
    eventually(Duration::from_secs(20), || async {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        (ledger.active.len() >= 20).then_some(())
    })
    .await
    .expect("A's steps under way");
    let (b, b_metrics) = slow_replica(&client, &ns, "replica-b", &ledger, slow);
    eventually(Duration::from_secs(30), || async {
        (held(&a_metrics) == 3.0 && held(&b_metrics) == 3.0).then_some(())
    })
    .await
    .expect("the shards split 3 + 3");
    let objects = all_running(&api, 24).await;
    assert_labelled(&client, &objects).await;
    {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        // A step of A still running when B started one on the same object: A released the
        // shard with its reconcile in flight.
        assert!(ledger.overlaps.is_empty(), "{:?}", ledger.overlaps);
        assert!(ledger.child_unseen.is_empty(), "{:?}", ledger.child_unseen);
        let by_both = ledger.by.values().filter(|r| r.len() == 2).count();
        eprintln!("{by_both} of 24 objects were handed over mid-way");
        assert!(by_both > 0, "some objects moved from A to B mid-way");
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_slow_give_up_does_not_hold_back_the_renewal_of_the_shards_kept() {
    let Some((client, ns)) = cluster::prepare("a_slow_give_up", "fsm-shards-drain").await else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // A 1.6 s renew deadline: a shard given up waits (4 s - 1.6 s) / 2 = 1.2 s for its
    // reconciles, then up to as long again once they are cancelled. Drained inside the Lease
    // loop, that held the kept shards' renewal (every 0.8 s) past their deadline.
    let timed = |replica: &str| {
        Sharding::new("fsm-shards", &ns, SHARDS)
            .identity(replica)
            .duration(Duration::from_secs(4))
            .renew_deadline(Duration::from_millis(1600))
    };
    let slow = Duration::from_secs(5);
    let (a, a_metrics) = replica_with(&client, &ns, "replica-a", &ledger, slow, timed("replica-a"));
    eventually(Duration::from_secs(20), || async {
        (held(&a_metrics) == f64::from(SHARDS)).then_some(())
    })
    .await
    .expect("a lone replica holds every shard");
    create(&api, "drain", 24).await;
    eventually(Duration::from_secs(20), || async {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        (ledger.active.len() >= 20).then_some(())
    })
    .await
    .expect("A's steps under way");
    // B joins: A gives half its shards up while their reconciles are in flight, and must keep
    // serving the other half all along.
    let (b, b_metrics) = replica_with(&client, &ns, "replica-b", &ledger, slow, timed("replica-b"));
    let mut lowest = held(&a_metrics);
    let mut split_at = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while tokio::time::Instant::now() < deadline {
        lowest = lowest.min(held(&a_metrics));
        if split_at.is_none() && held(&a_metrics) == 3.0 && held(&b_metrics) == 3.0 {
            split_at = Some(tokio::time::Instant::now());
        }
        // Several renewal rounds after the split, too.
        if split_at.is_some_and(|at| at.elapsed() > Duration::from_secs(4)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.stop().await;
    b.stop().await;
    assert!(split_at.is_some(), "the shards split 3 + 3 within 40 s");
    assert_eq!(
        lowest, 3.0,
        "A kept serving the 3 shards it keeps while giving up the others"
    );
}

/// Relay handlers: replica A takes objects from First to Second only, replica B from Second to
/// the end; each stays otherwise, looking again soon.
#[derive(Clone)]
struct Relays {
    takes_to_the_end: bool,
}

impl RelayHandler for Relays {
    type Error = std::convert::Infallible;

    async fn on_first(
        &self,
        _: &Relay,
        _: &mut Step<Relay>,
    ) -> Result<RelayFirstNext, Self::Error> {
        Ok(RelayFirstEvent::Go.into())
    }

    async fn on_second(
        &self,
        _: &Relay,
        step: &mut Step<Relay>,
    ) -> Result<RelaySecondNext, Self::Error> {
        if self.takes_to_the_end {
            return Ok(RelaySecondEvent::Go.into());
        }
        step.requeue_after(Duration::from_millis(300));
        Ok(Next::Stay)
    }

    async fn on_third(
        &self,
        _: &Relay,
        _: &mut Step<Relay>,
    ) -> Result<RelayThirdNext, Self::Error> {
        Ok(RelayThirdEvent::Go.into())
    }
}

/// Every phase each Relay was seen in, in order, by name.
type History = Arc<Mutex<HashMap<String, Vec<String>>>>;

/// Every phase each Relay of `api` was seen in, by a watch of its own.
fn phase_history(api: &Api<Relay>) -> (History, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let seen = Arc::new(Mutex::new(HashMap::<String, Vec<String>>::new()));
    let events = watcher(api.clone(), watcher::Config::default()).applied_objects();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        tokio::pin!(events);
        while let Some(relay) = events.next().await {
            let Ok(relay) = relay else { continue };
            let Some(phase) = phase_of(&relay) else {
                continue;
            };
            let mut seen = record.lock().unwrap_or_else(PoisonError::into_inner);
            let history = seen.entry(relay.name_any()).or_default();
            if history.last() != Some(&phase) {
                history.push(phase);
            }
        }
    });
    (seen, task)
}

#[tokio::test]
async fn a_shard_handed_over_and_back_writes_no_backward_move_under_drift_revert() {
    let Some((client, ns)) =
        cluster::prepare("a_shard_handed_over_and_back", "fsm-shards-back").await
    else {
        return;
    };
    // Relay's CRD has no CEL rules: a backward write would land.
    let api: Api<Relay> = Api::namespaced(client.clone(), &ns);
    let (history, watching) = phase_history(&api);
    let spawn = |identity: &'static str, takes_to_the_end: bool| {
        let recorded = Recorded::default();
        let sharding = Sharding::new("fsm-relays", &ns, 2)
            .identity(identity)
            .duration(Duration::from_secs(4));
        let operator =
            operator::in_namespace::<Relay, _>(&client, &ns, Relays { takes_to_the_end })
                .replicas(sharding)
                .metrics(recorded.metrics());
        (Running::spawn(operator), recorded)
    };
    let relay_held =
        |recorded: &Recorded| recorded.sum("kube_fsm_shards_held", &[("machine", "Relay")]);
    let (a, a_metrics) = spawn("replica-a", false);
    eventually(Duration::from_secs(20), || async {
        (relay_held(&a_metrics) == 2.0).then_some(())
    })
    .await
    .expect("A holds both shards");
    for i in 0..12 {
        let mut relay = Relay::new(&format!("relay-{i}"), RelaySpec {});
        relay.metadata.namespace = Some(ns.clone());
        api.create(&PostParams::default(), &relay)
            .await
            .expect("create");
    }
    let phases = || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        Some(list.items.iter().filter_map(phase_of).collect::<Vec<_>>())
    };
    eventually(Duration::from_secs(30), || async {
        let phases = phases().await?;
        (phases.len() == 12 && phases.iter().all(|p| p == "Second")).then_some(())
    })
    .await
    .expect("A took every Relay to Second (and remembers that)");
    // B joins and takes one shard: its Relays go on to Fourth.
    let (b, b_metrics) = spawn("replica-b", true);
    eventually(Duration::from_secs(30), || async {
        let phases = phases().await?;
        let split = relay_held(&a_metrics) == 1.0 && relay_held(&b_metrics) == 1.0;
        let moved = phases.iter().any(|p| p == "Fourth")
            && phases.iter().all(|p| p == "Second" || p == "Fourth");
        (split && moved).then_some(())
    })
    .await
    .expect("B took its shard's Relays to Fourth");
    // B leaves: A takes the shard back. What A remembered of those Relays (Second) is from
    // its earlier holding; Fourth does not follow Second, so reverting would move them back.
    b.stop().await;
    eventually(Duration::from_secs(20), || async {
        (relay_held(&a_metrics) == 2.0).then_some(())
    })
    .await
    .expect("A holds both shards again");
    // A reconciles every Relay of the shard it took back (its watch lists them) meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    watching.abort();
    let history = history
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let backward: Vec<_> = history
        .iter()
        .filter(|(_, phases)| {
            phases
                .windows(2)
                .any(|w| w[0] == "Fourth" || (w[0] == "Third" && w[1] != "Fourth"))
        })
        .collect();
    assert!(backward.is_empty(), "moved backward: {backward:?}");
    let reverted = a_metrics.sum(
        "kube_fsm_drift_total",
        &[("machine", "Relay"), ("action", "reverted")],
    );
    assert_eq!(
        reverted, 0.0,
        "A reported drift after taking the shard back"
    );
    a.stop().await;
}

#[tokio::test]
async fn an_object_whose_label_write_failed_is_labelled_once_the_write_can_land() {
    let Some(client) = cluster::client("an_object_whose_label_write_failed").await else {
        return;
    };
    cluster::install_crds(&client).await;
    let ns = kube_fsm_testkit::admission::namespace(&client, "fsm-shards-unlabelled", &[]).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    // Another team's policy webhook, down under Fail, refuses every metadata write of
    // Databases here: creates go through, shard labels do not.
    let probe = sample(kube_fsm_testkit::admission::PROBE);
    let policy = kube_fsm_testkit::admission::policy_webhook_down(&client, &ns, probe).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, a_metrics) = replica(&client, &ns, "replica-a", &ledger);
    create(&api, "refused", 5).await;
    let unlabelled = || a_metrics.sum("kube_fsm_unlabelled_objects", &[("machine", "Database")]);
    let waiting = eventually(Duration::from_secs(20), || async {
        (unlabelled() == 6.0).then_some(())
    })
    .await;
    // The webhook comes back: nothing relists (the watch is healthy), the retries land.
    policy.remove().await;
    let objects = all_running(&api, 6).await;
    assert_labelled(&client, &objects).await;
    assert!(
        waiting.is_some(),
        "the metric counted the 6 objects waiting for a label"
    );
    assert_eq!(unlabelled(), 0.0);
    a.stop().await;
}

#[tokio::test]
async fn a_lower_shard_count_relabels_the_objects_of_shards_that_are_gone() {
    let Some((client, ns)) = cluster::prepare("a_lower_shard_count", "fsm-shards-fewer").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, _) = replica(&client, &ns, "replica-a", &ledger);
    create(&api, "six", 12).await;
    let objects = all_running(&api, 12).await;
    assert!(
        objects.iter().any(|db| {
            kube_fsm::controller::shard_of(&db.uid().unwrap_or_default(), SHARDS) >= 3
        }),
        "some objects are in shards 3 to 5"
    );
    a.stop().await;
    // The operator comes back with 3 shards: labels 3 to 5 match no replica's selector.
    let (b, _) = replica_of(
        &client,
        &ns,
        "replica-b",
        &ledger,
        Duration::from_millis(30),
        3,
    );
    change_every_spec(&api).await;
    let objects = all_running(&api, 12).await;
    // Each object moved to its shard of 3 (its children keep theirs until the next apply).
    for db in &objects {
        let expected = kube_fsm::controller::shard_of(&db.uid().unwrap_or_default(), 3);
        assert_eq!(
            db.labels().get(LABEL),
            Some(&expected.to_string()),
            "{}",
            db.name_any()
        );
    }
    b.stop().await;
}

/// Who holds the Lease of `shard` (of the tests' sharding `fsm-shards`).
async fn holder_of(client: &kube::Client, ns: &str, shard: u32) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    leases
        .get_opt(&format!("fsm-shards-shard-{shard}"))
        .await
        .ok()??
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn a_rolling_change_to_fewer_shards_never_hands_an_object_to_two_replicas() {
    let Some((client, ns)) = cluster::prepare("a_rolling_change_to_fewer", "fsm-shards-roll").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let step = Duration::from_millis(400);
    // Two replicas of the old count (6) share its shards.
    let (a, _) = replica_of(&client, &ns, "old-a", &ledger, step, SHARDS);
    let (b, _) = replica_of(&client, &ns, "old-b", &ledger, step, SHARDS);
    create(&api, "roll", 24).await;
    all_running(&api, 24).await;
    eventually(Duration::from_secs(30), || async {
        let mut holders = BTreeSet::new();
        for shard in 0..SHARDS {
            holders.insert(holder_of(&client, &ns, shard).await?);
        }
        (holders.len() == 2).then_some(())
    })
    .await
    .expect("both old replicas hold shards");
    // The rolling update replaces the holder of shard 0 with a replica of the new count (3):
    // it takes shard 0 and, as its labeller, finds the objects labelled 3 to 5, while the
    // other old replica still serves some of those shards.
    let first = holder_of(&client, &ns, 0).await.expect("shard 0 held");
    let (gone, staying) = if first == "old-a" { (a, b) } else { (b, a) };
    gone.stop().await;
    let (new, _) = replica_of(&client, &ns, "new", &ledger, step, 3);
    eventually(Duration::from_secs(30), || async {
        (holder_of(&client, &ns, 0).await.as_deref() == Some("new")).then_some(())
    })
    .await
    .expect("the new replica takes shard 0");
    // Every object is reconciled again while the shards change hands.
    change_every_spec(&api).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The last old replica leaves: every object moves to its shard of 3.
    staying.stop().await;
    let objects = eventually(Duration::from_secs(60), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|db| {
                let shard = kube_fsm::controller::shard_of(&db.uid().unwrap_or_default(), 3);
                db.labels().get(LABEL) == Some(&shard.to_string())
                    && phase_of(db).as_deref() == Some("Running")
                    && db
                        .status
                        .as_ref()
                        .and_then(|s| s.machine.observed_generation)
                        == db.metadata.generation
            })
            .then_some(list.items)
    })
    .await
    .expect("every object moved to its shard of 3 and is Running at its generation");
    assert_eq!(objects.len(), 24);
    let overlaps = ledger
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .overlaps
        .clone();
    // Measured before the fix: the new replica moved objects out of the old replica's shards
    // while it was stepping them.
    assert!(
        overlaps.is_empty(),
        "reconciled by two replicas at once: {overlaps:?}"
    );
    new.stop().await;
}

#[tokio::test]
async fn switching_from_leader_election_to_sharding_finds_every_child_and_moves_no_phase() {
    let Some((client, ns)) =
        cluster::prepare("switching_from_leader_election", "fsm-shards-switch").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // Under leader election the children carry no shard label.
    let elected = Running::spawn(
        operator::in_namespace::<Database, _>(
            &client,
            &ns,
            Noted {
                replica: "elected",
                ledger: ledger.clone(),
                delay: Duration::from_millis(30),
            },
        )
        .owns::<ConfigMap>(watcher::Config::default().labels(&format!("app={CHILDREN}")))
        .replicas(
            kube_fsm::controller::LeaderElection::new("fsm-shards-switch", &ns)
                .identity("elected")
                .duration(Duration::from_secs(4)),
        ),
    );
    create(&api, "converged", 30).await;
    all_running(&api, 30).await;
    elected.stop().await;
    let children: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let unlabelled = children
        .list(&ListParams::default().labels(&format!("app={CHILDREN}")))
        .await
        .expect("children")
        .items
        .iter()
        .filter(|c| !c.labels().contains_key(LABEL))
        .count();
    assert_eq!(
        unlabelled, 30,
        "children made under leader election have no shard label"
    );

    // The same deployment, now sharded over two replicas.
    let (a, a_metrics) = replica(&client, &ns, "replica-a", &ledger);
    let (b, b_metrics) = replica(&client, &ns, "replica-b", &ledger);
    eventually(Duration::from_secs(30), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        let reconciled = ledger
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by
            .values()
            .filter(|r| r.contains("replica-a") || r.contains("replica-b"))
            .count();
        (list.items.iter().all(|db| db.labels().contains_key(LABEL)) && reconciled >= 30)
            .then_some(())
    })
    .await
    .expect("every object labelled and reconciled by the sharded replicas");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let moves = a_metrics.sum("kube_fsm_transitions_total", &[])
        + b_metrics.sum("kube_fsm_transitions_total", &[]);
    {
        let ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        assert!(
            ledger.child_unseen.is_empty(),
            "children read as absent: {:?}",
            ledger.child_unseen
        );
    }
    assert_eq!(moves, 0.0, "no phase moved");
    let objects = all_running(&api, 30).await;
    assert_labelled(&client, &objects).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_label_write_never_lands_on_a_version_it_did_not_see() {
    let Some((client, ns)) =
        cluster::prepare("a_label_write_never_lands", "fsm-shards-stale").await
    else {
        return;
    };
    // Shards 1 and 2 are held by a replica of elsewhere (a replica of another shard count, during
    // a rolling change, say), so this one holds shard 0 only: it is the labeller.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &ns);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    for shard in [1, 2] {
        let lease = k8s_openapi::api::coordination::v1::Lease {
            metadata: ObjectMeta {
                name: Some(format!("fsm-shards-shard-{shard}")),
                ..ObjectMeta::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some("elsewhere".into()),
                lease_duration_seconds: Some(3_600),
                acquire_time: Some(now.clone()),
                renew_time: Some(now.clone()),
                ..Default::default()
            }),
        };
        leases
            .create(&PostParams::default(), &lease)
            .await
            .expect("a Lease held elsewhere");
    }
    // The labeller's metadata patches of the object are held back until the test lets them go.
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (held_client, hold) = kube_fsm_testkit::hold::client(config, |request| {
        request.method() == http::Method::PATCH && request.uri().path().ends_with("/databases/x")
    });
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, _) = replica_of(
        &held_client,
        &ns,
        "replica-a",
        &ledger,
        Duration::from_millis(30),
        3,
    );
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let created = api
        .create(&PostParams::default(), &sample("x"))
        .await
        .expect("create");
    let hash = kube_fsm::controller::shard_of(&created.uid().unwrap_or_default(), 3);
    eventually(Duration::from_secs(20), || async {
        (hold.held() > 0).then_some(())
    })
    .await
    .expect("the labeller saw the object without a label and sent its label");
    // Meanwhile another writer labels it (a shard 1 or 2, other than its hash under 3).
    let elsewhere = if hash == 1 { 2 } else { 1 };
    api.patch_metadata(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { LABEL: elsewhere.to_string() } } })),
    )
    .await
    .expect("label elsewhere");
    hold.release();
    eventually(Duration::from_secs(10), || async {
        (hold.answered().0 > 0).then_some(())
    })
    .await
    .expect("the held label write was answered");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let label = api
        .get("x")
        .await
        .expect("get")
        .labels()
        .get(LABEL)
        .cloned();
    assert_eq!(
        label,
        Some(elsewhere.to_string()),
        "the labeller wrote its label over one written after it looked (its write: HTTP {})",
        hold.answered().1
    );
    a.stop().await;
}

#[tokio::test]
async fn the_labeller_writes_labels_side_by_side() {
    let Some((client, ns)) = cluster::prepare("the_labeller_side_by_side", "fsm-shards-many").await
    else {
        return;
    };
    // Every label write is held back until the test lets them go: behind a slow API server a
    // labeller that waits for each before the next takes minutes over a thousand new objects.
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (held_client, hold) = kube_fsm_testkit::hold::client(config, |request| {
        request.method() == http::Method::PATCH
            && request.uri().path().contains("/databases/")
            && !request.uri().path().ends_with("/status")
    });
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, _) = replica(&held_client, &ns, "replica-a", &ledger);
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    create(&api, "many", 5).await;
    let side_by_side = eventually(Duration::from_secs(20), || async {
        (hold.held() >= 5).then_some(())
    })
    .await;
    let held = hold.held();
    hold.release();
    assert!(
        side_by_side.is_some(),
        "the labeller had {held} of 5 label writes under way at once"
    );
    let objects = all_running(&api, 5).await;
    assert_labelled(&client, &objects).await;
    a.stop().await;
}

#[tokio::test]
async fn a_crashed_replica_leaves_no_labeller_behind() {
    let Some((client, ns)) = cluster::prepare("a_crashed_replica_leaves", "fsm-shards-crash").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let (a, _) = replica(&client, &ns, "replica-a", &ledger);
    create(&api, "before", 2).await;
    all_running(&api, 2).await;
    // Its task aborted (as a caller's `select!` drops `run()`, or a crash of the task): nothing
    // of it may go on writing.
    a.crash().await;
    create(&api, "after", 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = api.get("after-0").await.expect("get");
    assert_eq!(
        after.labels().get(LABEL),
        None,
        "a labeller of the crashed replica labelled a new object"
    );
}
