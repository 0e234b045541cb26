//! Children declared in the spec, on the control plane (the Job controller, the scheduler and
//! kwok's nodes run them): the Migration example's Job (`children: migrate`) is applied by the
//! engine, named from its owner, labelled and owned, and its own conditions become the
//! Migration's (`from: migrate.Complete`, `from: migrate.Failed`), the Job's reason and message
//! carried over; the handler only builds the Job.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_fsm::children::CHILD_LABEL;
use kube_fsm_envtest::pods;
use kube_fsm_examples::migration::{self, Migration, MigrationSpec};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::Running;
use serde_json::json;

use super::control_plane::control_plane;

/// A Migration whose pod runs `labels` (kwok's failing stage reads one).
fn migration(name: &str, approved_by: Option<&str>, labels: &[(&str, &str)]) -> Migration {
    Migration::new(
        name,
        MigrationSpec {
            image: "registry.k8s.io/pause:3.10".into(),
            command: Vec::new(),
            approved_by: approved_by.map(str::to_owned),
            pod_labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        },
    )
}

/// The condition `type_` of `object`'s status.
fn condition(object: &Migration, type_: &str) -> Option<Condition> {
    object
        .status
        .as_ref()?
        .machine
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// The Job's condition `type_`, as the Job controller wrote it.
fn job_condition(job: &Job, type_: &str) -> Option<(String, String, String)> {
    let c = (job.status.as_ref()?.conditions.as_ref()?)
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    ))
}

#[tokio::test]
async fn a_declared_job_is_applied_by_the_engine_and_its_conditions_become_the_migrations() {
    let test = "children::a_declared_job_is_applied_by_the_engine";
    let Some((client, ns)) = control_plane(test, "cp-migrate").await else {
        return;
    };
    cluster::install_crd(&client, migration::crd()).await;
    let api: Api<Migration> = Api::namespaced(client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let running = Running::spawn(migration::operator(client.clone(), Some(&ns)));

    // Approved: the engine applies its Job, which runs on a simulated node and completes.
    let created = std::time::Instant::now();
    api.create(&PostParams::default(), &migration("ok", Some("alice"), &[]))
        .await
        .expect("create");
    let done = wait_phase(&api, "ok", "Succeeded").await;
    let took = created.elapsed();
    let job = jobs
        .get("ok-migrate")
        .await
        .expect("its Job, named from its owner");
    assert_eq!(
        job.labels().get(CHILD_LABEL).map(String::as_str),
        Some("migrate")
    );
    let owner = job.owner_references().first().expect("an owner");
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Migration", "ok", Some(true))
    );
    let applied_by = (job.managed_fields().iter())
        .find(|f| f.operation.as_deref() == Some("Apply"))
        .and_then(|f| f.manager.clone());
    assert_eq!(
        applied_by.as_deref(),
        Some("kube-fsm"),
        "server-side applied by the operator"
    );
    let (status, reason, message) = job_condition(&job, "Complete").expect("the Job is Complete");
    let complete = condition(&done, "JobComplete").expect("JobComplete");
    assert_eq!(status, "True");
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("True", reason.as_str()),
        "the Job's own reason"
    );
    let expected = if message.is_empty() {
        "The Job ok-migrate reports `Complete` True.".to_owned()
    } else {
        format!("The Job ok-migrate reports `Complete` True: {message}.")
    };
    assert_eq!(
        complete.message.trim_end_matches('.'),
        expected.trim_end_matches('.')
    );
    assert_eq!(complete.observed_generation, done.metadata.generation);

    // Its pod fails (kwok's stage): Failed, with the Job's reason and message carried over.
    api.create(
        &PostParams::default(),
        &migration("broken", Some("alice"), &[(pods::FAILS, "true")]),
    )
    .await
    .expect("create");
    let failed = wait_phase(&api, "broken", "Failed").await;
    let job_failed = condition(&failed, "JobFailed").expect("JobFailed");
    let broken = jobs.get("broken-migrate").await.expect("its Job");
    let (_, reason, message) = job_condition(&broken, "Failed").expect("the Job failed");
    assert_eq!(
        (job_failed.status.as_str(), job_failed.reason.as_str()),
        ("True", "BackoffLimitExceeded"),
        "{job_failed:?}"
    );
    assert_eq!(reason, "BackoffLimitExceeded");
    assert!(
        job_failed.message.contains(&message),
        "the Job's message {message:?} is carried over: {:?}",
        job_failed.message
    );

    // Not approved: it waits, with no Job, until someone approves it.
    api.create(&PostParams::default(), &migration("later", None, &[]))
        .await
        .expect("create");
    wait_phase(&api, "later", "AwaitingApproval").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        jobs.get_opt("later-migrate").await.expect("get").is_none(),
        "no Job before approval"
    );
    let approve = json!({ "spec": { "approvedBy": "bob" } });
    api.patch("later", &PatchParams::default(), &Patch::Merge(&approve))
        .await
        .expect("approve");
    wait_phase(&api, "later", "Succeeded").await;
    eprintln!("a migration approved at creation: Succeeded {took:?} after it (its Job on kwok)");

    // One Job per Migration that ran, each kept (`onLeave: keep`) after its phase.
    let listed = jobs
        .list(&ListParams::default().labels(&format!("{CHILD_LABEL}=migrate")))
        .await
        .expect("list");
    let mut names: Vec<String> = listed.items.iter().map(ResourceExt::name_any).collect();
    names.sort();
    assert_eq!(names, ["broken-migrate", "later-migrate", "ok-migrate"]);

    // Deleted: the garbage collector takes its Job and its pods.
    api.delete("ok", &DeleteParams::background())
        .await
        .expect("delete");
    let collected = eventually(Duration::from_secs(60), || async {
        jobs.get_opt("ok-migrate")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(collected.is_some(), "the Job of a deleted Migration stays");
    running.stop().await;
}

mod database;
mod lifecycle;
