//! The benchmarks' stand-in for the Database: the same group, kind, fields, phases and
//! conditions as [`crate::database`] (its machine is `specs/stand-in.yaml`, the tests'
//! reference machine), with one child ConfigMap of the same name
//! standing in for the workload. It is what the API-economy, pace, scale and chaos runs
//! compare against hand-written controllers doing exactly this job on a bare API server, and
//! what the tests that need no controllers run; it reports PodsReady and ServiceAvailable from
//! the ConfigMap alone, so it is not a database: [`crate::database`] is.
//!
//! The handlers are written for API economy (see the book's internals, "API economy"): an
//! object reaches `Running` with two status writes and one child write, and a reconcile of a
//! converged object sends nothing at all: the child is read from the operator's cache and an
//! apply that would change nothing is skipped.
//!
//! - Pending: nothing to check; fires `Accept`. The engine folds status initialisation into
//!   this step, so the first status write already says Provisioning.
//! - Provisioning: applies the child (server-side apply, one request), sets PodsReady and
//!   ServiceAvailable True and `status.endpoint` in the same step, so `when PodsReady` moves
//!   the object to Running in the second status write.
//! - Running: looks the child up in the cache. Present: applies it again (skipped while it
//!   holds the desired data; a drifted or outdated child gets one apply) and keeps the same
//!   conditions, so no status write. Gone: both conditions False, and `when
//!   !ServiceAvailable` moves the object to Degraded.
//! - Degraded: applies the child again and sets both conditions True;
//!   `when [ServiceAvailable, PodsReady]` moves it back to Running.
//! - Deletion (the spec's finalizer): deletes the child, since a bare API server runs no
//!   garbage collector to follow the ownerReference.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DeleteParams;
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, ResourceExt};
use kube_fsm::handler::ContextError;
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, MachineStatus, Next, Operator, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::{MANAGED_BY, child_selector};

/// A database: the spec the user writes.
#[state_machine(spec = "../specs/stand-in.yaml")]
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
    /// Where clients reach the database, once it has been provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// Why a handler failed; the engine logs it and retries the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A request for the child failed, or its cache is missing.
    #[error("child ConfigMap: {0}")]
    Child(#[from] ContextError),
    /// The cleanup's delete failed.
    #[error("child ConfigMap: {0}")]
    Kube(#[from] kube::Error),
    /// A condition was rejected (a bug in this example: reasons are constants).
    #[error(transparent)]
    Condition(#[from] ConditionError),
}

/// The phase handlers. They hold no client: every request goes through the step's (or, in
/// cleanup, the given) `Context`.
#[derive(Clone, Debug, Default)]
pub struct Handlers {
    latency: std::time::Duration,
}

impl Handlers {
    /// Handlers that answer at once.
    pub fn new() -> Self {
        Handlers::default()
    }

    /// Handlers whose Pending and Provisioning steps first wait `latency`, as a real handler
    /// waits on the external system it drives (for the throughput-against-latency benchmark).
    #[must_use]
    pub fn with_latency(mut self, latency: std::time::Duration) -> Self {
        self.latency = latency;
        self
    }
}

/// Applies the child: no request when the cached child already holds the desired fields.
async fn apply_child(db: &Database, step: &Step<Database>) -> Result<(), HandlerError> {
    step.apply(desired_child(db)).await?;
    Ok(())
}

/// The endpoint clients would use.
pub fn endpoint(db: &Database) -> String {
    format!(
        "{}.{}.svc:5432",
        db.name_any(),
        db.namespace().unwrap_or_default()
    )
}

/// The child ConfigMap (the step adds the ownerReference to `db` when it applies it).
fn desired_child(db: &Database) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(db.name_any()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
                ("example.kube-fsm.dev/database".to_owned(), db.name_any()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("version".into(), db.spec.version.clone()),
            ("replicas".into(), db.spec.replicas.to_string()),
            ("endpoint".into(), endpoint(db)),
        ])),
        ..ConfigMap::default()
    }
}

/// Reports the child as serving, with its endpoint; a no-op on the status when it already
/// says so.
fn set_serving(db: &Database, step: &mut Step<Database>) -> Result<(), HandlerError> {
    step.set_condition(
        DatabaseCondition::PodsReady,
        true,
        "ChildReady",
        format!(
            "{} replica(s) of version {} (a ConfigMap stands in for them)",
            db.spec.replicas, db.spec.version
        ),
    )?;
    step.set_condition(
        DatabaseCondition::ServiceAvailable,
        true,
        "Serving",
        format!("answers at {}", endpoint(db)),
    )?;
    step.status_mut().endpoint = Some(endpoint(db));
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
        tokio::time::sleep(self.latency).await;
        Ok(DatabasePendingEvent::Accept.into())
    }

    /// Applies the child and reports it ready, with the endpoint, in the same step, so the
    /// `when PodsReady` rule moves the object to Running in the same (second) status write.
    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, HandlerError> {
        tokio::time::sleep(self.latency).await;
        apply_child(db, step).await?;
        set_serving(db, step)?;
        Ok(Next::Stay)
    }

    /// Looks the child up in the cache: present → applied again (no request while unchanged)
    /// and the same conditions as before (no write); gone → both conditions False, and the
    /// `when !ServiceAvailable` rule moves the object to Degraded.
    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, HandlerError> {
        if step.child::<ConfigMap>(&db.name_any())?.is_some() {
            apply_child(db, step).await?;
            set_serving(db, step)?;
        } else {
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
        Ok(Next::Stay)
    }

    /// Applies the child again; with both conditions True again the
    /// `when [ServiceAvailable, PodsReady]` rule moves the object back to Running.
    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, HandlerError> {
        apply_child(db, step).await?;
        set_serving(db, step)?;
        Ok(Next::Stay)
    }

    /// Deletes the child. A real cluster's garbage collector would do it through the
    /// ownerReference, but deleting it here also works where none runs (envtest).
    async fn cleanup(
        &self,
        db: &Database,
        context: &kube_fsm::Context,
    ) -> Result<Cleanup, HandlerError> {
        let children: Api<ConfigMap> = Api::namespaced(
            context.client().clone(),
            &db.namespace().unwrap_or_else(|| "default".into()),
        );
        match children
            .delete(&db.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(err) => return Err(err.into()),
        }
        Ok(Cleanup::Done)
    }
}

/// The operator for `handlers`: Databases in `namespace` (or everywhere), reconciled again when
/// a child ConfigMap they control changes. Only the children (by label) are watched.
pub fn operator(
    client: Client,
    handlers: Handlers,
    namespace: Option<&str>,
) -> Operator<Database, Handlers> {
    let operator = Operator::<Database, Handlers>::new(client, handlers)
        .reporter("kube-fsm-examples")
        .owns::<ConfigMap>(watcher::Config::default().labels(&child_selector()));
    match namespace {
        Some(namespace) => operator.namespace(namespace),
        None => operator,
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
    use std::sync::Arc;

    use k8s_openapi::jiff::Timestamp;
    use kube_fsm::watch::Cache;
    use kube_fsm::{Context, testing};
    use kube_fsm_testkit::canned::{self, failure};

    use super::*;

    /// A context whose client talks to a canned API server (`answer(method, path)` gives the
    /// status code and JSON body), with `children` in the ConfigMap cache.
    fn context_with(
        answer: fn(&str, &str) -> (u16, serde_json::Value),
        children: Vec<ConfigMap>,
    ) -> (Arc<Context>, canned::Log) {
        let (client, log) = canned::client(move |method, path, _| answer(method, path));
        let context = Context::new(client).with_cache(Cache::from_objects(children));
        (Arc::new(context), log)
    }

    async fn step(
        handlers: &Handlers,
        db: &Database,
        context: &Arc<Context>,
    ) -> testing::Outcome<Database> {
        testing::step_in(handlers, db, Timestamp::now(), context)
            .await
            .expect("the step succeeds")
    }

    fn database() -> Database {
        let mut db = Database::new("db", DatabaseSpec::default());
        db.metadata.namespace = Some("ns".into());
        db.metadata.uid = Some("uid-1".into());
        db.metadata.generation = Some(1);
        db
    }

    /// The child as the server would store it after the apply.
    fn stored_child(db: &Database) -> ConfigMap {
        let mut child = desired_child(db);
        child.metadata.namespace = db.namespace();
        child.metadata.owner_references = kube_fsm::operator::owner_reference(db).map(|o| vec![o]);
        child.metadata.resource_version = Some("5".into());
        child
    }

    fn child_json() -> serde_json::Value {
        serde_json::to_value(stored_child(&database())).expect("encodes")
    }

    #[tokio::test]
    async fn pending_accepts_and_the_first_write_says_provisioning() {
        let (context, seen) = context_with(|_, _| (500, failure(500, "Unexpected")), vec![]);
        let handlers = Handlers::new();
        let outcome = step(&handlers, &database(), &context).await;
        assert_eq!(outcome.phase, DatabasePhase::Provisioning);
        assert!(outcome.writes_status);
        assert_eq!(outcome.transition.map(|t| t.reason), Some("Accept"));
        assert!(seen.lock().expect("log").is_empty(), "Pending asks nothing");
    }

    #[tokio::test]
    async fn provisioning_applies_the_child_and_runs_with_the_endpoint_in_the_same_step() {
        let (context, seen) = context_with(|_, _| (200, child_json()), vec![]);
        let handlers = Handlers::new();
        let db = testing::in_phase(database(), DatabasePhase::Provisioning);
        let outcome = step(&handlers, &db, &context).await;
        assert_eq!(outcome.phase, DatabasePhase::Running);
        assert_eq!(outcome.condition(DatabaseCondition::PodsReady), Some(true));
        assert_eq!(
            outcome.status.endpoint.as_deref(),
            Some("db.ns.svc:5432"),
            "the endpoint rides in the phase's write"
        );
        assert_eq!(
            outcome.patch.as_ref().map(|p| p["endpoint"].clone()),
            Some("db.ns.svc:5432".into())
        );
        assert_eq!(
            *seen.lock().expect("log"),
            ["PATCH /api/v1/namespaces/ns/configmaps/db"],
            "one server-side apply"
        );
    }

    #[tokio::test]
    async fn a_converged_running_object_sends_nothing() {
        let db = database();
        let (context, seen) = context_with(|_, _| (200, child_json()), vec![stored_child(&db)]);
        let handlers = Handlers::new();
        let mut db = testing::in_phase(db, DatabasePhase::Provisioning);
        let provisioned = step(&handlers, &db, &context).await;
        assert_eq!(provisioned.phase, DatabasePhase::Running);
        assert!(
            seen.lock().expect("log").is_empty(),
            "the cached child already holds the desired data: its apply is skipped"
        );
        testing::apply(&mut db, &provisioned);
        let running = step(&handlers, &db, &context).await;
        assert_eq!(running.phase, DatabasePhase::Running);
        assert!(
            !running.writes_status,
            "same conditions and endpoint: no status write"
        );
        assert_eq!(running.requeue, None, "Running waits for a change");
        assert!(
            seen.lock().expect("log").is_empty(),
            "the child comes from the cache and holds the desired data: no request"
        );
    }

    #[tokio::test]
    async fn a_lost_child_degrades_and_degraded_recovers() {
        let (context, seen) = context_with(|_, _| (200, child_json()), vec![]);
        let handlers = Handlers::new();
        let mut db = testing::in_phase(database(), DatabasePhase::Running);
        let lost = step(&handlers, &db, &context).await;
        assert_eq!(lost.phase, DatabasePhase::Degraded);
        assert_eq!(
            lost.condition(DatabaseCondition::ServiceAvailable),
            Some(false)
        );
        assert!(
            seen.lock().expect("log").is_empty(),
            "Running applies nothing without a child"
        );
        testing::apply(&mut db, &lost);
        let recovered = step(&handlers, &db, &context).await;
        assert_eq!(recovered.phase, DatabasePhase::Running);
        assert_eq!(
            *seen.lock().expect("log"),
            ["PATCH /api/v1/namespaces/ns/configmaps/db"],
            "Degraded applies the child again: one request"
        );
    }

    #[tokio::test]
    async fn a_drifted_child_is_applied_once() {
        let db = database();
        let mut drifted = stored_child(&db);
        if let Some(data) = drifted.data.as_mut() {
            data.insert("replicas".into(), "7".into());
        }
        let (context, seen) = context_with(|_, _| (200, child_json()), vec![drifted]);
        let handlers = Handlers::new();
        let db = testing::in_phase(db, DatabasePhase::Running);
        step(&handlers, &db, &context).await;
        assert_eq!(
            *seen.lock().expect("log"),
            ["PATCH /api/v1/namespaces/ns/configmaps/db"]
        );
    }

    #[tokio::test]
    async fn cleanup_is_done_when_the_child_is_already_gone() {
        let (context, _) = context_with(|_, _| (404, failure(404, "NotFound")), vec![]);
        let handlers = Handlers::new();
        let done = DatabaseHandler::cleanup(&handlers, &database(), &context).await;
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

    /// The stand-in's CRD is the Database's but for the machine's annotation (its `when`
    /// rules differ): the benchmarks' objects are Databases, with the same group, kind,
    /// fields, phases and printer columns.
    #[test]
    fn its_crd_is_the_databases_but_for_its_rules() {
        let without_machine = |crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| {
            let mut crd = serde_json::to_value(crd).expect("CRD encodes");
            crd["metadata"]["annotations"]
                .as_object_mut()
                .expect("annotations")
                .remove("kube-fsm.dev/machine")
                .expect("the machine's annotation");
            crd
        };
        assert_eq!(
            without_machine(crd()),
            without_machine(crate::database::crd())
        );
    }
}
