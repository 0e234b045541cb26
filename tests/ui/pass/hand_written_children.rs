//! Children applied and read back by hand (`step.apply`, `step.children`), the form the
//! README's quick start had before children were declared in the spec: it still compiles.
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,                      // your own fields
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)] Child(#[from] kube_fsm::handler::ContextError),
    #[error(transparent)] Condition(#[from] kube_fsm::machine::ConditionError),
}

struct Handlers;
impl JobHandler for Handlers {                     // one method per non-terminal phase
    type Error = Error;
    async fn on_pending(&self, job: &Job, step: &mut Step<Job>) -> Result<JobPendingNext, Error> {
        let container = Container { name: "main".into(), image: Some(job.spec.image.clone()), ..Default::default() };
        let mut pod = Pod::default();
        pod.metadata.name = Some(job.name_any());
        pod.spec = Some(PodSpec { containers: vec![container], restart_policy: Some("Never".into()), ..Default::default() });
        step.apply(pod).await?;                    // server-side apply, owned by the Job; no request if the cache has it
        step.status_mut().pod = Some(job.name_any()); // written in the same status patch as the phase
        Ok(JobPendingEvent::Start.into())          // JobPendingTarget::Succeeded would not compile
    }
    async fn on_running(&self, _: &Job, step: &mut Step<Job>) -> Result<JobRunningNext, Error> {
        let succeeded = step.children::<Pod>()?    // from the operator's cache, by owner: no GET
            .iter()
            .any(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"));
        if succeeded {
            step.set_condition(JobCondition::Complete, true, "Finished", "exit 0")?; // rule → Succeeded
        }
        Ok(Next::Stay)
    }
}

// The README's `#[tokio::main] async fn main`, built but not run (trybuild runs pass tests).
async fn operator() {
    let client = kube::Client::try_default().await.expect("kubeconfig");
    kube_fsm::Operator::<Job, Handlers>::new(client, Handlers)
        .owns::<Pod>(watcher::Config::default())  // watch the children, cache them for `step`
        .run()
        .await;
}

fn main() {
    drop(operator());
}
