//! The holding a reconcile runs under. With sharding, each reconcile starts under one holding
//! of its object's shard (see [`crate::replicas::shards`]), and every write it makes — the engine's
//! status and metadata patches and Events, the step's applies, deletes and Events — first
//! checks that this holding still stands, right before the request (after any wait for a
//! slot), so nothing is written for a shard this replica gave up or lost. The holding travels
//! with the reconcile's future (a task-local, as a tracing span does), so the step's methods
//! need no extra argument. Without sharding there is none, and every check passes.
//!
//! What this cannot fence: requests a handler sends through its own client. Those stop when
//! the holding ends and the reconcile is cancelled (see [`crate::replicas::shards`]).

use std::future::Future;

use crate::replicas::shards::Fence;

tokio::task_local! {
    static CURRENT: Fence;
}

/// Runs `work` under `fence` (or under none, without sharding).
pub(crate) async fn under<F: Future>(fence: Option<Fence>, work: F) -> F::Output {
    match fence {
        Some(fence) => CURRENT.scope(fence, work).await,
        None => work.await,
    }
}

/// Whether the current reconcile's writes may land (see [`Fence::holds`]); always outside a
/// sharded reconcile.
pub(crate) fn open() -> bool {
    CURRENT.try_with(Fence::holds).unwrap_or(true)
}

/// Whether the current reconcile may go on with new work after a wait (see
/// [`Fence::serving`]); always outside a sharded reconcile.
pub(crate) fn serving() -> bool {
    CURRENT.try_with(Fence::serving).unwrap_or(true)
}
