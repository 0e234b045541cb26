//! The one question the engine and a step ask of the replicas: may this replica reconcile and
//! write this object now, and until when. With one replica the answer is always yes, for as
//! long as the process runs; under leader election, an object is this replica's while its
//! leadership stands; with sharding, while the holding of its shard it started under stands
//! ([`Turn`]). Either way every write is sent only while its turn stands ([`write`]).
//! How Leases and shards are held, labelled and fenced stays behind this file.

use std::future::Future;
use std::time::Duration;

use kube::api::ObjectMeta;
use kube::runtime::controller::Action;

use crate::replicas::fence::{self, Fence};
use crate::replicas::leading::Leading;
use crate::replicas::shard_label::{LABEL_BACKOFF, Labeller};
use crate::replicas::shards::{InFlight, Serving};
use crate::watch::scope::Scoped;

/// Whose objects this replica reconciles: every one (one replica, or the leader while it
/// leads), or those of the shards it holds.
#[derive(Clone, Default)]
pub(crate) struct Turns {
    leading: Option<Leading>,
    sharded: Option<Labeller>,
}

/// A reconcile's turn on one object: its writes land while the turn stands.
#[derive(Debug)]
pub(crate) enum Turn {
    /// While this replica leads.
    Lease(Leading),
    /// While the holding of the object's shard stands.
    Shard(InFlight),
}

impl Turns {
    /// Every object is this replica's (one replica).
    pub(crate) fn every() -> Self {
        Turns::default()
    }

    /// Every object is this replica's while `leading` stands (leader election).
    pub(crate) fn leading(leading: Leading) -> Self {
        Turns {
            leading: Some(leading),
            sharded: None,
        }
    }

    /// The objects of the shards `labeller` serves are this replica's.
    pub(crate) fn sharded(labeller: Labeller) -> Self {
        Turns {
            leading: None,
            sharded: Some(labeller),
        }
    }

    /// Whether objects are shared out by shard (a reconcile then waits for its turn before it
    /// waits for a slot).
    pub(crate) fn by_shard(&self) -> bool {
        self.sharded.is_some()
    }

    /// Whether to reconcile the object with `meta` now: `Ok(None)` with one replica,
    /// `Ok(Some(_))` under leader election (the turn lasts while this replica leads) and,
    /// with sharding, while its shard is served (the reconcile is counted under the holding
    /// until the turn drops), or what to do instead: look again soon while the shard's
    /// renewal is late, or on the next change when the object is not this replica's or its
    /// label names another shard than its own (a hand edit, or another shard count's label:
    /// the replica serving the labelled shard puts it right, and the object moves to the watch
    /// of its shard's holder).
    pub(crate) async fn take<K>(&self, meta: &ObjectMeta) -> Result<Option<Turn>, Action>
    where
        K: Scoped + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if let Some(leading) = &self.leading {
            return Ok(Some(Turn::Lease(leading.clone())));
        }
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
            Serving::Yes(in_flight) => Ok(Some(Turn::Shard(in_flight))),
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
    /// The number of the shard's holding the turn stands on (what per-object memory is kept
    /// under); 0 for leadership, which a process holds once.
    pub(crate) fn holding(&self) -> u64 {
        match self {
            Turn::Lease(_) => 0,
            Turn::Shard(in_flight) => in_flight.fence().holding,
        }
    }

    fn fence(&self) -> Fence {
        match self {
            Turn::Lease(leading) => Fence::Lease(leading.clone()),
            Turn::Shard(in_flight) => Fence::Shard(in_flight.fence().clone()),
        }
    }

    /// Whether writes made in this turn may still land.
    pub(crate) fn stands(&self) -> bool {
        match self {
            Turn::Lease(leading) => leading.holds(),
            Turn::Shard(in_flight) => in_flight.fence().holds(),
        }
    }

    /// Completes when the turn ends (leadership lost; its shard given up past its grace, or
    /// lost).
    pub(crate) async fn ended(&self) {
        match self {
            Turn::Lease(leading) => leading.lost().await,
            Turn::Shard(in_flight) => in_flight.ended().await,
        }
    }

    /// Runs `work` in this turn: each of its writes goes through [`write`].
    pub(crate) async fn run<F: Future>(&self, work: F) -> F::Output {
        fence::under(self.fence(), work).await
    }
}

/// Sends the write `request` of the current reconcile while its turn stands (always, with one
/// replica), checked before the request starts and again whenever it waited; `None` when it
/// was not sent.
pub(crate) async fn write<F: Future>(request: F) -> Option<F::Output> {
    fence::send(request).await
}

/// Whether the current reconcile may go on with new work after a wait: its turn stands and its
/// shard is not being given up (always, with one replica).
pub(crate) fn may_go_on() -> bool {
    fence::serving()
}
