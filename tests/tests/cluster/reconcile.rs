//! The engine against a real kube-apiserver + etcd (scripts/envtest), not mocks: status
//! initialisation, handler- and condition-driven transitions, Events, API economy, conflicts
//! with a concurrent writer, finalizers, timeouts and a controller restart mid-flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fsm::machine::PhaseValue;
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, phase_of, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;
use tokio::sync::Notify;

const FINALIZER: &str = "example.com/cleanup";

#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Condition(#[from] kube_fsm::machine::ConditionError),
    #[error("the backing store is unreachable")]
    Unreachable,
}

/// Knobs the tests turn while the operator runs.
#[derive(Default)]
struct Knobs {
    /// Hold the first Provisioning step until notified.
    hold_first_provisioning: AtomicBool,
    provisioning_entered: AtomicUsize,
    release: Notify,
    /// Whether every handler call saw the finalizer already on the object.
    finalizer_missing_in_handler: AtomicBool,
    allow_cleanup: AtomicBool,
    cleanups: AtomicUsize,
    /// Fail every Pending step while set.
    fail_pending: AtomicBool,
    pending_calls: AtomicUsize,
}

#[derive(Clone)]
struct DbHandler(Arc<Knobs>);

impl DbHandler {
    fn saw(&self, db: &Database) {
        if !db.finalizers().iter().any(|f| f == FINALIZER) {
            self.0
                .finalizer_missing_in_handler
                .store(true, Ordering::SeqCst);
        }
    }
}

impl DatabaseHandler for DbHandler {
    type Error = TestError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        self.saw(db);
        self.0.pending_calls.fetch_add(1, Ordering::SeqCst);
        if self.0.fail_pending.load(Ordering::SeqCst) {
            return Err(TestError::Unreachable);
        }
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        self.saw(db);
        let first = self.0.provisioning_entered.fetch_add(1, Ordering::SeqCst) == 0;
        if first && self.0.hold_first_provisioning.load(Ordering::SeqCst) {
            self.0.release.notified().await;
        }
        step.set_condition(
            DatabaseCondition::PodsReady,
            true,
            "PodsUp",
            "all pods ready",
        )?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, TestError> {
        self.saw(db);
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, TestError> {
        self.saw(db);
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, TestError> {
        self.0.cleanups.fetch_add(1, Ordering::SeqCst);
        Ok(if self.0.allow_cleanup.load(Ordering::SeqCst) {
            Cleanup::Done
        } else {
            Cleanup::InProgress(Duration::from_millis(300))
        })
    }
}

/// Starts an operator for `K` in `namespace` with a short backoff.
fn start<K, H>(client: &Client, namespace: &str, handler: H) -> Running
where
    K: kube_fsm::Reconcilable<H>,
    H: Send + Sync + 'static,
{
    Running::spawn(operator::in_namespace::<K, H>(client, namespace, handler))
}

async fn create_db(api: &Api<Database>, name: &str) -> Database {
    api.create(&PostParams::default(), &sample(name))
        .await
        .expect("create database")
}

#[tokio::test]
async fn objects_are_initialised_and_move_by_event_and_by_rule_with_events_recorded() {
    let Some((client, ns)) = cluster::prepare(
        "objects_are_initialised_and_move_by_event_and_by_rule",
        "fsm-flow",
    )
    .await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let knobs = Arc::new(Knobs::default());
    let operator = start::<Database, _>(&client, &ns, DbHandler(knobs.clone()));

    create_db(&api, "db").await;
    let db = wait_phase(&api, "db", "Running").await;
    let status = &db.status.as_ref().unwrap().machine;
    assert_eq!(status.observed_generation, db.metadata.generation);
    assert!(status.last_phase_transition_time.is_some());
    let pods = status.condition("PodsReady").expect("PodsReady set");
    assert_eq!(
        (pods.status.as_str(), pods.reason.as_str()),
        ("True", "PodsUp")
    );
    assert!(
        db.finalizers().contains(&FINALIZER.to_owned()),
        "finalizer added"
    );
    assert!(
        !knobs.finalizer_missing_in_handler.load(Ordering::SeqCst),
        "the finalizer is added before any handler runs"
    );

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let seen = eventually(Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let notes: Vec<(String, String)> = list
            .items
            .iter()
            .map(|e| {
                (
                    e.reason.clone().unwrap_or_default(),
                    e.note.clone().unwrap_or_default(),
                )
            })
            .collect();
        let want = [
            ("Accept", "Pending → Provisioning"),
            ("PhaseChanged", "Provisioning → Running"),
        ];
        want.iter()
            .all(|(r, n)| notes.iter().any(|(rr, nn)| rr == r && nn == n))
            .then_some(notes)
    })
    .await;
    assert!(seen.is_some(), "transition Events recorded");
    operator.stop().await;
}

#[tokio::test]
async fn status_writes_equal_status_changes_and_reconciles_after_convergence_write_nothing() {
    struct Pipelines;
    impl PipelineHandler for Pipelines {
        type Error = TestError;
        async fn on_pending(
            &self,
            _: &Pipeline,
            step: &mut Step<Pipeline>,
        ) -> Result<PipelinePendingNext, TestError> {
            step.set_condition(PipelineCondition::Scheduled, true, "Bound", "")?;
            step.set_condition(PipelineCondition::Complete, true, "Done", "")?;
            step.set_condition(PipelineCondition::Failed, false, "Done", "")?;
            Ok(Next::Stay)
        }
        async fn on_running(
            &self,
            _: &Pipeline,
            _: &mut Step<Pipeline>,
        ) -> Result<PipelineRunningNext, TestError> {
            Ok(Next::Stay)
        }
    }

    let Some((client, ns)) =
        cluster::prepare("status_writes_equal_status_changes", "fsm-economy").await
    else {
        return;
    };
    let api: Api<Pipeline> = Api::namespaced(client.clone(), &ns);
    let patches = [
        ("resource", "pipelines"),
        ("subresource", "status"),
        ("verb", "PATCH"),
    ];
    let before = cluster::requests(&client, &patches).await;
    let operator = start::<Pipeline, _>(&client, &ns, Pipelines);

    let n = 10;
    for i in 0..n {
        api.create(
            &PostParams::default(),
            &Pipeline::new(
                &format!("p{i}"),
                PipelineSpec {
                    image: "busybox".into(),
                },
            ),
        )
        .await
        .expect("create pipeline");
    }
    let done = eventually(Duration::from_secs(60), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|p| {
                p.status.as_ref().and_then(|s| s.machine.phase()) == Some(PipelinePhase::Succeeded)
            })
            .then_some(())
    })
    .await;
    assert!(done.is_some(), "all pipelines succeed");
    // Pending -> Running (first write, the rule fires in the first step) and Running -> Succeeded:
    // waited for (a request is counted as it is answered), then counted exactly.
    let counted = eventually(Duration::from_secs(10), || async {
        (cluster::requests(&client, &patches).await - before >= 2 * n).then_some(())
    })
    .await;
    assert!(counted.is_some(), "the status writes were counted");
    let converged = cluster::requests(&client, &patches).await;
    assert_eq!(
        converged - before,
        2 * n,
        "exactly one status write per status change"
    );

    // Touch every object: each is reconciled again and nothing is written.
    for i in 0..n {
        let patch = json!({"metadata": {"annotations": {"touched": "yes"}}});
        api.patch(
            &format!("p{i}"),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .expect("annotate");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        cluster::requests(&client, &patches).await,
        converged,
        "no writes after convergence"
    );
    operator.stop().await;
}

/// Holds the first Provisioning step, lets `write` change the object meanwhile, releases;
/// waits for the engine's stale write to be refused with a 409 (the API server's audit log,
/// this object's requests only) and for the object to be `settled`.
async fn race_with_concurrent_writer(
    prefix: &str,
    write: serde_json::Value,
    settled: impl Fn(&Database) -> bool,
) -> (Database, Vec<String>) {
    let client = cluster::client(prefix).await.expect("checked by caller");
    cluster::install_crds(&client).await;
    let ns = cluster::namespace(&client, prefix).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let knobs = Arc::new(Knobs {
        hold_first_provisioning: AtomicBool::new(true),
        ..Knobs::default()
    });

    // Record every phase the API server ever stores for the object.
    let watched = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let watcher_task = {
        let (api, watched) = (api.clone(), watched.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            let stream = kube::runtime::watcher(api, kube::runtime::watcher::Config::default());
            let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(stream));
            while let Some(Ok(db)) = stream.next().await {
                if let Some(phase) = phase_of(&db) {
                    let mut seen = watched.lock().unwrap();
                    if seen.last() != Some(&phase) {
                        seen.push(phase);
                    }
                }
            }
        })
    };

    let operator = start::<Database, _>(&client, &ns, DbHandler(knobs.clone()));
    create_db(&api, "db").await;
    eventually(Duration::from_secs(30), || async {
        (knobs.provisioning_entered.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await
    .expect("provisioning handler entered");
    api.patch_status("db", &PatchParams::default(), &Patch::Merge(&write))
        .await
        .expect("concurrent write");
    knobs.release.notify_one();

    if let Some(audit) = kube_fsm_testkit::audit::log(prefix) {
        let refused = eventually(Duration::from_secs(10), || async {
            kube_fsm_testkit::audit::requests(&audit, &ns)
                .iter()
                .any(|r| {
                    (
                        r.resource.as_str(),
                        r.subresource.as_str(),
                        r.name.as_str(),
                        r.code,
                    ) == ("databases", "status", "db", 409)
                })
                .then_some(())
        })
        .await;
        assert!(
            refused.is_some(),
            "the engine's stale write of db got no 409"
        );
    }
    let db = eventually(Duration::from_secs(10), || async {
        api.get("db").await.ok().filter(|db| settled(db))
    })
    .await
    .expect("settled after the conflict");
    // A moment for anything else the engine would still write (nothing, if it is right) to
    // reach the watch.
    tokio::time::sleep(Duration::from_secs(1)).await;
    operator.stop().await;
    watcher_task.abort();
    let phases = watched.lock().unwrap().clone();
    (db, phases)
}

#[tokio::test]
async fn a_conflicting_write_is_recovered_without_losing_the_other_writers_change() {
    if cluster::client("a_conflicting_write_is_recovered")
        .await
        .is_none()
    {
        return;
    }
    let other = json!({"status": {"conditions": [
        {"type": "PodsReady", "status": "False", "reason": "Waiting", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "example.com/ExternalCheck", "status": "True", "reason": "Verified", "message": "by another controller", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}});
    let (db, phases) = race_with_concurrent_writer("fsm-conflict", other, |db| {
        phase_of(db).as_deref() == Some("Running")
    })
    .await;
    let status = &db.status.as_ref().unwrap().machine;
    assert_eq!(status.phase(), Some(DatabasePhase::Running));
    let external = status
        .condition("example.com/ExternalCheck")
        .expect("the other writer's condition survives");
    assert_eq!(external.reason, "Verified");
    assert_eq!(status.condition("PodsReady").unwrap().status, "True");
    assert_eq!(phases, ["Provisioning", "Running"]);
}

#[tokio::test]
async fn a_conflict_never_persists_an_illegal_phase() {
    if cluster::client("a_conflict_never_persists_an_illegal_phase")
        .await
        .is_none()
    {
        return;
    }
    // Meanwhile someone fails the object: Running is no longer a legal successor.
    let other = json!({"status": {"phase": "Failed"}});
    let (db, phases) = race_with_concurrent_writer("fsm-illegal", other, |db| {
        phase_of(db).as_deref() == Some("Failed")
    })
    .await;
    assert_eq!(
        db.status.as_ref().unwrap().machine.phase(),
        Some(DatabasePhase::Failed)
    );
    assert!(
        !phases.contains(&"Running".to_owned()),
        "Running was never stored: {phases:?}"
    );
}

#[tokio::test]
async fn cleanup_runs_and_the_finalizer_goes_only_after_it_succeeds() {
    let Some((client, ns)) =
        cluster::prepare("cleanup_runs_and_the_finalizer_goes", "fsm-finalizer").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let knobs = Arc::new(Knobs::default());
    let operator = start::<Database, _>(&client, &ns, DbHandler(knobs.clone()));
    create_db(&api, "db").await;
    wait_phase(&api, "db", "Running").await;

    api.delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(Duration::from_secs(10), || async {
        (knobs.cleanups.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await
    .expect("cleanup retried while pending");
    let pending = api
        .get("db")
        .await
        .expect("still there while cleanup is pending");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert!(pending.finalizers().contains(&FINALIZER.to_owned()));

    knobs.allow_cleanup.store(true, Ordering::SeqCst);
    let gone = eventually(Duration::from_secs(10), || async {
        api.get_opt("db")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    assert!(gone.is_some(), "object deleted once cleanup is done");
    operator.stop().await;
}

#[tokio::test]
async fn phase_timeouts_fire() {
    struct Timers;
    impl TimerHandler for Timers {
        type Error = TestError;
        async fn on_waiting(
            &self,
            _: &Timer,
            _: &mut Step<Timer>,
        ) -> Result<TimerWaitingNext, TestError> {
            Ok(Next::Stay)
        }
    }
    let Some((client, ns)) = cluster::prepare("phase_timeouts_fire", "fsm-timeout").await else {
        return;
    };
    let api: Api<Timer> = Api::namespaced(client.clone(), &ns);
    let operator = start::<Timer, _>(&client, &ns, Timers);
    api.create(&PostParams::default(), &Timer::new("t", TimerSpec {}))
        .await
        .expect("create");
    let expired = eventually(Duration::from_secs(20), || async {
        let t = api.get("t").await.ok()?;
        (t.status?.machine.phase == Some(PhaseValue::Known(TimerPhase::Expired))).then_some(())
    })
    .await;
    assert!(expired.is_some(), "Waiting timed out to Expired");
    // The transition's Event is recorded after the status write the poll above may see first.
    let recorded = eventually(Duration::from_secs(10), || async {
        let reasons = cluster::all_events(&client, &ns).await;
        reasons
            .contains(&"WaitingTimedOut".to_owned())
            .then_some(())
    })
    .await;
    assert!(
        recorded.is_some(),
        "{:?}",
        cluster::all_events(&client, &ns).await
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_restarted_controller_converges() {
    let Some((client, ns)) =
        cluster::prepare("a_restarted_controller_converges", "fsm-restart").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    // The first controller hangs in Provisioning and crashes there.
    let stuck = Arc::new(Knobs {
        hold_first_provisioning: AtomicBool::new(true),
        ..Knobs::default()
    });
    let first = start::<Database, _>(&client, &ns, DbHandler(stuck.clone()));
    create_db(&api, "db").await;
    eventually(Duration::from_secs(30), || async {
        (stuck.provisioning_entered.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await
    .expect("first controller got to Provisioning");
    first.crash().await;
    assert_eq!(
        phase_of(&api.get("db").await.unwrap()).as_deref(),
        Some("Provisioning")
    );

    let second = start::<Database, _>(&client, &ns, DbHandler(Arc::new(Knobs::default())));
    wait_phase(&api, "db", "Running").await;
    second.stop().await;
}

#[tokio::test]
async fn handler_failures_back_off_record_a_warning_and_recover() {
    let Some((client, ns)) = cluster::prepare("handler_failures_back_off", "fsm-failure").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let knobs = Arc::new(Knobs {
        fail_pending: AtomicBool::new(true),
        ..Knobs::default()
    });
    let operator = start::<Database, _>(&client, &ns, DbHandler(knobs.clone()));
    create_db(&api, "db").await;

    eventually(Duration::from_secs(20), || async {
        (knobs.pending_calls.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await
    .expect("failed steps are retried");
    let db = api.get("db").await.unwrap();
    assert!(db.status.is_none(), "a failed step writes nothing");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let warning = eventually(Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("ReconcileFailed") && e.type_.as_deref() == Some("Warning")
        })
    })
    .await
    .expect("a Warning event for the failure");
    assert!(warning.note.unwrap_or_default().contains("unreachable"));

    knobs.fail_pending.store(false, Ordering::SeqCst);
    wait_phase(&api, "db", "Running").await;
    operator.stop().await;
}
