//! What a reconcile's writes are fenced by. Under leader election, this replica's leadership
//! (see [`crate::replicas::leading`]); with sharding, the one holding of its object's shard it
//! started under (see [`crate::replicas::shards`]). Every write a reconcile makes — the
//! engine's status and metadata patches, finalizer changes and Events, the step's applies,
//! deletes and Events — is sent through [`send`], which checks that its fence still holds
//! before the request starts and again each time the request is polled until it is answered
//! (after a wait for a connection or a lock, or for a process frozen in between), so nothing is
//! written by a replica that lost its Lease, was frozen past its renew deadline, or gave its
//! shard up. What remains is the instant between the last check and the bytes leaving the
//! socket: no client can close that one (client-go cannot either); the status writes are
//! locked on the resourceVersion besides. The fence travels with the
//! reconcile's future (a task-local, as a tracing span does), so the step's methods need no
//! extra argument. With one replica there is none, and every check passes.
//!
//! What this cannot fence: requests a handler sends through its own client. Those stop when
//! the leadership or the holding ends and the reconcile is cancelled at its next await.

use std::future::Future;

use crate::replicas::leading::Leading;
use crate::replicas::shards::ShardFence;

/// What the current reconcile's writes are fenced by.
#[derive(Clone, Debug)]
pub(crate) enum Fence {
    /// This replica's leadership (leader election).
    Lease(Leading),
    /// One holding of the object's shard (sharding).
    Shard(ShardFence),
}

impl Fence {
    /// Whether writes made under this fence may still land.
    fn holds(&self) -> bool {
        match self {
            Fence::Lease(leading) => leading.holds(),
            Fence::Shard(shard) => shard.holds(),
        }
    }

    /// Whether new work may start under this fence (a shard being given up lets the writes of
    /// reconciles under way land, but starts nothing).
    fn serving(&self) -> bool {
        match self {
            Fence::Lease(leading) => leading.holds(),
            Fence::Shard(shard) => shard.serving(),
        }
    }
}

tokio::task_local! {
    static CURRENT: Fence;
}

/// Runs `work` under `fence`.
pub(crate) async fn under<F: Future>(fence: Fence, work: F) -> F::Output {
    CURRENT.scope(fence, work).await
}

/// Sends the write `request` while the current reconcile's fence holds: checked before its
/// first poll and before every later one, so a request that waited past the end of the fence
/// is dropped before it goes out. `None` when it was not sent (or its answer is not awaited).
pub(crate) async fn send<F: Future>(request: F) -> Option<F::Output> {
    let mut request = std::pin::pin!(request);
    std::future::poll_fn(|cx| {
        if open() {
            request.as_mut().poll(cx).map(Some)
        } else {
            std::task::Poll::Ready(None)
        }
    })
    .await
}

/// Whether the current reconcile's writes may land; always outside a fenced reconcile.
pub(crate) fn open() -> bool {
    CURRENT.try_with(Fence::holds).unwrap_or(true)
}

/// Whether the current reconcile may go on with new work after a wait; always outside a
/// fenced reconcile.
pub(crate) fn serving() -> bool {
    CURRENT.try_with(Fence::serving).unwrap_or(true)
}
