//! The `Migration` custom resource, driven by `specs/migration.yaml`: a schema migration run as
//! a Kubernetes Job, a batch workload whose state another controller writes.
//!
//! - AwaitingApproval: `Approved` is True once a person sets `spec.approvedBy` (the rule
//!   `when Approved` then moves it to Running); until then it says whom it waits for.
//! - Running: the spec declares the Job (`children: migrate`), so the engine applies it from
//!   [`MigrationHandler::migrate`] (server-side apply, skipped while unchanged, owned by the
//!   Migration so the garbage collector removes it and its pods with it), and writes
//!   `JobComplete` and `JobFailed` from the Job's own `Complete` and `Failed` conditions, with
//!   the Job's reason and message (→ Succeeded, → Failed). The handler of Running has nothing
//!   to do; nothing here claims what the Job's status does not say. The phase's 10-minute
//!   timeout fails a migration whose Job never finishes.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kube::{Client, CustomResource, ResourceExt};
use kube_fsm::machine::ConditionError;
use kube_fsm::{MachineStatus, Next, Operator, Step, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::{MANAGED_BY, child_selector};

/// A migration: the spec the user writes.
#[state_machine(spec = "../specs/migration.yaml")]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.kube-fsm.dev",
    version = "v1",
    kind = "Migration",
    namespaced,
    status = "MigrationStatus",
    shortname = "mig"
)]
#[serde(rename_all = "camelCase")]
pub struct MigrationSpec {
    /// The image that runs the migration.
    pub image: String,
    /// Its command (the image's entrypoint when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Who approved it; the migration waits until someone does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// Labels for the Job's pod (e.g. for a service mesh, or a test's simulated failure).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_labels: BTreeMap<String, String>,
}

/// What the operator reports about a Migration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationStatus {
    /// Phase, conditions, observedGeneration and phase entry time, owned by kube-fsm.
    #[serde(flatten)]
    pub machine: MachineStatus<MigrationPhase>,
}

/// Why a handler failed; the engine logs it and retries the object with backoff.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// A condition was rejected (a bug in this example: reasons are constants).
    #[error(transparent)]
    Condition(#[from] ConditionError),
}

/// The phase handlers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Handlers;

/// The migration's Job: one pod, never restarted, never retried (a failed migration needs a
/// person).
fn desired_job(migration: &Migration) -> Job {
    let mut labels = migration.spec.pod_labels.clone();
    labels.insert(
        "example.kube-fsm.dev/migration".to_owned(),
        migration.name_any(),
    );
    let container = serde_json::json!({
        "name": "migrate",
        "image": migration.spec.image,
        "command": migration.spec.command,
    });
    let job = serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": { "labels": labels },
                "spec": { "restartPolicy": "Never", "containers": [container] },
            },
        },
    });
    let mut job: Job = serde_json::from_value(job).expect("a Job");
    job.metadata = ObjectMeta {
        labels: Some(BTreeMap::from([(
            MANAGED_BY.0.to_owned(),
            MANAGED_BY.1.to_owned(),
        )])),
        ..ObjectMeta::default()
    };
    job
}

impl MigrationHandler for Handlers {
    type Error = HandlerError;

    async fn on_awaiting_approval(
        &self,
        migration: &Migration,
        step: &mut Step<Migration>,
    ) -> Result<MigrationAwaitingApprovalNext, HandlerError> {
        match &migration.spec.approved_by {
            Some(who) => step.set_condition(
                MigrationCondition::Approved,
                true,
                "Approved",
                format!("approved by {who}"),
            )?,
            None => step.set_condition(
                MigrationCondition::Approved,
                false,
                "AwaitingApproval",
                "waits for a person to set spec.approvedBy",
            )?,
        }
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _migration: &Migration,
        _step: &mut Step<Migration>,
    ) -> Result<MigrationRunningNext, HandlerError> {
        // The engine applies the Job and derives JobComplete / JobFailed from it.
        Ok(Next::Stay)
    }

    async fn migrate(
        &self,
        migration: &Migration,
        _step: &Step<Migration>,
    ) -> Result<Job, HandlerError> {
        Ok(desired_job(migration))
    }
}

/// The operator: Migrations in `namespace` (or everywhere), reconciled again when a Job they
/// own changes. The Job's watch comes from the spec's `children:`; the one here narrows it to
/// the Jobs with the examples' label (the first config of a kind wins).
pub fn operator(client: Client, namespace: Option<&str>) -> Operator<Migration, Handlers> {
    let operator = Operator::<Migration, Handlers>::new(client, Handlers)
        .reporter("kube-fsm-examples")
        .owns::<Job>(watcher::Config::default().labels(&child_selector()));
    match namespace {
        Some(namespace) => operator.namespace(namespace),
        None => operator,
    }
}

/// The Migration CRD, from [`kube_fsm::crd`].
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    kube_fsm::crd::<Migration>()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::jiff::Timestamp;
    use kube::Resource;
    use kube_fsm::watch::Cache;
    use kube_fsm::{Context, testing};

    use super::*;

    fn migration(approved_by: Option<&str>) -> Migration {
        let mut migration = Migration::new(
            "m",
            MigrationSpec {
                image: "migrate:1".into(),
                approved_by: approved_by.map(str::to_owned),
                ..MigrationSpec::default()
            },
        );
        migration.metadata.namespace = Some("ns".into());
        migration.metadata.uid = Some("uid-1".into());
        migration.metadata.generation = Some(1);
        migration
    }

    /// The migration's Job as the engine applied it and the Job controller leaves it:
    /// condition `type_` True.
    fn job(type_: &str, reason: &str) -> Job {
        let owner = migration(Some("a"));
        let mut job = desired_job(&owner);
        job.metadata.name = Some("m-migrate".into());
        job.metadata.namespace = Some("ns".into());
        job.metadata.owner_references = owner.controller_owner_ref(&()).map(|o| vec![o]);
        (job.metadata.labels.get_or_insert_with(Default::default))
            .insert(kube_fsm::children::CHILD_LABEL.into(), "migrate".into());
        job.status = serde_json::from_value(serde_json::json!({
            "conditions": [{ "type": type_, "status": "True", "reason": reason,
                "message": "Job has reached the specified backoff limit" }],
        }))
        .expect("a JobStatus");
        job
    }

    async fn step(migration: &Migration, jobs: Vec<Job>) -> testing::Outcome<Migration> {
        let context = Arc::new(
            Context::new(testing::no_cluster_client()).with_cache(Cache::from_objects(jobs)),
        );
        testing::step_in(&Handlers, migration, Timestamp::now(), &context)
            .await
            .expect("the step succeeds")
    }

    #[tokio::test]
    async fn it_waits_for_approval_and_runs_once_approved() {
        let waiting = step(&migration(None), vec![]).await;
        assert_eq!(waiting.phase, MigrationPhase::AwaitingApproval);
        assert_eq!(waiting.condition(MigrationCondition::Approved), Some(false));
        let approved = step(&migration(Some("alice")), vec![]).await;
        assert_eq!(approved.phase, MigrationPhase::Running);
    }

    #[tokio::test]
    async fn the_jobs_own_status_ends_it_with_the_jobs_reason() {
        let running = testing::in_phase(migration(Some("alice")), MigrationPhase::Running);
        // The Job is in the cache as applied: no request (there is no cluster here).
        let failed = step(&running, vec![job("Failed", "BackoffLimitExceeded")]).await;
        assert_eq!(failed.phase, MigrationPhase::Failed);
        let condition = failed
            .status
            .machine
            .conditions
            .iter()
            .find(|c| c.type_ == "JobFailed")
            .expect("JobFailed");
        assert_eq!(condition.reason, "BackoffLimitExceeded");
        assert_eq!(
            condition.message,
            "The Job m-migrate reports `Failed` True: Job has reached the specified backoff limit."
        );
        let done = step(&running, vec![job("Complete", "CompletionsReached")]).await;
        assert_eq!(done.phase, MigrationPhase::Succeeded);
    }
}
