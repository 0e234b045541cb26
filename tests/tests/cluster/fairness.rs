//! Waiting reconciles are served in the order they came, on the real API server: with a bound
//! of one reconcile in flight and objects created faster than the handler serves them, every
//! object's first step runs in the order the objects were created — as controller-runtime's
//! work queue serves them. (Kube's controller, bounding on its own, held the waiting triggers
//! in a set and took them in no order: at 1 000 objects the unluckiest waited seconds behind
//! objects created after them.)

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kube_fsm::handler::ConditionError;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;

const OBJECTS: usize = 24;

/// Records the order of each object's first step, taking 40 ms a step (as a call to an
/// external system would), and keeps every object in Pending.
#[derive(Clone, Default)]
struct Slow {
    first_steps: Arc<Mutex<Vec<String>>>,
}

impl DatabaseHandler for Slow {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        {
            let mut seen = self
                .first_steps
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !seen.contains(&db.name_any()) {
                seen.push(db.name_any());
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(Next::Stay)
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, ConditionError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

#[tokio::test]
async fn objects_waiting_for_a_place_are_served_in_the_order_they_came() {
    let Some((client, ns)) = cluster::prepare("fairness::first_come", "fsm-fairness").await else {
        return;
    };
    let handler = Slow::default();
    let running = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, handler.clone()).concurrency(1),
    );
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let created: Vec<String> = (0..OBJECTS).map(|i| format!("db-{i:02}")).collect();
    for name in &created {
        api.create(&PostParams::default(), &sample(name))
            .await
            .expect("create");
    }
    let served = eventually(Duration::from_secs(60), || async {
        let seen = handler
            .first_steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        (seen.len() == OBJECTS).then_some(seen)
    })
    .await
    .expect("every object's first step");
    assert_eq!(served, created, "first steps in the order of the creates");
    running.stop().await;
}
