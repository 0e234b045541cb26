//! The README's quick start (spec path adjusted to this fixture's folder; `main` not run).
use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[state_machine(spec = "ui/pass/job.yaml")]           // relative to this crate's Cargo.toml
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Job", namespaced, status = "JobStatus")]
pub struct JobSpec { pub image: String }

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,         // phase, conditions, observedGeneration, ...
}

struct Handlers;
impl JobHandler for Handlers {                     // one method per non-terminal phase
    type Error = kube_fsm::conditions::ConditionError;
    async fn on_pending(&self, _: &Job, _: &mut Step<Job>) -> Result<JobPendingNext, Self::Error> {
        Ok(JobPendingEvent::Start.into())          // JobPendingTarget::Succeeded would not compile
    }
    async fn on_running(&self, _: &Job, step: &mut Step<Job>) -> Result<JobRunningNext, Self::Error> {
        step.set_condition(JobCondition::Complete, true, "Finished", "exit 0")?; // rule → Succeeded
        Ok(Next::Stay)
    }
}

// The README's `#[tokio::main] async fn main`, built but not run (trybuild runs pass tests).
async fn operator() {
    let client = kube::Client::try_default().await.expect("kubeconfig");
    kube_fsm::Operator::<Job, Handlers>::new(client, Handlers).run().await;
}

fn main() {
    drop(operator());
}
