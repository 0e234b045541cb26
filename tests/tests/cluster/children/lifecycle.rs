//! A declared child's whole life on the control plane, with a machine of the test's own
//! (`Chore`: a worker Pod, a note ConfigMap `after: [worker]`, a seed Secret `apply: once`):
//! the note waits for the Pod to be ready (kwok's node runs it), a child deleted by someone is
//! made again, a field changed by another writer is taken back, an `apply: once` child is never
//! updated, leaving the phase deletes the worker (`onLeave: delete`) and keeps the others, and
//! deleting a Chore removes its ordered children in reverse `after:` order before its
//! finalizer goes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, CustomResource, ResourceExt};
use kube_fsm::children::CHILD_LABEL;
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, MachineStatus, Next, Operator, Step, state_machine};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::Running;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::super::control_plane::control_plane;

/// A chore: a worker Pod, a note written once the worker is ready, a seed made once.
#[state_machine(
    phases(Working(initial), Done(terminal)),
    children(
        worker(type = Pod, phases(Working)),
        note(type = ConfigMap, phases(Working), after(worker), on_leave = keep),
        seed(type = Secret, phases(Working), apply = once, on_leave = keep),
    ),
    conditions(WorkerReady(from = worker.ready), Noted(from = note.ready)),
    transitions(Working -> Done on Finish),
    finalizer = "children.example.com/cleanup",
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "children.example.com",
    version = "v1",
    kind = "Chore",
    namespaced,
    status = "ChoreStatus"
)]
pub struct ChoreSpec {
    /// What the note says.
    pub text: String,
    /// Set to finish the chore.
    #[serde(default)]
    pub finish: bool,
}

/// Status of [`Chore`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChoreStatus {
    /// The machine's fields.
    #[serde(flatten)]
    pub machine: MachineStatus<ChorePhase>,
}

struct Chores;

impl ChoreHandler for Chores {
    type Error = ConditionError;

    async fn on_working(
        &self,
        chore: &Chore,
        _: &mut Step<Chore>,
    ) -> Result<ChoreWorkingNext, ConditionError> {
        Ok(if chore.spec.finish {
            ChoreWorkingEvent::Finish.into()
        } else {
            Next::Stay
        })
    }

    async fn cleanup(&self, _: &Chore, _: &kube_fsm::Context) -> Result<Cleanup, ConditionError> {
        Ok(Cleanup::Done)
    }

    async fn worker(&self, _: &Chore, _: &Step<Chore>) -> Result<Pod, ConditionError> {
        Ok(serde_json::from_value(json!({
            "spec": { "containers": [{ "name": "work", "image": "registry.k8s.io/pause:3.10" }] },
        }))
        .expect("a Pod"))
    }

    async fn note(&self, chore: &Chore, _: &Step<Chore>) -> Result<ConfigMap, ConditionError> {
        Ok(ConfigMap {
            data: Some(BTreeMap::from([(
                "text".to_owned(),
                chore.spec.text.clone(),
            )])),
            ..ConfigMap::default()
        })
    }

    async fn seed(&self, chore: &Chore, _: &Step<Chore>) -> Result<Secret, ConditionError> {
        // Changes with the spec: `apply: once` must still never update it.
        Ok(Secret {
            string_data: Some(BTreeMap::from([(
                "seed".to_owned(),
                chore.spec.text.clone(),
            )])),
            ..Secret::default()
        })
    }
}

fn chore(name: &str, text: &str) -> Chore {
    Chore::new(
        name,
        ChoreSpec {
            text: text.into(),
            finish: false,
        },
    )
}

/// The note's text, if it exists.
async fn note_text(maps: &Api<ConfigMap>, name: &str) -> Option<String> {
    let map = maps.get_opt(name).await.ok()??;
    map.data?.get("text").cloned()
}

/// What a watch of `api` saw, as `(revision, "{kind} {name} {what}")`, each line once: `created`
/// (its first event), `ready` (its first with a `Ready` condition True), `terminating` and
/// `gone`. The revisions are etcd's, one sequence for every kind, so events of different
/// watches can be put in the order they were stored in. Returns once the watch has listed
/// what was there, so that what is made afterwards is seen from its creation.
pub(super) async fn record<K>(api: Api<K>, kind: &'static str, seen: Arc<Mutex<Vec<(u64, String)>>>)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + Serialize
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let (listed, ready) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            let (object, gone) = match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, false),
                watcher::Event::Delete(o) => (o, true),
                watcher::Event::InitDone => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                    continue;
                }
                watcher::Event::Init => continue,
            };
            let value = serde_json::to_value(&object).unwrap_or_default();
            let ready = (value
                .pointer("/status/conditions")
                .and_then(|c| c.as_array()))
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            let whats = if gone {
                vec!["gone"]
            } else if object.meta().deletion_timestamp.is_some() {
                vec!["terminating"]
            } else if ready {
                vec!["created", "ready"]
            } else {
                vec!["created"]
            };
            let revision = (object.resource_version())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut seen = seen.lock().expect("lock");
            for what in whats {
                let line = format!("{kind} {} {what}", object.name_any());
                if !seen.iter().any(|(_, l)| *l == line) {
                    seen.push((revision, line));
                }
            }
        }
    });
    ready.await.expect("the watch lists");
}

#[tokio::test]
async fn a_declared_childs_life_follows_the_spec_from_its_first_step_to_its_owners_deletion() {
    let test = "children::lifecycle";
    let Some((client, ns)) = control_plane(test, "cp-chore").await else {
        return;
    };
    cluster::install_crd(&client, kube_fsm::crd::<Chore>()).await;
    let api: Api<Chore> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let running = Running::spawn(
        Operator::<Chore, Chores>::new(client.clone(), Chores).namespace(ns.clone()),
    );

    // The first step applies the worker; the note waits for it, and says so (every stored
    // `Noted` seen by a watch started before the create).
    let notes: Arc<Mutex<Vec<(String, String, String)>>> = Arc::default();
    let watched = notes.clone();
    let chores = api.clone();
    tokio::spawn(async move {
        let mut events = watcher(chores, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            if let watcher::Event::Apply(chore) = event
                && let Some(c) = chore
                    .status
                    .as_ref()
                    .and_then(|s| s.machine.condition("Noted"))
            {
                let seen = (c.status.clone(), c.reason.clone(), c.message.clone());
                let mut all = watched.lock().expect("lock");
                if all.last() != Some(&seen) {
                    all.push(seen);
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.create(&PostParams::default(), &chore("dishes", "wash"))
        .await
        .expect("create");
    let first_noted = eventually(Duration::from_secs(30), || async {
        notes.lock().expect("lock").first().cloned()
    })
    .await
    .expect("Noted is written");
    assert_eq!(
        first_noted,
        (
            "False".to_owned(),
            "Waiting".to_owned(),
            "The child `note` waits for `worker` to be ready before it is applied.".to_owned()
        )
    );

    // kwok runs the Pod: it is ready, so the note is applied, after it.
    let noted = eventually(Duration::from_secs(60), || async {
        let chore = api.get("dishes").await.ok()?;
        let noted = chore.status?.machine.condition("Noted").cloned()?;
        (noted.status == "True").then_some(noted)
    })
    .await
    .expect("the note is applied once the worker is ready");
    let worker = pods.get("dishes-worker").await.expect("the worker Pod");
    let ready_at = (worker.status.and_then(|s| s.conditions).unwrap_or_default())
        .into_iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .expect("the worker is Ready");
    let note = maps.get("dishes-note").await.expect("the note");
    let created = note.creation_timestamp().expect("a creation time");
    assert!(
        created.0 >= ready_at.0,
        "the note ({created:?}) came after the worker was ready ({ready_at:?})"
    );
    assert_eq!(
        note.labels().get(CHILD_LABEL).map(String::as_str),
        Some("note")
    );
    assert_eq!(noted.reason, "Ready");
    let chore_now = api.get("dishes").await.expect("get");
    let worker_ready = chore_now
        .status
        .as_ref()
        .and_then(|s| s.machine.condition("WorkerReady"));
    assert_eq!(worker_ready.map(|c| c.status.as_str()), Some("True"));

    // Someone deletes the note: the engine makes it again.
    maps.delete("dishes-note", &DeleteParams::default())
        .await
        .expect("delete the note");
    let again = eventually(Duration::from_secs(30), || async {
        let map = maps.get_opt("dishes-note").await.ok()??;
        (map.uid() != note.uid()).then_some(map)
    })
    .await;
    assert!(again.is_some(), "a deleted child is made again");

    // Another writer changes the note's text and adds a key of its own: the engine's apply
    // takes its field back and leaves the other writer's alone.
    let theirs = json!({ "data": { "text": "dry", "theirs": "kept" } });
    maps.patch(
        "dishes-note",
        &PatchParams::default(),
        &Patch::Merge(&theirs),
    )
    .await
    .expect("another writer");
    let back = eventually(Duration::from_secs(30), || async {
        (note_text(&maps, "dishes-note").await.as_deref() == Some("wash")).then_some(())
    })
    .await;
    assert!(back.is_some(), "the engine's field is taken back");
    let data = (maps.get("dishes-note").await.expect("the note").data).unwrap_or_default();
    assert_eq!(
        data.get("theirs").map(String::as_str),
        Some("kept"),
        "a field the operator does not own is left alone: {data:?}"
    );

    // The spec changes: the note follows, the `apply: once` seed does not.
    let seed_before = secrets.get("dishes-seed").await.expect("the seed");
    let spec = json!({ "spec": { "text": "scrub" } });
    api.patch("dishes", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .expect("change the spec");
    let followed = eventually(Duration::from_secs(30), || async {
        (note_text(&maps, "dishes-note").await.as_deref() == Some("scrub")).then_some(())
    })
    .await;
    assert!(followed.is_some(), "the note follows the spec");
    let seed_after = secrets.get("dishes-seed").await.expect("the seed");
    assert_eq!(
        (seed_after.resource_version(), seed_after.data),
        (seed_before.resource_version(), seed_before.data),
        "an `apply: once` child is never updated"
    );

    // Finished: the worker is deleted on leaving Working, the note and the seed are kept.
    let finish = json!({ "spec": { "finish": true } });
    api.patch("dishes", &PatchParams::default(), &Patch::Merge(&finish))
        .await
        .expect("finish");
    wait_phase(&api, "dishes", "Done").await;
    let pruned = eventually(Duration::from_secs(60), || async {
        pods.get_opt("dishes-worker")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        pruned.is_some(),
        "the worker is deleted on leaving its phase"
    );
    assert!(
        maps.get_opt("dishes-note").await.expect("get").is_some(),
        "the note is kept"
    );
    assert!(
        secrets.get_opt("dishes-seed").await.expect("get").is_some(),
        "the seed is kept"
    );

    // A second chore, watched from before its creation: its note is stored after its worker
    // is ready; deleted while working, the note goes before the worker, the worker before
    // the finalizer.
    let seen = Arc::new(Mutex::new(Vec::new()));
    record(api.clone(), "chore", seen.clone()).await;
    record(pods.clone(), "pod", seen.clone()).await;
    record(maps.clone(), "map", seen.clone()).await;
    api.create(&PostParams::default(), &chore("laundry", "fold"))
        .await
        .expect("create");
    let applied = eventually(Duration::from_secs(60), || async {
        maps.get_opt("laundry-note").await.ok()?.map(drop)
    })
    .await;
    assert!(applied.is_some(), "the second chore's note is applied");
    api.delete("laundry", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = eventually(Duration::from_secs(60), || async {
        api.get_opt("laundry").await.ok()?.is_none().then_some(())
    })
    .await;
    let mut order = seen.lock().expect("lock").clone();
    order.sort();
    let order: Vec<String> = order.into_iter().map(|(_, line)| line).collect();
    assert!(gone.is_some(), "the chore is deleted: {order:?}");
    let at = |line: &str| {
        order
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line:?} not seen in {order:?}"))
    };
    assert!(
        at("pod laundry-worker ready") < at("map laundry-note created"),
        "the note is made only once the worker is ready: {order:?}"
    );
    assert!(
        at("map laundry-note gone") < at("pod laundry-worker terminating"),
        "{order:?}"
    );
    assert!(
        at("pod laundry-worker gone") < at("chore laundry gone"),
        "{order:?}"
    );
    running.stop().await;
}

/// An `apply: once` child whose object exists before the engine's first step — made by a
/// person, or by the other replica a moment ago, so that it is not among this step's owned
/// children — is never written: not created again, not updated, its data kept.
#[tokio::test]
async fn an_apply_once_child_that_already_exists_is_never_written() {
    let test = "children::apply_once_existing";
    let Some((client, ns)) = control_plane(test, "cp-once").await else {
        return;
    };
    cluster::install_crd(&client, kube_fsm::crd::<Chore>()).await;
    let api: Api<Chore> = Api::namespaced(client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let made = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("laundry-seed".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("seed".to_owned(), "by hand".to_owned())])),
        ..Secret::default()
    };
    let made = secrets
        .create(&PostParams::default(), &made)
        .await
        .expect("the seed, made by hand");
    let running = Running::spawn(
        Operator::<Chore, Chores>::new(client.clone(), Chores).namespace(ns.clone()),
    );
    api.create(&PostParams::default(), &chore("laundry", "from the spec"))
        .await
        .expect("create");
    // The seed's turn is in the first step, beside the worker's: once a step has written the
    // status, it has come and gone.
    let stepped = eventually(Duration::from_secs(30), || async {
        let chore = api.get("laundry").await.ok()?;
        chore.status?.machine.condition("WorkerReady").map(|_| ())
    })
    .await;
    assert!(stepped.is_some(), "a step ran");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seed = secrets.get("laundry-seed").await.expect("the seed");
    assert_eq!(
        seed.resource_version(),
        made.resource_version(),
        "never written: {:?}",
        seed.managed_fields()
    );
    running.stop().await;
}
