//! The shard label on children that lack one. `Step::apply` labels a child with its owner's
//! shard, but children made otherwise — by a handler through its own client, or under leader
//! election before a deployment switched to sharding — carry none, and an owned kind is
//! watched for the served shards' labels only: its replica would read them as absent. So the
//! replica serving shard 0 also watches, metadata only, each owned kind's objects without a
//! valid shard label, and labels those whose controller is an object of this machine with
//! their owner's shard (its UID, or the namespace they share, gives it). It does so before it
//! labels any owner (see [`Labeller::assign`]): an owner labelled first could be reconciled by
//! a replica whose cache does not hold its children yet.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tokio::sync::watch;

use crate::scope::Scoped;
use crate::shard_label::{Labeller, Retries};

/// How far the children's labellers are: the owned kinds that have one, and those whose
/// labeller has labelled what its first list held.
#[derive(Debug, Default)]
pub(crate) struct ChildLabelling {
    kinds: Mutex<BTreeSet<String>>,
    listed: watch::Sender<BTreeSet<String>>,
}

impl ChildLabelling {
    /// Registers the labeller of `kind` (before any runs).
    pub fn expect(&self, kind: &str) {
        self.kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(kind.to_owned());
    }

    fn listed(&self, kind: &str) {
        self.listed
            .send_if_modified(|listed| listed.insert(kind.to_owned()));
    }

    /// Completes once every registered labeller has labelled its first list.
    pub async fn all_listed(&self) {
        let kinds = self
            .kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut listed = self.listed.subscribe();
        let _ = listed.wait_for(|listed| listed.is_superset(&kinds)).await;
    }
}

/// How long the owners' labeller waits for the children's before it goes on anyway (a watch
/// of children that keeps failing must not leave every new object unlabelled).
pub(crate) const CHILDREN_FIRST: Duration = Duration::from_secs(60);

/// The metadata of the shard an owned object falls in: its controller's, when that is an
/// object of `K` (`None` otherwise: not this machine's child).
fn owner_shard_meta<K: Resource<DynamicType = ()>>(child: &ObjectMeta) -> Option<ObjectMeta> {
    let owner = child
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    (owner.kind == K::kind(&()) && owner.api_version == K::api_version(&())).then(|| ObjectMeta {
        uid: Some(owner.uid.clone()),
        namespace: child.namespace.clone(),
        ..ObjectMeta::default()
    })
}

impl Labeller {
    /// While this replica serves shard 0, labels every object of `api` (narrowed by
    /// `selector`, the owned kind's watch selector) that has no valid shard label and whose
    /// controller is an object of `K`, with its owner's shard; failed writes are retried with
    /// backoff.
    pub async fn assign_children<K, R>(
        self,
        api: Api<PartialObjectMeta<R>>,
        selector: Option<String>,
    ) where
        K: Resource<DynamicType = ()>,
        R: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let invalid = self.shards.sharding.unlabelled_selector();
        let unlabelled = match selector {
            Some(selector) => format!("{selector},{invalid}"),
            None => invalid,
        };
        let kind = R::kind(&()).into_owned();
        let mut served = self.shards.selector();
        loop {
            while !self.shards.serves_shard(0) {
                if served.changed().await.is_err() {
                    return;
                }
            }
            let config = watcher::Config::default().labels(&unlabelled);
            let events = watcher::watcher(api.clone(), config).default_backoff();
            tokio::pin!(events);
            let mut retries = Retries::default();
            // The first list is done once it ended and its label writes settled: only then
            // may objects be labelled (see `ChildLabelling::all_listed`).
            let mut listed = false;
            let mut announced = false;
            loop {
                if listed && !announced && retries.writing.is_empty() {
                    announced = true;
                    self.children.listed(&kind);
                }
                let room = retries.room();
                tokio::select! {
                    event = events.next(), if room => match event {
                        Some(Ok(watcher::Event::Apply(child) | watcher::Event::InitApply(child))) => {
                            if let Some(owner) = owner_shard_meta::<K>(&child.metadata) {
                                let shard = self.shards.sharding.shard_of(&owner);
                                self.try_label::<R>(child.metadata, shard, 0, &mut retries)
                                    .await;
                            }
                        }
                        Some(Ok(watcher::Event::InitDone)) => listed = true,
                        Some(Ok(_)) => {}
                        Some(Err(err)) => tracing::debug!(%err, kind, "watch of unlabelled children failed"),
                        None => break,
                    },
                    Some((meta, shard, attempt)) = retries.due.next(), if room => {
                        self.try_label::<R>(meta, shard, attempt, &mut retries).await;
                    }
                    Some(done) = retries.writing.next() => self.settle(done, &mut retries),
                    changed = served.changed() => {
                        if changed.is_err() || !self.shards.serves_shard(0) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    #[test]
    fn a_child_falls_in_its_controllers_shard_if_that_is_ours() {
        let owner = |kind: &str, controller| OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: "o".into(),
            uid: "uid-1".into(),
            controller: Some(controller),
            ..OwnerReference::default()
        };
        let child = |owners| ObjectMeta {
            namespace: Some("ns".into()),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        };
        let ours = owner_shard_meta::<ConfigMap>(&child(vec![owner("ConfigMap", true)]))
            .expect("a child of ours");
        assert_eq!(
            (ours.uid.as_deref(), ours.namespace.as_deref()),
            (Some("uid-1"), Some("ns"))
        );
        assert!(owner_shard_meta::<ConfigMap>(&child(vec![owner("Secret", true)])).is_none());
        assert!(owner_shard_meta::<ConfigMap>(&child(vec![owner("ConfigMap", false)])).is_none());
    }
}
