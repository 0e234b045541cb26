//! Finding the resource a command names: its CRD (by kind, plural, singular, short name or
//! `plural.group`), the version to read, and the machine the CRD carries.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, ListParams};
use kube_fsm::machine::{Description, MACHINE_ANNOTATION};

use crate::Error;

/// A kube-fsm resource type as the cluster serves it.
pub struct Target {
    /// What the API calls it.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// Its machine, from the CRD's annotation.
    pub machine: Description,
}

impl Target {
    /// The resource named `kind` (`databases`, `database`, `Database`, `db`, or
    /// `databases.example.kube-fsm.dev`).
    pub async fn resolve(client: &Client, kind: &str) -> Result<Self, Error> {
        let crds = Api::<CustomResourceDefinition>::all(client.clone())
            .list(&ListParams::default())
            .await?;
        let wanted = kind.to_ascii_lowercase();
        let crd = crds
            .items
            .into_iter()
            .find(|crd| names_of(crd).contains(&wanted))
            .ok_or_else(|| {
                format!("no custom resource named {kind:?} is served by this cluster")
            })?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        let text = crd
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MACHINE_ANNOTATION))
            .ok_or_else(|| {
                format!("{name} is not a kube-fsm resource: its CRD has no {MACHINE_ANNOTATION} annotation")
            })?;
        let machine: Description = serde_json::from_str(text)
            .map_err(|e| format!("{name}'s {MACHINE_ANNOTATION} annotation cannot be read: {e}"))?;
        let spec = &crd.spec;
        let version = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| spec.versions.iter().find(|v| v.served))
            .ok_or_else(|| format!("{name} serves no version"))?;
        let resource = ApiResource {
            group: spec.group.clone(),
            version: version.name.clone(),
            api_version: format!("{}/{}", spec.group, version.name),
            kind: spec.names.kind.clone(),
            plural: spec.names.plural.clone(),
        };
        Ok(Target {
            resource,
            namespaced: spec.scope == "Namespaced",
            machine,
        })
    }
}

/// Every name the CRD's objects answer to, lower case.
fn names_of(crd: &CustomResourceDefinition) -> Vec<String> {
    let names = &crd.spec.names;
    let mut all = vec![
        names.kind.to_ascii_lowercase(),
        names.plural.clone(),
        format!("{}.{}", names.plural, crd.spec.group),
    ];
    all.extend(names.singular.clone());
    all.extend(names.short_names.iter().flatten().cloned());
    all
}
