//! The stop of a machine's reconciles: on the stop signal, reconciles still waiting for a slot
//! end at once (they have done nothing yet; the next replica, or the next start, reconciles
//! their objects), and those under way get the drain ([`crate::Operator::drain_timeout`]) to
//! finish, then are cancelled at their current `.await`, so the process stops within the
//! drain whatever the backlog or a handler, and the Lease release and the webhook's
//! deregistration that follow still fit in the Pod's grace period.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

/// A stop signal, shareable.
pub(crate) type Signal = Shared<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>;

/// When a machine's reconciles stop: asked to, and the drain after it run out.
#[derive(Clone)]
pub(crate) struct Stop {
    requested: Signal,
    drained: Shared<BoxFuture<'static, ()>>,
}

impl Stop {
    /// Stops on `signal`, cancelling what still runs `drain` later.
    pub(crate) fn new(
        signal: impl Future<Output = ()> + Send + Sync + 'static,
        drain: Duration,
    ) -> Self {
        let boxed: Pin<Box<dyn Future<Output = ()> + Send + Sync>> = Box::pin(signal);
        let requested = boxed.shared();
        let drained = requested
            .clone()
            .then(move |()| tokio::time::sleep(drain))
            .boxed()
            .shared();
        Stop { requested, drained }
    }

    /// A stop never asked for.
    pub(crate) fn never() -> Self {
        Stop::new(std::future::pending(), Duration::ZERO)
    }

    /// Completes once the stop was asked for.
    pub(crate) fn requested(&self) -> Signal {
        self.requested.clone()
    }

    /// Whether the stop was asked for.
    pub(crate) fn is_requested(&self) -> bool {
        self.requested.clone().now_or_never().is_some()
    }

    /// Completes once the drain after the stop ran out.
    pub(crate) async fn drained(&self) {
        self.drained.clone().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_drain_runs_from_the_signal() {
        let (tell, told) = tokio::sync::oneshot::channel::<()>();
        let stop = Stop::new(told.map(|_| ()), Duration::from_millis(50));
        assert!(!stop.is_requested());
        assert!(
            tokio::time::timeout(Duration::from_millis(100), stop.drained())
                .await
                .is_err(),
            "no drain before the signal"
        );
        tell.send(()).unwrap();
        stop.requested().await;
        assert!(stop.is_requested());
        tokio::time::timeout(Duration::from_millis(500), stop.drained())
            .await
            .expect("drained 50 ms after the signal");
    }
}
