//! What the tests of the example Database on the control plane share: a Database of N
//! replicas, its conditions, its pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::ListParams;
use kube::{Api, Client};
use kube_fsm_examples::database::{Database, DatabaseSpec, workload::DATABASE_LABEL};

/// A Database `name` of `replicas` replicas of version 16.
#[must_use]
pub fn database(name: &str, replicas: u32) -> Database {
    Database::new(
        name,
        DatabaseSpec {
            version: "16".into(),
            replicas,
        },
    )
}

/// The condition `type_` of `db`.
///
/// # Panics
/// When `db` has none: the test expected it.
#[must_use]
pub fn condition(db: &Database, type_: &str) -> Condition {
    db.status
        .as_ref()
        .and_then(|s| s.machine.conditions.iter().find(|c| c.type_ == type_))
        .cloned()
        .unwrap_or_else(|| panic!("no condition {type_} in {:?}", db.status))
}

/// The pods of the Database `name` in `ns`, by their label.
///
/// # Panics
/// When the API server refuses the list.
pub async fn pods(client: &Client, ns: &str, name: &str) -> Vec<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{DATABASE_LABEL}={name}");
    api.list(&ListParams::default().labels(&selector))
        .await
        .expect("list pods")
        .items
}
