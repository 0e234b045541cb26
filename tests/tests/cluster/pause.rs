//! Pausing and reconcile-now on the real API server: a paused object is left alone past its
//! timeout (its status is not written: the API server counts no status PATCH of the kind and the
//! object's resourceVersion does not move), the time paused does not count toward the timeout
//! once it resumes — also when the handler fails after the resume —, a paused object's deletion
//! waits for the resume to run cleanup (and `skip-cleanup` orphans), and a reconcile request on
//! a failing object is handled at once, once, recorded in the status, and leaves the backoff
//! where it was (no hot loop: counted in the API server's audit log). A handler failing again and again makes its object `Stalled`, for the generation
//! it failed on, with the API server's refusal in a sentence.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ResourceQuota};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("told to fail by the test/fail annotation")]
    Told,
    /// Displayed as a user's error around kube's usually is.
    #[error("could not create its ConfigMap: {0}")]
    Child(#[source] kube::Error),
}

/// Finishes when annotated `test/finish`, fails while annotated `test/fail`, tries to create a
/// ConfigMap (and fails when the API server refuses it) while annotated `test/child`, otherwise
/// waits (and times out, unless annotated `test/hold`: then its timeout is vetoed); counts its
/// calls and cleanups.
#[derive(Clone, Default)]
struct Sleepers {
    calls: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

impl SleeperHandler for Sleepers {
    type Error = Failed;

    async fn on_waiting(
        &self,
        sleeper: &Sleeper,
        step: &mut Step<Sleeper>,
    ) -> Result<SleeperWaitingNext, Failed> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let annotations = sleeper.annotations();
        if annotations.contains_key("test/fail") {
            return Err(Failed::Told);
        }
        if annotations.contains_key("test/child") {
            let api = Api::<ConfigMap>::namespaced(
                step.context().client().clone(),
                &sleeper.namespace().unwrap_or_default(),
            );
            let child = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(format!("{}-child", sleeper.name_any())),
                    ..Default::default()
                },
                ..Default::default()
            };
            api.create(&PostParams::default(), &child)
                .await
                .map_err(Failed::Child)?;
        }
        if annotations.contains_key("test/finish") {
            return Ok(SleeperWaitingEvent::Finish.into());
        }
        Ok(Next::Stay)
    }

    async fn before_transition(
        &self,
        sleeper: &Sleeper,
        _: SleeperPhase,
        _: SleeperPhase,
    ) -> Result<kube_fsm::Verdict, Failed> {
        Ok(if sleeper.annotations().contains_key("test/hold") {
            kube_fsm::Verdict::Veto("held by the test".into())
        } else {
            kube_fsm::Verdict::Allow
        })
    }

    async fn cleanup(
        &self,
        _: &Sleeper,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, Failed> {
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
    start_with(client, ns, |operator| operator)
}

/// [`start`], the operator set up by `setup` (its backoff, say).
fn start_with(
    client: &kube::Client,
    ns: &str,
    setup: impl FnOnce(kube_fsm::Operator<Sleeper, Sleepers>) -> kube_fsm::Operator<Sleeper, Sleepers>,
) -> (Api<Sleeper>, Sleepers, Running) {
    let handlers = Sleepers::default();
    let operator = Running::spawn(setup(operator::in_namespace::<Sleeper, _>(
        client,
        ns,
        handlers.clone(),
    )));
    (Api::namespaced(client.clone(), ns), handlers, operator)
}

/// Creates the Sleeper `s` (default spec) and waits until it is Waiting; returns it then.
async fn waiting(api: &Api<Sleeper>) -> Sleeper {
    api.create(
        &PostParams::default(),
        &Sleeper::new("s", SleeperSpec::default()),
    )
    .await
    .expect("create");
    wait_phase(api, "s", "Waiting").await
}

/// Waits until the handler has been called `n` times (up to `within`); how long that took.
async fn wait_calls(handlers: &Sleepers, n: usize, within: Duration) -> Duration {
    let asked = Instant::now();
    let reached = eventually(within, || async {
        (handlers.calls.load(Ordering::SeqCst) >= n).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "the handler was called {} times in {within:?}, not {n}",
        handlers.calls.load(Ordering::SeqCst)
    );
    asked.elapsed()
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
    waiting(&api).await;
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
    // A reconcile asked for while paused is not one: nothing runs, nothing is recorded.
    let asked = api
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                "kube-fsm.dev/reconcile-requested-at": "while-paused" } } })),
        )
        .await
        .expect("ask for a reconcile");
    let (version, writes, calls) = (
        asked.resource_version(),
        status_writes(&client).await,
        handlers.calls.load(Ordering::SeqCst),
    );

    // Twice the 3 s timeout: nothing moves, nothing is written, no handler runs.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let held = api.get("s").await.expect("get");
    assert_eq!(cluster::phase_of(&held).as_deref(), Some("Waiting"));
    assert_eq!(held.resource_version(), version, "no write while paused");
    assert_eq!(
        last_handled(&held),
        None,
        "a reconcile request is not handled while paused"
    );
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

/// Waits until `name` is gone; panics naming `what` otherwise.
async fn wait_gone(api: &Api<Sleeper>, name: &str, what: &str) {
    let gone = eventually(Duration::from_secs(20), || async {
        api.get_opt(name)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(gone.is_some(), "{name}: {what}");
}

#[tokio::test]
async fn deleting_a_paused_object_waits_for_the_resume_to_clean_up_and_skip_cleanup_orphans() {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::deletion", "fsm-pause-delete").await else {
        return;
    };
    let (api, handlers, operator) = start(&client, &ns);
    for name in ["kept", "orphaned"] {
        let mut sleeper = Sleeper::new(name, SleeperSpec::default());
        sleeper.annotations_mut().insert(
            "kube-fsm.dev/paused".into(),
            "INC-7: keep the bucket".into(),
        );
        api.create(&PostParams::default(), &sleeper)
            .await
            .expect("create");
        wait_for(&api, name, "paused with the finalizer", |s| {
            !s.finalizers().is_empty() && condition(s, "Paused").is_some()
        })
        .await;
    }

    // Paused, then deleted: no cleanup while paused (as Cluster API and Flux do), the object
    // stays Terminating, and it says so.
    api.delete("kept", &DeleteParams::default())
        .await
        .expect("delete");
    let waiting = wait_for(&api, "kept", "the deletion waiting", |s| {
        condition(s, "Paused").is_some_and(|c| c.0 == "True" && c.2.contains("deleted"))
    })
    .await;
    assert!(waiting.metadata.deletion_timestamp.is_some());
    let announced = eventually(Duration::from_secs(10), || async {
        (!cluster::events(&client, &ns, "DeletionPaused")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(announced.is_some(), "no DeletionPaused Event");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        api.get_opt("kept").await.expect("get").is_some(),
        "deleted while paused"
    );
    assert_eq!(
        handlers.cleanups.load(Ordering::SeqCst),
        0,
        "cleanup ran while paused"
    );

    // Resumed: the cleanup runs and the object goes.
    annotate(&api, "kept", json!({ "kube-fsm.dev/paused": null })).await;
    wait_gone(&api, "kept", "not deleted after the resume").await;
    assert_eq!(handlers.cleanups.load(Ordering::SeqCst), 1);

    // Asked to orphan what it made: the finalizer goes without cleanup.
    annotate(
        &api,
        "orphaned",
        json!({ "kube-fsm.dev/skip-cleanup": "true" }),
    )
    .await;
    api.delete("orphaned", &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&api, "orphaned", "not deleted with skip-cleanup").await;
    assert_eq!(handlers.cleanups.load(Ordering::SeqCst), 1, "cleanup ran");
    let skipped = eventually(Duration::from_secs(10), || async {
        (!cluster::events(&client, &ns, "CleanupSkipped")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(skipped.is_some(), "no CleanupSkipped Event");
    assert_eq!(handlers.calls.load(Ordering::SeqCst), 0, "no step ran");
    operator.stop().await;
}

/// Reads `status.lastHandledReconcileAt`.
fn last_handled(sleeper: &Sleeper) -> Option<&str> {
    sleeper
        .status
        .as_ref()?
        .machine
        .last_handled_reconcile_at
        .as_deref()
}

#[tokio::test]
async fn a_reconcile_request_on_a_failing_object_runs_once_at_once_is_recorded_and_the_backoff_resumes()
 {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::reconcile_now", "fsm-reconcile-now").await
    else {
        return;
    };
    // A backoff far longer than every window below: any call but the ones asked for would be a
    // call the backoff did not allow.
    let (api, handlers, operator) = start_with(&client, &ns, |operator| {
        operator.backoff(Duration::from_secs(60), Duration::from_secs(600))
    });
    let mut sleeper = Sleeper::new("s", SleeperSpec::default());
    sleeper
        .annotations_mut()
        .insert("test/fail".into(), "true".into());
    api.create(&PostParams::default(), &sleeper)
        .await
        .expect("create");
    wait_calls(&handlers, 1, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(handlers.calls.load(Ordering::SeqCst), 1, "in its backoff");

    for (n, requested) in [(2, "2026-12-02T10:00:00Z"), (3, "2026-12-02T10:05:00Z")] {
        // Still failing, a reconcile asked for now: the handler runs at once, not at the end
        // of the backoff (30 s at the least) ...
        annotate(
            &api,
            "s",
            json!({ "kube-fsm.dev/reconcile-requested-at": requested }),
        )
        .await;
        let took = wait_calls(&handlers, n, Duration::from_secs(5)).await;
        assert!(took < Duration::from_secs(3), "handled after {took:?}");
        // ... the request is recorded although the step failed ...
        wait_for(&api, "s", "the request recorded", |s| {
            last_handled(s) == Some(requested)
        })
        .await;
        // ... and the backoff resumes: no call for the same request, none for the echo of the
        // status write that recorded it.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(
            handlers.calls.load(Ordering::SeqCst),
            n,
            "called again within the backoff after the request {requested}"
        );
    }
    operator.stop().await;
}

/// A namespace's quota that allows no ConfigMap. No controller-manager runs beside the test
/// API server, so the quota's usage is written by hand, as its controller would.
async fn no_config_maps(client: &kube::Client, ns: &str) {
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), ns);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": { "name": "no-config-maps" },
        "spec": { "hard": { "configmaps": "0" } },
    }))
    .expect("quota");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("create the quota");
    let status =
        json!({ "status": { "hard": { "configmaps": "0" }, "used": { "configmaps": "0" } } });
    quotas
        .patch_status(
            "no-config-maps",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("the quota's usage");
}

#[tokio::test]
async fn a_handler_refused_by_a_quota_stalls_its_object_and_a_reconcile_request_makes_no_hot_loop()
{
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::stalled", "fsm-stalled").await else {
        return;
    };
    let Some(audit) = kube_fsm_testkit::audit::log("pause::stalled") else {
        return;
    };
    no_config_maps(&client, &ns).await;
    // The engine's own backoff (0.5 s doubling up to 5 min), not the tests' quick one.
    let (api, handlers, operator) = start_with(&client, &ns, |operator| {
        operator.backoff(Duration::from_millis(500), Duration::from_secs(300))
    });
    let mut sleeper = Sleeper::new("s", SleeperSpec::default());
    sleeper
        .annotations_mut()
        .insert("test/child".into(), "true".into());
    // Stalled, it is in Waiting from its first step on, and Waiting's timeout would end the
    // failing before the test does: held.
    sleeper
        .annotations_mut()
        .insert("test/hold".into(), "true".into());
    api.create(&PostParams::default(), &sleeper)
        .await
        .expect("create");

    // Five refusals in a row: Stalled, saying what the API server said, in a sentence.
    let stalled = wait_for(&api, "s", "Stalled after 5 failures", |s| {
        condition(s, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await;
    let (_, reason, message) = condition(&stalled, "Stalled").expect("Stalled");
    assert_eq!(reason, "ReconcileFailing");
    assert!(
        message.contains("failed 5 times in a row")
            && message
                .contains(r#"configmaps "s-child" is forbidden: exceeded quota: no-config-maps"#)
            && message.contains("Forbidden, HTTP 403"),
        "{message}"
    );
    for dump in ["Status {", "ListMeta", "Some(", "ApiError"] {
        assert!(!message.contains(dump), "a Debug dump ({dump}): {message}");
    }

    // A new generation, still refused: Stalled is said of the generation it failed on, so
    // kstatus does not read "not observed yet" forever.
    let patch = Patch::Merge(json!({ "spec": { "note": "edited" } }));
    let edited = api
        .patch("s", &PatchParams::default(), &patch)
        .await
        .expect("edit the spec");
    let generation = edited.metadata.generation;
    assert_eq!(generation, Some(2));
    let observed = wait_for(&api, "s", "the new generation observed", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.machine.observed_generation)
            == generation
    })
    .await;
    let stalled_at = observed
        .status
        .as_ref()
        .and_then(|s| s.machine.condition("Stalled"))
        .and_then(|c| c.observed_generation);
    assert_eq!(stalled_at, generation, "Stalled of generation 2");

    // The operator's requests about this object, from the API server's own record.
    let requests_between = |from: k8s_openapi::jiff::Timestamp,
                            to: k8s_openapi::jiff::Timestamp| {
        kube_fsm_testkit::audit::requests(&audit, &ns)
            .into_iter()
            .filter(|r| {
                (r.resource == "configmaps" && r.name == "s-child")
                    || (r.resource == "sleepers" && r.name == "s")
            })
            .filter(|r| r.at >= from && r.at < to)
            .count()
    };
    let window = Duration::from_secs(20);
    let before_start = k8s_openapi::jiff::Timestamp::now();
    let calls_before = handlers.calls.load(Ordering::SeqCst);
    tokio::time::sleep(window).await;
    let asked = k8s_openapi::jiff::Timestamp::now();
    annotate(
        &api,
        "s",
        json!({ "kube-fsm.dev/reconcile-requested-at": "2026-12-03T10:00:00Z" }),
    )
    .await;
    wait_for(&api, "s", "the request recorded", |s| {
        last_handled(s) == Some("2026-12-03T10:00:00Z")
            && condition(s, "Stalled").is_some_and(|c| c.0 == "True")
    })
    .await;
    let calls_at_request = handlers.calls.load(Ordering::SeqCst);
    tokio::time::sleep(window).await;
    // The test's own annotation patch (the same client) is not the operator's.
    let before = requests_between(before_start, asked);
    let after = requests_between(asked, asked + window)
        .checked_sub(1)
        .expect("the annotation patch is in the audit log");
    eprintln!(
        "the operator's requests about the object: {before} in the {window:?} before the request, \
         {after} in the {window:?} after; handler calls {calls_before} → {calls_at_request} → {}",
        handlers.calls.load(Ordering::SeqCst)
    );
    assert!(
        before > 0,
        "no request at all before: the count is not read"
    );
    assert!(
        after <= before,
        "{after} requests after the reconcile request against {before} before: a hot loop"
    );
    operator.stop().await;
}

#[tokio::test]
async fn resumed_with_a_failing_handler_the_timeout_still_fires_on_time() {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::resume_failing", "fsm-resume-failing").await
    else {
        return;
    };
    // Only the phase's timeout can bring the object back within the window, not a retry.
    let (api, handlers, operator) = start_with(&client, &ns, |operator| {
        operator.backoff(Duration::from_secs(60), Duration::from_secs(600))
    });
    let waiting = waiting(&api).await;
    let entered = waiting
        .status
        .as_ref()
        .and_then(|s| s.machine.entered_at())
        .expect("entered");
    annotate(&api, "s", json!({ "kube-fsm.dev/paused": "true" })).await;
    let paused = wait_for(&api, "s", "Paused", |s| {
        condition(s, "Paused").is_some_and(|c| c.0 == "True")
    })
    .await;
    let paused_at = paused
        .status
        .as_ref()
        .and_then(|s| s.machine.condition("Paused"))
        .map(|c| c.last_transition_time.0)
        .expect("paused at");
    // While paused its dependency goes down; then it is resumed, still failing.
    annotate(&api, "s", json!({ "test/fail": "true" })).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = handlers.calls.load(Ordering::SeqCst);
    annotate(&api, "s", json!({ "kube-fsm.dev/paused": null })).await;
    let resumed_at = Instant::now();
    wait_calls(&handlers, calls + 1, Duration::from_secs(5)).await;

    // Resumed although the step failed: Paused False, the time paused settled, announced.
    let resumed = wait_for(&api, "s", "Paused False", |s| {
        condition(s, "Paused").is_some_and(|c| c.0 == "False")
    })
    .await;
    assert_eq!(cluster::phase_of(&resumed).as_deref(), Some("Waiting"));
    let paused_seconds = resumed
        .status
        .as_ref()
        .and_then(|s| s.machine.paused_seconds)
        .unwrap_or(0);
    assert!(paused_seconds >= 4, "pausedSeconds {paused_seconds}");
    let announced = eventually(Duration::from_secs(10), || async {
        (!cluster::events(&client, &ns, "Resumed").await.is_empty()).then_some(())
    })
    .await;
    assert!(announced.is_some(), "no Resumed Event");

    // The 3 s timeout, less the time it had run before the pause, is due after the resume;
    // the engine looks a second after the deadline. 3 s more of slack for the steps' writes.
    let ran_before_pause: Duration = paused_at
        .duration_since(entered)
        .try_into()
        .unwrap_or_default();
    let due = Duration::from_secs(3).saturating_sub(ran_before_pause) + Duration::from_secs(1);
    let expired = eventually(Duration::from_secs(20), || async {
        api.get("s")
            .await
            .ok()
            .filter(|s| cluster::phase_of(s).as_deref() == Some("Expired"))
    })
    .await;
    let took = resumed_at.elapsed();
    assert!(expired.is_some(), "never timed out after the resume");
    assert!(
        took <= due + Duration::from_secs(3),
        "timed out {took:?} after the resume; due after {due:?}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_clock_pushed_into_the_future_by_hand_does_not_hold_the_timeout_off() {
    let _one_at_a_time = SLEEPERS.lock().await;
    let Some((client, ns)) = cluster::prepare("pause::forged_clock", "fsm-forged-clock").await
    else {
        return;
    };
    let (api, _, operator) = start(&client, &ns);
    waiting(&api).await;
    // Whoever may write the status (no webhook here) dates the entry into Waiting next century
    // and claims it was paused for a hundred years: neither is trusted beyond now.
    cluster::hand_edit(
        &api,
        "s",
        json!({ "lastPhaseTransitionTime": "2099-01-01T00:00:00Z", "pausedSeconds": 3_000_000_000u64 }),
    )
    .await;
    let edited = Instant::now();
    wait_phase(&api, "s", "Expired").await;
    // The 3 s timeout from the edit at the latest, a second after the deadline, 3 s of slack.
    assert!(
        edited.elapsed() <= Duration::from_secs(7),
        "expired {:?} after the edit",
        edited.elapsed()
    );
    operator.stop().await;
}
