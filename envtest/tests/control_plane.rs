//! A cluster with the control plane: a Job completes on the simulated nodes, and a node taken
//! away has its pods made again on the others. The binaries come from
//! `KUBE_FSM_CONTROL_PLANE_ASSETS` (`scripts/envtest assets --version current --control-plane`,
//! as `scripts/test` sets it); without it these tests skip loudly (fail with
//! `KUBE_FSM_REQUIRE_CLUSTER=1`).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube_fsm_envtest::TestCluster;

/// A cluster with `nodes` simulated nodes, or `None` after a loud skip.
async fn cluster(test: &str, nodes: u32) -> Option<TestCluster> {
    let Some(assets) = std::env::var_os("KUBE_FSM_CONTROL_PLANE_ASSETS") else {
        assert!(
            std::env::var("KUBE_FSM_REQUIRE_CLUSTER").as_deref() != Ok("1"),
            "{test}: KUBE_FSM_REQUIRE_CLUSTER=1 but KUBE_FSM_CONTROL_PLANE_ASSETS is not set"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED {test}: no KUBE_FSM_CONTROL_PLANE_ASSETS (export KUBE_FSM_CONTROL_PLANE_ASSETS=$(scripts/envtest assets --version current --control-plane))\n"
        );
        return None;
    };
    TestCluster::builder()
        .assets(assets)
        .nodes(nodes)
        .start(test)
        .await
}

/// Waits up to 60 s for `check` to give `Some`.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    mut check: impl FnMut() -> F,
) -> Option<T> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Some(value) = check().await {
            return Some(value);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

fn pod_template(app: &str, restart: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "labels": { "app": app } },
        "spec": {
            "restartPolicy": restart,
            "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }],
        },
    })
}

#[tokio::test]
async fn a_job_completes_on_the_simulated_nodes() {
    let Some(cluster) = cluster("a_job_completes_on_the_simulated_nodes", 1).await else {
        return;
    };
    let ns = cluster.namespace("job").await.expect("namespace");
    let jobs: Api<Job> = Api::namespaced(cluster.client(), &ns);
    let job: Job = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "once" },
        "spec": { "template": pod_template("once", "Never"), "backoffLimit": 0 },
    }))
    .expect("a Job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create");
    let done = eventually(|| async {
        let status = jobs.get("once").await.ok()?.status?;
        (status.succeeded == Some(1)).then_some(())
    })
    .await;
    assert!(done.is_some(), "the Job did not complete");
}

#[tokio::test]
async fn the_pods_of_a_node_drained_away_are_made_again_on_the_others() {
    let Some(cluster) = cluster("the_pods_of_a_node_taken_away", 2).await else {
        return;
    };
    let ns = cluster.namespace("node").await.expect("namespace");
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), &ns);
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 4,
            "selector": { "matchLabels": { "app": "web" } },
            "template": pod_template("web", "Always"),
        },
    }))
    .expect("a Deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create");
    let available = || async {
        let status = deployments.get("web").await.ok()?.status?;
        (status.available_replicas == Some(4)).then_some(())
    };
    assert!(eventually(available).await.is_some(), "not Available");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), &ns);
    let on = |node: &'static str| {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            Some(
                list.items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                    .count(),
            )
        }
    };
    assert!(
        on("kwok-node-0").await.unwrap_or(0) > 0,
        "the scheduler spreads the pods over both nodes"
    );
    cluster
        .drain_node("kwok-node-0")
        .await
        .expect("drain the node");
    let removed = Instant::now();
    let moved = eventually(|| async {
        let left = on("kwok-node-0").await?;
        (left == 0).then_some(())
    })
    .await;
    assert!(
        moved.is_some(),
        "the pods of the removed node are still there"
    );
    assert!(
        eventually(available).await.is_some(),
        "the Deployment is not Available again on the node left"
    );
    eprintln!(
        "a node drained and taken away: its pods made again on the other, Available {:?} after",
        removed.elapsed()
    );
}
