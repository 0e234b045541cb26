//! The Database example's declared children on the control plane: its StatefulSet, declared
//! `after: [credentials]`, is not created while its Secret cannot be (a ResourceQuota refuses
//! it), and once it can, is stored after it — by etcd's revisions, one sequence for every
//! kind, seen by watches started before the Database was created.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ResourceQuota, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fsm_examples::database::{self, Database};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::workload;
use serde_json::json;

use super::super::control_plane::control_plane;
use super::lifecycle::record;

/// The revision at which `line` (`"{kind} {name} {what}"`) was seen, if it was.
fn revision(seen: &Mutex<Vec<(u64, String)>>, line: &str) -> Option<u64> {
    let seen = seen.lock().expect("lock");
    seen.iter().find(|(_, l)| l == line).map(|(r, _)| *r)
}

#[tokio::test]
async fn the_statefulset_waits_for_its_secret_to_exist() {
    let test = "children::database_after_credentials";
    let Some((client, ns)) = control_plane(test, "cp-after").await else {
        return;
    };
    cluster::install_crd(&client, database::crd()).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let seen: Arc<Mutex<Vec<(u64, String)>>> = Arc::default();
    record(
        Api::<Secret>::namespaced(client.clone(), &ns),
        "secret",
        seen.clone(),
    )
    .await;
    record(
        Api::<StatefulSet>::namespaced(client.clone(), &ns),
        "sts",
        seen.clone(),
    )
    .await;
    // No Secret may be made in the namespace: the quota controller has counted it.
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    let quota = serde_json::from_value(json!({
        "metadata": { "name": "no-secrets" },
        "spec": { "hard": { "secrets": "0" } },
    }))
    .expect("a ResourceQuota");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("the quota");
    let counted = eventually(Duration::from_secs(30), || async {
        let quota = quotas.get("no-secrets").await.ok()?;
        quota.status?.hard.map(|_| ())
    })
    .await;
    assert!(
        counted.is_some(),
        "the quota controller counts the namespace"
    );
    let running = Running::spawn(database::operator(client.clone(), Some(&ns)));
    api.create(&PostParams::default(), &workload::database("orders", 1))
        .await
        .expect("create");
    wait_phase(&api, "orders", "Provisioning").await;
    // Steps are refused at the Secret and retried: the StatefulSet is never made meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(
        sts.get_opt("orders").await.expect("get").is_none(),
        "no StatefulSet while its Secret cannot be made"
    );
    assert!(revision(&seen, "secret orders-credentials created").is_none());

    // The quota goes: the Secret is made, then the StatefulSet, and the Database runs.
    quotas
        .delete("no-secrets", &DeleteParams::default())
        .await
        .expect("delete the quota");
    wait_phase(&api, "orders", "Running").await;
    let secret = revision(&seen, "secret orders-credentials created").expect("its Secret was seen");
    let set = revision(&seen, "sts orders created").expect("its StatefulSet was seen");
    assert!(
        secret < set,
        "the Secret (revision {secret}) is stored before the StatefulSet that waits for it \
         (revision {set})"
    );
    running.stop().await;
}
