//! The shard label on each object: written once, by the replica serving shard 0 (for objects
//! that have no valid one: none yet, or a value left by a larger shard count; it watches only
//! those, metadata only) or by the replica serving the shard that an object's label names when
//! that is not the object's shard (a hand edit, or a changed shard count). The value is a
//! function of the object's UID or namespace, and the patch carries the UID and the
//! resourceVersion of the version the writer saw, so that it never lands on a new object of
//! the same name nor over a label written since. A write that fails (an API error, a policy
//! webhook down under `Fail`) is retried with backoff until it lands: an unlabelled object is
//! in no replica's watch, so nothing else would bring it back.
//!
//! An object whose label names a shard of a larger count is moved only once that shard's Lease
//! is no longer held (released, or unchanged for its duration): during a rolling change to
//! fewer shards, a replica of the old count may still be serving it, and moving the object
//! would hand it to a second replica mid-reconcile.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::metrics::MachineMetrics;
use crate::pure::backoff::Backoff;
use crate::pure::selection;
use crate::replicas::lease::Observed;
use crate::replicas::shards::Shards;
use crate::watch::scope::Scoped;

/// The unlabelled children of one owned kind, and how they get their owner's label (see
/// [`crate::replicas::shard_children`]).
pub(crate) trait Adopt: Send + Sync {
    /// Labels the children of the object with `owner` (a served object of the machine) that
    /// have no valid shard label with its shard, and caches them.
    fn adopt<'a>(
        &'a self,
        owner: &'a ObjectMeta,
        labeller: &'a Labeller,
    ) -> BoxFuture<'a, Result<(), kube::Error>>;
}

/// The owned kinds' [`Adopt`]s, registered while the watches are wired.
pub(crate) type Adopters = Mutex<Vec<Arc<dyn Adopt>>>;

/// Who writes the labels and where.
#[derive(Clone)]
pub(crate) struct Labeller {
    pub client: Client,
    pub shards: Arc<Shards>,
    pub field_manager: String,
    pub metrics: Arc<MachineMetrics>,
    /// The owned kinds' labellers of unlabelled children (see [`crate::replicas::shard_children`]).
    pub children: Arc<Adopters>,
}

impl Labeller {
    /// Writes the label of the shard of the object with `meta` onto it.
    pub async fn label<K>(&self, meta: &ObjectMeta) -> Result<(), kube::Error>
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let shard = self.shards.sharding.shard_of(meta);
        if self
            .write_label::<K, PartialObjectMeta<K>>(meta, shard)
            .await?
            .is_some()
        {
            self.metrics.shard_labelled();
        }
        Ok(())
    }

    /// Writes the label of `shard` onto the object of `R` with `meta`, and returns the object
    /// as written (as a `T`: `R` itself, or its `PartialObjectMeta`); `None` when it is gone,
    /// was replaced by a new one of the same name, or got a valid label meanwhile.
    ///
    /// The patch carries the UID and the resourceVersion of the version seen: a labeller works
    /// from a watch that may be far behind (thousands of objects listed, each label written in
    /// turn), and a label written meanwhile — by a replica of another shard count during a
    /// rolling change, by the object's holder — must not be overwritten: that would move the
    /// object out of a shard another replica serves while it steps the object. On a conflict
    /// the object is read again and labelled only if it still has no valid label.
    pub async fn write_label<R, T>(
        &self,
        meta: &ObjectMeta,
        shard: u32,
    ) -> Result<Option<T>, kube::Error>
    where
        R: Scoped,
        T: kube::Resource<Scope = R::Scope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let sharding = &self.shards.sharding;
        let api: Api<T> = R::api_in(self.client.clone(), meta.namespace.as_deref());
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let name = meta.name.as_deref().unwrap_or_default();
        let patch = |seen: &ObjectMeta| {
            Patch::Merge(serde_json::json!({
                "metadata": {
                    "uid": seen.uid,
                    "resourceVersion": seen.resource_version,
                    "labels": { sharding.label(): shard.to_string() },
                }
            }))
        };
        let mut seen = meta.clone();
        for _ in 0..2 {
            match api.patch(name, &params, &patch(&seen)).await {
                Ok(written) => return Ok(Some(written)),
                // Changed since it was seen, or replaced (the UID differs): look again.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let Some(fresh) = api.get_metadata_opt(name).await? else {
                        return Ok(None);
                    };
                    if fresh.metadata.uid != meta.uid
                        || sharding.labelled(&fresh.metadata).is_some()
                    {
                        return Ok(None);
                    }
                    seen = fresh.metadata;
                }
                // Gone, or an immutable field: the new object's own events follow.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 422) => {
                    return Ok(None);
                }
                Err(err) => return Err(err),
            }
        }
        // Changed again in between: the caller retries with backoff.
        Err(kube::Error::Api(
            kube::core::Status::failure(
                "the object changed twice while its shard label was written",
                "Conflict",
            )
            .with_code(409)
            .boxed(),
        ))
    }

    /// While this replica serves shard 0, labels every object of `api` (narrowed by
    /// `selector`, the operator's own label selector) that has no valid shard label (a
    /// metadata-only watch), retrying failed writes with backoff.
    pub async fn assign<K>(self, api: Api<PartialObjectMeta<K>>, selector: Option<String>)
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let unlabelled = selection::both(
            selector.as_deref(),
            &self.shards.sharding.unlabelled_selector(),
        );
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
            let mut retries = Retries::default();
            loop {
                let room = retries.room();
                tokio::select! {
                    object = objects.next(), if room => match object {
                        Some(Ok(object)) => {
                            let shard = self.shards.sharding.shard_of(&object.metadata);
                            self.try_label::<K>(object.metadata, shard, 0, &mut retries).await;
                        }
                        Some(Err(err)) => tracing::debug!(%err, "watch of unlabelled objects failed"),
                        None => break,
                    },
                    Some((meta, shard, attempt)) = retries.due.next(), if room => {
                        self.try_label::<K>(meta, shard, attempt, &mut retries).await;
                    }
                    Some(done) = retries.writing.next() => self.settle(done, &mut retries),
                    changed = served.changed() => {
                        if changed.is_err() || !self.shards.serves_shard(0) {
                            break;
                        }
                    }
                }
                self.metrics.unlabelled(retries.waiting.len());
            }
            // The next holder of shard 0 lists every object still without a valid label.
            self.metrics.unlabelled(0);
        }
    }

    /// Labels the object of `R` with `meta` with `shard` (this is its `attempt`th retry): the
    /// write goes into `retries.writing` (up to [`LABELS_IN_FLIGHT`] at once: one at a time,
    /// a labeller behind a slow API server took minutes over a thousand new objects, which
    /// meanwhile no replica reconciles); [`Labeller::settle`] takes its outcome. A failure is
    /// retried after a backoff, unless a retry of it is already waiting.
    async fn try_label<'a, R>(
        &'a self,
        meta: ObjectMeta,
        shard: u32,
        attempt: u32,
        retries: &mut Retries<'a>,
    ) where
        R: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    {
        let uid = meta.uid.clone().unwrap_or_default();
        if attempt > 0 {
            retries.waiting.remove(&uid);
        }
        if !retries.in_flight.insert(uid) {
            // A write of it is under way; its outcome decides.
            return;
        }
        if let Some(old) = self.shards.sharding.stale(&meta)
            && !self.released(old, &mut retries.old_shards).await
        {
            let done = (meta, shard, attempt, Err(Unlabelled::StillServed(old)));
            self.settle(done, retries);
            return;
        }
        retries.writing.push(Box::pin(async move {
            let written = self
                .write_label::<R, PartialObjectMeta<R>>(&meta, shard)
                .await
                .map(|written| written.is_some())
                .map_err(Unlabelled::Refused);
            (meta, shard, attempt, written)
        }));
    }

    /// Takes the outcome of a label write (or of the wait for an old shard's Lease).
    fn settle(&self, (meta, shard, attempt, written): Written, retries: &mut Retries<'_>) {
        let uid = meta.uid.clone().unwrap_or_default();
        retries.in_flight.remove(&uid);
        match written {
            Ok(written) => {
                if written {
                    self.metrics.shard_labelled();
                }
            }
            Err(why) if retries.waiting.insert(uid) => {
                // A held old shard is looked at again every retry period (its Lease is read
                // once per period for all its objects), so the object moves soon after it frees.
                let delay = match why {
                    Unlabelled::Refused(_) => LABEL_BACKOFF.jittered(attempt.saturating_add(1)),
                    Unlabelled::StillServed(_) => self.shards.sharding.timing.retry_period,
                };
                let object = meta.name.as_deref().unwrap_or_default();
                match why {
                    Unlabelled::Refused(err) => {
                        tracing::warn!(%err, object, ?delay, "cannot write a shard label; retrying")
                    }
                    Unlabelled::StillServed(old) => tracing::debug!(
                        old,
                        object,
                        ?delay,
                        "the object's shard of the former count is still held; moving it once that shard is released"
                    ),
                }
                retries.due.push(Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    (meta, shard, attempt.saturating_add(1))
                }));
            }
            Err(_) => {}
        }
    }

    /// Whether shard `old` of a larger count is no longer held: its Lease is gone, released,
    /// ours, or unchanged for its duration on this replica's clock (read at most once per
    /// retry period; an unanswered read counts as held).
    async fn released(&self, old: u32, leases: &mut HashMap<u32, OldShard>) -> bool {
        let timing = &self.shards.sharding.timing;
        let seen = leases.entry(old).or_default();
        if seen
            .read
            .is_some_and(|at| at.elapsed() < timing.retry_period)
        {
            return seen.free;
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.shards.sharding.namespace);
        let name = self.shards.sharding.lease(old);
        seen.read = Some(tokio::time::Instant::now());
        seen.free = match tokio::time::timeout(timing.renew_deadline / 2, api.get_opt(&name)).await
        {
            Ok(Ok(lease)) => seen
                .observed
                .free(lease.as_ref(), &timing.identity, timing.duration),
            _ => false,
        };
        seen.free
    }
}

/// Why an object is still without its label.
pub(crate) enum Unlabelled {
    /// The write failed.
    Refused(kube::Error),
    /// Its label names this shard of a larger count, whose Lease is still held.
    StillServed(u32),
}

/// What the labeller last saw of the Lease of a shard of a larger count.
#[derive(Default)]
struct OldShard {
    observed: Observed,
    read: Option<tokio::time::Instant>,
    free: bool,
}

/// The backoff between attempts at one object's shard label.
pub(crate) const LABEL_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(500),
    max: Duration::from_secs(30),
};

/// A label write's next attempt: due when it completes, with the object, its shard and the
/// attempt.
type Attempt = Pin<Box<dyn Future<Output = (ObjectMeta, u32, u32)> + Send>>;

/// How many label writes one labeller keeps in flight.
const LABELS_IN_FLIGHT: usize = 16;

/// A label write's outcome: the object, its shard, the attempt, and whether it was written.
type Written = (ObjectMeta, u32, u32, Result<bool, Unlabelled>);

/// Label writes under way, and those waiting for another attempt: by UID, and when each is
/// due.
#[derive(Default)]
struct Retries<'a> {
    waiting: HashSet<String>,
    due: FuturesUnordered<Attempt>,
    /// The writes under way, and their objects' UIDs.
    writing: FuturesUnordered<Pin<Box<dyn Future<Output = Written> + Send + 'a>>>,
    in_flight: HashSet<String>,
    /// The Leases of shards of a larger count that objects' labels still name.
    old_shards: HashMap<u32, OldShard>,
}

impl Retries<'_> {
    /// Whether another write may start.
    fn room(&self) -> bool {
        self.writing.len() < LABELS_IN_FLIGHT
    }
}
