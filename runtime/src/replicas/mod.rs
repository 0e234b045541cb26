//! Several replicas, one writer per object: how they share the work ([`Replicas`]), leader
//! election ([`LeaderElection`]), sharding ([`Sharding`], [`ShardKey`], [`shard_of`]); inside
//! the crate, Leases, leadership, shards and their holdings, the fence every write checks, and
//! the shard label on objects and children.

use std::sync::Arc;

pub(crate) mod fence;
pub(crate) mod label;
pub(crate) mod leader;
pub(crate) mod leading;
pub(crate) mod lease;
pub(crate) mod shard;
pub(crate) mod shard_children;
pub(crate) mod shard_label;
pub(crate) mod shards;
pub(crate) mod turn;

pub use label::dns_label;
pub use leader::LeaderElection;
pub use shard::{ShardKey, Sharding, shard_of};

/// How an operator's replicas share the work (see [`crate::Operator::replicas`]).
#[derive(Clone, Debug, Default)]
pub enum Replicas {
    /// One replica reconciles every object (the default).
    #[default]
    One,
    /// Only the replica holding the Lease reconciles; the others wait. `run` returns when
    /// leadership is lost, so exit the process and let Kubernetes restart it, as
    /// controller-runtime's manager does.
    LeaderElection(LeaderElection),
    /// Each replica reconciles and watches only the objects of the shards it holds. Each
    /// object gets its shard label once (one metadata patch), written by the replica holding
    /// shard 0. At most one replica reconciles an object at any time; a crashed replica's
    /// shards are taken over after the Lease duration; replicas joining or leaving rebalance
    /// the shards.
    Sharded(Sharding),
}

impl From<LeaderElection> for Replicas {
    fn from(election: LeaderElection) -> Self {
        Replicas::LeaderElection(election)
    }
}

impl From<Sharding> for Replicas {
    fn from(sharding: Sharding) -> Self {
        Replicas::Sharded(sharding)
    }
}

/// What this process holds for its machines while they run: everything (one replica), the
/// Lease (leader election), or the shards it serves.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    /// One replica: every object, for as long as the process runs.
    Everything,
    /// Every object while this leadership stands.
    Lease(leading::Leading),
    /// The objects of the shards served by this shard set.
    Shards(Arc<shards::Shards>),
}

impl Held {
    /// The shard set, with sharding.
    pub(crate) fn shards(&self) -> Option<&Arc<shards::Shards>> {
        match self {
            Held::Shards(shards) => Some(shards),
            _ => None,
        }
    }
}
