//! kwok's simulated nodes, through any client of a cluster where kwok runs (a
//! [`crate::TestCluster`] started with [`crate::Builder::nodes`], or `scripts/envtest start
//! --control-plane`): add one, drain one and take it away, count the Ready ones.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use crate::Error;

/// The label selector of the simulated nodes (kwokctl's label).
pub const SIMULATED: &str = "type=kwok";

/// Adds a simulated node named `name` (kwok manages it; started with
/// [`crate::Builder::nodes`]) and waits (at most 30 s) until it is Ready.
///
/// # Errors
/// When the API server refuses it, or it is not Ready in time.
pub async fn add(client: &Client, name: &str) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    let before = ready_count(&api).await;
    create(&api, name).await?;
    let start = Instant::now();
    while ready_count(&api).await <= before {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(Error::Api {
                action: format!("make the node {name} Ready within 30 s"),
                source: kube::Error::Service("kwok did not mark it Ready".into()),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Drains the node `name` and takes it away, as `kubectl drain` then a machine's removal
/// do: it is cordoned, each of its pods evicted (the Eviction API: PodDisruptionBudgets
/// are respected, retried until they allow it, at most 60 s), then its Node object is
/// deleted. Their owners make new pods on the nodes left (a few seconds).
///
/// # Errors
/// When the API server refuses a request, or an eviction is still refused after 60 s.
pub async fn drain(client: &Client, name: &str) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let failed = |action: String| move |source| Error::Api { action, source };
    let cordon = serde_json::json!({ "spec": { "unschedulable": true } });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&cordon))
        .await
        .map_err(failed(format!("cordon the node {name}")))?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(client.clone());
    let on_node = ListParams::default().fields(&format!("spec.nodeName={name}"));
    let start = Instant::now();
    loop {
        let left = pods
            .list(&on_node)
            .await
            .map_err(failed(format!("list the pods of {name}")))?;
        let live: Vec<_> = left
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if live.is_empty() {
            break;
        }
        for pod in live {
            let (Some(ns), Some(pod_name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
                continue;
            };
            let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
            match api
                .evict(pod_name, &kube::api::EvictParams::default())
                .await
            {
                // 429: a PodDisruptionBudget does not allow it yet.
                Ok(_) | Err(kube::Error::Api(_)) => {}
                Err(err) => return Err(failed(format!("evict {ns}/{pod_name}"))(err)),
            }
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err(Error::Api {
                action: format!("drain the node {name} within 60 s"),
                source: kube::Error::Service("evictions are still refused".into()),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    remove(client, name).await
}

/// Takes the node `name` away without draining it, as a machine that is suddenly gone:
/// its Node object is deleted; the pods bound to it are collected by the controllers' pod
/// garbage collector (about a minute later: its quarantine), and their owners make new ones
/// on the nodes left.
///
/// # Errors
/// When the API server refuses the deletion.
pub async fn remove(client: &Client, name: &str) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    api.delete(name, &kube::api::DeleteParams::default())
        .await
        .map(drop)
        .map_err(|source| Error::Api {
            action: format!("delete the node {name}"),
            source,
        })
}

/// How many of the simulated nodes are Ready.
pub(crate) async fn ready_count(api: &Api<Node>) -> usize {
    let Ok(list) = api.list(&ListParams::default().labels(SIMULATED)).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|node| {
            node.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count()
}

/// How many of the simulated nodes are Ready.
pub async fn ready(client: &Client) -> usize {
    ready_count(&Api::all(client.clone())).await
}

/// Creates the simulated node `name` (kwok manages it, by its annotation).
pub(crate) async fn create(api: &Api<Node>, name: &str) -> Result<(), Error> {
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": name,
            "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "type": "kwok",
            },
        },
        "status": {
            "allocatable": { "cpu": "32", "memory": "256Gi", "pods": "500" },
            "capacity": { "cpu": "32", "memory": "256Gi", "pods": "500" },
        },
    }))
    .expect("a Node");
    api.create(&PostParams::default(), &node)
        .await
        .map(drop)
        .map_err(|source| Error::Api {
            action: format!("create the simulated node {name}"),
            source,
        })
}
