//! The one question the engine and a step ask of the replicas: may this replica reconcile and
//! write this object now, and until when. Without sharding the answer is always yes, for as
//! long as the process runs; with sharding, an object is this replica's while the holding of
//! its shard it started under stands ([`Turn`]), and every write checks that right before it
//! is sent ([`may_write`]). How shards are held, labelled and fenced stays behind this file.

use std::future::Future;
use std::time::Duration;

use kube::api::ObjectMeta;
use kube::runtime::controller::Action;

use crate::replicas::fence;
use crate::replicas::shard_label::{LABEL_BACKOFF, Labeller};
use crate::replicas::shards::{InFlight, Serving};
use crate::watch::scope::Scoped;

/// Whose objects this replica reconciles: every one (one replica, or the leader), or those of
/// the shards it holds.
#[derive(Clone, Default)]
pub(crate) struct Turns {
    sharded: Option<Labeller>,
}

/// A reconcile's turn on one object: its writes land while the turn stands.
#[derive(Debug)]
pub(crate) struct Turn(InFlight);

impl Turns {
    /// Every object is this replica's (no sharding).
    pub(crate) fn every() -> Self {
        Turns::default()
    }

    /// The objects of the shards `labeller` serves are this replica's.
    pub(crate) fn sharded(labeller: Option<Labeller>) -> Self {
        Turns { sharded: labeller }
    }

    /// Whether objects are shared out by shard (a reconcile then waits for its turn before it
    /// waits for a slot).
    pub(crate) fn by_shard(&self) -> bool {
        self.sharded.is_some()
    }

    /// Whether to reconcile the object with `meta` now: `Ok(None)` without sharding,
    /// `Ok(Some(_))` while its shard is served (the reconcile is counted under the holding
    /// until the turn drops), or what to do instead: look again soon while the shard's
    /// renewal is late, or on the next change when the object is not this replica's or its
    /// label names another shard than its own (a hand edit, or another shard count's label:
    /// the replica serving the labelled shard puts it right, and the object moves to the watch
    /// of its shard's holder).
    pub(crate) async fn take<K>(&self, meta: &ObjectMeta) -> Result<Option<Turn>, Action>
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let Some(labeller) = &self.sharded else {
            return Ok(None);
        };
        let sharding = &labeller.shards.sharding;
        let labelled = sharding.labelled(meta);
        if labelled != Some(sharding.shard_of(meta)) {
            // Only the replica serving the shard the label names moves the object, before it
            // steps it (kube never runs two reconciles of one object at once), so nobody is
            // stepping it meanwhile; any other replica (a cache a moment behind a handover)
            // leaves it alone, and an object without a valid label is the labeller's.
            if !labelled.is_some_and(|shard| labeller.shards.serves_shard(shard)) {
                return Err(Action::await_change());
            }
            return Err(match labeller.label::<K>(meta).await {
                // The object moves to the watch of its shard's holder.
                Ok(()) => Action::await_change(),
                Err(err) => {
                    let delay = LABEL_BACKOFF.jittered(4);
                    tracing::warn!(%err, ?delay, "cannot put the shard label right; retrying");
                    Action::requeue(delay)
                }
            });
        }
        match labeller.shards.enter(meta) {
            Serving::Yes(in_flight) => Ok(Some(Turn(in_flight))),
            Serving::Later(after) => Err(Action::requeue(after)),
            Serving::No => Err(Action::await_change()),
        }
    }

    /// When to look again at the object with `meta`, whose turn ended: soon while its shard's
    /// renewal is late (deferred, not dropped), else on its next change (`None`: the shard's
    /// new holder lists it).
    pub(crate) fn again(&self, meta: &ObjectMeta) -> Option<Duration> {
        self.sharded
            .as_ref()
            .and_then(|labeller| labeller.shards.later(meta))
    }

    /// With sharding: the object's children without a shard label get it now, and are cached.
    pub(crate) async fn adopt_children(&self, owner: &ObjectMeta) -> Result<(), kube::Error> {
        match &self.sharded {
            Some(labeller) => labeller.adopt_children(owner).await,
            None => Ok(()),
        }
    }

    /// With sharding: the label (key, value) a child of the object with `meta` carries, its
    /// owner's shard.
    pub(crate) fn child_label(&self, meta: &ObjectMeta) -> Option<(String, String)> {
        let sharding = &self.sharded.as_ref()?.shards.sharding;
        Some((sharding.label(), sharding.shard_of(meta).to_string()))
    }
}

impl Turn {
    /// The number of the holding the turn stands on (what per-object memory is kept under).
    pub(crate) fn holding(&self) -> u64 {
        self.0.fence().holding
    }

    /// Whether writes made in this turn may still land.
    pub(crate) fn stands(&self) -> bool {
        self.0.fence().holds()
    }

    /// Completes when the turn ends (its shard given up past its grace, or lost).
    pub(crate) async fn ended(&self) {
        self.0.ended().await;
    }

    /// Runs `work` in this turn: each of its writes checks [`may_write`] first.
    pub(crate) async fn run<F: Future>(&self, work: F) -> F::Output {
        fence::under(Some(self.0.fence().clone()), work).await
    }
}

/// Whether a write of the current reconcile may land now: its turn stands (always, outside a
/// sharded reconcile).
pub(crate) fn may_write() -> bool {
    fence::open()
}

/// Whether the current reconcile may go on with new work after a wait: its turn stands and its
/// shard is not being given up (always, outside a sharded reconcile).
pub(crate) fn may_go_on() -> bool {
    fence::serving()
}
