//! What a Database's workload looks like: its credentials Secret, its headless Service and its
//! StatefulSet, built from the Database alone (deterministic names, so a retried step never
//! makes a second one). The step applies them with the Database as their controller owner, so
//! the garbage collector removes them, and the StatefulSet's pods, with it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde::de::DeserializeOwned;

use super::Database;
use crate::MANAGED_BY;

/// The label that ties a Database's pods (and its Service's selector) to it.
pub const DATABASE_LABEL: &str = "example.kube-fsm.dev/database";

/// The port the database answers on.
pub const PORT: u16 = 5432;

/// The credentials Secret's name: `<database>-credentials`.
#[must_use]
pub fn credentials_name(db: &Database) -> String {
    format!("{}-credentials", db.name_any())
}

/// Where clients reach the database: its headless Service's name in the cluster's DNS.
#[must_use]
pub fn endpoint(db: &Database) -> String {
    format!(
        "{}.{}.svc:{PORT}",
        db.name_any(),
        db.namespace().unwrap_or_default()
    )
}

fn labels(db: &Database) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        (DATABASE_LABEL.to_owned(), db.name_any()),
    ])
}

fn meta(name: String, db: &Database) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: Some(labels(db)),
        ..ObjectMeta::default()
    }
}

/// A literal of a Kubernetes type, written as the JSON one would put in a manifest.
fn typed<T: DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("the literal is a valid object of its type (tested)")
}

/// Fresh credentials: the superuser `postgres` and a password of 24 random bytes from the
/// operating system's CSPRNG, as hex. Made once: a reconcile never rotates them.
pub fn credentials(db: &Database) -> Result<Secret, getrandom::Error> {
    Ok(Secret {
        metadata: meta(credentials_name(db), db),
        data: Some(BTreeMap::from([
            ("username".to_owned(), ByteString(b"postgres".to_vec())),
            (
                "password".to_owned(),
                ByteString(crate::random_hex(24)?.into_bytes()),
            ),
        ])),
        ..Secret::default()
    })
}

/// The headless Service: one DNS name for the ready replicas (and `<pod>.<service>` for each),
/// whose EndpointSlices say which replicas answer.
#[must_use]
pub fn service(db: &Database) -> Service {
    let mut service: Service = typed(serde_json::json!({
        "spec": {
            "clusterIP": "None",
            "selector": { DATABASE_LABEL: db.name_any() },
            "ports": [{ "name": "postgres", "port": PORT, "targetPort": PORT }],
        },
    }));
    service.metadata = meta(db.name_any(), db);
    service
}

/// The StatefulSet: `spec.replicas` pods of `postgres:<spec.version>`, started together, one
/// per node (a node lost is one replica lost, never two), their password from the credentials
/// Secret. Data lives in an `emptyDir`: this example claims no storage.
#[must_use]
pub fn stateful_set(db: &Database) -> StatefulSet {
    let name = db.name_any();
    let pod_labels = labels(db);
    let password = serde_json::json!({
        "secretKeyRef": { "name": credentials_name(db), "key": "password" },
    });
    let mut set: StatefulSet = typed(serde_json::json!({
        "spec": {
            "replicas": db.spec.replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": { "matchLabels": { DATABASE_LABEL: name } },
            "template": {
                "metadata": { "labels": pod_labels },
                "spec": {
                    "affinity": { "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [{
                            "labelSelector": { "matchLabels": { DATABASE_LABEL: name } },
                            "topologyKey": "kubernetes.io/hostname",
                        }],
                    }},
                    "containers": [{
                        "name": "postgres",
                        "image": format!("postgres:{}", db.spec.version),
                        "ports": [{ "name": "postgres", "containerPort": PORT }],
                        "env": [
                            { "name": "POSTGRES_PASSWORD", "valueFrom": password },
                            { "name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata" },
                        ],
                        "readinessProbe": {
                            "exec": { "command": ["pg_isready", "-U", "postgres"] },
                            "periodSeconds": 5,
                        },
                        "resources": { "requests": { "cpu": "50m", "memory": "128Mi" } },
                        "volumeMounts": [{ "name": "data", "mountPath": "/var/lib/postgresql/data" }],
                    }],
                    "volumes": [{ "name": "data", "emptyDir": {} }],
                },
            },
        },
    }));
    set.metadata = meta(name, db);
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::DatabaseSpec;

    fn database() -> Database {
        let mut db = Database::new(
            "orders",
            DatabaseSpec {
                version: "17".into(),
                replicas: 3,
            },
        );
        db.metadata.namespace = Some("shop".into());
        db
    }

    #[test]
    fn the_workload_is_named_and_labelled_from_the_database() {
        let db = database();
        let set = stateful_set(&db);
        let spec = &set.spec;
        assert_eq!(set.metadata.name.as_deref(), Some("orders"));
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.service_name.as_deref(), Some("orders"));
        let pod = spec.template.spec.as_ref().expect("a pod spec");
        assert_eq!(pod.containers[0].image.as_deref(), Some("postgres:17"));
        let template_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        assert_eq!(
            template_labels.and_then(|l| l.get(DATABASE_LABEL).cloned()),
            Some("orders".to_owned())
        );
        let service = service(&db);
        assert_eq!(
            service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()),
            Some("None")
        );
        assert_eq!(endpoint(&db), "orders.shop.svc:5432");
        assert_eq!(credentials_name(&db), "orders-credentials");
    }

    #[test]
    fn credentials_are_random_each_time() {
        let password = |secret: Secret| secret.data.expect("data")["password"].0.clone();
        let (a, b) = (
            password(credentials(&database()).expect("random bytes")),
            password(credentials(&database()).expect("random bytes")),
        );
        assert_eq!(a.len(), 48);
        assert_ne!(a, b);
    }
}
