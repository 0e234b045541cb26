//! The Database example on the control plane: its StatefulSet's pods run on kwok's simulated
//! nodes, its conditions follow what the StatefulSet and EndpointSlice controllers report, and
//! the garbage collector removes its workload with it. On a bare API server nothing would ever
//! make its pods ready: this test fails there ("did not reach Running"). A node taken away is
//! `examples/tests/workload.rs`: on a control plane of its own, in a test binary of its own.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube_fsm_examples::database::{self, Database};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::observer::Phases;
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::workload::{condition, database, pods};

/// When the pod's Ready condition last turned True.
fn ready_since(pod: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    ready.last_transition_time.as_ref().map(|t| t.0)
}

#[tokio::test]
async fn a_database_runs_once_its_replicas_are_ready_and_takes_its_workload_when_deleted() {
    let test = "database::a_database_runs_once_its_replicas_are_ready";
    let Some(client) = cluster::control_plane(test).await else {
        return;
    };
    cluster::install_crd(&client, database::crd()).await;
    let ns = cluster::namespace(&client, "cp-db").await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let phases = Phases::watch(api.clone());
    let running = Running::spawn(database::operator(client.clone(), Some(&ns)));

    let created = Instant::now();
    api.create(&PostParams::default(), &database("orders", 3))
        .await
        .expect("create");
    let db = wait_phase(&api, "orders", "Running").await;
    let took = created.elapsed();

    // What made it Running is what the controllers report, and it says so.
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let set = sets.get("orders").await.expect("its StatefulSet");
    let status = set.status.expect("a status");
    assert_eq!((status.replicas, status.ready_replicas), (3, Some(3)));
    let pods_ready = condition(&db, "PodsReady");
    assert_eq!(pods_ready.reason, "Ready", "{pods_ready:?}");
    assert_eq!(
        pods_ready.message,
        "The StatefulSet orders is ready: Partition rollout complete. updated: 3.",
        "kstatus's words for a StatefulSet the server defaulted to `partition: 0`"
    );
    let available = condition(&db, "ServiceAvailable");
    assert_eq!(
        (available.status.as_str(), available.reason.as_str()),
        ("True", "EndpointsReady")
    );
    let endpoint = format!("orders.{ns}.svc:5432");
    assert_eq!(
        db.status.as_ref().and_then(|s| s.endpoint.clone()),
        Some(endpoint)
    );
    // ServiceAvailable needs one ready endpoint; the EndpointSlice controller lists all three
    // soon after (it may lag the StatefulSet's status by a moment).
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let all_three = eventually(Duration::from_secs(30), || async {
        let listed = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=orders"))
            .await
            .ok()?;
        let ready = listed
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .count();
        (ready == 3).then_some(())
    })
    .await;
    assert!(
        all_three.is_some(),
        "the Service's EndpointSlices never listed 3 ready endpoints"
    );

    // Running came after the last replica was Ready, never before.
    let replicas = pods(&client, &ns, "orders").await;
    assert_eq!(replicas.len(), 3);
    let mut nodes: Vec<_> = replicas
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one replica per node: {nodes:?}");
    let last_ready = replicas
        .iter()
        .map(|p| ready_since(p).expect("every replica Ready"))
        .max()
        .expect("replicas");
    let entered = db
        .status
        .as_ref()
        .and_then(|s| s.machine.last_phase_transition_time.clone())
        .expect("a phase entry time");
    assert!(
        entered.0 >= last_ready,
        "Running at {entered:?}, before its last replica was Ready at {last_ready}"
    );
    assert_eq!(
        phases.seen().get("orders").cloned().unwrap_or_default(),
        ["Provisioning", "Running"].map(str::to_owned).to_vec(),
        "no phase skipped, none claimed early (the first status write already says Provisioning)"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let credentials = secrets
        .get("orders-credentials")
        .await
        .expect("its credentials");
    assert_eq!(
        credentials
            .data
            .unwrap_or_default()
            .get("password")
            .map(|p| p.0.len()),
        Some(48)
    );

    // Deleted: the garbage collector takes its StatefulSet, Service, Secret and pods.
    api.delete("orders", &DeleteParams::background())
        .await
        .expect("delete");
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let collected = eventually(Duration::from_secs(60), || async {
        let left = usize::from(sets.get_opt("orders").await.ok()?.is_some())
            + usize::from(services.get_opt("orders").await.ok()?.is_some())
            + usize::from(secrets.get_opt("orders-credentials").await.ok()?.is_some())
            + pods(&client, &ns, "orders").await.len();
        (left == 0).then_some(())
    })
    .await;
    assert!(collected.is_some(), "the workload of orders is still there");

    // A namespace deleted with a Database in it finishes: the operator lets it go.
    api.create(&PostParams::default(), &database("inventory", 1))
        .await
        .expect("create");
    wait_phase(&api, "inventory", "Running").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::background())
        .await
        .expect("delete the namespace");
    let gone = eventually(Duration::from_secs(90), || async {
        namespaces.get_opt(&ns).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "namespace {ns} is still terminating");
    eprintln!("a 3-replica Database on kwok: Running {took:?} after its creation");
    running.stop().await;
}
