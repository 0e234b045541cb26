use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "ui/fail/database.yaml")]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Database", namespaced, status = "DatabaseStatus")]
pub struct DatabaseSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct DatabaseStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<DatabasePhase>,
}

#[derive(Debug, thiserror::Error)]
#[error("failed")]
pub struct Error;

struct Handlers;

impl DatabaseHandler for Handlers {
    type Error = Error;

    async fn on_pending(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabasePendingNext, Error> {
        // Pending may only go to Provisioning.
        Ok(Next::To(DatabasePendingTarget::Running))
    }

    async fn on_provisioning(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabaseProvisioningNext, Error> {
        Ok(Next::Stay)
    }

    async fn on_running(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabaseRunningNext, Error> {
        Ok(Next::Stay)
    }

    async fn on_degraded(&self, _: &Database, _: &mut Step<Database>) -> Result<DatabaseDegradedNext, Error> {
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<kube_fsm::Cleanup, Error> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

fn main() {}
