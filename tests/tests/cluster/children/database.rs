//! The Database example's declared children on the control plane: its StatefulSet, declared
//! `after: [credentials]`, is not created while its Secret cannot be (a ResourceQuota refuses
//! it), and once it can, is stored after it — by etcd's revisions, one sequence for every
//! kind, seen by watches started before the Database was created.

use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ResourceQuota, Secret};
use kube::api::{DeleteParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_fsm_examples::database::{self, Database};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::workload;
use serde_json::json;

use super::super::control_plane::control_plane;

/// The revision each object of `api` was first seen at, by name, from a watch that has
/// listed what was there before this returns.
async fn first_seen<K>(api: Api<K>) -> Arc<Mutex<Vec<(String, u64)>>>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let seen: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let (listed, ready) = tokio::sync::oneshot::channel();
    let record = seen.clone();
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::InitDone => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                }
                watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                    let revision = (object.resource_version())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let mut seen = record.lock().expect("lock");
                    if !seen.iter().any(|(name, _)| *name == object.name_any()) {
                        seen.push((object.name_any(), revision));
                    }
                }
                _ => {}
            }
        }
    });
    ready.await.expect("the watch lists");
    seen
}

fn revision(seen: &Mutex<Vec<(String, u64)>>, name: &str) -> Option<u64> {
    let seen = seen.lock().expect("lock");
    seen.iter().find(|(n, _)| n == name).map(|(_, r)| *r)
}

#[tokio::test]
async fn the_statefulset_waits_for_its_secret_to_exist() {
    let test = "children::database_after_credentials";
    let Some((client, ns)) = control_plane(test, "cp-after").await else {
        return;
    };
    cluster::install_crd(&client, database::crd()).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let secrets = first_seen(Api::<Secret>::namespaced(client.clone(), &ns)).await;
    let sets = first_seen(Api::<StatefulSet>::namespaced(client.clone(), &ns)).await;
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
    assert!(revision(&secrets, "orders-credentials").is_none());

    // The quota goes: the Secret is made, then the StatefulSet, and the Database runs.
    quotas
        .delete("no-secrets", &DeleteParams::default())
        .await
        .expect("delete the quota");
    wait_phase(&api, "orders", "Running").await;
    let secret = revision(&secrets, "orders-credentials").expect("its Secret was seen");
    let set = revision(&sets, "orders").expect("its StatefulSet was seen");
    assert!(
        secret < set,
        "the Secret (revision {secret}) is stored before the StatefulSet that waits for it \
         (revision {set})"
    );
    running.stop().await;
}
