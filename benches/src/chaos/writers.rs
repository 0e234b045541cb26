//! The chaos run's external writers: legal and illegal status edits, edits into the terminal
//! phase, spec changes, deletions in every phase, objects created with an undeclared phase, and
//! plain creations — and where each object must end because of them.

use std::collections::{BTreeMap, HashMap};

use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use kube_fsm_testkit::resources::{Database, sample};
use serde_json::json;

/// The label that marks a run's objects (value: the run id).
pub const LABEL: &str = "kube-fsm-chaos";
/// The writers' field manager.
pub const WRITER: &str = "chaos-writer";

/// What the external writers did that decides where an object must end.
#[derive(Debug, Default)]
pub struct Expect {
    /// Objects set to the terminal phase by hand.
    pub failed: HashMap<String, ()>,
    /// Objects created with an undeclared phase, to correct once faults stop.
    pub undeclared: Vec<(String, String)>,
    /// Actions by kind.
    pub actions: BTreeMap<&'static str, u64>,
    /// How many of [`FIRST_OF_EACH`] are done.
    first_done: usize,
    /// Actions the API server refused, by kind.
    pub refused: BTreeMap<&'static str, u64>,
    /// The last refusal.
    pub last_error: Option<String>,
}

pub fn key(db: &Database) -> String {
    format!("{}/{}", db.namespace().unwrap_or_default(), db.name_any())
}

pub fn new_db(name: &str, ns: &str, run: &str) -> Database {
    let mut db = sample(name);
    db.metadata = ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: Some([(LABEL.to_owned(), run.to_owned())].into()),
        ..ObjectMeta::default()
    };
    db
}

/// Where each kind of action starts in the draw out of 100 (legal edit 20 %, edit to Failed 8 %,
/// illegal edit 20 %, spec change 15 %, delete 17 %, create undeclared 8 %, create 12 %), in the
/// order the run first makes one of each: creations first, edits once objects got somewhere.
const FIRST_OF_EACH: [u32; 7] = [88, 80, 48, 63, 0, 20, 28];

/// One external action on the run's objects: one of each kind first, then drawn at random.
pub async fn act(
    client: &Client,
    run: &str,
    namespaces: &[String],
    expect: &mut Expect,
    serial: &mut u64,
) {
    let first = FIRST_OF_EACH.get(expect.first_done).copied();
    let roll = first.unwrap_or_else(|| fastrand::u32(..100));
    let ns = &namespaces[fastrand::usize(..namespaces.len())];
    let api: Api<Database> = Api::namespaced(client.clone(), ns);
    let params = PatchParams {
        field_manager: Some(WRITER.into()),
        ..PatchParams::default()
    };
    let Ok(list) = api
        .list(&ListParams::default().labels(&format!("{LABEL}={run}")))
        .await
    else {
        return;
    };
    let live: Vec<&Database> = list
        .items
        .iter()
        .filter(|d| d.meta().deletion_timestamp.is_none())
        .collect();
    let phase_of = |d: &Database| {
        d.status
            .as_ref()
            .and_then(|s| s.machine.phase.as_ref())
            .map(|p| p.as_str().to_owned())
    };
    let name = |prefix: &str, serial: &mut u64| {
        *serial += 1;
        format!("{prefix}-{serial}")
    };
    let pick = || live.get(fastrand::usize(..live.len().max(1))).copied();
    let status_edit = |phase: &'static str| json!({ "status": { "phase": phase } });
    let (kind, result) = match roll {
        0..20 => {
            // A legal edit: Running -> Degraded (the rules lead back to Running).
            let Some(db) = live
                .iter()
                .find(|d| phase_of(d).as_deref() == Some("Running"))
            else {
                return;
            };
            (
                "legal edit",
                api.patch_status(
                    &db.name_any(),
                    &params,
                    &Patch::Merge(&status_edit("Degraded")),
                )
                .await
                .map(drop),
            )
        }
        20..28 => {
            // A legal edit into the terminal phase: the object must stay Failed.
            let Some(db) = live
                .iter()
                .find(|d| matches!(phase_of(d).as_deref(), Some("Running" | "Provisioning")))
            else {
                return;
            };
            let result = api
                .patch_status(
                    &db.name_any(),
                    &params,
                    &Patch::Merge(&status_edit("Failed")),
                )
                .await
                .map(drop);
            if result.is_ok() {
                expect.failed.insert(key(db), ());
            }
            ("edit to Failed", result)
        }
        28..48 => {
            // An illegal edit (1.20 runs no CEL): the engine reports it and, by `drift: adopt`,
            // continues from the phase found.
            let Some(db) = live
                .iter()
                .find(|d| phase_of(d).as_deref() == Some("Running"))
            else {
                return;
            };
            (
                "illegal edit",
                api.patch_status(
                    &db.name_any(),
                    &params,
                    &Patch::Merge(&status_edit("Pending")),
                )
                .await
                .map(drop),
            )
        }
        48..63 => {
            let Some(db) = pick() else { return };
            let version = format!("{}", 10 + fastrand::u32(..90));
            let patch = json!({ "spec": { "version": version } });
            (
                "spec change",
                api.patch(&db.name_any(), &params, &Patch::Merge(&patch))
                    .await
                    .map(drop),
            )
        }
        63..80 => {
            let Some(db) = pick() else { return };
            expect.failed.remove(&key(db));
            (
                "delete",
                api.delete(&db.name_any(), &DeleteParams::default())
                    .await
                    .map(drop),
            )
        }
        80..88 => {
            // An object of an older spec: an undeclared phase from the start.
            let name = name("undeclared", serial);
            let created = api
                .create(&PostParams::default(), &new_db(&name, ns, run))
                .await;
            let result = match created {
                Ok(_) => api
                    .patch_status(&name, &params, &Patch::Merge(&status_edit("Archived")))
                    .await
                    .map(drop),
                Err(err) => Err(err),
            };
            if result.is_ok() {
                expect.undeclared.push((ns.clone(), name));
            }
            ("create undeclared", result)
        }
        _ => {
            let name = name("late", serial);
            (
                "create",
                api.create(&PostParams::default(), &new_db(&name, ns, run))
                    .await
                    .map(drop),
            )
        }
    };
    if first.is_some() {
        expect.first_done += 1;
    }
    match result {
        Ok(()) => *expect.actions.entry(kind).or_default() += 1,
        Err(err) => {
            *expect.refused.entry(kind).or_default() += 1;
            expect.last_error = Some(err.to_string());
        }
    }
}

/// Where every object must end: Failed if set so by hand, else Running; deleted ones gone.
pub async fn unconverged(
    client: &Client,
    run: &str,
    expect: &Expect,
) -> Result<Vec<String>, kube::Error> {
    let api: Api<Database> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().labels(&format!("{LABEL}={run}")))
        .await?;
    Ok(list
        .items
        .iter()
        .filter_map(|db| {
            let phase = db
                .status
                .as_ref()
                .and_then(|s| s.machine.phase.as_ref())
                .map(|p| p.as_str().to_owned());
            let want = if expect.failed.contains_key(&key(db)) {
                "Failed"
            } else {
                "Running"
            };
            let ok = db.meta().deletion_timestamp.is_none() && phase.as_deref() == Some(want);
            (!ok).then(|| {
                format!(
                    "{} is {phase:?}{}",
                    key(db),
                    if db.meta().deletion_timestamp.is_some() {
                        " (deleting)"
                    } else {
                        ""
                    }
                )
            })
        })
        .collect())
}
