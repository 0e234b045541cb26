//! Whether this replica reconciles an object now, with sharding: its shard is served, and its
//! label names that shard.

use kube::runtime::controller::Action;

use super::{Engine, Reconcilable, Requeue};
use crate::replicas::shard_label::LABEL_BACKOFF;
use crate::replicas::shards::{InFlight, Serving};

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Whether to reconcile `object` now: `Ok(None)` without sharding, `Ok(Some(_))` while
    /// its shard is served (the reconcile is counted under the holding until the guard
    /// drops), or what to do instead: look again soon while the shard's renewal is late, or
    /// on the next change when the object is not this replica's or its label names another
    /// shard than its own (a hand edit, or another shard count's label: the replica serving
    /// the labelled shard puts it right, and the object moves to the watch of its shard's
    /// holder).
    pub(crate) async fn shard_gate(&self, object: &K) -> Result<Option<InFlight>, Action> {
        let Some(labeller) = &self.labeller else {
            return Ok(None);
        };
        let meta = object.meta();
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
