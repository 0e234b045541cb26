//! The connections of [`crate::watch::client::client`], shut while this process's leadership
//! has lapsed.
//!
//! hyper drives each connection in a task of its own, which writes the requests queued on it
//! whenever it runs. Every write of a reconcile is fenced until it is queued (see
//! `replicas::fence`), but a request queued just before the process froze (SIGSTOP, a paused
//! VM, a starved runtime) is written by its connection's task as soon as the process wakes —
//! the fence of the reconcile that queued it cannot stop that. So each connection task checks,
//! every time it runs, that the conditions registered here hold (under leader election: the
//! leadership was renewed within its renew deadline, see `replicas::leading`), and closes its
//! connection without writing anything when one does not. Requests then fail as a broken
//! connection, and new connections serve again once the lapsed leadership is given up (its
//! registration dropped).
//!
//! The one instant left is between that check and the bytes leaving the socket, within one
//! poll of the connection: no client can close it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::task::{Context, Poll};

/// A condition the connections need, registered while this value lives.
type Check = dyn Fn() -> bool + Send + Sync;

/// The conditions of one set of connections (dropped ones are skipped, and pruned at the next
/// registration).
#[derive(Default)]
struct Conditions(RwLock<Vec<Weak<Check>>>);

/// Those of every connection of [`crate::watch::client::client`].
static CONDITIONS: Conditions = Conditions(RwLock::new(Vec::new()));

/// A registered condition: the connections close while it does not hold, until this drops.
#[must_use = "the condition is registered while this value lives"]
pub(crate) struct Condition {
    _registered: Arc<Check>,
}

/// Registers `check`: while it is false, every connection closes instead of writing.
pub(crate) fn open_while(check: impl Fn() -> bool + Send + Sync + 'static) -> Condition {
    CONDITIONS.register(Arc::new(check))
}

impl Conditions {
    fn register(&self, check: Arc<Check>) -> Condition {
        let mut conditions = self.0.write().unwrap_or_else(PoisonError::into_inner);
        conditions.retain(|c| c.strong_count() > 0);
        conditions.push(Arc::downgrade(&check));
        Condition { _registered: check }
    }

    /// Whether every registered condition holds.
    fn hold(&self) -> bool {
        (self.0.read().unwrap_or_else(PoisonError::into_inner))
            .iter()
            .filter_map(Weak::upgrade)
            .all(|check| check())
    }
}

/// The executor of the client's connection tasks: each runs while the conditions hold.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Gated;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

impl hyper::rt::Executor<Task> for Gated {
    fn execute(&self, task: Task) {
        tokio::spawn(Gate(task, &CONDITIONS));
    }
}

/// One connection's task, ended (its connection closed) when it runs while a condition does
/// not hold.
struct Gate(Task, &'static Conditions);

impl Future for Gate {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.1.hold() {
            tracing::debug!(
                "connection to the API server closed: this replica's leadership lapsed"
            );
            return Poll::Ready(());
        }
        self.0.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_connection_task_ends_unpolled_while_a_registered_condition_fails() {
        let conditions: &'static Conditions = Box::leak(Box::default());
        let holds = Arc::new(AtomicBool::new(true));
        let condition = {
            let holds = holds.clone();
            conditions.register(Arc::new(move || holds.load(Ordering::SeqCst)))
        };
        let polled = Arc::new(AtomicBool::new(false));
        let run = |polled: &Arc<AtomicBool>| {
            let polled = polled.clone();
            polled.store(false, Ordering::SeqCst);
            let task: Task = Box::pin(async move {
                polled.store(true, Ordering::SeqCst);
            });
            Gate(task, conditions)
        };
        run(&polled).await;
        assert!(
            polled.load(Ordering::SeqCst),
            "runs while the condition holds"
        );
        holds.store(false, Ordering::SeqCst);
        run(&polled).await;
        assert!(!polled.load(Ordering::SeqCst), "ends without running");
        drop(condition);
        run(&polled).await;
        assert!(
            polled.load(Ordering::SeqCst),
            "runs again once the condition is dropped"
        );
    }
}
