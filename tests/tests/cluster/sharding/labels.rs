//! The shard label: an object whose label write failed is labelled once the write can land, a
//! lower shard count relabels the objects of shards that are gone, a label write never lands
//! on a version it did not see, the labeller writes side by side, and a crashed replica leaves
//! no labeller behind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::resources::*;
use serde_json::json;

use super::{
    LABEL, Ledger, SHARDS, all_running, assert_labelled, change_every_spec, create, replica,
    replica_of,
};

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
        objects
            .iter()
            .any(|db| { kube_fsm::replicas::shard_of(&db.uid().unwrap_or_default(), SHARDS) >= 3 }),
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
        let expected = kube_fsm::replicas::shard_of(&db.uid().unwrap_or_default(), 3);
        assert_eq!(
            db.labels().get(LABEL),
            Some(&expected.to_string()),
            "{}",
            db.name_any()
        );
    }
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
    let hash = kube_fsm::replicas::shard_of(&created.uid().unwrap_or_default(), 3);
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
