//! Waiting reconciles are served in the order they came, on the real API server: with a bound
//! of one reconcile in flight and objects created faster than the handler serves them, every
//! object's first step runs in the order the objects were created — as controller-runtime's
//! work queue serves them. (Kube's controller, bounding on its own, held the waiting triggers
//! in a set and took them in no order: at 1 000 objects the unluckiest waited seconds behind
//! objects created after them.) And an object that moved keeps its place for its next step,
//! also when the echo of its own earlier write (the finalizer) comes back first.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;

const OBJECTS: usize = 24;

/// Records every step (the object and its phase) in the order they ran, taking 40 ms a step
/// in Pending (as a call to an external system would); keeps every object in Pending unless
/// `advance`, then moves it on to Provisioning.
#[derive(Clone)]
struct Slow {
    steps: Arc<Mutex<Vec<(String, &'static str)>>>,
    advance: bool,
    pause: Duration,
}

impl Default for Slow {
    fn default() -> Self {
        Slow {
            steps: Arc::default(),
            advance: false,
            pause: Duration::from_millis(40),
        }
    }
}

impl Slow {
    fn saw(&self, db: &Database, phase: &'static str) {
        self.steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((db.name_any(), phase));
    }

    fn steps(&self) -> Vec<(String, &'static str)> {
        self.steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Each object's first step, in the order they ran.
    fn first_steps(&self) -> Vec<String> {
        let mut first: Vec<String> = Vec::new();
        for (name, _) in self.steps() {
            if !first.contains(&name) {
                first.push(name);
            }
        }
        first
    }
}

impl DatabaseHandler for Slow {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        self.saw(db, "Pending");
        tokio::time::sleep(self.pause).await;
        if self.advance {
            return Ok(DatabasePendingEvent::Accept.into());
        }
        Ok(Next::Stay)
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        self.saw(db, "Provisioning");
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
        let seen = handler.first_steps();
        (seen.len() == OBJECTS).then_some(seen)
    })
    .await
    .expect("every object's first step");
    assert_eq!(served, created, "first steps in the order of the creates");
    running.stop().await;
}

/// Under load (200 objects created 20 at a time, 4 reconciles in flight, quick handlers), each
/// object's step in Provisioning comes within a few dozen other objects' first steps of its own
/// first step: the change its transition brought back keeps its place in line, also when the
/// echo of its finalizer write arrives after the step that wrote both (that echo finds the
/// cache behind the engine's own write and is skipped, keeping the place). Before, the skipped
/// echo used the place up and the next step went to the back of the line, behind every object
/// created meanwhile.
#[tokio::test]
async fn an_object_that_moved_keeps_its_place_for_its_next_step() {
    const MANY: usize = 200;
    const IN_FLIGHT: u16 = 4;
    let Some((client, ns)) = cluster::prepare("fairness::keeps_its_place", "fsm-fairness").await
    else {
        return;
    };
    let handler = Slow {
        advance: true,
        pause: Duration::ZERO,
        ..Slow::default()
    };
    let running = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, handler.clone()).concurrency(IN_FLIGHT),
    );
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    futures::stream::iter(0..MANY)
        .map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &sample(&format!("db-{i:03}")))
                    .await
                    .expect("create");
            }
        })
        .buffer_unordered(20)
        .collect::<()>()
        .await;
    let steps = eventually(Duration::from_secs(120), || async {
        let steps = handler.steps();
        let provisioned: std::collections::HashSet<&String> = steps
            .iter()
            .filter(|(_, p)| *p == "Provisioning")
            .map(|(n, _)| n)
            .collect();
        (provisioned.len() == MANY).then_some(steps.clone())
    })
    .await
    .expect("every object's step in Provisioning");
    running.stop().await;
    let mut worst = (0, String::new());
    for i in 0..MANY {
        let name = format!("db-{i:03}");
        let first = steps.iter().position(|(n, _)| *n == name);
        let next = steps
            .iter()
            .position(|(n, p)| *n == name && *p == "Provisioning");
        let (Some(first), Some(next)) = (first, next) else {
            panic!("{name} has no step in Pending or in Provisioning");
        };
        let passed_by = steps[first..next]
            .iter()
            .filter(|(n, p)| *n != name && *p == "Pending")
            .count();
        if passed_by > worst.0 {
            worst = (passed_by, name);
        }
    }
    // In line, an object is passed by the objects already in flight when it moved and those
    // dispatched before its change came back: a few times the bound, never most of the run.
    assert!(
        worst.0 <= 8 * usize::from(IN_FLIGHT),
        "{}'s step in Provisioning waited behind {} other objects' steps in Pending",
        worst.1,
        worst.0
    );
    eprintln!(
        "fairness: the most passed object was passed by {} objects ({})",
        worst.0, worst.1
    );
}
