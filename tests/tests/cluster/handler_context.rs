//! What a handler reaches through its step, on the real API server: its own status fields
//! written with the phase in the engine's one status patch (other writers' fields survive,
//! `None` removes a field, a conflict redoes the step on what the server holds), children read
//! from the operator's cache by owner, and server-side apply skipped when the cache already
//! holds the applied fields.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use kube_fsm::handler::Applied;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, hand_edit, wait_phase};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;
use tokio::sync::Notify;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Condition(#[from] kube_fsm::machine::ConditionError),
    #[error(transparent)]
    Context(#[from] kube_fsm::handler::ContextError),
}

/// Pending: records the endpoint it saw (`seen:<stored endpoint>`) and accepts; the first run
/// may be held until the test has written the object behind its back. Provisioning: removes
/// the endpoint when told to, and reports the spec's version in a condition.
#[derive(Clone, Default)]
struct Endpoints {
    hold_first: Arc<AtomicBool>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
    pending_runs: Arc<AtomicUsize>,
    clear: Arc<AtomicBool>,
}

impl DatabaseHandler for Endpoints {
    type Error = TestError;

    async fn on_pending(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        let run = self.pending_runs.fetch_add(1, Ordering::SeqCst);
        if run == 0 && self.hold_first.load(Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        let seen = step
            .status()
            .endpoint
            .clone()
            .unwrap_or_else(|| "none".into());
        step.status_mut().endpoint = Some(format!("seen:{seen}"));
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        if self.clear.load(Ordering::SeqCst) {
            step.status_mut().endpoint = None;
        }
        step.set_condition(
            DatabaseCondition::PodsReady,
            false,
            "Waiting",
            format!("version {}", db.spec.version),
        )?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, TestError> {
        Ok(Next::Stay)
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, TestError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

/// The stored status as JSON, as the API server holds it.
async fn raw_status(api: &Api<Database>, name: &str) -> serde_json::Value {
    let object = api.get(name).await.expect("get");
    serde_json::to_value(object.status).expect("encodes")
}

#[tokio::test]
async fn user_fields_are_written_with_the_phase_in_one_patch_and_others_survive() {
    let Some((client, ns)) = cluster::prepare("user_fields_with_the_phase", "fsm-fields").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let handler = Endpoints::default();
    let recorded = Recorded::default();
    let operator = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, handler.clone())
            .metrics(recorded.metrics()),
    );
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let db = wait_phase(&api, "db", "Provisioning").await;
    let status = db.status.expect("a status");
    assert_eq!(status.endpoint.as_deref(), Some("seen:none"));
    // Pending's step (endpoint + phase) and Provisioning's (its condition): two writes, so the
    // endpoint rode along with the phase rather than costing a patch of its own.
    let writes = eventually(Duration::from_secs(10), || async {
        let db = api.get("db").await.ok()?;
        db.status?
            .machine
            .condition("PodsReady")
            .map(|_| recorded.sum("kube_fsm_status_writes_total", &[]))
    })
    .await
    .expect("Provisioning reports its condition");
    assert!(
        (writes - 2.0).abs() < f64::EPSILON,
        "expected 2 status writes, saw {writes}"
    );

    // Another writer sets the endpoint; a step that does not touch it leaves it alone.
    hand_edit(&api, "db", json!({ "endpoint": "set-by-kubectl" })).await;
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "version": "17" } })),
    )
    .await
    .expect("bump the spec");
    let db = eventually(Duration::from_secs(10), || async {
        let db = api.get("db").await.ok()?;
        let message = db
            .status
            .as_ref()?
            .machine
            .condition("PodsReady")?
            .message
            .clone();
        (message == "version 17").then_some(db)
    })
    .await
    .expect("the step after the spec change is written");
    assert_eq!(
        db.status.and_then(|s| s.endpoint).as_deref(),
        Some("set-by-kubectl"),
        "a field the handler did not touch survives the engine's write"
    );

    // `None` removes the field from the stored status.
    handler.clear.store(true, Ordering::SeqCst);
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "version": "18" } })),
    )
    .await
    .expect("bump the spec");
    let removed = eventually(Duration::from_secs(10), || async {
        let status = raw_status(&api, "db").await;
        let pods_ready = status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodsReady")?;
        (pods_ready["message"] == "version 18").then_some(status)
    })
    .await
    .expect("the step after the second spec change is written");
    assert!(
        removed.get("endpoint").is_none(),
        "the endpoint is removed, not left or nulled: {removed}"
    );
    assert_eq!(removed["phase"], "Provisioning");
    operator.stop().await;
}

#[tokio::test]
async fn a_conflict_redoes_the_step_on_what_the_server_holds() {
    let Some((client, ns)) =
        cluster::prepare("conflict_redoes_user_fields", "fsm-fields-409").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let handler = Endpoints::default();
    handler.hold_first.store(true, Ordering::SeqCst);
    let recorded = Recorded::default();
    let operator = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, handler.clone())
            .metrics(recorded.metrics()),
    );
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    // While the first step runs, another writer sets the endpoint: the step's write, locked on
    // the version it read, is refused, and the step runs again on the object as it is now.
    tokio::time::timeout(Duration::from_secs(30), handler.entered.notified())
        .await
        .expect("the first step starts");
    hand_edit(&api, "db", json!({ "endpoint": "other" })).await;
    handler.release.notify_one();
    let db = wait_phase(&api, "db", "Provisioning").await;
    assert_eq!(
        db.status.and_then(|s| s.endpoint).as_deref(),
        Some("seen:other"),
        "the redo saw the other writer's value, and its own result replaced it whole"
    );
    assert!(handler.pending_runs.load(Ordering::SeqCst) >= 2);
    assert!(recorded.sum("kube_fsm_status_conflicts_total", &[]) >= 1.0);
    operator.stop().await;
}

/// Provisioning applies a child ConfigMap (by default with the spec's version) and moves on
/// once the cache shows it as owned; Running applies it again on every step (skipped while
/// unchanged) and reports how many owned children the cache holds.
#[derive(Clone)]
struct Children {
    applies: Arc<Mutex<Vec<bool>>>,
    owned_seen: Arc<Mutex<Vec<usize>>>,
    /// The child applied (by default [`version_child`]).
    child: fn(&Database) -> ConfigMap,
}

impl Default for Children {
    fn default() -> Self {
        Children {
            applies: Arc::default(),
            owned_seen: Arc::default(),
            child: version_child,
        }
    }
}

/// A ConfigMap `<db>-config` holding the spec's version.
fn version_child(db: &Database) -> ConfigMap {
    let mut child = ConfigMap::default();
    child.metadata.name = Some(format!("{}-config", db.name_any()));
    child.data = Some(BTreeMap::from([(
        "version".to_owned(),
        db.spec.version.clone(),
    )]));
    child
}

impl Children {
    async fn apply(&self, db: &Database, step: &Step<Database>) -> Result<(), TestError> {
        let applied: Applied<ConfigMap> = step.apply((self.child)(db)).await?;
        self.applies
            .lock()
            .expect("log")
            .push(applied.was_written());
        Ok(())
    }
}

impl DatabaseHandler for Children {
    type Error = TestError;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        self.apply(db, step).await?;
        let owned = step.children::<ConfigMap>()?.len();
        step.set_condition(
            DatabaseCondition::PodsReady,
            owned == 1,
            "Children",
            format!("{owned} owned"),
        )?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, TestError> {
        self.apply(db, step).await?;
        let owned = step.children::<ConfigMap>()?;
        let name = (self.child)(db).metadata.name.unwrap_or_default();
        assert!(step.child::<ConfigMap>(&name)?.is_some());
        self.owned_seen.lock().expect("log").push(owned.len());
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, TestError> {
        Ok(Next::Stay)
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, TestError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

#[tokio::test]
async fn children_come_from_the_cache_by_owner_and_unchanged_applies_are_skipped() {
    let Some((client, ns)) = cluster::prepare("children_from_the_cache", "fsm-children").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let handler = Children::default();
    let operator = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, handler.clone())
            .owns::<ConfigMap>(watcher::Config::default()),
    );
    // A ConfigMap nobody owns is in the cache too, but not among anyone's children.
    let mut stranger = ConfigMap::default();
    stranger.metadata.name = Some("stranger".into());
    configmaps
        .create(&PostParams::default(), &stranger)
        .await
        .expect("create");
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Running").await;
    let child = configmaps.get("db-config").await.expect("the child exists");
    assert_eq!(
        child.owner_references()[0].uid,
        api.get("db").await.expect("get").uid().expect("uid")
    );
    assert!(
        child
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some("kube-fsm")
                && m.operation.as_deref() == Some("Apply")),
        "server-side applied with the operator's field manager"
    );
    // A label on the owner reconciles it again: the child is unchanged, so no request.
    let before = handler.applies.lock().expect("log").len();
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
    )
    .await
    .expect("label");
    eventually(Duration::from_secs(10), || async {
        (handler.applies.lock().expect("log").len() > before).then_some(())
    })
    .await
    .expect("reconciled after the label");
    let applies = handler.applies.lock().expect("log").clone();
    assert_eq!(
        applies.iter().filter(|written| **written).count(),
        applies
            .iter()
            .position(|written| !written)
            .unwrap_or(applies.len()),
        "once the cache holds the child, no apply is sent: {applies:?}"
    );
    assert!(
        applies.last() == Some(&false),
        "the apply after the label was skipped: {applies:?}"
    );
    assert!(
        handler
            .owned_seen
            .lock()
            .expect("log")
            .iter()
            .all(|n| *n == 1),
        "exactly one child by owner, the stranger is not one"
    );
    // A changed spec changes the applied fields: one apply is sent.
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "version": "17" } })),
    )
    .await
    .expect("bump the spec");
    let updated = eventually(Duration::from_secs(10), || async {
        let child = configmaps.get("db-config").await.ok()?;
        (child.data?.get("version")? == "17").then_some(())
    })
    .await;
    assert!(updated.is_some(), "the child follows the spec");
    operator.stop().await;
}

/// A ConfigMap `<db>-keys` with one data key for each name in the Database's `keys`
/// annotation (comma-separated).
fn keys_child(db: &Database) -> ConfigMap {
    let keys = db.annotations().get("keys").cloned().unwrap_or_default();
    let mut child = ConfigMap::default();
    child.metadata.name = Some(format!("{}-keys", db.name_any()));
    child.data = Some(
        keys.split(',')
            .filter(|k| !k.is_empty())
            .map(|k| (k.to_owned(), "1".to_owned()))
            .collect(),
    );
    child
}

/// An operator of handlers applying [`keys_child`], its ConfigMaps watched with `config`, and
/// the Database `db` with the `keys` annotation `keys`, created.
async fn keys_operator(
    client: &kube::Client,
    ns: &str,
    config: watcher::Config,
    keys: &str,
) -> (Children, Running) {
    let handler = Children {
        child: keys_child,
        ..Children::default()
    };
    let operator = Running::spawn(
        operator::in_namespace::<Database, _>(client, ns, handler.clone())
            .owns::<ConfigMap>(config),
    );
    let mut db = sample("db");
    db.annotations_mut().insert("keys".into(), keys.into());
    Api::<Database>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &db)
        .await
        .expect("create");
    (handler, operator)
}

#[tokio::test]
async fn an_apply_that_stops_setting_a_field_removes_it_with_one_request() {
    let Some((client, ns)) = cluster::prepare("an_apply_that_stops_setting", "fsm-prune").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let (handler, operator) = keys_operator(&client, &ns, watcher::Config::default(), "a,b").await;
    wait_phase(&api, "db", "Running").await;
    let data = |cm: ConfigMap| cm.data.unwrap_or_default().into_keys().collect::<Vec<_>>();
    let child = configmaps.get("db-keys").await.expect("the child");
    assert_eq!(data(child), ["a", "b"]);
    let written = || {
        let applies = handler.applies.lock().expect("log");
        (applies.len(), applies.iter().filter(|w| **w).count())
    };
    let (_, before) = written();
    // The handler stops setting b: server-side apply removes a field its manager no longer
    // applies, so the apply must be sent (the cached child still holds every applied field).
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "annotations": { "keys": "a" } } })),
    )
    .await
    .expect("drop key b");
    let pruned = eventually(Duration::from_secs(10), || async {
        let child = configmaps.get("db-keys").await.ok()?;
        (data(child) == ["a"]).then_some(())
    })
    .await;
    assert!(pruned.is_some(), "b was removed from the child");
    // Once applied, the same apply is skipped again.
    let (seen, _) = written();
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
    )
    .await
    .expect("label");
    eventually(Duration::from_secs(10), || async {
        (written().0 > seen).then_some(())
    })
    .await
    .expect("reconciled after the label");
    let (_, after) = written();
    assert_eq!(after - before, 1, "one request removed b, none since");
    operator.stop().await;
}

#[tokio::test]
async fn a_child_its_watch_does_not_select_is_not_taken_from_the_cache_for_good() {
    let Some((client, ns)) =
        cluster::prepare("a_child_its_watch_does_not_select", "fsm-unselected").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // The owned kind is watched for `app=selected` only; the handler's child lacks the label,
    // so the watch never reports it (nor its deletion).
    let (_, operator) = keys_operator(
        &client,
        &ns,
        watcher::Config::default().labels("app=selected"),
        "a",
    )
    .await;
    eventually(Duration::from_secs(30), || async {
        configmaps.get("db-keys").await.ok()
    })
    .await
    .expect("the child was applied");
    configmaps
        .delete("db-keys", &Default::default())
        .await
        .expect("somebody deletes the child");
    // The next reconcile must not take its own earlier write for the child: it applies again
    // (measured before the fix: the remembered copy stayed, the apply was skipped, the child
    // never came back).
    api.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "poke": "1" } } })),
    )
    .await
    .expect("label");
    let back = eventually(Duration::from_secs(10), || async {
        configmaps.get("db-keys").await.ok()
    })
    .await;
    assert!(back.is_some(), "the child was applied again");
    operator.stop().await;
}
