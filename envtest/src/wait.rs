//! Waiting for what the controllers do to a workload: a Job completes or fails, a Deployment
//! is available, a StatefulSet's replicas are ready, or any state a test names ([`until`]).
//! Each waits on a watch of the one object (kube's `await_condition`), not by polling.

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::serde::Serialize;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::runtime::wait::await_condition;
use kube::{Api, Resource};

use crate::Error;

/// Waits at most `within` until the object `name` of `api` exists and `done` holds for it,
/// and returns it; `what` names it in the error ("the Job shop/migrate completes").
///
/// # Errors
/// [`Error::Timeout`] when `within` passes first, with what the watch saw last;
/// [`Error::Api`] when the watch fails.
pub async fn until<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    within: Duration,
    done: impl Fn(&K) -> bool + Send + 'static,
) -> Result<K, Error>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned + Send + 'static,
{
    let waited = await_condition(api.clone(), name, move |k: Option<&K>| k.is_some_and(&done));
    match tokio::time::timeout(within, waited).await {
        Ok(Ok(Some(found))) => Ok(found),
        Ok(Ok(None)) => unreachable!("the condition holds for no missing object"),
        Ok(Err(err)) => Err(Error::Api {
            action: format!("watch while waiting until {what}"),
            source: kube::Error::Service(err.into()),
        }),
        Err(_) => {
            let state = match api.get_opt(name).await {
                Ok(Some(last)) => format!("its status was last {}", status_of(&last)),
                Ok(None) => "it does not exist".to_owned(),
                Err(err) => format!("it cannot be read ({err})"),
            };
            Err(Error::Timeout {
                what: what.to_owned(),
                within,
                state,
            })
        }
    }
}

/// The object's `status`, as JSON (what a timeout reports).
fn status_of<K: Serialize>(object: &K) -> String {
    match serde_json::to_value(object) {
        Ok(value) => value
            .get("status")
            .map_or_else(|| "empty".to_owned(), ToString::to_string),
        Err(err) => format!("unreadable ({err})"),
    }
}

/// Waits at most `within` until the Job `name` has completed (its `Complete` condition).
///
/// # Errors
/// As [`until`].
pub async fn job_complete(api: &Api<Job>, name: &str, within: Duration) -> Result<Job, Error> {
    job_ends(api, name, within, "Complete", "completes").await
}

/// Waits at most `within` until the Job `name` has failed (its `Failed` condition).
///
/// # Errors
/// As [`until`].
pub async fn job_failed(api: &Api<Job>, name: &str, within: Duration) -> Result<Job, Error> {
    job_ends(api, name, within, "Failed", "fails").await
}

/// Waits until the Job has the condition `end` (`Complete` or `Failed`) with status True;
/// `verb` says so in a timeout's sentence.
async fn job_ends(
    api: &Api<Job>,
    name: &str,
    within: Duration,
    end: &'static str,
    verb: &str,
) -> Result<Job, Error> {
    let what = format!("the Job {name} {verb}");
    until(api, name, &what, within, move |job| job_condition(job, end)).await
}

/// Waits at most `within` until the Deployment `name` is available and rolled out: its
/// controller has seen its latest spec, every replica is updated and available.
///
/// # Errors
/// As [`until`].
pub async fn deployment_available(
    api: &Api<Deployment>,
    name: &str,
    within: Duration,
) -> Result<Deployment, Error> {
    let what = format!("the Deployment {name} is available");
    until(api, name, &what, within, is_deployment_available).await
}

/// Waits at most `within` until every replica of the StatefulSet `name` is ready and at its
/// latest revision.
///
/// # Errors
/// As [`until`].
pub async fn stateful_set_ready(
    api: &Api<StatefulSet>,
    name: &str,
    within: Duration,
) -> Result<StatefulSet, Error> {
    let what = format!("every replica of the StatefulSet {name} is ready");
    until(api, name, &what, within, is_stateful_set_ready).await
}

/// Whether the Job has the condition `type_` with status True.
fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Whether the Deployment's controller has seen its spec and all its replicas are updated and
/// available.
fn is_deployment_available(deployment: &Deployment) -> bool {
    let want = deployment.spec.replicas.unwrap_or(1);
    let Some(status) = &deployment.status else {
        return false;
    };
    status.observed_generation >= deployment.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
}

/// Whether the StatefulSet's controller has seen its spec and all its replicas are ready at
/// the update revision.
fn is_stateful_set_ready(set: &StatefulSet) -> bool {
    let want = set.spec.replicas.unwrap_or(1);
    let Some(status) = &set.status else {
        return false;
    };
    status.observed_generation >= set.metadata.generation
        && status.replicas == want
        && status.ready_replicas.unwrap_or(0) == want
        && status.updated_replicas.unwrap_or(0) == want
        && status.current_revision == status.update_revision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(spec: i32, status: serde_json::Value) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "db", "generation": 2 },
            "spec": { "replicas": spec, "selector": {}, "serviceName": "db", "template": {} },
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_stateful_set_is_ready_only_when_every_replica_is_ready_at_its_latest_revision() {
        let ready = serde_json::json!({ "observedGeneration": 2, "replicas": 3,
            "readyReplicas": 3, "updatedReplicas": 3,
            "currentRevision": "db-2", "updateRevision": "db-2" });
        assert!(is_stateful_set_ready(&set(3, ready.clone())));
        let mut stale = ready.clone();
        stale["observedGeneration"] = 1.into();
        assert!(!is_stateful_set_ready(&set(3, stale)));
        let mut one_down = ready.clone();
        one_down["readyReplicas"] = 2.into();
        assert!(!is_stateful_set_ready(&set(3, one_down)));
        let mut rolling = ready;
        rolling["currentRevision"] = "db-1".into();
        assert!(!is_stateful_set_ready(&set(3, rolling)));
    }

    #[test]
    fn a_job_is_complete_or_failed_by_its_conditions() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "migrate" },
            "status": { "conditions": [
                { "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded" },
                { "type": "Complete", "status": "False" },
            ] },
        }))
        .unwrap();
        assert!(job_condition(&job, "Failed"));
        assert!(!job_condition(&job, "Complete"));
    }
}
