//! One bad object harms only itself, on the real API server: a handler that panics on every
//! call stalls its own object (`Stalled`, reason `HandlerPanicked`), is retried within its
//! backoff, and the process and every other object of both kinds go on; a handler that never
//! returns is dropped at its deadline (`Stalled`, reason `HandlerTimedOut`), frees its slot for
//! the others, and does not hold its phase's timeout back.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Manager, Step};
use kube_fsm_examples::riskengine::{self, RiskEngine};
use kube_fsm_testkit::audit;
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::handlers::{BeforeEach, Preceded};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::resources::*;

/// Objects of each kind.
const EACH: usize = 25;

/// What the bad object's Pending handler does.
#[derive(Clone, Copy)]
enum Spoil {
    Panics,
    Hangs,
}

/// Before the Database handler for Pending, spoils the object named `.0`; `.2` holds when it
/// first did.
#[derive(Clone)]
struct Spoils(&'static str, Spoil, Arc<OnceLock<Timestamp>>);

impl Spoils {
    fn new(name: &'static str, how: Spoil) -> Self {
        Spoils(name, how, Arc::default())
    }
}

impl BeforeEach for Spoils {
    async fn before(&self, db: &Database, phase: DatabasePhase) {
        if phase == DatabasePhase::Pending && db.name_any() == self.0 {
            self.2.get_or_init(Timestamp::now);
            match self.1 {
                Spoil::Panics => panic!("this handler cannot handle {}", self.0),
                Spoil::Hangs => std::future::pending::<()>().await,
            }
        }
    }
}

/// A Manager of Databases (handled by `bad`) and RiskEngines in `ns`. Beside a hanging
/// handler, the Databases are reconciled one at a time, each handler call bounded to a second:
/// the hung call holds the only slot until its deadline.
fn manager(client: &Client, ns: &str, bad: Spoils, metrics: &Recorded) -> Manager {
    let how = bad.1;
    let databases = in_namespace::<Database, _>(client, ns, Preceded(bad));
    let databases = match how {
        Spoil::Panics => databases,
        Spoil::Hangs => databases
            .concurrency(1)
            .handler_timeout(Duration::from_secs(1)),
    };
    Manager::new(client.clone())
        .machine(databases)
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
    bad: Spoils,
    names: &[String],
    metrics: &Recorded,
) -> (Running, Duration) {
    let spoiled = bad.0;
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
        if name != spoiled {
            wait_phase(&databases, name, "Running").await;
        }
        wait_phase(&engines, &format!("risk-{i}"), "Active").await;
    }
    (running, started.elapsed())
}

/// The Databases' names, `bad` (if any) among them in the middle.
fn names(bad: Option<&str>) -> Vec<String> {
    (0..EACH)
        .map(|i| match bad {
            Some(bad) if i == EACH / 2 => bad.to_owned(),
            _ => format!("db-{i}"),
        })
        .collect()
}

/// Waits as people do (`kubectl wait --for=condition=Stalled`) until Database `name` in `ns`
/// is Stalled; returns it with its condition's status, reason and message.
async fn wait_stalled(
    test: &str,
    client: &Client,
    ns: &str,
    name: &str,
) -> (Database, String, String, String) {
    let object = format!("databases.example.kube-fsm.dev/{name}");
    let (waited, said) = cluster::kubectl(
        test,
        &[
            "wait",
            "--for=condition=Stalled",
            "--timeout=30s",
            "-n",
            ns,
            &object,
        ],
    )
    .await
    .expect("kubectl");
    assert!(waited, "kubectl wait --for=condition=Stalled: {said}");
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let db = databases.get(name).await.expect("get the Database");
    let (status, reason, message) = stalled(&db).expect("a Stalled condition");
    (db, status, reason, message)
}

/// The `Stalled` condition of `db`: (status, reason, message).
fn stalled(db: &Database) -> Option<(String, String, String)> {
    let condition = stalled_condition(&db.status.as_ref()?.machine.conditions)?;
    Some((
        condition.status.clone(),
        condition.reason.clone(),
        condition.message.clone(),
    ))
}

fn stalled_condition(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Stalled")
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
    // The same work without the bad object, for the time it takes.
    let (running, without) = converge(
        &client,
        &plain,
        Spoils::new("nobody", Spoil::Panics),
        &names(None),
        &Recorded::default(),
    )
    .await;
    running.stop().await;
    let ns = cluster::namespace(&client, "fsm-panic").await;
    let recorded = Recorded::default();
    let (running, with) = converge(
        &client,
        &ns,
        Spoils::new("bad", Spoil::Panics),
        &names(Some("bad")),
        &recorded,
    )
    .await;
    eprintln!(
        "{} other objects converged in {with:?} beside a panicking one, {without:?} without it",
        2 * EACH - 1
    );
    let (_, status, reason, message) = wait_stalled(test, &client, &ns, "bad").await;
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
    let since = Timestamp::now();
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

#[tokio::test]
async fn a_hung_handler_is_dropped_at_its_deadline_and_frees_its_slot() {
    let test = "isolation::hang";
    let Some((client, ns)) = cluster::prepare(test, "fsm-hang").await else {
        return;
    };
    cluster::install_crd(&client, riskengine::crd()).await;
    let recorded = Recorded::default();
    // One Database slot, a 1 s deadline: every other Database waits behind the hung call
    // until it is dropped.
    let hangs = Spoils::new("hung", Spoil::Hangs);
    let first_call = hangs.2.clone();
    let (running, took) = converge(&client, &ns, hangs, &names(Some("hung")), &recorded).await;
    eprintln!(
        "{} other objects converged in {took:?} beside a handler that never returns",
        2 * EACH - 1
    );
    let (hung, status, reason, message) = wait_stalled(test, &client, &ns, "hung").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "HandlerTimedOut")
    );
    assert!(
        message.contains("the handler of phase Pending did not finish within 1s"),
        "{message}"
    );
    // Stalled at the deadline of its first call: 1 s, and its status write among the others'
    // (measured 1.4–1.9 s on a second-precision timestamp; 3 s allowed).
    let called = *first_call.get().expect("the hung handler was called");
    let condition = stalled_condition(&hung.status.as_ref().expect("status").machine.conditions)
        .expect("Stalled");
    let after = condition.last_transition_time.0.duration_since(called);
    eprintln!("hung was Stalled {after:?} after its handler was first called");
    assert!(
        after <= k8s_openapi::jiff::SignedDuration::from_secs(3),
        "Stalled {after:?} after its first call"
    );
    assert!(
        !cluster::events(&client, &ns, "HandlerTimedOut")
            .await
            .is_empty(),
        "a HandlerTimedOut Event"
    );
    let dropped = recorded.sum(
        "kube_fsm_handler_timeouts_total",
        &[("machine", "Database"), ("phase", "Pending")],
    );
    assert!(dropped >= 1.0, "counted: {dropped}");
    assert!(!running.is_finished(), "the Manager still runs");
    running.stop().await;
}

/// Every call of `Working`'s handler hangs.
struct Hangs;

impl ChoreHandler for Hangs {
    type Error = ConditionError;

    async fn on_working(
        &self,
        _: &Chore,
        _: &mut Step<Chore>,
    ) -> Result<ChoreWorkingNext, ConditionError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_phase_timeout_is_reached_on_time_while_every_handler_call_hangs() {
    let test = "isolation::timeout";
    let Some((client, ns)) = cluster::prepare(test, "fsm-chore").await else {
        return;
    };
    cluster::install_crd(&client, kube_fsm::crd::<Chore>()).await;
    let recorded = Recorded::default();
    // The machine's own deadline is the default (5 minutes): the spec's `handlerTimeout: 1s`
    // bounds Working's calls, and the phase's 3 s timeout bounds the last one.
    let running =
        Running::spawn(in_namespace::<Chore, _>(&client, &ns, Hangs).metrics(recorded.metrics()));
    let chores: Api<Chore> = Api::namespaced(client.clone(), &ns);
    chores
        .create(&PostParams::default(), &Chore::new("c", ChoreSpec {}))
        .await
        .expect("create a Chore");
    let failed = wait_phase(&chores, "c", "Failed").await;
    let machine = &failed.status.as_ref().expect("status").machine;
    let created = failed
        .metadata
        .creation_timestamp
        .clone()
        .expect("created")
        .0;
    let entered = machine.entered_at().expect("entered Failed");
    let after = entered.duration_since(created);
    eprintln!(
        "Working (3 s timeout) reached Failed {after:?} after creation, every handler call hanging"
    );
    // 3 s and the requeue that takes it, on second-precision timestamps.
    assert!(
        after <= k8s_openapi::jiff::SignedDuration::from_secs(5),
        "Failed {after:?} after creation"
    );
    assert!(
        !cluster::events(&client, &ns, "WorkTimedOut")
            .await
            .is_empty(),
        "the timeout's transition"
    );
    assert!(
        !cluster::events(&client, &ns, "HandlerTimedOut")
            .await
            .is_empty(),
        "the spec's 1 s handlerTimeout dropped a call before the timeout"
    );
    let dropped = recorded.sum("kube_fsm_handler_timeouts_total", &[("machine", "Chore")]);
    assert!(dropped >= 2.0, "counted: {dropped}");
    running.stop().await;
}
