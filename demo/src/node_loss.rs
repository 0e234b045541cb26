//! A replica lost, and back: on simulated nodes (kwok's), a node holding a replica of each
//! Database is drained and taken away — with one replica per node, none can run elsewhere, so
//! every Database with one there is Degraded — then a new node joins and they run again. On
//! other nodes (a user's cluster) the demo takes no node away: it deletes one replica's pod.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use kube_fsm_examples::database::DatabasePhase;
use kube_fsm_examples::database::workload::DATABASE_LABEL;

use crate::BoxError;
use crate::tracker::Tracker;

/// Takes away the node of `first`'s first replica (or, on nodes that are not simulated, that
/// replica's pod) and waits until the Databases that lost a replica were Degraded and are all
/// Running again.
pub async fn run(
    client: &Client,
    ns: &str,
    first: &str,
    tracker: &Tracker,
    timeout: Duration,
) -> Result<(), BoxError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let victim = pods.get(&format!("{first}-0")).await?;
    let node = victim
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .ok_or_else(|| format!("the pod {first}-0 runs on no node"))?;
    let simulated = Api::<Node>::all(client.clone())
        .get(&node)
        .await?
        .labels()
        .get("type")
        .is_some_and(|t| t == "kwok");
    let mut snapshots = tracker.snapshots.clone();
    if !simulated {
        println!(
            "deleting the pod {first}-0 (a replica lost; these nodes are not simulated, so the \
             demo takes none away)"
        );
        pods.delete(&victim.name_any(), &DeleteParams::default())
            .await?;
        tokio::time::timeout(
            timeout,
            snapshots.wait_for(|s| s.count(DatabasePhase::Running) == s.objects.len()),
        )
        .await
        .map_err(|_| "the Databases did not run again after a replica was lost")??;
        return Ok(());
    }
    let on_node = ListParams::default()
        .labels(DATABASE_LABEL)
        .fields(&format!("spec.nodeName={node}"));
    let losing: BTreeSet<String> = pods
        .list(&on_node)
        .await?
        .items
        .iter()
        .filter_map(|p| p.labels().get(DATABASE_LABEL).cloned())
        .collect();
    println!(
        "taking the simulated node {node} away (drained, then deleted): {} Database(s) lose the \
         replica they run there, which cannot run on a node that has one already",
        losing.len()
    );
    kube_fsm_envtest::nodes::drain(client, &node).await?;
    let all_degraded = snapshots.wait_for(|s| {
        losing.iter().all(|name| {
            s.objects
                .get(name)
                .and_then(|status| status.as_ref()?.machine.phase())
                == Some(DatabasePhase::Degraded)
        })
    });
    tokio::time::timeout(timeout, all_degraded)
        .await
        .map_err(|_| format!("the Databases that lost a replica on {node} were not Degraded"))??;
    let joining = format!("{node}-replacement");
    println!("a new simulated node, {joining}, joins the cluster");
    kube_fsm_envtest::nodes::add(client, &joining).await?;
    tokio::time::timeout(
        timeout,
        snapshots.wait_for(|s| s.count(DatabasePhase::Running) == s.objects.len()),
    )
    .await
    .map_err(|_| format!("the Databases did not run again once {joining} joined"))??;
    Ok(())
}
