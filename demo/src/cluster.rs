//! Setting the stage on a cluster: the client, a CRD, a namespace, the Database objects, and
//! removing them again.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};

use crate::BoxError;
use kube_fsm_examples::database::{Database, DatabaseSpec, child_selector};

/// The client of the kubeconfig (`KUBECONFIG`, else `~/.kube/config`). A kubeconfig that
/// names no current context gets a sentence that names the file and what to do, not kube's
/// bare "failed to load current context".
pub async fn client() -> Result<Client, BoxError> {
    let explicit = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty());
    let path = explicit.clone().map(std::path::PathBuf::from).or_else(|| {
        std::env::var_os("HOME").map(|home| std::path::Path::new(&home).join(".kube/config"))
    });
    if let Some(path) = path.filter(|p| p.exists())
        && let Ok(kubeconfig) = kube::config::Kubeconfig::read_from(&path)
        && kubeconfig
            .current_context
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    {
        let local = if explicit.is_some() {
            "unset KUBECONFIG".to_owned()
        } else {
            format!("remove {}", path.display())
        };
        return Err(format!(
            "the kubeconfig {} names no current context, so the demo cannot tell which cluster \
             to use: set one (kubectl config use-context NAME), or {local} so that scripts/demo \
             starts a local control plane",
            path.display()
        )
        .into());
    }
    Ok(Client::try_default().await?)
}

/// Creates `crd`, or replaces it if it exists, and waits until it is Established.
pub async fn install_crd(
    client: &Client,
    mut crd: CustomResourceDefinition,
) -> Result<(), BoxError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.name_any();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            let current = crds.get(&name).await?;
            crd.metadata.resource_version = current.resource_version();
            crds.replace(&name, &PostParams::default(), &crd).await?;
        }
        Err(err) => return Err(err.into()),
    }
    let established = await_condition(crds, &name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established)
        .await
        .map_err(|_| format!("CRD {name} not Established after 30 s"))??;
    Ok(())
}

/// How many nodes take pods (Ready, not cordoned).
pub async fn schedulable_nodes(client: &Client) -> Result<usize, BoxError> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|node| {
            let spec = node.spec.as_ref();
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            ready && !spec.and_then(|s| s.unschedulable).unwrap_or(false)
        })
        .count())
}

/// Creates `namespace` unless it exists.
pub async fn ensure_namespace(client: &Client, namespace: &str) -> Result<(), BoxError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The name of the `index`-th object of a run of `count`, zero-padded so that they sort.
pub fn object_name(index: usize, count: usize) -> String {
    let width = count.saturating_sub(1).max(1).to_string().len();
    format!("db-{index:0width$}")
}

/// Creates `count` Databases of `replicas` each, `parallel` requests at a time (an existing
/// one is kept).
pub async fn create_databases(
    client: &Client,
    namespace: &str,
    count: usize,
    replicas: u32,
    parallel: usize,
) -> Result<(), BoxError> {
    let api: Api<Database> = Api::namespaced(client.clone(), namespace);
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let db = Database::new(
                    &object_name(i, count),
                    DatabaseSpec {
                        version: "16".into(),
                        replicas,
                    },
                );
                match api.create(&PostParams::default(), &db).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(()),
                    Err(err) => Err(err),
                }
            }
        })
        .buffer_unordered(parallel.max(1))
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// Deletes every Database of `namespace` with one request (their finalizers keep them until
/// the operator lets them go; the garbage collector then takes their workloads).
pub async fn delete_databases(client: &Client, namespace: &str) -> Result<(), BoxError> {
    let api: Api<Database> = Api::namespaced(client.clone(), namespace);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// How many of the Databases' children (StatefulSets, Services and Secrets this example
/// manages) `namespace` holds.
pub async fn count_children(client: &Client, namespace: &str) -> Result<usize, BoxError> {
    let labelled = ListParams::default().labels(&child_selector());
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(sets.list_metadata(&labelled).await?.items.len()
        + services.list_metadata(&labelled).await?.items.len()
        + secrets.list_metadata(&labelled).await?.items.len())
}

#[cfg(test)]
mod tests {
    use super::object_name;

    #[test]
    fn names_sort_in_creation_order() {
        assert_eq!(object_name(3, 5), "db-3");
        assert_eq!(object_name(7, 200), "db-007");
        assert_eq!(object_name(199, 200), "db-199");
        assert_eq!(object_name(0, 1), "db-0");
    }
}
