//! The shards this replica holds: one Lease per shard, held with leader election's timing
//! (see [`crate::leader`]), and a membership Lease per replica so that each takes its fair
//! share. A replica serves a shard (starts reconciles and writes for its objects) only while
//! its last successful renewal is younger than the renew deadline; another replica takes the
//! shard only once its Lease is released or has not changed for its duration on that
//! replica's clock. A shard given up in a rebalance stops serving first, waits for its
//! reconciles in flight (at most half the margin between the deadline and the duration), and
//! only then releases its Lease: at no time do two replicas reconcile one object.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{DeleteParams, ListParams, ObjectMeta};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::lease::{LeaseError, LeaseLock, Observed};
use crate::metrics::MachineMetrics;
use crate::shard::{Sharding, fair_share, rebalance};

/// A shard this replica holds.
#[derive(Debug)]
struct Holding {
    /// When the last successful renewal started.
    renewed: Instant,
    /// Given up: no new reconcile starts; the Lease goes once those in flight are done.
    draining: bool,
    in_flight: usize,
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

/// The shards of one replica, shared by the Lease loop, the watch and the engine.
#[derive(Debug)]
pub(crate) struct Shards {
    pub sharding: Sharding,
    held: Mutex<BTreeMap<u32, Holding>>,
    selector: watch::Sender<Option<String>>,
    drained: Notify,
    metrics: Arc<MachineMetrics>,
}

/// A reconcile under way on an object of a served shard; ends when dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    shards: Arc<Shards>,
    shard: u32,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(holding) = self.shards.lock().get_mut(&self.shard) {
            holding.in_flight = holding.in_flight.saturating_sub(1);
        }
        self.shards.drained.notify_waiters();
    }
}

impl Shards {
    pub fn new(sharding: Sharding, metrics: Arc<MachineMetrics>) -> Arc<Self> {
        Arc::new(Shards {
            sharding,
            held: Mutex::new(BTreeMap::new()),
            selector: watch::Sender::new(None),
            drained: Notify::new(),
            metrics,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Holding>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The label selector of the served shards' objects, changing with them (`None`: none).
    pub fn selector(&self) -> watch::Receiver<Option<String>> {
        self.selector.subscribe()
    }

    fn serving(&self, holding: &Holding) -> bool {
        !holding.draining && holding.renewed.elapsed() < self.sharding.timing.renew_deadline
    }

    /// Whether this replica may reconcile and write an object with `meta` now.
    pub fn serves(&self, meta: &ObjectMeta) -> bool {
        self.serves_shard(self.sharding.shard_of(meta))
    }

    /// Whether this replica serves `shard` now.
    pub fn serves_shard(&self, shard: u32) -> bool {
        self.lock().get(&shard).is_some_and(|h| self.serving(h))
    }

    /// Starts a reconcile of an object with `meta` if its shard is served.
    pub fn enter(self: &Arc<Self>, meta: &ObjectMeta) -> Option<InFlight> {
        let shard = self.sharding.shard_of(meta);
        let mut held = self.lock();
        let holding = held.get_mut(&shard).filter(|h| self.serving(h))?;
        holding.in_flight += 1;
        Some(InFlight {
            shards: self.clone(),
            shard,
        })
    }

    /// The served shards.
    fn served(&self) -> BTreeSet<u32> {
        self.lock()
            .iter()
            .filter(|(_, h)| self.serving(h))
            .map(|(s, _)| *s)
            .collect()
    }

    /// Publishes the served shards (to the watch's selector and the metrics).
    fn publish(&self) {
        let served = self.served();
        self.metrics.shards_held(served.len());
        let selector = self.sharding.selector(&served);
        self.selector.send_if_modified(|current| {
            let changed = *current != selector;
            *current = selector;
            changed
        });
    }

    /// Stops serving `shard`, waits for its reconciles in flight (at most `grace`), releases
    /// its Lease and forgets it.
    async fn give_up(&self, api: &Api<Lease>, shard: u32, grace: Duration) {
        if let Some(holding) = self.lock().get_mut(&shard) {
            holding.draining = true;
        }
        self.publish();
        let drained = async {
            loop {
                let notified = self.drained.notified();
                if self.lock().get(&shard).is_none_or(|h| h.in_flight == 0) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                shard,
                ?grace,
                "reconciles still in flight; releasing the shard"
            );
        }
        let lock = self.sharding.timing.lock(api, self.sharding.lease(shard));
        if let Err(err) = lock.release().await {
            tracing::warn!(shard, %err, "could not release the shard's Lease; it expires");
        }
        self.lock().remove(&shard);
        tracing::info!(shard, "released the shard");
    }

    /// Holds this replica's fair share of the shards until `stop`, then gives them all up.
    pub async fn run(self: Arc<Self>, client: Client, stop: impl Future<Output = ()>) {
        let sharding = &self.sharding;
        let api = Api::<Lease>::namespaced(client, &sharding.namespace);
        let member = self.sharding.timing.lock(
            &api,
            format!(
                "{}{}",
                sharding.member_prefix(),
                dns_label(&sharding.timing.identity)
            ),
        );
        let grace = sharding
            .timing
            .duration
            .saturating_sub(sharding.timing.renew_deadline)
            / 2;
        let mut observed: HashMap<String, Observed> = HashMap::new();
        tokio::pin!(stop);
        loop {
            self.round(&api, &member, &mut observed, grace).await;
            tokio::select! {
                () = &mut stop => break,
                () = sharding.timing.pause() => {}
            }
        }
        let held: Vec<u32> = self.lock().keys().copied().collect();
        for shard in held {
            self.give_up(&api, shard, grace).await;
        }
        if let Err(err) = api.delete(&member.name, &DeleteParams::default()).await {
            tracing::debug!(%err, "could not delete the membership Lease");
        }
    }

    /// One round: renew membership and held shards, take a fair share, give up the excess.
    async fn round(
        &self,
        api: &Api<Lease>,
        member: &LeaseLock,
        observed: &mut HashMap<String, Observed>,
        grace: Duration,
    ) {
        let sharding = &self.sharding;
        let started = Instant::now();
        let leases = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(err) => {
                tracing::warn!(%err, "cannot read the shards' Leases");
                self.expire();
                return;
            }
        };
        let by_name: HashMap<String, Lease> =
            leases.into_iter().map(|l| (l.name_any(), l)).collect();
        let ours = by_name.get(&member.name).cloned();
        let mut own = observed.remove(&member.name).unwrap_or_default();
        if let Err(err) = member.acquire_or_renew(ours, &mut own).await {
            tracing::warn!(%err, "cannot renew the membership Lease");
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
            if let Err(err) = api.delete(&name, &DeleteParams::default()).await {
                tracing::debug!(%err, lease = name, "could not delete an expired membership");
            }
        }
        let share = fair_share(sharding.shards, members);

        let held: Vec<u32> = self.lock().keys().copied().collect();
        for shard in held {
            match self.hold(api, shard, &by_name, observed).await {
                Ok(Hold::Ours) => self.renewed(shard, started),
                Ok(Hold::Theirs) => {
                    tracing::warn!(shard, "another replica holds the shard");
                    self.lock().remove(&shard);
                }
                Ok(Hold::Retry) => {}
                Err(err) => tracing::warn!(shard, %err, "cannot renew the shard's Lease"),
            }
        }
        self.expire();

        let held: BTreeSet<u32> = self.lock().keys().copied().collect();
        let free: BTreeSet<u32> = (0..sharding.shards)
            .filter(|shard| !held.contains(shard))
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
            match self.hold(api, shard, &by_name, observed).await {
                Ok(Hold::Ours) => {
                    tracing::info!(shard, "acquired the shard");
                    let holding = Holding {
                        renewed: started,
                        draining: false,
                        in_flight: 0,
                    };
                    self.lock().insert(shard, holding);
                }
                Ok(_) => {}
                Err(err) => tracing::warn!(shard, %err, "cannot acquire the shard's Lease"),
            }
        }
        self.publish();
        for shard in release {
            self.give_up(api, shard, grace).await;
        }
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

    /// Forgets the shards not renewed within the renew deadline (they stopped serving then).
    fn expire(&self) {
        let deadline = self.sharding.timing.renew_deadline;
        self.lock().retain(|shard, holding| {
            let alive = holding.renewed.elapsed() < deadline;
            if !alive {
                tracing::warn!(
                    shard,
                    ?deadline,
                    "could not renew the shard within the renew deadline; stopped serving it"
                );
            }
            alive
        });
        self.publish();
    }
}

/// `identity` as a Lease name part: lower case, `[a-z0-9-]`, at most 63 characters.
fn dns_label(identity: &str) -> String {
    let label: String = identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    label.trim_matches('-').to_owned()
}
