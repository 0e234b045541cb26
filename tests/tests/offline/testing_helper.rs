//! The user-facing testing helper: phase handlers as pure state functions, no cluster.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_fsm::testing;
use kube_fsm::testing::Veto;
use kube_fsm::{Next, Step, Verdict};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::resources::*;

struct Handlers {
    pods_ready: bool,
    veto_failed: bool,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Error(#[from] kube_fsm::machine::ConditionError);

impl DatabaseHandler for Handlers {
    type Error = Error;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, Error> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, Error> {
        step.set_condition(
            DatabaseCondition::PodsReady,
            self.pods_ready,
            "Checked",
            "pods checked",
        )?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, Error> {
        step.requeue_after(Duration::from_secs(42));
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, Error> {
        Ok(DatabaseDegradedEvent::Fail.into())
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, Error> {
        Ok(kube_fsm::Cleanup::Done)
    }

    async fn before_transition(
        &self,
        _: &Database,
        _: DatabasePhase,
        to: DatabasePhase,
    ) -> Result<Verdict, Error> {
        Ok(if self.veto_failed && to == DatabasePhase::Failed {
            Verdict::Veto("keep it".into())
        } else {
            Verdict::Allow
        })
    }
}

fn db() -> Database {
    sample("db")
}

#[tokio::test]
async fn a_new_object_moves_to_provisioning_in_its_first_write() {
    let h = Handlers {
        pods_ready: false,
        veto_failed: false,
    };
    let out = testing::step(&h, &db()).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Provisioning);
    assert_eq!(
        out.transition.as_ref().map(|t| (t.from.clone(), t.reason)),
        Some((None, "Accept"))
    );
    assert!(out.writes_status);
    assert_eq!(
        out.requeue,
        Some(Duration::from_secs(10)),
        "Provisioning's requeueAfter"
    );
}

#[tokio::test]
async fn a_condition_set_by_the_handler_fires_the_rule_in_the_same_step() {
    let object = testing::in_phase(db(), DatabasePhase::Provisioning);
    let stuck = testing::step(
        &Handlers {
            pods_ready: false,
            veto_failed: false,
        },
        &object,
    )
    .await
    .unwrap();
    assert_eq!(stuck.phase, DatabasePhase::Provisioning);
    assert_eq!(stuck.condition(DatabaseCondition::PodsReady), Some(false));
    let ready = testing::step(
        &Handlers {
            pods_ready: true,
            veto_failed: false,
        },
        &object,
    )
    .await
    .unwrap();
    assert_eq!(ready.phase, DatabasePhase::Running);
    assert_eq!(ready.condition(DatabaseCondition::PodsReady), Some(true));

    // Chained: the next step in Running changes nothing but asks for a requeue.
    let mut object = object;
    testing::apply(&mut object, &ready);
    let settled = testing::step(
        &Handlers {
            pods_ready: true,
            veto_failed: false,
        },
        &object,
    )
    .await
    .unwrap();
    assert_eq!(
        (settled.phase, settled.writes_status, settled.requeue),
        (DatabasePhase::Running, false, Some(Duration::from_secs(42)))
    );
}

#[tokio::test]
async fn timeouts_and_vetoes() {
    let since = Timestamp::now() - SignedDuration::from_mins(11);
    let object = testing::in_phase_since(db(), DatabasePhase::Provisioning, since);
    let h = Handlers {
        pods_ready: false,
        veto_failed: false,
    };
    let out = testing::step(&h, &object).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Failed);
    assert_eq!(out.transition.unwrap().reason, "ProvisioningTimedOut");

    let vetoing = Handlers {
        pods_ready: false,
        veto_failed: true,
    };
    let out = testing::step(&vetoing, &object).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Provisioning);
    assert_eq!(
        out.vetoed,
        [Veto {
            from: DatabasePhase::Provisioning,
            to: DatabasePhase::Failed,
            message: "keep it".to_owned(),
            timeout: true,
        }]
    );
    assert!(out.transition.is_none());
    assert_eq!(
        out.condition(DatabaseCondition::PodsReady),
        Some(false),
        "the phase's handler still ran"
    );
    assert_eq!(
        out.requeue,
        Some(Duration::from_secs(10)),
        "the phase's own requeue, not a loop on the due timeout (the engine backs off)"
    );
}

#[tokio::test]
async fn a_vetoed_timeout_does_not_stop_the_phase_from_moving_on_by_its_rules() {
    let since = Timestamp::now() - SignedDuration::from_mins(11);
    let object = testing::in_phase_since(db(), DatabasePhase::Provisioning, since);
    let ready_but_vetoing = Handlers {
        pods_ready: true,
        veto_failed: true,
    };
    let out = testing::step(&ready_but_vetoing, &object).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Running, "`when PodsReady` fires");
    assert_eq!(out.vetoed.len(), 1);
    assert!(out.vetoed[0].timeout);
}

#[tokio::test]
async fn a_phase_written_by_someone_else_does_not_inherit_the_previous_phases_clock() {
    // 15 minutes in Pending, then a hand edit moves the phase to Provisioning (10 min timeout)
    // leaving the entry time as it was.
    let since = Timestamp::now() - SignedDuration::from_mins(15);
    let mut object = testing::in_phase_since(db(), DatabasePhase::Pending, since);
    object.status.as_mut().unwrap().machine.phase = Some(kube_fsm::machine::PhaseValue::Known(
        DatabasePhase::Provisioning,
    ));
    let h = Handlers {
        pods_ready: false,
        veto_failed: false,
    };
    let out = testing::step(&h, &object).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Provisioning, "no timeout yet");
    assert!(out.writes_status, "the new phase's clock is stamped");
    let entered = out.machine().last_phase_transition_time.as_ref().unwrap().0;
    assert!(Timestamp::now().duration_since(entered).as_secs() < 5);
    assert_eq!(
        out.machine().entered_phase,
        Some(kube_fsm::machine::PhaseValue::Known(
            DatabasePhase::Provisioning
        ))
    );
}

#[tokio::test]
async fn an_entry_time_far_in_the_past_makes_the_timeout_due_instead_of_disabling_it() {
    let since: Timestamp = "1200-01-01T00:00:00Z".parse().unwrap();
    let object = testing::in_phase_since(db(), DatabasePhase::Provisioning, since);
    let h = Handlers {
        pods_ready: false,
        veto_failed: false,
    };
    let out = testing::step(&h, &object).await.unwrap();
    assert_eq!(out.phase, DatabasePhase::Failed);
}

#[tokio::test]
async fn a_rate_limit_that_lets_nothing_through_is_refused_by_the_builder() {
    let client = kube_fsm::testing::no_cluster().client().clone();
    let operator = || kube_fsm::Operator::<Database, _>::new(client.clone(), Databases);
    for (per_second, burst) in [
        (0.0, 10),
        (-1.0, 10),
        (f64::NAN, 10),
        (f64::INFINITY, 10),
        (5.0, 0),
    ] {
        let refused = operator().rate_limit(per_second, burst).err();
        assert!(refused.is_some(), "{per_second}/s burst {burst}");
        assert!(refused.unwrap().to_string().contains("invalid rate limit"));
    }
    assert!(operator().rate_limit(0.5, 1).is_ok());
}

#[tokio::test]
async fn a_child_in_another_namespace_than_its_owner_is_refused_before_any_request() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let mut owner = db();
    owner.metadata.namespace = Some("team-a".into());
    owner.metadata.uid = Some("uid-1".into());
    let step = Step::<Database>::new(&owner, Timestamp::now(), testing::no_cluster());
    let mut child = ConfigMap::default();
    child.metadata.name = Some("config".into());
    child.metadata.namespace = Some("team-b".into());
    let refused = step.apply(child).await.expect_err("refused");
    assert!(
        matches!(&refused, kube_fsm::handler::ContextError::ForeignNamespace { child, owner } if child == "team-b" && owner == "team-a"),
        "{refused}"
    );
}
