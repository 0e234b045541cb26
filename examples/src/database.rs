//! The `Database` custom resource, driven by `specs/database.yaml`, and its phase handlers.
//!
//! Each Database owns one child, a ConfigMap of the same name that stands in for the database's
//! pods. The handlers are written for API economy (see ARCHITECTURE.md, API economy): an object reaches `Running` with
//! two status writes and one child write, and a reconcile of a converged object writes nothing.
//!
//! - Pending: nothing to check; fires `Accept`. The engine folds status initialisation into
//!   this step, so the first status write already says Provisioning.
//! - Provisioning: creates the child (one POST; "already exists" counts as done) and sets
//!   PodsReady and ServiceAvailable True in the same step, so `when PodsReady` moves the object
//!   to Running in the second status write.
//! - Running: reads the child. Present: the same conditions as before, so no write (a drifted
//!   or outdated child gets one patch). Gone: both conditions False, and
//!   `when !ServiceAvailable` moves the object to Degraded.
//! - Degraded: recreates the child and sets both conditions True;
//!   `when [ServiceAvailable, PodsReady]` moves it back to Running.
//! - Deletion (the spec's finalizer): deletes the child, since the envtest API server runs no
//!   garbage collector to follow the ownerReference.
//!
//! The endpoint is reported in the ServiceAvailable message and the child's data rather than in
//! a status field of its own: the engine's status write carries the machine's fields only, so
//! an extra field would cost a write of its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResource, ResourceExt};
use kube_fsm::conditions::ConditionError;
use kube_fsm::{Cleanup, MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label every child carries (key, value); the operator watches only ConfigMaps with it.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kube-fsm-examples");

/// The label selector of the children.
pub fn child_selector() -> String {
    format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)
}

/// A database: the spec the user writes.
#[state_machine(spec = "../specs/database.yaml")]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.kube-fsm.dev",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus",
    shortname = "db"
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSpec {
    /// The database engine version.
    #[serde(default = "default_version")]
    pub version: String,
    /// How many replicas the database should run.
    #[serde(default = "default_replicas")]
    pub replicas: u32,
}

fn default_version() -> String {
    "16".into()
}

fn default_replicas() -> u32 {
    1
}

/// What the operator reports about a Database.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DatabaseStatus {
    /// Phase, conditions, observedGeneration and phase entry time, owned by kube-fsm.
    #[serde(flatten)]
    pub machine: MachineStatus<DatabasePhase>,
}

/// Why a handler failed; the engine logs it and retries the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A request for the child failed.
    #[error("child ConfigMap: {0}")]
    Kube(#[from] kube::Error),
    /// A condition was rejected (a bug in this example: reasons are constants).
    #[error(transparent)]
    Condition(#[from] ConditionError),
    /// The Database has no uid yet, so no ownerReference can point at it.
    #[error("the Database has no uid; cannot own a child")]
    NoUid,
}

/// How often each handler ran and what it asked of the API server (for the scale run).
#[derive(Debug, Default)]
pub struct Counters {
    /// `on_pending` calls.
    pub pending: AtomicU64,
    /// `on_provisioning` calls.
    pub provisioning: AtomicU64,
    /// `on_running` calls.
    pub running: AtomicU64,
    /// `on_degraded` calls.
    pub degraded: AtomicU64,
    /// `cleanup` calls.
    pub cleanup: AtomicU64,
    /// Child creates that succeeded.
    pub child_created: AtomicU64,
    /// Child creates answered "already exists".
    pub child_existed: AtomicU64,
    /// Child reads.
    pub child_reads: AtomicU64,
    /// Child data repairs (a patch after drift or a spec change).
    pub child_patched: AtomicU64,
    /// Child deletes.
    pub child_deleted: AtomicU64,
}

impl Counters {
    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The phase handlers: a client for the children, and counters.
#[derive(Clone)]
pub struct Handlers {
    client: Client,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Handlers {
    /// Handlers that manage children through `client`.
    pub fn new(client: Client) -> Self {
        Handlers {
            client,
            counters: Arc::default(),
        }
    }

    /// The counters, shared with every clone of these handlers.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    fn children(&self, db: &Database) -> Api<ConfigMap> {
        Api::namespaced(
            self.client.clone(),
            &db.namespace().unwrap_or_else(|| "default".into()),
        )
    }

    /// Creates the child unless it exists: one POST, and no read first (an "already exists"
    /// answer is as good as a read).
    async fn ensure_child(&self, db: &Database) -> Result<(), HandlerError> {
        match self
            .children(db)
            .create(&PostParams::default(), &desired_child(db)?)
            .await
        {
            Ok(_) => Counters::bump(&self.counters.child_created),
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                Counters::bump(&self.counters.child_existed);
            }
            Err(err) => return Err(err.into()),
        }
        Ok(())
    }
}

/// The endpoint clients would use.
pub fn endpoint(db: &Database) -> String {
    format!(
        "{}.{}.svc:5432",
        db.name_any(),
        db.namespace().unwrap_or_default()
    )
}

/// What the child's data should be.
fn desired_data(db: &Database) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("version".into(), db.spec.version.clone()),
        ("replicas".into(), db.spec.replicas.to_string()),
        ("endpoint".into(), endpoint(db)),
    ])
}

/// The child ConfigMap, controlled by `db`.
fn desired_child(db: &Database) -> Result<ConfigMap, HandlerError> {
    let owner = kube_fsm::owner_reference(db).ok_or(HandlerError::NoUid)?;
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(db.name_any()),
            namespace: db.namespace(),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ("example.kube-fsm.dev/database".to_owned(), db.name_any()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(desired_data(db)),
        ..ConfigMap::default()
    })
}

/// Reports the child as serving; a no-op on the status when it already says so.
fn set_serving(db: &Database, step: &mut Step<Database>) -> Result<(), HandlerError> {
    step.set_condition(
        DatabaseCondition::PodsReady,
        true,
        "ChildReady",
        format!(
            "{} replica(s) of version {}",
            db.spec.replicas, db.spec.version
        ),
    )?;
    step.set_condition(
        DatabaseCondition::ServiceAvailable,
        true,
        "Serving",
        format!("answers at {}", endpoint(db)),
    )?;
    Ok(())
}

impl DatabaseHandler for Handlers {
    type Error = HandlerError;

    /// Nothing to check: accept at once. The engine folds initialisation into this step, so
    /// the first status write already says `Provisioning`.
    async fn on_pending(
        &self,
        _db: &Database,
        _step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, HandlerError> {
        Counters::bump(&self.counters.pending);
        Ok(DatabasePendingEvent::Accept.into())
    }

    /// Creates the child and reports it ready in the same step, so the `when PodsReady` rule
    /// moves the object to Running in the same (second) status write.
    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, HandlerError> {
        Counters::bump(&self.counters.provisioning);
        self.ensure_child(db).await?;
        set_serving(db, step)?;
        Ok(Next::Stay)
    }

    /// Reads the child: present → the same conditions as before (no write); data drifted or the
    /// spec changed → one child patch; gone → both conditions False, and the
    /// `when !ServiceAvailable` rule moves the object to Degraded.
    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, HandlerError> {
        Counters::bump(&self.counters.running);
        let children = self.children(db);
        Counters::bump(&self.counters.child_reads);
        match children.get_opt(&db.name_any()).await? {
            Some(child) => {
                let desired = desired_data(db);
                if child.data.as_ref() != Some(&desired) {
                    let patch = serde_json::json!({ "data": desired });
                    children
                        .patch(
                            &db.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await?;
                    Counters::bump(&self.counters.child_patched);
                }
                set_serving(db, step)?;
            }
            None => {
                step.set_condition(
                    DatabaseCondition::PodsReady,
                    false,
                    "ChildMissing",
                    format!("ConfigMap {} is gone", db.name_any()),
                )?;
                step.set_condition(
                    DatabaseCondition::ServiceAvailable,
                    false,
                    "ChildMissing",
                    "no pods to answer",
                )?;
            }
        }
        Ok(Next::Stay)
    }

    /// Recreates the child; with both conditions True again the
    /// `when [ServiceAvailable, PodsReady]` rule moves the object back to Running.
    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, HandlerError> {
        Counters::bump(&self.counters.degraded);
        self.ensure_child(db).await?;
        set_serving(db, step)?;
        Ok(Next::Stay)
    }

    /// Deletes the child. A real cluster's garbage collector would do it through the
    /// ownerReference, but deleting it here also works where none runs (envtest).
    async fn cleanup(&self, db: &Database) -> Result<Cleanup, HandlerError> {
        Counters::bump(&self.counters.cleanup);
        match self
            .children(db)
            .delete(&db.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => Counters::bump(&self.counters.child_deleted),
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(err) => return Err(err.into()),
        }
        Ok(Cleanup::Done)
    }
}

/// The Database CRD: the derived one plus the machine's CEL rules and printer columns
/// (Phase, Ready = the ServiceAvailable condition, Age), from [`kube_fsm::crd`].
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    kube_fsm::crd::<Database>()
}

/// [`crd`] as YAML, for `kubectl apply -f -`.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&crd())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use kube::client::Body;
    use kube_fsm::testing;

    use super::*;

    /// Handlers whose client talks to a canned API server: `answer(method, path)` gives the
    /// status code and JSON body; every request is recorded as `METHOD path`.
    fn handlers_with(
        answer: fn(&str, &str) -> (u16, serde_json::Value),
    ) -> (Handlers, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let service = tower::service_fn(move |request: http::Request<Body>| {
            let (method, path) = (
                request.method().to_string(),
                request.uri().path().to_owned(),
            );
            log.lock().expect("log").push(format!("{method} {path}"));
            let (code, body) = answer(&method, &path);
            async move {
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string().into_bytes()))
            }
        });
        (Handlers::new(Client::new(service, "ns")), seen)
    }

    fn status(code: u16, reason: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": reason, "code": code, "message": reason,
        })
    }

    fn database() -> Database {
        let mut db = Database::new("db", DatabaseSpec::default());
        db.metadata.namespace = Some("ns".into());
        db.metadata.uid = Some("uid-1".into());
        db.metadata.generation = Some(1);
        db
    }

    fn child(db: &Database) -> serde_json::Value {
        serde_json::to_value(desired_child(db).expect("the object has a uid")).expect("encodes")
    }

    #[tokio::test]
    async fn pending_accepts_and_the_first_write_says_provisioning() {
        let (handlers, seen) = handlers_with(|_, _| (500, status(500, "Unexpected")));
        let outcome = testing::step(&handlers, &database()).await.expect("no I/O");
        assert_eq!(outcome.phase, DatabasePhase::Provisioning);
        assert!(outcome.writes_status);
        assert_eq!(outcome.transition.map(|t| t.reason), Some("Accept"));
        assert!(seen.lock().expect("log").is_empty(), "Pending asks nothing");
    }

    #[tokio::test]
    async fn provisioning_creates_the_child_and_runs_in_the_same_step() {
        let (handlers, seen) = handlers_with(|_, _| (201, child(&database())));
        let db = testing::in_phase(database(), DatabasePhase::Provisioning);
        let outcome = testing::step(&handlers, &db).await.expect("child created");
        assert_eq!(outcome.phase, DatabasePhase::Running);
        assert_eq!(outcome.condition(DatabaseCondition::PodsReady), Some(true));
        assert_eq!(
            *seen.lock().expect("log"),
            ["POST /api/v1/namespaces/ns/configmaps"]
        );
    }

    #[tokio::test]
    async fn an_existing_child_is_as_good_as_a_created_one() {
        let (handlers, _) = handlers_with(|_, _| (409, status(409, "AlreadyExists")));
        let db = testing::in_phase(database(), DatabasePhase::Provisioning);
        let outcome = testing::step(&handlers, &db).await.expect("already exists");
        assert_eq!(outcome.phase, DatabasePhase::Running);
        assert_eq!(Counters::get(&handlers.counters().child_existed), 1);
    }

    #[tokio::test]
    async fn a_converged_running_object_writes_nothing() {
        let (handlers, seen) = handlers_with(|_, _| (200, child(&database())));
        let mut db = testing::in_phase(database(), DatabasePhase::Provisioning);
        let provisioned = testing::step(&handlers, &db).await.expect("provisioned");
        testing::apply(&mut db, &provisioned);
        let running = testing::step(&handlers, &db).await.expect("checked");
        assert_eq!(running.phase, DatabasePhase::Running);
        assert!(!running.writes_status, "same conditions: no status write");
        assert_eq!(running.requeue, None, "Running waits for a change");
        assert_eq!(
            seen.lock().expect("log").last().map(String::as_str),
            Some("GET /api/v1/namespaces/ns/configmaps/db"),
            "one read, no child write"
        );
    }

    #[tokio::test]
    async fn a_lost_child_degrades_and_degraded_recovers() {
        let (handlers, _) = handlers_with(|method, _| match method {
            "GET" => (404, status(404, "NotFound")),
            _ => (201, child(&database())),
        });
        let mut db = testing::in_phase(database(), DatabasePhase::Running);
        let lost = testing::step(&handlers, &db).await.expect("checked");
        assert_eq!(lost.phase, DatabasePhase::Degraded);
        assert_eq!(
            lost.condition(DatabaseCondition::ServiceAvailable),
            Some(false)
        );
        testing::apply(&mut db, &lost);
        let recovered = testing::step(&handlers, &db).await.expect("recreated");
        assert_eq!(recovered.phase, DatabasePhase::Running);
        assert_eq!(Counters::get(&handlers.counters().child_created), 1);
    }

    #[tokio::test]
    async fn a_drifted_child_is_patched_once() {
        let (handlers, seen) = handlers_with(|method, _| {
            let mut child = child(&database());
            if method == "GET" {
                child["data"]["replicas"] = "7".into();
            }
            (200, child)
        });
        let db = testing::in_phase(database(), DatabasePhase::Running);
        testing::step(&handlers, &db).await.expect("repaired");
        assert_eq!(
            *seen.lock().expect("log"),
            [
                "GET /api/v1/namespaces/ns/configmaps/db",
                "PATCH /api/v1/namespaces/ns/configmaps/db"
            ]
        );
    }

    #[tokio::test]
    async fn cleanup_is_done_when_the_child_is_already_gone() {
        let (handlers, _) = handlers_with(|_, _| (404, status(404, "NotFound")));
        let done = DatabaseHandler::cleanup(&handlers, &database()).await;
        assert_eq!(done.expect("a missing child is fine"), Cleanup::Done);
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
        assert_eq!(
            child_selector(),
            "app.kubernetes.io/managed-by=kube-fsm-examples"
        );
    }

    /// `crd` prints exactly the checked-in `examples/snapshots/database-crd.yaml`
    /// (`UPDATE_SNAPSHOTS=1` rewrites it after a deliberate change).
    #[test]
    fn crd_yaml_matches_the_snapshot() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots/database-crd.yaml");
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
}
