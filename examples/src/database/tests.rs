//! The handlers against a canned API server and a cache filled as the controllers would fill
//! it: what each phase applies, and where each condition comes from.

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube_fsm::watch::Cache;
use kube_fsm::{Context, testing};
use kube_fsm_testkit::canned;

use super::*;

fn database() -> Database {
    let mut db = Database::new(
        "db",
        DatabaseSpec {
            version: "16".into(),
            replicas: 3,
        },
    );
    db.metadata.namespace = Some("ns".into());
    db.metadata.uid = Some("uid-1".into());
    db.metadata.generation = Some(1);
    db
}

/// `child`, the spec's child `name`, as the server stores it after the engine's apply.
fn stored<C: Resource + Clone>(mut child: C, name: &str, db: &Database) -> C {
    let meta = child.meta_mut();
    (meta.labels.get_or_insert_with(Default::default))
        .insert(kube_fsm::children::CHILD_LABEL.into(), name.into());
    meta.namespace = db.namespace();
    meta.owner_references = kube_fsm::operator::owner_reference(db).map(|o| vec![o]);
    meta.resource_version = Some("5".into());
    child
}

/// The StatefulSet as its controller reports it: `ready` of 3 replicas ready.
fn reported(db: &Database, ready: i32) -> StatefulSet {
    let mut set = stored(workload::stateful_set(db), "db", db);
    set.metadata.generation = Some(1);
    set.status = serde_json::from_value(serde_json::json!({
        "observedGeneration": 1, "replicas": 3, "readyReplicas": ready, "updatedReplicas": 3,
        "currentReplicas": 3, "availableReplicas": ready,
        "currentRevision": "db-1", "updateRevision": "db-1",
    }))
    .expect("a StatefulSetStatus");
    set
}

/// The Service's EndpointSlice as the EndpointSlice controller makes it, `ready` endpoints.
fn slice(ready: usize) -> EndpointSlice {
    let endpoints: Vec<_> = (0..ready)
        .map(|i| serde_json::json!({ "addresses": [format!("10.0.0.{i}")], "conditions": { "ready": true } }))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": "db-x1", "namespace": "ns",
            "labels": { "kubernetes.io/service-name": "db" } },
        "addressType": "IPv4",
        "endpoints": endpoints,
    }))
    .expect("an EndpointSlice")
}

/// A context on a canned server that echoes every apply, its caches holding what is given.
fn context(
    db: &Database,
    set: Option<StatefulSet>,
    slices: Vec<EndpointSlice>,
    applied: bool,
) -> (Arc<Context>, canned::Log) {
    let (client, log) = canned::client(canned::echo);
    let secrets = applied.then(|| {
        stored(
            workload::credentials(db).expect("random"),
            "credentials",
            db,
        )
    });
    let services = applied.then(|| stored(workload::service(db), "service", db));
    let context = Context::new(client)
        .with_cache(Cache::from_objects(secrets))
        .with_cache(Cache::from_objects(services))
        .with_cache(Cache::from_objects(set))
        .with_cache(Cache::from_objects(slices).with_index(BY_SERVICE, service_key));
    (Arc::new(context), log)
}

async fn step(db: &Database, context: &Arc<Context>) -> testing::Outcome<Database> {
    testing::step_in(&Handlers, db, Timestamp::now(), context)
        .await
        .expect("the step succeeds")
}

#[tokio::test]
async fn provisioning_applies_the_workload_and_waits_for_what_the_controllers_report() {
    let db = testing::in_phase(database(), DatabasePhase::Provisioning);
    let (context, seen) = context(&db, None, vec![], false);
    let outcome = step(&db, &context).await;
    assert_eq!(outcome.phase, DatabasePhase::Provisioning);
    assert_eq!(outcome.condition(DatabaseCondition::PodsReady), Some(false));
    assert_eq!(
        outcome.condition(DatabaseCondition::ServiceAvailable),
        Some(false)
    );
    assert_eq!(outcome.status.endpoint, None, "nothing answers yet");
    assert_eq!(
        *seen.lock().expect("log"),
        [
            "POST /api/v1/namespaces/ns/secrets",
            "PATCH /api/v1/namespaces/ns/services/db",
            "PATCH /apis/apps/v1/namespaces/ns/statefulsets/db",
        ],
        "the `apply: once` Secret created, the others server-side applied"
    );
}

#[tokio::test]
async fn it_runs_once_every_replica_is_ready_and_sends_nothing_when_converged() {
    let db = testing::in_phase(database(), DatabasePhase::Provisioning);
    let (context, seen) = context(&db, Some(reported(&db, 3)), vec![slice(3)], true);
    let running = step(&db, &context).await;
    assert_eq!(running.phase, DatabasePhase::Running);
    assert_eq!(running.status.endpoint.as_deref(), Some("db.ns.svc:5432"));
    let pods = running
        .status
        .machine
        .conditions
        .iter()
        .find(|c| c.type_ == "PodsReady")
        .expect("PodsReady");
    assert_eq!(
        (pods.reason.as_str(), pods.message.as_str()),
        (
            "Ready",
            "The StatefulSet db is ready: All replicas scheduled as expected. Replicas: 3."
        ),
        "the engine's, by kstatus's rules for a StatefulSet"
    );
    let mut db = db;
    testing::apply(&mut db, &running);
    let again = step(&db, &context).await;
    assert!(!again.writes_status, "nothing changed: no status write");
    assert!(
        seen.lock().expect("log").is_empty(),
        "every child is cached as desired: no request, the credentials never rotated"
    );
}

#[tokio::test]
async fn a_replica_lost_degrades_it_and_its_return_brings_it_back() {
    let running = testing::in_phase(database(), DatabasePhase::Running);
    let (two, _) = context(&running, Some(reported(&running, 2)), vec![slice(2)], true);
    let lost = step(&running, &two).await;
    assert_eq!(lost.phase, DatabasePhase::Degraded);
    assert_eq!(
        lost.condition(DatabaseCondition::ServiceAvailable),
        Some(true),
        "two replicas still answer"
    );
    let degraded = testing::in_phase(database(), DatabasePhase::Degraded);
    let (three, _) = context(
        &degraded,
        Some(reported(&degraded, 3)),
        vec![slice(3)],
        true,
    );
    assert_eq!(step(&degraded, &three).await.phase, DatabasePhase::Running);
}

#[test]
fn crd_has_status_subresource_and_phase_enum() {
    let crd = serde_json::to_value(crd()).expect("CRD encodes");
    let version = &crd["spec"]["versions"][0];
    assert!(version["subresources"]["status"].is_object());
    assert_eq!(
        version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"],
        serde_json::json!(["Pending", "Provisioning", "Running", "Degraded", "Failed"])
    );
    assert_eq!(crd["spec"]["group"], "example.kube-fsm.dev");
}

/// `crd` prints exactly the checked-in `examples/snapshots/database-crd.yaml`
/// (`UPDATE_SNAPSHOTS=1` rewrites it after a deliberate change).
#[test]
fn crd_yaml_matches_the_snapshot() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots/database-crd.yaml");
    let yaml = crd_yaml().expect("CRD encodes");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &yaml).expect("snapshot written");
    }
    let snapshot = std::fs::read_to_string(&path).expect("snapshot exists");
    assert_eq!(
        yaml, snapshot,
        "the CRD changed; rerun with UPDATE_SNAPSHOTS=1 if on purpose"
    );
}
