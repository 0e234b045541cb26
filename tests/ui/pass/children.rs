//! Children declared in the inline DSL: the handler trait gains one typed builder per child,
//! the machine's data lists them in spec order, and the derived conditions name their child.
#![deny(warnings)]
#![allow(missing_docs)]

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, StateMachine, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(
    phases(Pending(initial), Running, Retired(terminal)),
    children(
        credentials(type = Secret, phases(Pending, Running), apply = once, on_leave = keep),
        service(type = Service, phases(Running)),
        db(type = StatefulSet, phases(Running), after(credentials)),
    ),
    conditions(PodsReady(from = db.ready), Configured),
    transitions(Pending -> Running when Configured, Running -> Retired),
)]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Db", namespaced, status = "DbStatus")]
pub struct DbSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct DbStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<DbPhase>,
}

struct Handlers;

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl DbHandler for Handlers {
    type Error = Never;

    async fn on_pending(&self, _: &Db, _: &mut Step<Db>) -> Result<DbPendingNext, Never> {
        Ok(Next::Stay)
    }

    async fn on_running(&self, _: &Db, _: &mut Step<Db>) -> Result<DbRunningNext, Never> {
        Ok(Next::Stay)
    }

    async fn credentials(&self, _: &Db, _: &Step<Db>) -> Result<Secret, Never> {
        Ok(Secret::default())
    }

    async fn service(&self, _: &Db, _: &Step<Db>) -> Result<Service, Never> {
        Ok(Service::default())
    }

    async fn db(&self, _: &Db, step: &Step<Db>) -> Result<StatefulSet, Never> {
        // A builder may read what the step knows (its status, its caches).
        let _ = step.status();
        Ok(StatefulSet::default())
    }
}

fn main() {
    let machine = <Db as StateMachine>::machine();
    let names: Vec<&str> = machine.children.iter().map(|c| c.name).collect();
    assert_eq!(names, ["credentials", "service", "db"]);
    assert_eq!(machine.children[2].after, [0]);
    assert!(machine.children[0].once && !machine.children[0].delete_on_leave);
    let pods_ready = &machine.conditions[0];
    assert_eq!(pods_ready.from.map(|f| f.child), Some(2));
    let _ = Handlers;
}
