//! The README's quick start on the control plane, as a new user runs it: its Task's Job is
//! applied by the engine, runs on a simulated node, completes, and the Task is `Succeeded`
//! with the Job's own reason — the handlers that do it are the README's, word for word.

#[path = "../examples/quickstart.rs"]
#[allow(dead_code)] // its `main` is for `cargo run`
mod quickstart;

use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::operator::Running;
use quickstart::{Handlers, Task, TaskSpec};

#[tokio::test]
async fn the_quick_starts_task_succeeds_when_its_declared_job_completes() {
    let test = "quickstart::the_quick_starts_task_succeeds";
    let Some(client) = cluster::control_plane(test).await else {
        return;
    };
    cluster::install_crd(&client, kube_fsm::crd::<Task>()).await;
    let ns = cluster::namespace(&client, "cp-quickstart").await;
    let tasks: Api<Task> = Api::namespaced(client.clone(), &ns);
    let operator = kube_fsm::Operator::<Task, Handlers>::new(client.clone(), Handlers);
    let running = Running::spawn(operator.namespace(&ns));

    let task = Task::new(
        "hello",
        TaskSpec {
            image: "busybox".into(),
        },
    );
    tasks
        .create(&PostParams::default(), &task)
        .await
        .expect("create");
    let done = wait_phase(&tasks, "hello", "Succeeded").await;
    let job = Api::<Job>::namespaced(client, &ns)
        .get("hello-job")
        .await
        .expect("the Job the engine applied, named `<task>-job`");
    assert_eq!(
        job.owner_references().first().map(|o| o.name.as_str()),
        Some("hello"),
        "owned by its Task"
    );
    let complete = (done.status.as_ref())
        .and_then(|s| {
            s.machine
                .conditions
                .iter()
                .find(|c| c.type_ == "JobComplete")
        })
        .expect("JobComplete, derived from the Job");
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("True", "CompletionsReached"),
        "the Job's own condition and reason: {complete:?}"
    );
    assert!(
        complete
            .message
            .starts_with("The Job hello-job reports `Complete` True"),
        "a sentence naming the Job: {:?}",
        complete.message
    );
    running.stop().await;
}
