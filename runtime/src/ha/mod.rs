//! Several replicas, one writer per object: Leases, leader election, shards and their
//! holdings, the fence every write checks, and the shard label on objects and children.

pub(crate) mod fence;
pub(crate) mod leader;
pub(crate) mod lease;
pub(crate) mod shard;
pub(crate) mod shard_children;
pub(crate) mod shard_label;
pub(crate) mod shards;
