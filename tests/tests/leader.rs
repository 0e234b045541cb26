//! Leader election on the real API server: of two replicas only the Lease holder writes, and
//! when it stops the other takes over within the lease duration. (A killed process, which
//! releases nothing, is tested with real processes in `examples/tests/leader_kill.rs`.)

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use kube_fsm::{LeaderElection, Operator};
use kube_fsm_tests::cluster::{self, eventually};
use kube_fsm_tests::handlers::Databases;
use kube_fsm_tests::operator::Running;
use kube_fsm_tests::resources::Database;

const LEASE: &str = "database-operator";
const DURATION: Duration = Duration::from_secs(4);

/// A replica named `identity`: its Lease identity, field manager and Event reporter.
fn replica(client: &Client, ns: &str, identity: &str) -> Running {
    Running::spawn(
        Operator::<Database, _>::new(client.clone(), Databases)
            .namespace(ns)
            .field_manager(identity)
            .reporter(identity)
            .leader_election(
                LeaderElection::new(LEASE, ns)
                    .identity(identity)
                    .duration(DURATION)
                    .grace(Duration::from_secs(1)),
            ),
    )
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get(LEASE).await.ok()?.spec?.holder_identity
}

/// Waits until `identity` holds the Lease; returns how long that took.
async fn wait_holder(leases: &Api<Lease>, identity: &str, timeout: Duration) -> Duration {
    let started = Instant::now();
    eventually(timeout, || async {
        (holder(leases).await.as_deref() == Some(identity)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("{identity} did not get the Lease within {timeout:?}"));
    started.elapsed()
}

/// Creates `name` and waits until it is Running; returns the field managers that wrote its
/// status (from `metadata.managedFields`).
async fn status_writers(api: &Api<Database>, name: &str) -> BTreeSet<String> {
    api.create(&PostParams::default(), &Database::sample(name))
        .await
        .expect("create");
    let db = eventually(Duration::from_secs(30), || async {
        let db = api.get(name).await.ok()?;
        let phase = db
            .status
            .as_ref()?
            .machine
            .phase
            .as_ref()?
            .as_str()
            .to_owned();
        (phase == "Running").then_some(db)
    })
    .await
    .unwrap_or_else(|| panic!("{name} did not reach Running"));
    db.managed_fields()
        .iter()
        .filter(|f| {
            f.fields_v1
                .as_ref()
                .is_some_and(|v| v.0.get("f:status").is_some())
        })
        .filter_map(|f| f.manager.clone())
        .collect()
}

#[tokio::test]
async fn only_the_leader_writes_and_another_replica_takes_over() {
    let Some((client, ns)) = cluster::prepare(
        "only_the_leader_writes_and_another_takes_over",
        "fsm-leader",
    )
    .await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let a = replica(&client, &ns, "replica-a");
    wait_holder(&leases, "replica-a", Duration::from_secs(10)).await;
    let b = replica(&client, &ns, "replica-b");
    for name in ["one", "two", "three"] {
        assert_eq!(
            status_writers(&api, name).await,
            BTreeSet::from(["replica-a".to_owned()]),
            "{name}: only the leader writes status"
        );
    }

    // The leader's task is dropped mid-flight (its `run` future aborted): the Lease manager
    // sees its last receiver go and releases the Lease.
    a.crash().await;
    let took = wait_holder(&leases, "replica-b", DURATION * 3).await;
    eprintln!("failover after dropping the leader: {took:?}");
    assert!(
        took <= DURATION,
        "failover after dropping the leader took {took:?}; the lease duration is {DURATION:?}"
    );
    assert_eq!(
        status_writers(&api, "four").await,
        BTreeSet::from(["replica-b".to_owned()])
    );

    // The new leader stops gracefully and releases the Lease: a third replica takes over.
    let c = replica(&client, &ns, "replica-c");
    b.stop().await;
    let took = wait_holder(&leases, "replica-c", DURATION * 3).await;
    eprintln!("failover after a graceful stop: {took:?}");
    assert!(
        took <= DURATION,
        "failover after a graceful stop took {took:?}; the lease duration is {DURATION:?}"
    );
    assert_eq!(
        status_writers(&api, "five").await,
        BTreeSet::from(["replica-c".to_owned()])
    );
    c.stop().await;
}
