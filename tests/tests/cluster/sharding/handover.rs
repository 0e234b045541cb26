//! Shards changing hands across deployments: a shard handed over and back writes no backward
//! move under drift revert, a rolling change to fewer shards never hands an object to two
//! replicas, and switching from leader election to sharding finds every child and moves no
//! phase.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_fsm::replicas::Sharding;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, phase_of};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;

use super::{
    CHILDREN, LABEL, Ledger, Noted, SHARDS, all_running, assert_labelled, change_every_spec,
    create, replica, replica_of,
};

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
                let shard = kube_fsm::replicas::shard_of(&db.uid().unwrap_or_default(), 3);
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
            kube_fsm::replicas::LeaderElection::new("fsm-shards-switch", &ns)
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
    let phases = kube_fsm_testkit::observer::Phases::watch(api.clone());
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
    // As a watch of our own saw them stored: each object stayed Running throughout.
    let seen = phases.seen();
    assert_eq!(seen.len(), 30, "{seen:?}");
    assert!(
        seen.values().all(|moves| moves == &["Running"]),
        "a phase moved: {seen:?}"
    );
    let objects = all_running(&api, 30).await;
    assert_labelled(&client, &objects).await;
    a.stop().await;
    b.stop().await;
}
