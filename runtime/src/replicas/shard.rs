//! Sharding: which shard an object belongs to, and how many shards a replica should hold.
//! Pure; the Leases and the label writes are in `shards.rs` and `shard_label.rs`.
//!
//! Objects fall into a fixed number of shards by a stable hash (FNV-1a, the same on every
//! replica and every version) of their UID, or of their namespace so that one tenant's objects
//! stay together. The shard is written once into a label on the object, so that each replica
//! watches only the shards it holds (a label selector) and its memory splits with the work.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::api::ObjectMeta;

use crate::replicas::lease::Timing;

/// What decides an object's shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ShardKey {
    /// The object's UID: objects spread evenly over the shards (the default).
    #[default]
    Uid,
    /// The object's namespace: all objects of a namespace (a tenant) in one shard.
    Namespace,
}

/// Spreads the objects over replicas: each replica reconciles only the objects of the shards
/// whose Leases it holds, and watches only those (see [`crate::Operator::replicas`] with [`crate::replicas::Sharding`]).
///
/// ```no_run
/// let sharding = kube_fsm::replicas::Sharding::new("database-operator", "operators", 12)
///     .identity(std::env::var("POD_NAME").unwrap_or_else(|_| "local".into()))
///     .key(kube_fsm::replicas::ShardKey::Namespace);
/// # let _ = sharding;
/// ```
#[derive(Clone, Debug)]
pub struct Sharding {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) shards: u32,
    pub(crate) key: ShardKey,
    pub(crate) timing: Timing,
}

impl Sharding {
    /// `shards` shards (1 to 1 000; fixed for the life of the objects: changing it moves
    /// objects to other shards) held through the Leases `{name}-shard-{i}` in `namespace`.
    /// `name` also names the label `shard.kube-fsm.io/{name}` (at most 63 characters).
    /// Defaults as [`crate::replicas::LeaderElection`]'s: identity = host name plus a random suffix,
    /// Lease duration 15 s, renew deadline 10 s, retry period 2 s.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, shards: u32) -> Self {
        Sharding {
            name: name.into(),
            namespace: namespace.into(),
            shards: shards.clamp(1, 1000),
            key: ShardKey::Uid,
            timing: Timing::default(),
        }
    }

    /// What decides an object's shard (default [`ShardKey::Uid`]).
    #[must_use]
    pub fn key(mut self, key: ShardKey) -> Self {
        self.key = key;
        self
    }

    /// This replica's name in the Leases (unique among the replicas; a Pod name fits).
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.timing.identity = identity.into();
        self
    }

    /// How long a shard's Lease stays valid after its last renewal: a crashed replica's
    /// shards are taken over after at most this long (whole seconds, at least 2). The renew
    /// deadline and retry period shrink to fit when needed (at most 2/3 and 1/5 of it).
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.timing.set_duration(duration);
        self
    }

    /// Stop serving a shard when no renewal of its Lease succeeded for this long (less than
    /// the duration; at least twice the retry period).
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.timing.set_renew_deadline(deadline);
        self
    }

    /// How often the Leases are renewed and free shards looked for (at least 100 ms).
    #[must_use]
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.timing.set_retry_period(period);
        self
    }

    /// This replica's identity.
    pub fn holder_identity(&self) -> &str {
        &self.timing.identity
    }

    /// The label holding an object's shard.
    pub fn label(&self) -> String {
        format!("shard.kube-fsm.io/{}", self.name)
    }

    /// The shard of an object with `meta`.
    pub fn shard_of(&self, meta: &ObjectMeta) -> u32 {
        let key = match self.key {
            ShardKey::Uid => meta.uid.as_deref(),
            ShardKey::Namespace => meta.namespace.as_deref(),
        };
        shard_of(key.unwrap_or_default(), self.shards)
    }

    /// The shard an object's label names, if it has a valid one.
    pub(crate) fn labelled(&self, meta: &ObjectMeta) -> Option<u32> {
        meta.labels
            .as_ref()?
            .get(&self.label())?
            .parse()
            .ok()
            .filter(|shard| *shard < self.shards)
    }

    /// The shard of a larger shard count that an object's label still names, if it does.
    pub(crate) fn stale(&self, meta: &ObjectMeta) -> Option<u32> {
        meta.labels
            .as_ref()?
            .get(&self.label())?
            .parse()
            .ok()
            .filter(|shard| *shard >= self.shards)
    }

    /// The Lease of shard `shard`.
    pub(crate) fn lease(&self, shard: u32) -> String {
        format!("{}-shard-{shard}", self.name)
    }

    /// The prefix of the replicas' membership Leases.
    pub(crate) fn member_prefix(&self) -> String {
        format!("{}-member-", self.name)
    }

    /// The label selector of the objects in `held` (none when nothing is held).
    /// The label selector of the objects without a valid shard label: none, or a value that
    /// is not a shard of this count (left by a larger shard count).
    pub(crate) fn unlabelled_selector(&self) -> String {
        let shards: Vec<String> = (0..self.shards).map(|s| s.to_string()).collect();
        format!("{} notin ({})", self.label(), shards.join(","))
    }

    pub(crate) fn selector(&self, held: &BTreeSet<u32>) -> Option<String> {
        if held.is_empty() {
            return None;
        }
        let shards: Vec<String> = held.iter().map(u32::to_string).collect();
        Some(format!("{} in ({})", self.label(), shards.join(",")))
    }
}

/// FNV-1a (64 bit) of `key`, modulo `shards`: stable across processes, platforms and versions.
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(shards.max(1))).unwrap_or(0)
}

/// How many shards each of `members` replicas should hold: the shards divided evenly, rounded
/// up (so that all are held even when the division is not exact).
pub fn fair_share(shards: u32, members: usize) -> usize {
    let members = members.max(1);
    (shards as usize).div_ceil(members)
}

/// What a replica holding `held` does when `free` shards are to be had and its fair share is
/// `share`: the shards to try to acquire (lowest first) and those to give up (highest first).
pub fn rebalance(held: &BTreeSet<u32>, free: &BTreeSet<u32>, share: usize) -> (Vec<u32>, Vec<u32>) {
    let acquire = free
        .iter()
        .filter(|s| !held.contains(s))
        .take(share.saturating_sub(held.len()))
        .copied()
        .collect();
    let release = held
        .iter()
        .rev()
        .take(held.len().saturating_sub(share))
        .copied()
        .collect();
    (acquire, release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv1a_and_spreads_evenly() {
        // FNV-1a 64 test vectors: "" and "a".
        assert_eq!(
            shard_of("", u32::MAX),
            (0xcbf2_9ce4_8422_2325u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            shard_of("a", 1 << 31),
            (0xaf63_dc4c_8601_ec8c_u64 % (1 << 31)) as u32
        );
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[shard_of(&format!("6c1f3a9e-{i:04}-4d0e-9c55-0242ac120002"), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|c| (850..=1150).contains(c)),
            "{counts:?}"
        );
    }

    #[test]
    fn the_shard_comes_from_the_uid_or_the_namespace_and_the_label_must_be_in_range() {
        let sharding = Sharding::new("db", "ops", 4);
        let meta = |ns: &str, uid: &str, label: Option<&str>| ObjectMeta {
            namespace: Some(ns.into()),
            uid: Some(uid.into()),
            labels: label.map(|l| [("shard.kube-fsm.io/db".to_owned(), l.to_owned())].into()),
            ..ObjectMeta::default()
        };
        assert_eq!(sharding.shard_of(&meta("a", "u1", None)), shard_of("u1", 4));
        let by_namespace = sharding.clone().key(ShardKey::Namespace);
        assert_eq!(
            by_namespace.shard_of(&meta("a", "u1", None)),
            by_namespace.shard_of(&meta("a", "u2", None))
        );
        assert_eq!(sharding.labelled(&meta("a", "u1", Some("3"))), Some(3));
        assert_eq!(sharding.labelled(&meta("a", "u1", Some("4"))), None);
        assert_eq!(sharding.labelled(&meta("a", "u1", Some("x"))), None);
        assert_eq!(
            sharding.selector(&[0, 3].into()).as_deref(),
            Some("shard.kube-fsm.io/db in (0,3)")
        );
        assert_eq!(sharding.selector(&BTreeSet::new()), None);
    }

    #[test]
    fn replicas_take_their_fair_share_and_give_up_the_excess() {
        assert_eq!(fair_share(12, 1), 12);
        assert_eq!(fair_share(12, 3), 4);
        assert_eq!(fair_share(12, 5), 3);
        assert_eq!(fair_share(12, 0), 12);
        let held: BTreeSet<u32> = [0, 1, 2, 3, 4, 5].into();
        let (acquire, release) = rebalance(&held, &[6, 7].into(), 4);
        assert!(acquire.is_empty());
        assert_eq!(release, vec![5, 4]);
        let (acquire, release) = rebalance(&[0].into(), &[3, 6, 9].into(), 3);
        assert_eq!(acquire, vec![3, 6]);
        assert!(release.is_empty());
    }
}
