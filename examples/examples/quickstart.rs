//! The README's quick start, verbatim (a test checks it): a `Task` custom resource whose
//! machine is `specs/task.yaml`, a Job child per Task declared in the spec, and the operator
//! over it.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example quickstart    # against KUBECONFIG's cluster
//! ```

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use kube::CustomResource;
use kube_fsm::{MachineStatus, Next, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;

#[state_machine(spec = "specs/task.yaml")] // relative to this crate's Cargo.toml
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Task",
    namespaced,
    status = "TaskStatus"
)]
pub struct TaskSpec {
    pub image: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TaskStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<TaskPhase>, // phase, conditions, observedGeneration, ...
}

#[derive(Debug)]
pub struct Handlers;
impl TaskHandler for Handlers {
    // one method per non-terminal phase, one builder per child
    type Error = Infallible;
    async fn on_pending(
        &self,
        _: &Task,
        _: &mut Step<Task>,
    ) -> Result<TaskPendingNext, Infallible> {
        Ok(TaskPendingEvent::Start.into()) // TaskPendingTarget::Succeeded would not compile
    }
    async fn on_running(
        &self,
        _: &Task,
        _: &mut Step<Task>,
    ) -> Result<TaskRunningNext, Infallible> {
        Ok(Next::Stay) // the Job's conditions move it: the spec's `when` rules
    }
    async fn job(&self, task: &Task, _: &Step<Task>) -> Result<Job, Infallible> {
        // what the Job looks like; the engine applies it (named `<task>-job`, owned by the Task)
        let container = Container {
            name: "main".into(),
            image: Some(task.spec.image.clone()),
            ..Default::default()
        };
        let template = PodTemplateSpec {
            spec: Some(PodSpec {
                containers: vec![container],
                restart_policy: Some("Never".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let spec = JobSpec {
            template,
            backoff_limit: Some(0),
            ..Default::default()
        };
        Ok(Job {
            spec: Some(spec),
            ..Default::default()
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = kube_fsm::client(kube::Config::infer().await?)?; // kubeconfig, or in-cluster
    kube_fsm::Operator::<Task, Handlers>::new(client, Handlers) // watches and caches its Jobs
        .run()
        .await;
    Ok(())
}
