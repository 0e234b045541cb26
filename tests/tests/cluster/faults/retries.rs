//! Failures the operator retries, and how: a vetoed timeout backs off and keeps the handler
//! running, `after_transition` runs at least once (retried until it succeeds, also when a
//! status write's answer is lost), and a forbidden watch is reported once and retried at the
//! cap while the handlers back off.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm::{Next, Step, Verdict};
use kube_fsm_testkit::cluster::{self, events, eventually, phase_of, wait_phase};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

use super::{Scripted, TestError, guarded};

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
        kube_fsm::watch::Connection::Refused { reason } => {
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
