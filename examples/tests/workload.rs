//! The Database example when a node goes away, on a control plane of its own (draining a node
//! of the shared one would evict the other tests' pods) and in a test binary of its own (its
//! five processes would slow the cluster tests that run beside it): Degraded while its replica
//! has no node, Running again once one joins.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use kube_fsm_examples::database::{self, Database};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::observer::Phases;
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::workload::{condition, database, pods};

#[tokio::test]
async fn a_node_taken_away_degrades_the_database_until_its_replica_runs_again() {
    let test = "database::a_node_taken_away_degrades_the_database";
    let Some(cluster) = cluster::own_control_plane(test, 3).await else {
        return;
    };
    let client = cluster.client();
    cluster::install_crd(&client, database::crd()).await;
    let ns = cluster::namespace(&client, "cp-node").await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let phases = Phases::watch(api.clone());
    let running = Running::spawn(database::operator(client.clone(), Some(&ns)));
    api.create(&PostParams::default(), &database("orders", 3))
        .await
        .expect("create");
    wait_phase(&api, "orders", "Running").await;

    // The node of one replica is drained and taken away: that replica cannot run on a node that
    // already has one, so the Database is Degraded, still answering on the other two.
    let replica = pods(&client, &ns, "orders")
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("orders-1"))
        .expect("orders-1");
    let node = replica
        .spec
        .and_then(|s| s.node_name)
        .expect("orders-1 is on a node");
    let lost = Instant::now();
    cluster
        .drain_node(&node)
        .await
        .expect("drain the node and remove it");
    let degraded = wait_phase(&api, "orders", "Degraded").await;
    let to_degraded = lost.elapsed();
    let pods_ready = condition(&degraded, "PodsReady");
    assert_eq!(
        (pods_ready.status.as_str(), pods_ready.reason.as_str()),
        ("False", "LessReady"),
        "{pods_ready:?}"
    );
    assert_eq!(
        pods_ready.message,
        "The StatefulSet orders is not ready yet: Ready: 2/3."
    );
    assert_eq!(condition(&degraded, "ServiceAvailable").status, "True");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = api.get("orders").await.expect("get");
    assert_eq!(
        cluster::phase_of(&still).as_deref(),
        Some("Degraded"),
        "no node for the lost replica: it stays Degraded"
    );

    // A new node: the replica runs there, and the Database is Running again.
    let back = Instant::now();
    cluster.add_node("kwok-node-new").await.expect("add a node");
    wait_phase(&api, "orders", "Running").await;
    let to_running = back.elapsed();
    let moved = pods(&client, &ns, "orders")
        .await
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some("orders-1"))
        .and_then(|p| p.spec?.node_name);
    assert_eq!(moved.as_deref(), Some("kwok-node-new"));
    assert_eq!(
        phases.seen().get("orders").cloned().unwrap_or_default(),
        ["Provisioning", "Running", "Degraded", "Running"]
            .map(str::to_owned)
            .to_vec()
    );
    eprintln!(
        "a node taken away: Degraded {to_degraded:?} after its drain; Running {to_running:?} after a new node"
    );
    running.stop().await;
}
