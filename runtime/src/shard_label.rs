//! The shard label on each object: written once, by the replica serving shard 0 (for objects
//! that have none yet; it watches only those, metadata only) or by the replica that finds an
//! object with a label other than its shard (a hand edit). The value is a function of the
//! object's UID or namespace, so every writer writes the same, and the patch carries the UID
//! so that it never lands on a new object of the same name.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::metrics::MachineMetrics;
use crate::reconcile::{Engine, Reconciled, Requeue};
use crate::scope::Scoped;
use crate::shards::{InFlight, Serving, Shards};

/// Who writes the labels and where.
#[derive(Clone)]
pub(crate) struct Labeller {
    pub client: Client,
    pub shards: Arc<Shards>,
    pub field_manager: String,
    pub metrics: Arc<MachineMetrics>,
}

impl Labeller {
    /// Writes the label of the shard of the object with `meta` onto it.
    pub async fn label<K>(&self, meta: &ObjectMeta) -> Result<(), kube::Error>
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let sharding = &self.shards.sharding;
        let shard = sharding.shard_of(meta);
        let api: Api<K> = K::api_in(self.client.clone(), meta.namespace.as_deref());
        let patch = serde_json::json!({
            "metadata": {
                "uid": meta.uid,
                "labels": { sharding.label(): shard.to_string() },
            }
        });
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let name = meta.name.as_deref().unwrap_or_default();
        match api
            .patch_metadata(name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                self.metrics.shard_labelled();
                Ok(())
            }
            // Gone, or replaced by a new object (its UID differs: a precondition failure or
            // an immutable field): the new object's own events follow.
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409 | 422) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// While this replica serves shard 0, labels every object of `api` (narrowed by
    /// `selector`, the operator's own label selector) that has no shard label (a metadata-only
    /// watch).
    pub async fn assign<K>(self, api: Api<PartialObjectMeta<K>>, selector: Option<String>)
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let unlabelled = match selector {
            Some(selector) => format!("{selector},!{}", self.shards.sharding.label()),
            None => format!("!{}", self.shards.sharding.label()),
        };
        let mut served = self.shards.selector();
        loop {
            while !self.shards.serves_shard(0) {
                if served.changed().await.is_err() {
                    return;
                }
            }
            tracing::info!("labelling new objects with their shard");
            let config = watcher::Config::default().labels(&unlabelled);
            let objects = watcher::watcher(api.clone(), config)
                .default_backoff()
                .applied_objects();
            tokio::pin!(objects);
            loop {
                tokio::select! {
                    object = objects.next() => match object {
                        Some(Ok(object)) => {
                            if let Err(err) = self.label::<K>(&object.metadata).await {
                                tracing::warn!(%err, "cannot write a shard label; retried on the next relist");
                            }
                        }
                        Some(Err(err)) => tracing::debug!(%err, "watch of unlabelled objects failed"),
                        None => break,
                    },
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

impl<K, H> Engine<K, H>
where
    K: Reconciled<H>,
    H: Send + Sync + 'static,
{
    /// Whether to reconcile `object` now: `Ok(None)` without sharding, `Ok(Some(_))` while
    /// its shard is served (the reconcile is counted under the holding until the guard
    /// drops), or what to do instead: look again soon while the shard's renewal is late, or
    /// on the next change when the object is not this replica's or its label names another
    /// shard than its own (a hand edit: the label is put right, and the object moves to the
    /// watch of its shard's holder).
    pub(crate) async fn shard_gate(&self, object: &K) -> Result<Option<InFlight>, Action> {
        let Some(labeller) = &self.labeller else {
            return Ok(None);
        };
        let meta = object.meta();
        let sharding = &labeller.shards.sharding;
        if sharding.labelled(meta) != Some(sharding.shard_of(meta)) {
            if let Err(err) = labeller.label::<K>(meta).await {
                tracing::warn!(%err, "cannot put the shard label right");
            }
            return Err(Action::await_change());
        }
        match labeller.shards.enter(meta) {
            Serving::Yes(in_flight) => Ok(Some(in_flight)),
            Serving::Later(after) => Err(Action::requeue(after)),
            Serving::No => Err(Action::await_change()),
        }
    }

    /// When to look again at `object`, whose reconcile stopped because its holding no longer
    /// serves: soon while its shard's renewal is late (deferred, not dropped), else on its
    /// next change (the shard's new holder lists it).
    pub(crate) fn unserved(&self, object: &K) -> Requeue {
        self.labeller
            .as_ref()
            .and_then(|labeller| labeller.shards.later(object.meta()))
    }
}
