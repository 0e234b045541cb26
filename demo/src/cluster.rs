//! Setting the stage on a cluster: a CRD, a namespace, the Database objects, and removing
//! them again.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, ResourceExt};

use crate::BoxError;
use kube_fsm_examples::database::{Database, DatabaseSpec, child_selector};

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

/// Creates `count` Databases, `parallel` requests at a time (an existing one is kept).
pub async fn create_databases(
    client: &Client,
    namespace: &str,
    count: usize,
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
                        replicas: 1,
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
/// the operator has cleaned up).
pub async fn delete_databases(client: &Client, namespace: &str) -> Result<(), BoxError> {
    let api: Api<Database> = Api::namespaced(client.clone(), namespace);
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    Ok(())
}

/// How many children (ConfigMaps this example manages) `namespace` holds.
pub async fn count_children(client: &Client, namespace: &str) -> Result<usize, BoxError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list_metadata(&ListParams::default().labels(&child_selector()))
        .await?;
    Ok(list.items.len())
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
