//! One bad object harms only itself, on the real API server: a handler that panics on every
//! call stalls its own object (`Stalled`, reason `HandlerPanicked`), is retried within its
//! backoff, and the process and every other object of both kinds go on.

use std::time::{Duration, Instant};

use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Cleanup, Manager, Step};
use kube_fsm_examples::riskengine::{self, RiskEngine};
use kube_fsm_testkit::audit;
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::resources::*;

/// Objects of each kind.
const EACH: usize = 25;

/// The plain Database handlers, but the one for Pending panics for the object named `bad`.
struct PanicsOn(&'static str);

impl DatabaseHandler for PanicsOn {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        assert!(
            db.name_any() != self.0,
            "this handler cannot handle {}",
            self.0
        );
        Databases.on_pending(db, step).await
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        Databases.on_provisioning(db, step).await
    }

    async fn on_running(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        Databases.on_running(db, step).await
    }

    async fn on_degraded(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        Databases.on_degraded(db, step).await
    }

    async fn cleanup(
        &self,
        db: &Database,
        context: &kube_fsm::Context,
    ) -> Result<Cleanup, ConditionError> {
        Databases.cleanup(db, context).await
    }
}

/// A Manager of Databases (handled by `PanicsOn(bad)`) and RiskEngines in `ns`.
fn manager(client: &Client, ns: &str, bad: &'static str, metrics: &Recorded) -> Manager {
    Manager::new(client.clone())
        .machine(in_namespace::<Database, _>(client, ns, PanicsOn(bad)))
        .machine(
            riskengine::operator(client.clone(), riskengine::Handlers::new(ns.to_owned()))
                .namespace(ns),
        )
        .record_into(metrics.metrics())
}

/// Creates `EACH` objects of each kind in `ns` (the Databases named by `name`), runs the
/// Manager and waits until every Database `converges` names is Running and every RiskEngine
/// Active; returns the Manager still running and how long that took.
async fn converge(
    client: &Client,
    ns: &str,
    bad: &'static str,
    names: &[String],
    metrics: &Recorded,
) -> (Running, Duration) {
    riskengine::apply_allow_list(client, ns, "2.0")
        .await
        .expect("the allow-list");
    let running = Running::manager(manager(client, ns, bad, metrics));
    let started = Instant::now();
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), ns);
    for (i, name) in names.iter().enumerate() {
        databases
            .create(&PostParams::default(), &sample(name))
            .await
            .expect("create a Database");
        engines
            .create(
                &PostParams::default(),
                &riskengine::engine(&format!("risk-{i}"), "2.0"),
            )
            .await
            .expect("create a RiskEngine");
    }
    for (i, name) in names.iter().enumerate() {
        if name != bad {
            wait_phase(&databases, name, "Running").await;
        }
        wait_phase(&engines, &format!("risk-{i}"), "Active").await;
    }
    (running, started.elapsed())
}

/// The `Stalled` condition of `db`: (status, reason, message).
fn stalled(db: &Database) -> Option<(String, String, String)> {
    let condition = (db.status.as_ref()?.machine.conditions)
        .iter()
        .find(|c| c.type_ == "Stalled")?;
    Some((
        condition.status.clone(),
        condition.reason.clone(),
        condition.message.clone(),
    ))
}

#[tokio::test]
async fn a_panicking_handler_stalls_its_object_and_nothing_else() {
    let test = "isolation::panic";
    let Some((client, plain)) = cluster::prepare(test, "fsm-nopanic").await else {
        return;
    };
    let Some(log) = audit::log(test) else {
        return;
    };
    cluster::install_crd(&client, riskengine::crd()).await;
    let names = |bad: Option<&str>| -> Vec<String> {
        (0..EACH)
            .map(|i| match bad {
                Some(bad) if i == EACH / 2 => bad.to_owned(),
                _ => format!("db-{i}"),
            })
            .collect()
    };
    // The same work without the bad object, for the time it takes.
    let (running, without) = converge(
        &client,
        &plain,
        "nobody",
        &names(None),
        &Recorded::default(),
    )
    .await;
    running.stop().await;
    let ns = cluster::namespace(&client, "fsm-panic").await;
    let recorded = Recorded::default();
    let (running, with) = converge(&client, &ns, "bad", &names(Some("bad")), &recorded).await;
    eprintln!(
        "{} other objects converged in {with:?} beside a panicking one, {without:?} without it",
        2 * EACH - 1
    );
    let (waited, said) = cluster::kubectl(
        test,
        &[
            "wait",
            "--for=condition=Stalled",
            "--timeout=30s",
            "-n",
            &ns,
            "databases.example.kube-fsm.dev/bad",
        ],
    )
    .await
    .expect("kubectl");
    assert!(waited, "kubectl wait --for=condition=Stalled: {said}");
    let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
    let bad = databases.get("bad").await.expect("get bad");
    let (status, reason, message) = stalled(&bad).expect("a Stalled condition");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "HandlerPanicked")
    );
    assert!(
        message.contains("panicked: this handler cannot handle bad") && !message.contains('\n'),
        "{message}"
    );
    assert!(
        !cluster::events(&client, &ns, "HandlerPanicked")
            .await
            .is_empty(),
        "a HandlerPanicked Event"
    );
    // Retried within its backoff (200 ms doubling to 2 s): in 10 s, a handful of attempts,
    // each one Event write (the Stalled status is written once).
    let since = k8s_openapi::jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let writes: Vec<_> = audit::writes(&log, &ns)
        .into_iter()
        .filter(|w| w.at > since && (w.name == "bad" || w.name.starts_with("bad.")))
        .collect();
    assert!(
        !writes.is_empty() && writes.len() <= 10,
        "retried, within its backoff: {writes:#?}"
    );
    let panics = recorded.sum("kube_fsm_handler_panics_total", &[("machine", "Database")]);
    assert!(panics >= 2.0, "counted: {panics}");
    assert!(!running.is_finished(), "the Manager still runs");
    running.stop().await;
}
