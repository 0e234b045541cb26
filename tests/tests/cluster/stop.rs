//! A stop that fits in the grace period, on the real API server: an operator with a backlog
//! behind handlers slower than its drain stops within the drain of the signal (the reconciles
//! waiting for a slot end at once, those under way are cancelled when the drain runs out); a
//! leader releases its Lease, and the standby takes over in seconds, not a Lease duration.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use kube_fsm::Operator;
use kube_fsm::replicas::LeaderElection;
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::handlers::{BeforeEach, Preceded};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::*;

const LEASE: &str = "stop-operator";
/// Long, so that a successor that had to wait it out would show.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const DRAIN: Duration = Duration::from_secs(2);
const BACKLOG: usize = 200;

/// Every handler call takes 20 s (a slow call to an outside system): longer than the drain.
#[derive(Clone, Copy)]
struct Slow;

impl BeforeEach for Slow {
    async fn before(&self, _: &Database, _: DatabasePhase) {
        tokio::time::sleep(Duration::from_secs(20)).await;
    }
}

fn replica(client: &kube::Client, ns: &str, identity: &str) -> Running {
    Running::spawn(
        Operator::<Database, _>::new(client.clone(), Preceded(Slow))
            .namespace(ns)
            .concurrency(2)
            .drain_timeout(DRAIN)
            .field_manager(identity)
            .replicas(
                LeaderElection::new(LEASE, ns)
                    .identity(identity)
                    .duration(LEASE_DURATION)
                    .retry_period(Duration::from_millis(500)),
            ),
    )
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get(LEASE)
        .await
        .ok()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Creates the [`BACKLOG`] Databases in `ns`.
async fn backlog(client: &kube::Client, ns: &str) {
    let api: Api<Database> = Api::namespaced(client.clone(), ns);
    for i in 0..BACKLOG {
        api.create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create a Database");
    }
}

#[tokio::test]
async fn a_leader_with_a_backlog_stops_within_its_drain_and_hands_over_at_once() {
    let Some((client, ns)) = cluster::prepare("stop::backlog", "fsm-stop").await else {
        return;
    };
    backlog(&client, &ns).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let first = replica(&client, &ns, "first");
    eventually(Duration::from_secs(20), || async {
        (holder(&leases).await.as_deref() == Some("first")).then_some(())
    })
    .await
    .expect("first leads");
    let standby = replica(&client, &ns, "second");
    // Busy: two 20 s handlers under way, the rest of the backlog waiting for a slot.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asked = Instant::now();
    first.stop().await;
    let stopped = asked.elapsed();
    let taken = eventually(Duration::from_secs(20), || async {
        (holder(&leases).await.as_deref() == Some("second")).then_some(())
    })
    .await;
    let handed = asked.elapsed();
    eprintln!(
        "stopped {stopped:?} after the signal (drain {DRAIN:?}, {BACKLOG} objects behind 20 s \
         handlers); the standby led {handed:?} after it (Lease duration {LEASE_DURATION:?})"
    );
    assert!(
        stopped <= DRAIN + Duration::from_secs(2),
        "stopped {stopped:?} after the signal, with a drain of {DRAIN:?}"
    );
    assert!(taken.is_some(), "the standby never led");
    assert!(
        handed < LEASE_DURATION / 2,
        "the standby led {handed:?} after the stop: the Lease was not released"
    );
    standby.stop().await;
}

#[tokio::test]
async fn one_replica_with_a_backlog_stops_within_its_drain() {
    let Some((client, ns)) = cluster::prepare("stop::one", "fsm-stop-one").await else {
        return;
    };
    backlog(&client, &ns).await;
    let running = Running::spawn(
        Operator::<Database, _>::new(client.clone(), Preceded(Slow))
            .namespace(&ns)
            .concurrency(2)
            .drain_timeout(DRAIN),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let asked = Instant::now();
    running.stop().await;
    let stopped = asked.elapsed();
    eprintln!(
        "one replica stopped {stopped:?} after the signal (drain {DRAIN:?}, {BACKLOG} objects behind 20 s handlers)"
    );
    assert!(
        stopped <= DRAIN + Duration::from_secs(2),
        "stopped {stopped:?} after the signal, with a drain of {DRAIN:?}"
    );
}
