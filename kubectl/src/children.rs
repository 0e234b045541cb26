//! Reads the declared children of an object's phase for `explain`: each child's kind from the
//! machine's description, found through discovery, listed by the `kube-fsm.dev/child` label
//! in the object's namespace and kept when the object owns it.

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{GroupVersionKind, TypeMeta};
use kube::discovery::{self, Scope};
use kube::{Client, ResourceExt};
use kube_fsm::children::CHILD_LABEL;
use kube_fsm::machine::{ChildDescription, Description};
use serde_json::Value;

use crate::explain::Found;
use crate::object::Stored;

/// What can be read of each child `machine` declares in `object`'s phase.
pub async fn read(client: &Client, machine: &Description, object: &Value) -> Found {
    let stored = Stored(object);
    let Some(phase) = stored.phase() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for child in &machine.children {
        if !child.phases.iter().any(|p| p == phase) {
            continue;
        }
        let objects = if child.kind.is_empty() {
            // A description written before children's kinds were recorded.
            Err(
                "the CRD's machine description does not name its kind; install the CRD this \
                 operator's `crd` command writes"
                    .to_owned(),
            )
        } else {
            owned(client, child, &stored).await
        };
        found.push((child.name.clone(), objects));
    }
    found
}

async fn owned(
    client: &Client,
    child: &ChildDescription,
    owner: &Stored<'_>,
) -> Result<Vec<Value>, String> {
    let types = TypeMeta {
        api_version: child.api_version.clone(),
        kind: child.kind.clone(),
    };
    let gvk = GroupVersionKind::try_from(&types).map_err(|err| err.to_string())?;
    let (resource, capabilities) = (discovery::pinned_kind(client, &gvk).await).map_err(said)?;
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), owner.namespace(), &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let labelled = ListParams::default().labels(&format!("{CHILD_LABEL}={}", child.name));
    let uid = owner.uid();
    let mut objects = Vec::new();
    for mut item in api.list(&labelled).await.map_err(said)?.items {
        if !item.owner_references().iter().any(|o| o.uid == uid) {
            continue;
        }
        // A list's items carry no apiVersion and kind; kstatus's rules need the kind.
        item.types = Some(types.clone());
        objects.push(serde_json::to_value(item).map_err(|err| err.to_string())?);
    }
    Ok(objects)
}

/// The API server's own message, or the client's.
fn said(err: kube::Error) -> String {
    match err {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    }
}
