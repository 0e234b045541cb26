//! The control plane beside the API server (`scripts/envtest start --version current
//! --control-plane`): the controllers, the scheduler and kwok's simulated nodes act on
//! workloads as a cluster's do — a Job completes, a Deployment becomes Available, deleting it
//! removes its ReplicaSet and Pods (garbage collection), and a namespace being deleted finishes.
//! They run on that cluster (`KUBE_FSM_CONTROL_PLANE_KUBECONFIG`), whatever server the other
//! tests use: its controllers would act on their objects too (a ConfigMap `kube-root-ca.crt`
//! in every namespace, owner references collected).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_fsm_envtest::{pods, wait};
use kube_fsm_testkit::cluster::{self, eventually};
use serde_json::json;

/// The control plane's client and a fresh namespace there; `None` after a loud skip when there
/// is no control plane.
pub(crate) async fn control_plane(test: &str, prefix: &str) -> Option<(Client, String)> {
    let client = cluster::control_plane(test).await?;
    let ns = cluster::namespace(&client, prefix).await;
    Some((client, ns))
}

fn pod_template(app: &str) -> serde_json::Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": {
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
        },
    })
}

/// Creates the Deployment `name` of `replicas` pods labelled `app=<name>` in `ns`.
async fn create_deployment(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Api<Deployment> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": pod_template(name),
        },
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
    deployments
}

#[tokio::test]
async fn a_job_completes_on_the_simulated_nodes() {
    let test = "control_plane::a_job_completes";
    let Some((client, ns)) = control_plane(test, "cp-job").await else {
        return;
    };
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let mut template = pod_template("migrate");
    template["spec"]["restartPolicy"] = json!("Never");
    let job: Job = serde_json::from_value(json!({
        "metadata": { "name": "migrate" },
        "spec": { "template": template, "backoffLimit": 0 },
    }))
    .expect("a Job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the Job");
    let complete = wait::job_complete(&jobs, "migrate", Duration::from_secs(60))
        .await
        .unwrap_or_else(or_panic);
    assert_eq!(complete.status.and_then(|s| s.succeeded), Some(1));
}

#[tokio::test]
async fn a_deployment_becomes_available_and_its_deletion_collects_its_pods() {
    let test = "control_plane::a_deployment_becomes_available";
    let Some((client, ns)) = control_plane(test, "cp-deploy").await else {
        return;
    };
    let deployments = create_deployment(&client, &ns, "web", 3).await;
    wait::deployment_available(&deployments, "web", Duration::from_secs(60))
        .await
        .unwrap_or_else(or_panic);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let running = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods");
    assert_eq!(running.items.len(), 3);
    for pod in &running.items {
        let status = pod.status.as_ref().expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Running"), "{status:?}");
        assert!(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|node| node.starts_with("kwok-node-")),
            "scheduled onto a simulated node"
        );
    }

    // Deleted in the background: the garbage collector removes what it owned.
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .expect("delete the Deployment");
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), &ns);
    let collected = eventually(Duration::from_secs(60), || async {
        let sets = replica_sets.list(&ListParams::default()).await.ok()?;
        let left = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (sets.items.is_empty() && left.items.is_empty()).then_some(())
    })
    .await;
    assert!(
        collected.is_some(),
        "the ReplicaSet and its Pods were not collected"
    );

    // The namespace's deletion finishes: the namespace controller empties it.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("delete the namespace");
    let gone = eventually(Duration::from_secs(60), || async {
        namespaces.get_opt(&ns).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(gone.is_some(), "namespace {ns} is still terminating");
}

/// kube-fsm-envtest's pod helpers act through kwok's stages, and the controllers see it: a
/// pod made NotReady is a replica its Deployment no longer counts ready, Ready again once
/// allowed; a pod made to fail is Failed and replaced.
#[tokio::test]
async fn a_pod_made_not_ready_or_failed_is_seen_so_by_its_deployment() {
    let test = "control_plane::a_pod_made_not_ready_or_failed";
    let Some((client, ns)) = control_plane(test, "cp-pods").await else {
        return;
    };
    let deployments = create_deployment(&client, &ns, "api", 2).await;
    let within = Duration::from_secs(60);
    wait::deployment_available(&deployments, "api", within)
        .await
        .unwrap_or_else(or_panic);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let names = || async {
        let list = pods.list(&ListParams::default().labels("app=api")).await;
        let mut names: Vec<String> = list
            .expect("pods")
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        names
    };
    let before = names().await;
    let pod = before[0].clone();

    pods::set_ready(&client, &ns, &pod, false)
        .await
        .unwrap_or_else(or_panic);
    let ready =
        |n: i32| move |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(n);
    wait::until(
        &deployments,
        "api",
        "the Deployment counts one replica ready",
        within,
        ready(1),
    )
    .await
    .unwrap_or_else(or_panic);
    pods::set_ready(&client, &ns, &pod, true)
        .await
        .unwrap_or_else(or_panic);
    wait::deployment_available(&deployments, "api", within)
        .await
        .unwrap_or_else(or_panic);
    assert_eq!(names().await, before, "the same pods, Ready again");

    pods::fail(&client, &ns, &pod)
        .await
        .unwrap_or_else(or_panic);
    let failed = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
    wait::until(&pods, &pod, "the pod fails", within, failed)
        .await
        .unwrap_or_else(or_panic);
    let replaced = eventually(within, || async {
        let running: Vec<String> = pods
            .list(&ListParams::default().labels("app=api"))
            .await
            .ok()?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .map(ResourceExt::name_any)
            .collect();
        (running.len() == 2 && !running.contains(&pod)).then_some(())
    })
    .await;
    assert!(
        replaced.is_some(),
        "the Deployment did not replace the failed pod"
    );
}

/// Panics with the sentence of a helper's error.
fn or_panic<T>(err: kube_fsm_envtest::Error) -> T {
    panic!("{err}")
}
