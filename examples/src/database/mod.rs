//! The `Database` custom resource, driven by `specs/database.yaml`: a database that runs as a
//! StatefulSet whose state the cluster's controllers write.
//!
//! The spec declares its three children (`children:`), which the engine applies server-side
//! from the operator's cache (no request while they hold what is desired) with the Database
//! as their controller owner, so that the garbage collector removes them, and the pods, with
//! it; the handler only builds them ([`workload`]): a credentials Secret (`apply: once`: made
//! once, never rotated), a headless Service, and a StatefulSet of `spec.replicas` pods of
//! `postgres:<spec.version>`, one per node, applied only once the credentials exist
//! (`after: [credentials]`). Its two conditions come from what the controllers report, never
//! from the handler's hopes:
//!
//! - `PodsReady` (`from: db.ready`): the engine's, by kstatus's rules for a StatefulSet —
//!   observed generation, ready replicas = desired, the current revision everywhere — with
//!   kstatus's message;
//! - `ServiceAvailable`: the handler's, from the Service's EndpointSlices ([`health`]) — at
//!   least one ready endpoint.
//!
//! Phases: Pending accepts at once; in Provisioning the engine applies the children and the
//! rule `when [PodsReady, ServiceAvailable]` moves it to Running (or Failed after its
//! 10-minute timeout); Running goes Degraded when a replica is lost (`when !PodsReady`, e.g.
//! a node taken away: its pod cannot run on another node that already has one) and Degraded
//! back to Running when every replica is ready again. Deletion needs no cleanup: the garbage
//! collector follows the ownerReferences.

pub mod health;
pub mod workload;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, CustomResource, ResourceExt};
use kube_fsm::handler::ContextError;
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, MachineStatus, Next, Operator, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use self::workload::endpoint;
pub use crate::{MANAGED_BY, child_selector};

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
    /// Where clients reach the database, once it has been provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// Why a handler failed; the engine logs it and retries the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The cache of EndpointSlices is missing.
    #[error("the database's endpoints: {0}")]
    Child(#[from] ContextError),
    /// The operating system gave no random bytes for the credentials.
    #[error("the database's credentials: {0}")]
    Random(#[from] getrandom::Error),
    /// A condition was rejected (a bug in this example: reasons are constants).
    #[error(transparent)]
    Condition(#[from] ConditionError),
}

/// The phase handlers. They hold no client: every request goes through the step's `Context`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handlers;

/// The name of the index of EndpointSlices by their Service (`namespace/name`) that the
/// handlers read ([`service_key`] gives the keys).
pub const BY_SERVICE: &str = "service";

/// An EndpointSlice's Service: its namespace and name.
fn service_of(slice: &EndpointSlice) -> Option<(String, String)> {
    let service = slice.labels().get("kubernetes.io/service-name")?;
    Some((slice.namespace().unwrap_or_default(), service.clone()))
}

/// An EndpointSlice's key in [`BY_SERVICE`]: its Service as `namespace/name`.
#[must_use]
pub fn service_key(slice: &EndpointSlice) -> Vec<String> {
    service_of(slice)
        .map(|(namespace, name)| format!("{namespace}/{name}"))
        .into_iter()
        .collect()
}

/// Sets `ServiceAvailable`, and the endpoint once something answers, from the Service's
/// EndpointSlices (the engine has applied the children and derived `PodsReady`).
fn observe(db: &Database, step: &mut Step<Database>) -> Result<(), HandlerError> {
    let key = format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any());
    let slices = step.cache::<EndpointSlice>()?.indexed(BY_SERVICE, &key);
    let service = health::service_available(&slices, &endpoint(db));
    step.set_condition(
        DatabaseCondition::ServiceAvailable,
        service.holds,
        service.reason,
        service.message,
    )?;
    if service.holds {
        step.status_mut().endpoint = Some(endpoint(db));
    }
    Ok(())
}

impl DatabaseHandler for Handlers {
    type Error = HandlerError;

    /// Nothing to check: accept at once (the first status write already says Provisioning).
    async fn on_pending(
        &self,
        _db: &Database,
        _step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, HandlerError> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    /// `when [PodsReady, ServiceAvailable]` moves it to Running once the controllers report
    /// every replica ready and the Service answering.
    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, HandlerError> {
        observe(db, step)?;
        Ok(Next::Stay)
    }

    /// A replica lost makes `PodsReady` False, and `when !PodsReady` moves it to Degraded.
    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, HandlerError> {
        observe(db, step)?;
        Ok(Next::Stay)
    }

    /// The same; `when [ServiceAvailable, PodsReady]` moves it back to Running.
    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, HandlerError> {
        observe(db, step)?;
        Ok(Next::Stay)
    }

    /// The credentials, made once (the engine does not call this while they exist).
    async fn credentials(
        &self,
        db: &Database,
        _step: &Step<Database>,
    ) -> Result<Secret, HandlerError> {
        Ok(workload::credentials(db)?)
    }

    /// The headless Service.
    async fn service(
        &self,
        db: &Database,
        _step: &Step<Database>,
    ) -> Result<Service, HandlerError> {
        Ok(workload::service(db))
    }

    /// The StatefulSet.
    async fn db(&self, db: &Database, _step: &Step<Database>) -> Result<StatefulSet, HandlerError> {
        Ok(workload::stateful_set(db))
    }

    /// Nothing to do: the garbage collector deletes the children through their
    /// ownerReferences once the Database is gone.
    async fn cleanup(
        &self,
        _db: &Database,
        _context: &kube_fsm::Context,
    ) -> Result<Cleanup, HandlerError> {
        Ok(Cleanup::Done)
    }
}

/// The operator: Databases in `namespace` (or everywhere), reconciled again when a child they
/// own changes (the spec's children are watched; the `owns` here narrow those watches to the
/// examples' label) or when their Service's EndpointSlices do (the EndpointSlice controller
/// copies the Service's labels onto them).
pub fn operator(client: Client, namespace: Option<&str>) -> Operator<Database, Handlers> {
    let labelled = || watcher::Config::default().labels(&child_selector());
    let operator = Operator::<Database, Handlers>::new(client, Handlers)
        .reporter("kube-fsm-examples")
        .owns::<StatefulSet>(labelled())
        .owns::<Service>(labelled())
        .owns::<Secret>(labelled())
        .watches::<EndpointSlice, _>(labelled(), |slice| {
            service_of(&slice).map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
        })
        .index::<EndpointSlice>(BY_SERVICE, service_key);
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
mod tests;
