//! The shard label on children that lack one. `Step::apply` labels a child with its owner's
//! shard, but children made otherwise — by a handler through its own client, or under leader
//! election before a deployment switched to sharding — carry none, and an owned kind is
//! watched for the served shards' labels only: its replica would read them as absent. So each
//! sharded replica also watches, metadata only, each owned kind's objects without a valid
//! shard label (normally none), and before a step of an object it serves it labels that
//! object's unlabelled children with its shard and puts each labelled child, as the write
//! returned it, into the kind's cache (see [`Adopt`]).
//!
//! The replica that steps the owner labels its children itself. A label written by another
//! replica reaches this replica's cache only at its watch's pace: a list of newly served shards
//! begun before the labels were written ends without them, and the owner, labelled a moment
//! later, can arrive first (measured: 26 of 30 children read as absent after a switch from
//! leader election, when the holder of shard 0 labelled them before their owners).

use std::sync::{Arc, PoisonError};

use futures::future::BoxFuture;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;

use crate::replicas::fence;
use crate::replicas::shard_label::{Adopt, Labeller};
use crate::watch::cache::{Cache, Watched};

/// The children of kind `R` without a valid shard label (metadata only, from their own
/// watch), and the cache of the labelled ones that handlers read.
pub(crate) struct Unlabelled<R: Watched> {
    pub found: Arc<Cache<PartialObjectMeta<R>>>,
    pub children: Arc<Cache<R>>,
}

impl<R: Watched> Adopt for Unlabelled<R> {
    fn adopt<'a>(
        &'a self,
        owner: &'a ObjectMeta,
        labeller: &'a Labeller,
    ) -> BoxFuture<'a, Result<(), kube::Error>> {
        Box::pin(async move {
            let Some(uid) = owner.uid.as_deref() else {
                return Ok(());
            };
            let shard = labeller.shards.sharding.shard_of(owner);
            for child in self.found.owned_by(uid) {
                if !controlled_by(&child.metadata, uid) {
                    continue;
                }
                let meta = &child.metadata;
                // The step's own writes are fenced the same way; it stops at its first.
                let Some(written) = fence::send(labeller.write_label::<R, R>(meta, shard)).await
                else {
                    return Ok(());
                };
                if let Some(labelled) = written? {
                    self.children.remember(labelled);
                }
                // Labelled now, or gone: its leaving the unlabelled watch is on its way.
                self.found.forget(
                    meta.name.as_deref().unwrap_or_default(),
                    meta.namespace.as_deref(),
                );
            }
            Ok(())
        })
    }
}

/// Whether the object with `child` is controlled by the object with `uid`.
fn controlled_by(child: &ObjectMeta, uid: &str) -> bool {
    child
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

impl Labeller {
    /// Before a step of the object with `owner`: labels its children that lack a shard label
    /// (see [`Adopt`]).
    pub(crate) async fn adopt_children(&self, owner: &ObjectMeta) -> Result<(), kube::Error> {
        let adopters = self
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for adopter in adopters {
            adopter.adopt(owner, self).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    #[test]
    fn a_child_is_adopted_only_by_its_controller() {
        let owner = |uid: &str, controller| OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "o".into(),
            uid: uid.into(),
            controller: Some(controller),
            ..OwnerReference::default()
        };
        let child = |owners| ObjectMeta {
            owner_references: Some(owners),
            ..ObjectMeta::default()
        };
        assert!(controlled_by(&child(vec![owner("uid-1", true)]), "uid-1"));
        assert!(!controlled_by(&child(vec![owner("uid-1", false)]), "uid-1"));
        assert!(!controlled_by(&child(vec![owner("uid-2", true)]), "uid-1"));
        assert!(!controlled_by(&ObjectMeta::default(), "uid-1"));
    }
}
