//! Pausing and reconcile-now on the real API server: a paused object is left alone past its
//! timeout (its status is not written: the API server counts no status PATCH of the kind and the
//! object's resourceVersion does not move), the time paused does not count toward the timeout
//! once it resumes, deletion still runs cleanup while paused, and a reconcile request is
//! handled at once in the middle of a failure backoff (after the failures made the object
//! `Stalled`) and recorded in the status.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
#[error("told to fail by the test/fail annotation")]
struct Told;

/// Finishes when annotated `test/finish`, fails while annotated `test/fail`, otherwise waits
/// (and times out); counts its calls and cleanups.
#[derive(Clone, Default)]
struct Sleepers {
    calls: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

impl SleeperHandler for Sleepers {
    type Error = Told;

    async fn on_waiting(
        &self,
        sleeper: &Sleeper,
        _: &mut Step<Sleeper>,
    ) -> Result<SleeperWaitingNext, Told> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let annotations = sleeper.annotations();
        if annotations.contains_key("test/fail") {
            return Err(Told);
        }
        if annotations.contains_key("test/finish") {
            return Ok(SleeperWaitingEvent::Finish.into());
        }
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Sleeper, _: &kube_fsm::Context) -> Result<kube_fsm::Cleanup, Told> {
        self.cleanups.fetch_add(1, Ordering::SeqCst);
        Ok(kube_fsm::Cleanup::Done)
    }
}

async fn annotate(api: &Api<Sleeper>, name: &str, annotations: serde_json::Value) {
    let patch = Patch::Merge(json!({ "metadata": { "annotations": annotations } }));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .expect("annotate");
}

fn condition(sleeper: &Sleeper, type_: &str) -> Option<(String, String, String)> {
    let c = sleeper.status.as_ref()?.machine.condition(type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_for(
    api: &Api<Sleeper>,
    name: &str,
    what: &str,
    test: impl Fn(&Sleeper) -> bool,
) -> Sleeper {
    eventually(Duration::from_secs(20), || async {
        api.get(name).await.ok().filter(|s| test(s))
    })
    .await
    .unwrap_or_else(|| panic!("{name}: {what}"))
}

/// An operator of Sleepers in `ns`: their API, its handlers (to count calls) and the operator.
fn start(client: &kube::Client, ns: &str) -> (Api<Sleeper>, Sleepers, Running) {
    let handlers = Sleepers::default();
    let operator = Running::spawn(operator::in_namespace::<Sleeper, _>(
        client,
        ns,
        handlers.clone(),
    ));
    (Api::namespaced(client.clone(), ns), handlers, operator)
}

/// The tests of this file one at a time: the first counts every status PATCH of Sleepers the
/// API server answers, so no other may write one meanwhile.
static SLEEPERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Status PATCHes of Sleepers the API server has answered (only this file's tests write them).
async fn status_writes(client: &kube::Client) -> u64 {
    cluster::requests(
        client,
        &[
            ("verb", "PATCH"),
            ("resource", "sleepers"),
            ("subresource", "status"),
        ],
    )
    .await
}

#[tokio::test]
async fn a_paused_object_is_left_alone_past_its_timeout_and_resumes_with_the_paused_time_excluded()
{
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::timeout", "fsm-pause").await else {
        return;
    };
    let (api, handlers, operator) = start(&client, &ns);
    api.create(&PostParams::default(), &Sleeper::new("s", SleeperSpec {}))
        .await
        .expect("create");
    wait_phase(&api, "s", "Waiting").await;
    annotate(
        &api,
        "s",
        json!({ "kube-fsm.dev/paused": "INC-42: disk full" }),
    )
    .await;
    let paused = wait_for(&api, "s", "the Paused condition", |s| {
        condition(s, "Paused").is_some_and(|c| c.0 == "True")
    })
    .await;
    assert_eq!(
        condition(&paused, "Paused"),
        Some((
            "True".into(),
            "PausedByAnnotation".into(),
            "paused by the kube-fsm.dev/paused annotation: INC-42: disk full".into()
        ))
    );
    let (version, writes, calls) = (
        paused.resource_version(),
        status_writes(&client).await,
        handlers.calls.load(Ordering::SeqCst),
    );

    // Twice the 3 s timeout: nothing moves, nothing is written, no handler runs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held = api.get("s").await.expect("get");
    assert_eq!(cluster::phase_of(&held).as_deref(), Some("Waiting"));
    assert_eq!(held.resource_version(), version, "no write while paused");
    assert_eq!(status_writes(&client).await, writes, "no status PATCH");
    assert_eq!(handlers.calls.load(Ordering::SeqCst), calls, "no step");
    assert_eq!(cluster::events(&client, &ns, "Paused").await.len(), 1);

    // Resumed: not timed out (6 s of the 3 s were paused), the time paused recorded.
    annotate(&api, "s", json!({ "kube-fsm.dev/paused": null })).await;
    let resumed = wait_for(&api, "s", "Paused False", |s| {
        condition(s, "Paused").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert_eq!(cluster::phase_of(&resumed).as_deref(), Some("Waiting"));
    let status = &resumed.status.as_ref().expect("status").machine;
    assert!(
        status.paused_seconds.is_some_and(|s| s >= 6),
        "{:?}",
        status.paused_seconds
    );
    // The Event follows the write that resumed it.
    let resumed_event = eventually(Duration::from_secs(10), || async {
        (!cluster::events(&client, &ns, "Resumed").await.is_empty()).then_some(())
    })
    .await;
    assert!(resumed_event.is_some(), "no Resumed Event");
    // And it converges: the timeout, now counted without the pause, still fires.
    wait_phase(&api, "s", "Expired").await;
    operator.stop().await;
}

#[tokio::test]
async fn deletion_runs_cleanup_while_paused() {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::deletion", "fsm-pause-delete").await else {
        return;
    };
    let (api, handlers, operator) = start(&client, &ns);
    let mut sleeper = Sleeper::new("s", SleeperSpec {});
    sleeper
        .annotations_mut()
        .insert("kube-fsm.dev/paused".into(), "true".into());
    api.create(&PostParams::default(), &sleeper)
        .await
        .expect("create");
    wait_for(&api, "s", "paused with the finalizer", |s| {
        !s.finalizers().is_empty() && condition(s, "Paused").is_some()
    })
    .await;
    api.delete("s", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = eventually(Duration::from_secs(20), || async {
        api.get_opt("s").await.expect("get").is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the paused object was not deleted");
    assert_eq!(handlers.cleanups.load(Ordering::SeqCst), 1);
    assert_eq!(handlers.calls.load(Ordering::SeqCst), 0, "no step ran");
    operator.stop().await;
}

#[tokio::test]
async fn a_reconcile_request_is_handled_at_once_during_a_backoff_and_recorded() {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::reconcile_now", "fsm-reconcile-now").await
    else {
        return;
    };
    let (api, handlers, operator) = start(&client, &ns);
    let mut sleeper = Sleeper::new("s", SleeperSpec {});
    sleeper
        .annotations_mut()
        .insert("test/fail".into(), "true".into());
    api.create(&PostParams::default(), &sleeper)
        .await
        .expect("create");
    // Failing with backoff: after 5 failures in a row the object says it is Stalled, and the
    // retries have spread out.
    let stalled = wait_for(&api, "s", "Stalled after 5 failures", |s| {
        condition(s, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await;
    let (_, reason, message) = condition(&stalled, "Stalled").expect("Stalled");
    assert_eq!(reason, "ReconcileFailing");
    assert!(
        message.contains("failed 5 times in a row") && message.contains("told to fail"),
        "{message}"
    );
    assert!(handlers.calls.load(Ordering::SeqCst) >= 5);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = handlers.calls.load(Ordering::SeqCst);

    // Fixed, and a reconcile asked for now: handled within a second or two, not at the end of
    // the backoff, and the request recorded.
    let asked = Instant::now();
    annotate(
        &api,
        "s",
        json!({ "test/fail": null, "test/finish": "true", "kube-fsm.dev/reconcile-requested-at": "2026-12-02T10:00:00Z" }),
    )
    .await;
    let done = wait_phase(&api, "s", "Done").await;
    assert_eq!(
        condition(&done, "Stalled").map(|c| c.0),
        Some("False".to_owned()),
        "the step that succeeded cleared it"
    );
    assert!(handlers.calls.load(Ordering::SeqCst) > before);
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.machine.last_handled_reconcile_at.as_deref()),
        Some("2026-12-02T10:00:00Z")
    );
    operator.stop().await;
}
