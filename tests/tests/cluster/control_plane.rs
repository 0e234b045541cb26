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
use kube::{Api, Client};
use kube_fsm_testkit::cluster::{self, eventually};
use serde_json::json;

/// The control plane's client and a fresh namespace there; `None` after a loud skip when there
/// is no control plane.
async fn control_plane(test: &str, prefix: &str) -> Option<(Client, String)> {
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
    let complete = eventually(Duration::from_secs(60), || async {
        let job = jobs.get("migrate").await.ok()?;
        let status = job.status?;
        let done = status
            .conditions?
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        (done && status.succeeded == Some(1)).then_some(())
    })
    .await;
    assert!(
        complete.is_some(),
        "the Job did not complete: {:?}",
        jobs.get("migrate").await.ok().and_then(|j| j.status)
    );
}

#[tokio::test]
async fn a_deployment_becomes_available_and_its_deletion_collects_its_pods() {
    let test = "control_plane::a_deployment_becomes_available";
    let Some((client, ns)) = control_plane(test, "cp-deploy").await else {
        return;
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": pod_template("web"),
        },
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create the Deployment");
    let available = eventually(Duration::from_secs(60), || async {
        let status = deployments.get("web").await.ok()?.status?;
        (status.available_replicas == Some(3)).then_some(())
    })
    .await;
    assert!(
        available.is_some(),
        "the Deployment did not become Available: {:?}",
        deployments.get("web").await.ok().and_then(|d| d.status)
    );
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
