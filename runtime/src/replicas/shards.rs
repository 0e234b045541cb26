//! The shards this replica holds: one Lease per shard, held with leader election's timing
//! (see [`crate::replicas::leader`]), and a membership Lease per replica so that each takes its fair
//! share. A replica serves a shard (starts reconciles for its objects) only while its last
//! successful renewal is younger than the renew deadline, counted from the start of that
//! renewal's request; another replica takes the shard only once its Lease is released or has
//! not changed for its duration on that replica's clock.
//!
//! Each acquisition is a *holding* with a number of its own. A reconcile starts under one
//! holding and every write it makes is fenced by it (see [`crate::replicas::fence`]). A shard given up in
//! a rebalance stops starting reconciles, waits for those in flight (at most half the margin
//! between the deadline and the duration), cancels the rest, waits for them to stop, and only
//! then releases its Lease — beside the Lease loop, which goes on renewing the shards it keeps
//! meanwhile; a shard that missed its renew deadline cancels its reconciles at
//! once. Its objects and children stay watched until the holding ends, so reconciles that
//! finish read their children as before: at no time do two replicas reconcile one object.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, ListParams, ObjectMeta};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::metrics::MachineMetrics;
use crate::replicas::label::dns_label;
use crate::replicas::lease::{LeaseError, LeaseLock, Observed};
use crate::replicas::shard::{Sharding, fair_share, rebalance};
use crate::watch::health::Health;

/// A shard this replica holds.
#[derive(Debug)]
struct Holding {
    /// When the request of the last successful renewal started.
    renewed: Instant,
    /// Given up: no new reconcile starts; the Lease goes once those in flight are done.
    draining: bool,
    in_flight: usize,
    /// This holding's number, unique over the replica's life: the guards and the memory of an
    /// earlier holding of the same shard never count for this one.
    number: u64,
    /// Cancelled when the holding ends: reconciles still under way in it stop at their next
    /// await.
    ended: CancellationToken,
}

/// How an attempt to hold a shard's Lease ended.
enum Hold {
    /// This replica holds it.
    Ours,
    /// Another replica holds it.
    Theirs,
    /// Not written this time (a conflict), though the record still names this replica.
    Retry,
}

/// Whether an object's reconcile may start here now.
#[derive(Debug)]
pub(crate) enum Serving {
    /// Its shard is served: the reconcile is counted under the holding until the guard drops.
    Yes(InFlight),
    /// Its shard is held but the renewal is late: look again after this long (a trigger is
    /// deferred through a serving gap, never dropped).
    Later(Duration),
    /// Not this replica's: another holds the shard, or it is being given up.
    No,
}

/// The shards of one replica, shared by the Lease loop, the watch and the engine.
#[derive(Debug)]
pub(crate) struct Shards {
    pub sharding: Sharding,
    held: Mutex<BTreeMap<u32, Holding>>,
    numbers: AtomicU64,
    selector: watch::Sender<Option<String>>,
    drained: Notify,
    /// The metrics of every machine served under these shards.
    metrics: Vec<Arc<MachineMetrics>>,
}

/// One holding of one shard: what a reconcile's writes are fenced by (see [`crate::replicas::fence`]).
#[derive(Clone, Debug)]
pub(crate) struct ShardFence {
    pub(crate) shards: Arc<Shards>,
    pub(crate) shard: u32,
    pub(crate) holding: u64,
}

impl ShardFence {
    /// Whether writes made under this holding may still land: the shard is still held under
    /// it and was renewed within the renew deadline (also while it is being given up: a
    /// reconcile under way finishes its writes before the Lease goes).
    pub fn holds(&self) -> bool {
        self.shards.stands(self.shard, self.holding, false)
    }

    /// Whether work may start under this holding: it holds and is not being given up.
    pub fn serving(&self) -> bool {
        self.shards.stands(self.shard, self.holding, true)
    }
}

/// A reconcile under way on an object of a served shard; ends when dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    fence: ShardFence,
    ended: CancellationToken,
}

impl InFlight {
    /// The holding this reconcile runs under.
    pub fn fence(&self) -> &ShardFence {
        &self.fence
    }

    /// Completes when the holding ends (given up past its grace, or lost).
    pub fn ended(&self) -> WaitForCancellationFuture<'_> {
        self.ended.cancelled()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let shards = &self.fence.shards;
        if let Some(holding) = shards.lock().get_mut(&self.fence.shard)
            && holding.number == self.fence.holding
        {
            holding.in_flight = holding.in_flight.saturating_sub(1);
        }
        shards.drained.notify_waiters();
    }
}

impl Shards {
    /// The shards of `sharding`, for the machines whose `metrics` these are (one shard set
    /// for every machine of a process).
    pub fn new(sharding: Sharding, metrics: Vec<Arc<MachineMetrics>>) -> Arc<Self> {
        for machine in &metrics {
            machine.shards(sharding.shards);
        }
        Arc::new(Shards {
            sharding,
            held: Mutex::new(BTreeMap::new()),
            numbers: AtomicU64::new(1),
            selector: watch::Sender::new(None),
            drained: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Holding>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The label selector of the held shards' objects, changing with them (`None`: none).
    pub fn selector(&self) -> watch::Receiver<Option<String>> {
        self.selector.subscribe()
    }

    fn renewed_in_time(&self, holding: &Holding) -> bool {
        holding.renewed.elapsed() < self.sharding.timing.renew_deadline
    }

    fn serving(&self, holding: &Holding) -> bool {
        !holding.draining && self.renewed_in_time(holding)
    }

    /// Whether this replica serves `shard` now.
    pub fn serves_shard(&self, shard: u32) -> bool {
        self.lock().get(&shard).is_some_and(|h| self.serving(h))
    }

    /// Whether holding number `holding` of `shard` still stands: not ended, renewed within the
    /// renew deadline and, with `to_start`, not being given up (a reconcile under way in a
    /// shard being given up may still finish its writes; a new one may not start).
    pub(crate) fn stands(&self, shard: u32, holding: u64, to_start: bool) -> bool {
        self.lock().get(&shard).is_some_and(|h| {
            h.number == holding && self.renewed_in_time(h) && (!to_start || !h.draining)
        })
    }

    /// Starts a reconcile of an object with `meta` if its shard is served.
    pub fn enter(self: &Arc<Self>, meta: &ObjectMeta) -> Serving {
        self.enter_shard(self.sharding.shard_of(meta))
    }

    /// Whether a reconcile may start under `holding` now: `Ok`, or not now, with when to try
    /// again (`Some`: its renewal is late; `None`: it is being given up).
    fn admits(&self, holding: Option<&Holding>) -> Result<(), Option<Duration>> {
        match holding {
            Some(h) if h.draining => Err(None),
            Some(h) if !self.renewed_in_time(h) => Err(Some(self.sharding.timing.retry_period)),
            Some(_) => Ok(()),
            None => Err(None),
        }
    }

    fn enter_shard(self: &Arc<Self>, shard: u32) -> Serving {
        let mut held = self.lock();
        match self.admits(held.get(&shard)) {
            Ok(()) => {}
            Err(Some(after)) => return Serving::Later(after),
            Err(None) => return Serving::No,
        }
        let Some(holding) = held.get_mut(&shard) else {
            return Serving::No;
        };
        holding.in_flight += 1;
        Serving::Yes(InFlight {
            fence: ShardFence {
                shards: self.clone(),
                shard,
                holding: holding.number,
            },
            ended: holding.ended.clone(),
        })
    }

    /// Whether a reconcile of an object with `meta` that may not go on now should be tried
    /// again later (its shard's renewal is late) or left to its next change (not ours).
    pub fn later(&self, meta: &ObjectMeta) -> Option<Duration> {
        let shard = self.sharding.shard_of(meta);
        self.admits(self.lock().get(&shard)).err().flatten()
    }

    /// Publishes the held shards, draining ones included (to the watch's selector: their
    /// objects and children stay cached until the holding ends) and the served ones (to the
    /// metrics).
    fn publish(&self) {
        let (held, served): (BTreeSet<u32>, usize) = {
            let held = self.lock();
            let served = held.values().filter(|h| self.serving(h)).count();
            (held.keys().copied().collect(), served)
        };
        for machine in &self.metrics {
            machine.shards_held(served);
        }
        let selector = self.sharding.selector(&held);
        self.selector.send_if_modified(|current| {
            let changed = *current != selector;
            *current = selector;
            changed
        });
    }

    /// Ends the holding of `shard`: cancels what still runs under it and forgets it.
    fn end(&self, shard: u32) {
        if let Some(holding) = self.lock().remove(&shard) {
            holding.ended.cancel();
        }
    }

    /// Waits at most `patience` until no reconcile runs under the holding of `shard`.
    async fn drained(&self, shard: u32, patience: Duration) -> bool {
        let drained = async {
            loop {
                let notified = self.drained.notified();
                if self.lock().get(&shard).is_none_or(|h| h.in_flight == 0) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(patience, drained).await.is_ok()
    }

    /// Stops serving `shard`, waits for its reconciles in flight (at most `grace`), cancels
    /// those still under way and waits for them to stop (at most `grace` again), then releases
    /// its Lease and forgets it. Reconciles that do not stop (a handler blocking its thread)
    /// keep the Lease: it is not released but left to expire.
    async fn give_up(&self, api: &Api<Lease>, shard: u32, grace: Duration) {
        let Some(holding) = self.lock().get_mut(&shard).map(|h| {
            h.draining = true;
            h.number
        }) else {
            return;
        };
        // Still held (and watched) while it drains; no longer served.
        self.publish();
        if !self.drained(shard, grace).await {
            let cancelled = self.lock().get(&shard).map(|h| {
                h.ended.cancel();
                h.in_flight
            });
            tracing::warn!(
                shard,
                ?grace,
                reconciles = cancelled,
                "reconciles still in flight after the grace period; cancelled them"
            );
            if !self.drained(shard, grace).await {
                tracing::error!(
                    shard,
                    "cancelled reconciles have not stopped; the shard's Lease is left to expire"
                );
                self.end(shard);
                self.publish();
                return;
            }
        }
        // Nothing runs under the holding any more: another replica may take the shard.
        let lock = self.sharding.timing.lock(api, self.sharding.lease(shard));
        match tokio::time::timeout(self.request_timeout(), lock.release()).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(shard, %err, "could not release the shard's Lease; it expires");
            }
            Err(_) => tracing::warn!(shard, "releasing the shard's Lease timed out; it expires"),
        }
        self.end(shard);
        self.publish();
        tracing::info!(shard, holding, "released the shard");
    }

    /// How long one request of the Lease loop may take: half the renew deadline, so a hung
    /// request never keeps the other shards' renewals past theirs.
    fn request_timeout(&self) -> Duration {
        self.sharding.timing.renew_deadline / 2
    }

    /// Holds this replica's fair share of the shards until `stop`, then gives them all up.
    pub async fn run(
        self: Arc<Self>,
        client: Client,
        health: Health,
        stop: impl Future<Output = ()>,
    ) {
        let sharding = &self.sharding;
        let api = Api::<Lease>::namespaced(client, &sharding.namespace);
        let member = self.sharding.timing.lock(
            &api,
            format!(
                "{}{}",
                sharding.member_prefix(),
                dns_label(&sharding.timing.identity, 63)
            ),
        );
        let grace = sharding
            .timing
            .duration
            .saturating_sub(sharding.timing.renew_deadline)
            / 2;
        let mut observed: HashMap<String, Observed> = HashMap::new();
        // Shards being given up drain beside the loop: a drain waits up to twice `grace` for
        // reconciles in flight, and the loop must go on renewing the shards it keeps.
        let mut draining = tokio::task::JoinSet::new();
        tokio::pin!(stop);
        loop {
            let release = self.round(&api, &member, &mut observed, &health).await;
            for shard in release {
                let (this, api) = (self.clone(), api.clone());
                draining.spawn(async move { this.give_up(&api, shard, grace).await });
            }
            while draining.try_join_next().is_some() {}
            tokio::select! {
                () = &mut stop => break,
                () = sharding.timing.pause() => {}
            }
        }
        let held: Vec<u32> = self
            .lock()
            .iter()
            .filter(|(_, h)| !h.draining)
            .map(|(s, _)| *s)
            .collect();
        self.give_up_all(&api, held, grace).await;
        while draining.join_next().await.is_some() {}
        if let Err(err) = api.delete(&member.name, &DeleteParams::default()).await {
            tracing::debug!(%err, "could not delete the membership Lease");
        }
    }

    /// Gives up `shards` at once: their grace periods run side by side.
    async fn give_up_all(&self, api: &Api<Lease>, shards: Vec<u32>, grace: Duration) {
        futures::future::join_all(
            shards
                .into_iter()
                .map(|shard| self.give_up(api, shard, grace)),
        )
        .await;
    }

    /// One round: renew membership and the held shards, take a fair share; the excess is
    /// marked draining (no reconcile starts in it any more) and returned, to be given up
    /// beside the loop. Shards already draining are neither renewed nor counted as held.
    async fn round(
        &self,
        api: &Api<Lease>,
        member: &LeaseLock,
        observed: &mut HashMap<String, Observed>,
        health: &Health,
    ) -> Vec<u32> {
        let sharding = &self.sharding;
        let timeout = self.request_timeout();
        let listed = tokio::time::timeout(timeout, api.list(&ListParams::default())).await;
        let leases = match listed {
            Ok(Ok(list)) => list.items,
            Ok(Err(err)) => {
                if !health.refused(&err) {
                    tracing::warn!(%err, "cannot read the shards' Leases");
                }
                self.expire();
                return Vec::new();
            }
            Err(_) => {
                tracing::warn!(?timeout, "reading the shards' Leases timed out");
                self.expire();
                return Vec::new();
            }
        };
        let by_name: HashMap<String, Lease> =
            leases.into_iter().map(|l| (l.name_any(), l)).collect();
        let ours = by_name.get(&member.name).cloned();
        let mut own = observed.remove(&member.name).unwrap_or_default();
        match tokio::time::timeout(timeout, member.acquire_or_renew(ours, &mut own)).await {
            Ok(Ok(_)) => {}
            Ok(Err(err)) if err.refused(health) => {}
            Ok(Err(err)) => tracing::warn!(%err, "cannot renew the membership Lease"),
            Err(_) => tracing::warn!(?timeout, "renewing the membership Lease timed out"),
        }
        observed.insert(member.name.clone(), own);
        let prefix = sharding.member_prefix();
        let mut members = 0;
        let mut gone = Vec::new();
        for (name, lease) in by_name.iter().filter(|(name, _)| name.starts_with(&prefix)) {
            let seen = observed.entry(name.clone()).or_default();
            if *name != member.name && seen.free(Some(lease), "", sharding.timing.duration) {
                gone.push(name.clone());
            } else {
                members += 1;
            }
        }
        // Replicas that left without a word (killed): their membership expired; tidy up.
        for name in gone {
            observed.remove(&name);
            let params = DeleteParams::default();
            let deleted = tokio::time::timeout(timeout, api.delete(&name, &params)).await;
            if let Ok(Err(err)) = deleted {
                tracing::debug!(%err, lease = name, "could not delete an expired membership");
            }
        }
        let share = fair_share(sharding.shards, members);

        let held: Vec<(u32, Instant)> = self
            .lock()
            .iter()
            .filter(|(_, h)| !h.draining)
            .map(|(s, h)| (*s, h.renewed))
            .collect();
        for (shard, renewed) in held {
            // Each renewal may take what is left of its own deadline, as client-go's.
            let left = sharding
                .timing
                .renew_deadline
                .saturating_sub(renewed.elapsed());
            let started = Instant::now();
            match tokio::time::timeout(left, self.hold(api, shard, &by_name, observed)).await {
                Ok(Ok(Hold::Ours)) => self.renewed(shard, started),
                Ok(Ok(Hold::Theirs)) => {
                    tracing::warn!(shard, "another replica holds the shard");
                    self.end(shard);
                }
                Ok(Ok(Hold::Retry)) => {}
                Ok(Err(err)) if err.refused(health) => {}
                Ok(Err(err)) => tracing::warn!(shard, %err, "cannot renew the shard's Lease"),
                Err(_) => tracing::warn!(shard, "renewing the shard's Lease timed out"),
            }
        }
        self.expire();

        let (held, draining): (BTreeSet<u32>, BTreeSet<u32>) = {
            let holdings = self.lock();
            let draining = holdings.iter().filter(|(_, h)| h.draining);
            let draining: BTreeSet<u32> = draining.map(|(s, _)| *s).collect();
            let held = holdings.keys().copied().filter(|s| !draining.contains(s));
            (held.collect(), draining)
        };
        let free: BTreeSet<u32> = (0..sharding.shards)
            .filter(|shard| !held.contains(shard) && !draining.contains(shard))
            .filter(|shard| {
                let name = sharding.lease(*shard);
                let lease = by_name.get(&name);
                observed.entry(name).or_default().free(
                    lease,
                    &sharding.timing.identity,
                    sharding.timing.duration,
                )
            })
            .collect();
        let (acquire, release) = rebalance(&held, &free, share);
        for shard in acquire {
            let started = Instant::now();
            match tokio::time::timeout(timeout, self.hold(api, shard, &by_name, observed)).await {
                Ok(Ok(Hold::Ours)) => {
                    let number = self.numbers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(shard, holding = number, "acquired the shard");
                    let holding = Holding {
                        renewed: started,
                        draining: false,
                        in_flight: 0,
                        number,
                        ended: CancellationToken::new(),
                    };
                    self.lock().insert(shard, holding);
                }
                Ok(Ok(_)) => {}
                Ok(Err(err)) => tracing::warn!(shard, %err, "cannot acquire the shard's Lease"),
                Err(_) => tracing::warn!(shard, "acquiring the shard's Lease timed out"),
            }
        }
        {
            let mut holdings = self.lock();
            for shard in &release {
                if let Some(holding) = holdings.get_mut(shard) {
                    holding.draining = true;
                }
            }
        }
        self.publish();
        release.into_iter().collect()
    }

    /// Acquires or renews the Lease of `shard` over its copy in `leases` (as just listed).
    async fn hold(
        &self,
        api: &Api<Lease>,
        shard: u32,
        leases: &HashMap<String, Lease>,
        observed: &mut HashMap<String, Observed>,
    ) -> Result<Hold, LeaseError> {
        let name = self.sharding.lease(shard);
        let current = leases.get(&name).cloned();
        let seen = observed.entry(name.clone()).or_default();
        let lock = self.sharding.timing.lock(api, name);
        Ok(match lock.acquire_or_renew(current, seen).await? {
            true => Hold::Ours,
            // Refused while the record still names us: a conflict, retried next round.
            false if seen.held_by(&self.sharding.timing.identity) => Hold::Retry,
            false => Hold::Theirs,
        })
    }

    fn renewed(&self, shard: u32, at: Instant) {
        if let Some(holding) = self.lock().get_mut(&shard) {
            holding.renewed = at;
        }
    }

    /// Ends the holdings not renewed within the renew deadline (they stopped serving then):
    /// what still runs under them is cancelled at once, since another replica may take the
    /// shard once the Lease's duration has passed.
    fn expire(&self) {
        let deadline = self.sharding.timing.renew_deadline;
        let late: Vec<u32> = self
            .lock()
            .iter()
            .filter(|(_, h)| !self.renewed_in_time(h))
            .map(|(s, _)| *s)
            .collect();
        for shard in late {
            tracing::warn!(
                shard,
                ?deadline,
                "could not renew the shard within the renew deadline; stopped serving it"
            );
            self.end(shard);
        }
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards() -> Arc<Shards> {
        let sharding = Sharding::new("test", "ns", 4).duration(Duration::from_secs(4));
        Shards::new(sharding, vec![Arc::new(MachineMetrics::detached())])
    }

    fn hold(shards: &Shards, shard: u32, renewed: Instant) -> u64 {
        let number = shards.numbers.fetch_add(1, Ordering::Relaxed);
        let holding = Holding {
            renewed,
            draining: false,
            in_flight: 0,
            number,
            ended: CancellationToken::new(),
        };
        shards.lock().insert(shard, holding);
        number
    }

    #[tokio::test]
    async fn a_late_renewal_defers_a_reconcile_and_a_shard_given_up_refuses_it() {
        let shards = shards();
        let deadline = shards.sharding.timing.renew_deadline;
        let late = Instant::now()
            .checked_sub(deadline * 2)
            .expect("a past instant");
        hold(&shards, 0, Instant::now());
        hold(&shards, 1, late);
        assert!(matches!(shards.enter_shard(0), Serving::Yes(_)));
        // Held but not renewed in time: try again in a retry period, do not drop the trigger.
        assert!(matches!(
            shards.enter_shard(1),
            Serving::Later(after) if after == shards.sharding.timing.retry_period
        ));
        assert!(matches!(shards.enter_shard(2), Serving::No), "not ours");
        shards.lock().get_mut(&0).expect("held").draining = true;
        assert!(
            matches!(shards.enter_shard(0), Serving::No),
            "being given up"
        );
    }

    /// An object of `shard` (found by trying uids).
    fn object_of(shards: &Shards, shard: u32) -> ObjectMeta {
        (0..)
            .map(|n| ObjectMeta {
                uid: Some(format!("uid-{n}")),
                ..ObjectMeta::default()
            })
            .find(|meta| shards.sharding.shard_of(meta) == shard)
            .expect("some uid falls in every shard")
    }

    #[tokio::test]
    async fn a_reconcile_stopped_by_a_late_renewal_is_tried_again_and_one_not_ours_waits() {
        // What a fenced write returns as its requeue (`Engine::unserved`): a step whose write
        // found the shard's renewal late is tried again a retry period later (it used to wait
        // for the object's next change, losing the step's requeue or timeout).
        let shards = shards();
        let late = Instant::now()
            .checked_sub(shards.sharding.timing.renew_deadline * 2)
            .expect("a past instant");
        hold(&shards, 0, Instant::now());
        hold(&shards, 1, late);
        let retry = shards.sharding.timing.retry_period;
        assert_eq!(shards.later(&object_of(&shards, 1)), Some(retry));
        assert_eq!(shards.later(&object_of(&shards, 2)), None, "not ours");
        shards.lock().get_mut(&1).expect("held").draining = true;
        assert_eq!(
            shards.later(&object_of(&shards, 1)),
            None,
            "being given up: its next holder lists it"
        );
    }

    #[tokio::test]
    async fn a_guard_of_an_earlier_holding_never_counts_against_a_new_one() {
        let shards = shards();
        let first = hold(&shards, 0, Instant::now());
        let Serving::Yes(old) = shards.enter_shard(0) else {
            panic!("served");
        };
        assert!(old.fence().holds());
        // The shard is lost and taken again: a new holding, with a reconcile of its own.
        shards.end(0);
        assert!(!old.fence().holds(), "the old holding's writes are fenced");
        let second = hold(&shards, 0, Instant::now());
        assert_ne!(first, second);
        let Serving::Yes(new) = shards.enter_shard(0) else {
            panic!("served");
        };
        drop(old);
        assert_eq!(
            shards.lock()[&0].in_flight,
            1,
            "the new reconcile still counts"
        );
        assert!(new.fence().serving());
        drop(new);
        assert_eq!(shards.lock()[&0].in_flight, 0);
    }

    #[tokio::test]
    async fn ending_a_holding_cancels_what_runs_under_it() {
        let shards = shards();
        hold(&shards, 0, Instant::now());
        let Serving::Yes(in_flight) = shards.enter_shard(0) else {
            panic!("served");
        };
        shards.end(0);
        tokio::time::timeout(Duration::from_millis(100), in_flight.ended())
            .await
            .expect("cancelled at once");
    }
}
