//! The hand-written reference of the scale run (`scale`): the example's Database job done with
//! plain kube-rs 5 and no kube-fsm — no Events, no finalizer, no conditions — so that every
//! figure of kube-fsm's operator is a ratio against the same job done by hand in one run.
//!
//! Pending (no phase) → `Provisioning`; Provisioning → server-side apply of the child ConfigMap
//! (skipped when the cached child holds the data) and `Running` with `status.endpoint`; Running
//! → nothing while the child is cached. Status writes are made only when the status changes,
//! locked on the resourceVersion read, and a stale-cache guard skips an object whose cached copy
//! is older than this controller's last write of it (two status writes and one child write per
//! object, as kube-fsm's).
//!
//! `reference-controller [--finalizer] [--events] [--same-status]` runs until SIGTERM or Ctrl-C, on every namespace, with
//! the cluster of `KUBECONFIG`. With `--finalizer` it also holds each object with a finalizer
//! as kube-fsm's engine does (added, locked on the resourceVersion, in the object's first
//! reconcile, which then goes on with the returned object; removed on deletion), so that the
//! two can be compared doing exactly the same writes. With `--events` it records a Normal
//! Event of each transition it writes (as kube-fsm's `--events all` does, through kube's
//! `Recorder`). With `--same-status` it also writes
//! the status in kube-fsm's shape (the example's two Conditions, the kstatus `Ready` and, while
//! provisioning, `Reconciling` conditions, `observedGeneration`, `lastPhaseTransitionTime`,
//! `enteredPhase`) and the child with the example's labels, so that the objects have the same
//! size and only the engines differ.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The example's Database, declared by hand (same group, version, kind and fields).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.kube-fsm.dev",
    version = "v1",
    kind = "Database",
    namespaced,
    status = "DatabaseStatus"
)]
struct DatabaseSpec {
    #[serde(default)]
    version: String,
    #[serde(default)]
    replicas: u32,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct DatabaseStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    // kube-fsm's fields, decoded as a hand-written controller with Conditions would.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_phase_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    entered_phase: Option<String>,
}

const MANAGER: &str = "reference-controller";
const FINALIZER: &str = "example.kube-fsm.dev/reference";

struct State {
    client: Client,
    finalizer: bool,
    /// Write kube-fsm's status shape (`--same-status`).
    same_status: bool,
    children: Store<ConfigMap>,
    /// Records an Event of each transition written (`--events`).
    recorder: Option<Recorder>,
    /// The resourceVersion of this controller's last status write, per object.
    written: Mutex<HashMap<String, u64>>,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Error(#[from] kube::Error);

fn version_of<K: Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn endpoint(db: &Database) -> String {
    format!(
        "{}.{}.svc:5432",
        db.name_any(),
        db.namespace().unwrap_or_default()
    )
}

fn child(db: &Database, same_status: bool) -> ConfigMap {
    let mut labels = BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_owned(),
        "kube-fsm-examples".to_owned(),
    )]);
    if same_status {
        labels.insert("example.kube-fsm.dev/database".to_owned(), db.name_any());
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(db.name_any()),
            namespace: db.namespace(),
            labels: Some(labels),
            owner_references: db.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("version".to_owned(), db.spec.version.clone()),
            ("replicas".to_owned(), db.spec.replicas.to_string()),
            ("endpoint".to_owned(), endpoint(db)),
        ])),
        ..ConfigMap::default()
    }
}

/// The status kube-fsm's example writes on entering `phase`, times at whole seconds as kube-fsm
/// stores them: the kstatus conditions (Provisioning: `Ready` False and `Reconciling` True;
/// Running: `Ready` True) and, Running, the spec's two conditions True.
fn machine_status(db: &Database, phase: &str) -> serde_json::Value {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let now = k8s_openapi::jiff::Timestamp::from_second(now).unwrap_or_default();
    let generation = db.meta().generation;
    let condition_of = |type_: &str, status: &str, reason: &str, message: String| {
        json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": now.to_string(),
        })
    };
    let condition =
        |type_: &str, reason: &str, message: String| condition_of(type_, "True", reason, message);
    let conditions = if phase == "Running" {
        vec![
            condition("Ready", "Ready", String::new()),
            condition(
                "PodsReady",
                "ChildReady",
                format!(
                    "{} replica(s) of version {}",
                    db.spec.replicas, db.spec.version
                ),
            ),
            condition(
                "ServiceAvailable",
                "Serving",
                format!("answers at {}", endpoint(db)),
            ),
        ]
    } else {
        vec![
            condition_of(
                "Ready",
                "False",
                "NotReady",
                format!("phase {phase} is not Running"),
            ),
            condition(
                "Reconciling",
                "Progressing",
                format!("phase {phase}: Child resources are being created."),
            ),
        ]
    };
    json!({
        "phase": phase,
        "conditions": conditions,
        "observedGeneration": generation,
        "lastPhaseTransitionTime": now.to_string(),
        "enteredPhase": phase,
    })
}

async fn write_status(
    state: &State,
    api: &Api<Database>,
    db: &Database,
    status: serde_json::Value,
) -> Result<(), Error> {
    let from = db
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".to_owned());
    let to = status["phase"].as_str().unwrap_or_default().to_owned();
    let patch = json!({
        "metadata": { "resourceVersion": db.resource_version() },
        "status": status,
    });
    let params = PatchParams::default();
    match api
        .patch_status(&db.name_any(), &params, &Patch::Merge(&patch))
        .await
    {
        Ok(written) => {
            let key = format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any());
            state
                .written
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(key, version_of(&written));
            if let Some(recorder) = &state.recorder {
                let event = Event {
                    type_: EventType::Normal,
                    reason: "Transition".to_owned(),
                    note: Some(format!("{from} → {to}")),
                    action: "Reconcile".to_owned(),
                    secondary: None,
                };
                if let Err(error) = recorder.publish(&event, &db.object_ref(&())).await {
                    tracing::warn!(%error, "could not record the event");
                }
            }
            Ok(())
        }
        // Someone wrote meanwhile: their event brings the object back.
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => Ok(()),
        Err(err) => Err(err.into()),
    }
}

async fn reconcile(db: Arc<Database>, state: Arc<State>) -> Result<Action, Error> {
    let key = format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any());
    let last = state
        .written
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
        .copied();
    if last.is_some_and(|last| version_of(db.as_ref()) < last) {
        return Ok(Action::await_change());
    }
    let api: Api<Database> =
        Api::namespaced(state.client.clone(), &db.namespace().unwrap_or_default());
    let db = if state.finalizer {
        match hold(&api, db).await? {
            Some(db) => db,
            None => return Ok(Action::await_change()),
        }
    } else {
        db
    };
    let phase = db.status.as_ref().and_then(|s| s.phase.as_deref());
    match phase {
        None => {
            let status = if state.same_status {
                machine_status(&db, "Provisioning")
            } else {
                json!({ "phase": "Provisioning" })
            };
            write_status(&state, &api, &db, status).await?;
        }
        Some("Provisioning") => {
            let desired = child(&db, state.same_status);
            let cached = state
                .children
                .get(&ObjectRef::from_obj(&desired))
                .is_some_and(|c| c.data == desired.data);
            if !cached {
                Api::<ConfigMap>::namespaced(
                    state.client.clone(),
                    &db.namespace().unwrap_or_default(),
                )
                .patch(
                    &db.name_any(),
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(&desired),
                )
                .await?;
            }
            let mut status = if state.same_status {
                machine_status(&db, "Running")
            } else {
                json!({ "phase": "Running" })
            };
            status["endpoint"] = endpoint(&db).into();
            write_status(&state, &api, &db, status).await?;
        }
        _ => {}
    }
    Ok(Action::await_change())
}

/// The finalizer: removed from an object being deleted (then `None`), added to one without it
/// (the object as returned), with a merge patch locked on the resourceVersion read.
async fn hold(api: &Api<Database>, db: Arc<Database>) -> Result<Option<Arc<Database>>, Error> {
    let has = db.finalizers().iter().any(|f| f == FINALIZER);
    let deleting = db.meta().deletion_timestamp.is_some();
    if has != deleting {
        return Ok(Some(db));
    }
    let mut finalizers: Vec<String> = db.finalizers().to_vec();
    if deleting {
        finalizers.retain(|f| f != FINALIZER);
    } else {
        finalizers.push(FINALIZER.to_owned());
    }
    let patch = json!({
        "metadata": { "resourceVersion": db.resource_version(), "finalizers": finalizers },
    });
    match api
        .patch(
            &db.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) if !deleting => Ok(Some(Arc::new(written))),
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.is_conflict() || status.is_not_found() => Ok(None),
        Err(err) => Err(err.into()),
    }
}

fn error_policy(_: Arc<Database>, error: &Error, _: Arc<State>) -> Action {
    tracing::warn!(%error, "reconcile failed");
    Action::requeue(Duration::from_secs(1))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let client = Client::try_default().await?;
    // The children in a store of our own, so that the reconciler reads them without a GET.
    let (children, writer) = reflector::store();
    let child_events = reflector(
        writer,
        watcher::watcher(
            Api::<ConfigMap>::all(client.clone()),
            watcher::Config::default().labels("app.kubernetes.io/managed-by=kube-fsm-examples"),
        ),
    )
    .touched_objects();
    let controller = Controller::new(
        Api::<Database>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns_stream(child_events);
    let recorder = std::env::args()
        .any(|arg| arg == "--events")
        .then(|| Recorder::new(client.clone(), Reporter::from(MANAGER.to_owned())));
    let state = Arc::new(State {
        recorder,
        client,
        finalizer: std::env::args().any(|arg| arg == "--finalizer"),
        same_status: std::env::args().any(|arg| arg == "--same-status"),
        children,
        written: Mutex::new(HashMap::new()),
    });
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, state)
        .for_each(|_| std::future::ready(()))
        .await;
    Ok(())
}
