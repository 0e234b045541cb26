//! The engine's failure paths on the real API server: vetoed timeouts, phases written by
//! someone else, deletion while a write conflicts, objects gone mid-reconcile, per-object
//! memory of deleted objects, `after_transition` at least once, and a removed status.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm::{Cleanup, Next, Step, Verdict};
use kube_fsm_testkit::cluster::{self, events, eventually, hand_edit, phase_of, wait_phase};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Condition(#[from] kube_fsm::handler::ConditionError),
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("told to fail")]
    Told,
}

#[derive(Clone, Default)]
struct VetoingTimers {
    veto: Arc<AtomicBool>,
    handler_runs: Arc<AtomicUsize>,
    asked: Arc<AtomicUsize>,
}

impl TimerHandler for VetoingTimers {
    type Error = TestError;

    async fn on_waiting(
        &self,
        _: &Timer,
        _: &mut Step<Timer>,
    ) -> Result<TimerWaitingNext, TestError> {
        self.handler_runs.fetch_add(1, Ordering::SeqCst);
        Ok(Next::Stay)
    }

    async fn before_transition(
        &self,
        _: &Timer,
        _: TimerPhase,
        _: TimerPhase,
    ) -> Result<Verdict, TestError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(if self.veto.load(Ordering::SeqCst) {
            Verdict::Veto("not yet".into())
        } else {
            Verdict::Allow
        })
    }
}

#[tokio::test]
async fn a_vetoed_timeout_backs_off_keeps_the_handler_running_and_warns_once() {
    let Some((client, ns)) = cluster::prepare("a_vetoed_timeout_backs_off", "fsm-veto").await
    else {
        return;
    };
    let api: Api<Timer> = Api::namespaced(client.clone(), &ns);
    let timers = VetoingTimers::default();
    timers.veto.store(true, Ordering::SeqCst);
    let operator = Running::spawn(
        operator::in_namespace::<Timer, _>(&client, &ns, timers.clone())
            .backoff(Duration::from_secs(1), Duration::from_secs(8)),
    );
    api.create(&PostParams::default(), &Timer::new("t", TimerSpec {}))
        .await
        .expect("create");
    // The 2 s timeout comes due and is vetoed.
    eventually(Duration::from_secs(15), || async {
        (timers.asked.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await
    .expect("the timeout came due");
    let first_veto = std::time::Instant::now();
    let runs_at_first_veto = timers.handler_runs.load(Ordering::SeqCst);
    let runs_on = eventually(Duration::from_secs(10), || async {
        (timers.handler_runs.load(Ordering::SeqCst) > runs_at_first_veto).then_some(())
    })
    .await;
    assert!(
        runs_on.is_some(),
        "the phase's handler still runs after its timeout was vetoed"
    );
    // The rest of a 10 s window from the first veto, for the retry count (the window is the
    // promise: backing off, not looping).
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(first_veto.elapsed())).await;
    let asked = timers.asked.load(Ordering::SeqCst);
    // Backing off from 1 s (jittered, doubling): at most 5 retries in 10 s; a 1 s loop is 10.
    assert!(
        asked <= 6,
        "the vetoed timeout was retried {asked} times in 10 s"
    );
    let vetoes = events(&client, &ns, "TransitionVetoed").await;
    assert_eq!(vetoes.len(), 1, "{vetoes:?}");
    assert!(
        vetoes[0].series.is_none(),
        "one Event per distinct veto, not a series: {:?}",
        vetoes[0].series
    );
    assert_eq!(
        phase_of(&api.get("t").await.unwrap()).as_deref(),
        Some("Waiting")
    );

    // Once allowed, the retried timeout fires.
    timers.veto.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(20), || async {
        let t = api.get("t").await.ok()?;
        (phase_of(&t).as_deref() == Some("Expired")).then_some(())
    })
    .await
    .expect("the timeout fired once allowed");
    operator.stop().await;
}

/// Stays wherever it is; Provisioning reports its pods not ready.
#[derive(Clone, Default)]
struct Patient;

impl DatabaseHandler for Patient {
    type Error = TestError;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        step.set_condition(DatabaseCondition::PodsReady, false, "Waiting", "")?;
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

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, TestError> {
        Ok(Cleanup::Done)
    }
}

fn minutes_ago(minutes: i64) -> String {
    (Timestamp::now() - SignedDuration::from_mins(minutes))
        .round(k8s_openapi::jiff::Unit::Second)
        .expect("round")
        .to_string()
}

/// Provisioning (10 min timeout) must not inherit Pending's 15 minutes.
async fn assert_fresh_provisioning_clock(api: &Api<Database>) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let db = api.get("db").await.expect("get");
    let status = &db.status.as_ref().expect("status").machine;
    assert_eq!(
        phase_of(&db).as_deref(),
        Some("Provisioning"),
        "no timeout to Failed"
    );
    assert_eq!(
        status
            .entered_phase
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("Provisioning")
    );
    let entered = status.last_phase_transition_time.as_ref().expect("time").0;
    assert!(
        Timestamp::now().duration_since(entered) < SignedDuration::from_secs(30),
        "the clock started when the controller first saw Provisioning: {entered}"
    );
}

#[tokio::test]
async fn a_phase_written_by_someone_else_starts_its_own_clock_also_across_restarts() {
    let Some((client, ns)) = cluster::prepare("a_phase_written_by_someone_else", "fsm-clock").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let operator = Running::spawn(operator::in_namespace::<Database, _>(&client, &ns, Patient));
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Pending").await;
    // 15 minutes in Pending, then a legal hand edit to Provisioning that leaves the time.
    hand_edit(
        &api,
        "db",
        json!({ "lastPhaseTransitionTime": minutes_ago(15) }),
    )
    .await;
    hand_edit(&api, "db", json!({ "phase": "Provisioning" })).await;
    assert_fresh_provisioning_clock(&api).await;
    operator.crash().await;

    // A controller that starts on such a status has no memory of it: the status alone tells.
    hand_edit(
        &api,
        "db",
        json!({ "lastPhaseTransitionTime": minutes_ago(15), "enteredPhase": "Pending" }),
    )
    .await;
    let operator = Running::spawn(operator::in_namespace::<Database, _>(&client, &ns, Patient));
    assert_fresh_provisioning_clock(&api).await;
    operator.stop().await;
}

/// Deletes the object from inside its first Pending step (so the step's status write
/// conflicts, or finds the object gone) and counts what runs.
#[derive(Clone)]
struct Deleting {
    api: Api<Database>,
    pending_runs: Arc<AtomicUsize>,
    cleanups: Arc<AtomicUsize>,
}

impl DatabaseHandler for Deleting {
    type Error = TestError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        if self.pending_runs.fetch_add(1, Ordering::SeqCst) == 0 {
            self.api
                .delete(&db.name_any(), &DeleteParams::default())
                .await?;
        }
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
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

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, TestError> {
        self.cleanups.fetch_add(1, Ordering::SeqCst);
        Ok(Cleanup::Done)
    }
}

#[tokio::test]
async fn a_conflict_caused_by_deletion_runs_cleanup_not_the_step_again() {
    let Some((client, ns)) = cluster::prepare("a_conflict_caused_by_deletion", "fsm-delconf").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let handler = Deleting {
        api: api.clone(),
        pending_runs: Arc::default(),
        cleanups: Arc::default(),
    };
    let operator = Running::spawn(operator::in_namespace::<Database, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let gone = eventually(Duration::from_secs(15), || async {
        api.get_opt("db")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    assert!(gone.is_some(), "cleanup ran and the finalizer was removed");
    assert_eq!(
        handler.pending_runs.load(Ordering::SeqCst),
        1,
        "the re-read object was being deleted: its step must not run again"
    );
    assert!(handler.cleanups.load(Ordering::SeqCst) >= 1);
    assert!(events(&client, &ns, "ReconcileFailed").await.is_empty());
    assert!(
        events(&client, &ns, "Accept").await.is_empty(),
        "no transition was written"
    );
    operator.stop().await;
}

/// Guarded handlers that fail while the object's `fail` annotation says so (`always`, or
/// `once` per object), delete the object on `delete`, and record `after_transition` calls.
#[derive(Clone, Default)]
struct Scripted {
    api: Option<Api<Guarded>>,
    failed_once: Arc<Mutex<Vec<String>>>,
    pending_runs: Arc<AtomicUsize>,
    hooks: Arc<Mutex<HashMap<(String, String), usize>>>,
    fail_first_hook: Arc<AtomicBool>,
}

impl GuardedHandler for Scripted {
    type Error = TestError;

    async fn on_pending(
        &self,
        g: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedPendingNext, TestError> {
        self.pending_runs.fetch_add(1, Ordering::SeqCst);
        match g.annotations().get("fail").map(String::as_str) {
            Some("always") => return Err(TestError::Told),
            Some("once") => {
                let uid = g.uid().unwrap_or_default();
                let mut failed = self.failed_once.lock().unwrap();
                if !failed.contains(&uid) {
                    failed.push(uid);
                    return Err(TestError::Told);
                }
            }
            _ => {}
        }
        if let (Some("delete"), Some(api)) =
            (g.annotations().get("then").map(String::as_str), &self.api)
        {
            api.delete(&g.name_any(), &DeleteParams::default()).await?;
        }
        Ok(GuardedPendingEvent::Activate.into())
    }

    async fn on_active(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedActiveNext, TestError> {
        Ok(Next::Stay)
    }

    async fn after_transition(
        &self,
        _: &Guarded,
        from: GuardedPhase,
        to: GuardedPhase,
    ) -> Result<(), TestError> {
        *self
            .hooks
            .lock()
            .unwrap()
            .entry((from.to_string(), to.to_string()))
            .or_default() += 1;
        if self.fail_first_hook.swap(false, Ordering::SeqCst) {
            return Err(TestError::Told);
        }
        Ok(())
    }
}

fn guarded(name: &str, annotations: &[(&str, &str)]) -> Guarded {
    let mut g = Guarded::new(name, GuardedSpec {});
    g.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    g
}

#[tokio::test]
async fn an_object_gone_before_its_write_is_a_quiet_success() {
    let Some((client, ns)) = cluster::prepare("an_object_gone_before_its_write", "fsm-gone").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted {
        api: Some(api.clone()),
        ..Scripted::default()
    };
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &guarded("g", &[("then", "delete")]))
        .await
        .expect("create");
    eventually(Duration::from_secs(15), || async {
        (handler.pending_runs.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await
    .expect("the step ran");
    let gone = eventually(Duration::from_secs(10), || async {
        api.get_opt("g").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "the object is gone");
    // A moment for a failure that should not be reported.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let failed = events(&client, &ns, "ReconcileFailed").await;
    assert!(
        failed.is_empty(),
        "a vanished object is no failure: {failed:?}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_new_object_of_a_deleted_ones_name_does_not_inherit_its_backoff() {
    let Some((client, ns)) = cluster::prepare("a_new_object_does_not_inherit", "fsm-uid").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    let operator = Running::spawn(
        operator::in_namespace::<Guarded, _>(&client, &ns, handler.clone())
            .backoff(Duration::from_millis(50), Duration::from_secs(600)),
    );
    api.create(&PostParams::default(), &guarded("g", &[("fail", "always")]))
        .await
        .expect("create");
    // 8 failures in a row: the next retry would come after 6.4-12.8 s.
    eventually(Duration::from_secs(30), || async {
        (handler.pending_runs.load(Ordering::SeqCst) >= 8).then_some(())
    })
    .await
    .expect("failures retried");
    api.delete("g", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(Duration::from_secs(10), || async {
        api.get_opt("g")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await
    .expect("deleted");
    // Same name, new UID, fails once: its first retry comes after 25-50 ms.
    api.create(&PostParams::default(), &guarded("g", &[("fail", "once")]))
        .await
        .expect("create again");
    let active = eventually(Duration::from_secs(4), || async {
        let g = api.get("g").await.ok()?;
        (phase_of(&g).as_deref() == Some("Active")).then_some(())
    })
    .await;
    assert!(
        active.is_some(),
        "the new object inherited the old one's backoff"
    );
    operator.stop().await;
}

#[tokio::test]
async fn after_transition_runs_for_the_first_move_and_is_retried_until_it_succeeds() {
    let Some((client, ns)) = cluster::prepare("after_transition_runs", "fsm-hook").await else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    handler.fail_first_hook.store(true, Ordering::SeqCst);
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &guarded("g", &[]))
        .await
        .expect("create");
    wait_phase(&api, "g", "Active").await;
    let first_move = ("Pending".to_owned(), "Active".to_owned());
    let calls = eventually(Duration::from_secs(10), || async {
        let hooks = handler.hooks.lock().unwrap().clone();
        hooks.get(&first_move).copied().filter(|&n| n >= 2)
    })
    .await;
    assert_eq!(
        calls,
        Some(2),
        "the first move (folded into the first write) runs the hook; it failed once and was retried"
    );
    assert_eq!(
        handler.pending_runs.load(Ordering::SeqCst),
        1,
        "the retry ran the hook, not the step"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_removed_status_is_drift_and_revert_writes_the_phase_back() {
    let Some((client, ns)) = cluster::prepare("a_removed_status_is_drift", "fsm-nostatus").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &guarded("g", &[]))
        .await
        .expect("create");
    let before = wait_phase(&api, "g", "Active").await;
    let entered = before.status.unwrap().machine.last_phase_transition_time;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    api.patch_status(
        "g",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": null })),
    )
    .await
    .expect("remove the status");
    let drift = eventually(Duration::from_secs(15), || async {
        events(&client, &ns, "PhaseDrift")
            .await
            .into_iter()
            .find(|e| e.note.as_deref().is_some_and(|n| n.contains("was removed")))
    })
    .await;
    assert!(drift.is_some(), "no PhaseDrift event for the removal");
    let after = wait_phase(&api, "g", "Active").await;
    assert_eq!(
        after.status.unwrap().machine.last_phase_transition_time,
        entered,
        "a revert does not restart the clock of the phase it restores"
    );
    assert_eq!(
        handler.pending_runs.load(Ordering::SeqCst),
        1,
        "no restart at Pending"
    );
    operator.stop().await;
}

/// Relays straight through to the end.
struct Straight;

impl RelayHandler for Straight {
    type Error = TestError;

    async fn on_first(&self, _: &Relay, _: &mut Step<Relay>) -> Result<RelayFirstNext, TestError> {
        Ok(RelayFirstEvent::Go.into())
    }

    async fn on_second(
        &self,
        _: &Relay,
        _: &mut Step<Relay>,
    ) -> Result<RelaySecondNext, TestError> {
        Ok(RelaySecondEvent::Go.into())
    }

    async fn on_third(&self, _: &Relay, _: &mut Step<Relay>) -> Result<RelayThirdNext, TestError> {
        Ok(RelayThirdEvent::Go.into())
    }
}

#[tokio::test]
async fn an_object_whose_status_does_not_decode_is_skipped_and_does_not_stall_the_others() {
    let Some((client, ns)) = cluster::prepare("an_object_that_does_not_decode", "fsm-decode").await
    else {
        return;
    };
    let api: Api<Relay> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &Relay::new("bad", RelaySpec {}))
        .await
        .expect("create");
    // Its CRD lets any status through (as one installed by an older version might). Written
    // untyped: our own client could not read the answer either.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<Relay>(&()),
    );
    raw.patch_status(
        "bad",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "phase": "Second", "observedGeneration": "soon" } })),
    )
    .await
    .expect("store a status that does not decode");
    let recorded = Recorded::default();
    let operator = Running::spawn(
        operator::in_namespace::<Relay, _>(&client, &ns, Straight).metrics(recorded.metrics()),
    );
    api.create(&PostParams::default(), &Relay::new("good", RelaySpec {}))
        .await
        .expect("create");
    wait_phase(&api, "good", "Fourth").await;
    let text = recorded.text();
    assert!(
        text.contains("kube_fsm_undecodable_objects_total{machine=\"Relay\"} 1"),
        "{text}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_status_write_whose_answer_is_lost_still_reports_its_transition() {
    use kube_fsm_testkit::lost::{LoseAnswers, Loss};
    let Some((client, ns)) =
        cluster::prepare("a_status_write_whose_answer_is_lost", "fsm-lost").await
    else {
        return;
    };
    // The operator's client loses the answer of each object's first status write: it lands,
    // the operator sees a 504 for one and a reset connection for the other.
    let answers = LoseAnswers::default();
    answers.next_status_write("g-504", Loss::GatewayTimeout);
    answers.next_status_write("g-reset", Loss::Reset);
    let config = kube::Config::infer().await.expect("config");
    let lossy = kube::client::ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&answers)
        .build();
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &lossy,
        &ns,
        handler.clone(),
    ));
    let names = ["g-504", "g-reset"];
    for name in names {
        api.create(&PostParams::default(), &guarded(name, &[]))
            .await
            .expect("create");
    }
    for name in names {
        wait_phase(&api, name, "Active").await;
    }
    assert_eq!(
        answers.lost().len(),
        2,
        "both first writes lost their answer"
    );
    // Each persisted move runs its hook and records its Event, lost answer or not.
    let first_move = ("Pending".to_owned(), "Active".to_owned());
    let hooks = eventually(Duration::from_secs(15), || async {
        let hooks = handler.hooks.lock().unwrap().clone();
        hooks.get(&first_move).copied().filter(|&n| n >= 2)
    })
    .await;
    assert_eq!(hooks, Some(2), "after_transition once per object");
    for name in names {
        let recorded = eventually(Duration::from_secs(15), || async {
            events(&client, &ns, "Activate")
                .await
                .into_iter()
                .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        })
        .await;
        assert!(recorded.is_some(), "no transition Event for {name}");
    }
    operator.stop().await;
}

/// A client of the test cluster acting as `user`, whose RBAC in `ns` is `rules` (a Role and
/// its RoleBinding, made by the admin `client`).
async fn limited_client(
    client: &kube::Client,
    ns: &str,
    user: &str,
    rules: serde_json::Value,
) -> kube::Client {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": user, "namespace": ns },
        "rules": rules,
    }))
    .expect("role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": user, "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }],
    }))
    .expect("binding");
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    let mut config = kube::Config::infer().await.expect("config");
    config.auth_info.impersonate = Some(user.to_owned());
    kube::Client::try_from(config).expect("impersonating client")
}

#[tokio::test]
async fn a_forbidden_watch_is_reported_once_and_retried_at_the_cap_while_handlers_back_off() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let Some((client, ns)) = cluster::prepare("a_forbidden_watch", "fsm-forbidden").await else {
        return;
    };
    // The operator may list ConfigMaps but not watch them (an RBAC slip).
    let user = format!("{ns}-operator");
    let limited = limited_client(
        &client,
        &ns,
        &user,
        json!([
            { "apiGroups": ["fsm.example.com"], "resources": ["guardeds", "guardeds/status"],
              "verbs": ["get", "list", "watch", "patch", "update"] },
            { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"] },
            { "apiGroups": ["", "events.k8s.io"], "resources": ["events"],
              "verbs": ["create", "patch", "update", "get"] },
        ]),
    )
    .await;
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let recorded = Recorded::default();
    // The default backoff: 0.5 s doubling; the reconnect cap 30 s.
    let operator = kube_fsm::Operator::<Guarded, _>::new(limited, Scripted::default())
        .namespace(&ns)
        .owns::<ConfigMap>(kube::runtime::watcher::Config::default())
        .metrics(recorded.metrics());
    let health = operator.health();
    let operator = Running::spawn(operator);
    const OBJECTS: usize = 100;
    for i in 0..OBJECTS {
        api.create(
            &PostParams::default(),
            &guarded(&format!("g-{i}"), &[("fail", "always")]),
        )
        .await
        .expect("create");
    }
    // Failed watch attempts, as the operator counts them (refusals, and any other failure).
    let refused = || async {
        recorded.sum("kube_fsm_watch_refusals_total", &[("machine", "Guarded")])
            + recorded.sum("kube_fsm_watch_restarts_total", &[("machine", "Guarded")])
    };
    // Failed reconciles: the failing objects' only.
    let reconciles = || {
        recorded.sum(
            "controller_runtime_reconcile_errors_total",
            &[("controller", "guarded")],
        )
    };
    // Meanwhile the cluster is busy: another object changes four times a second, so the
    // operator's own watch delivers events all along.
    api.create(&PostParams::default(), &guarded("busy", &[]))
        .await
        .expect("create");
    let busy = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                let touch = json!({ "metadata": { "annotations": { "touched": i.to_string() } } });
                let _ = api
                    .patch("busy", &PatchParams::default(), &Patch::Merge(&touch))
                    .await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (refused_before, reconciles_before) = (refused().await, reconciles());
    tokio::time::sleep(Duration::from_secs(30)).await;
    busy.abort();
    let (watches, per_object) = (
        refused().await - refused_before,
        (reconciles() - reconciles_before) / OBJECTS as f64,
    );
    eprintln!("in 30 s: {watches} refused watches, {per_object:.1} reconciles per object");
    // The reconnect cap is 30 s: one or two attempts in 30 s, not one every second.
    assert!(watches <= 2.0, "{watches} refused watches in 30 s");
    // The handlers' backoff (0.5 s doubling, from 5 s on: about 3 retries in 30 s).
    assert!(
        per_object <= 5.0,
        "{per_object} reconciles per object in 30 s"
    );
    match health.status() {
        kube_fsm::controller::Connection::Refused { reason } => {
            assert!(reason.contains("cannot watch ConfigMap"), "{reason}");
        }
        other => panic!("readiness should name the refused watch, not {other:?}"),
    }
    let refusals = recorded.sum(
        "kube_fsm_watch_refusals_total",
        &[("machine", "Guarded"), ("kind", "ConfigMap")],
    );
    assert!(
        (1.0..=4.0).contains(&refusals),
        "{refusals} refusals counted"
    );
    operator.stop().await;
}
