//! This replica's leadership while it holds the Lease, as every write asks it: it stands while
//! the last successful renewal *started* less than the renew deadline ago on the monotonic
//! clock, and until the Lease loop says it was lost. The write fence asks this right before
//! each request, so a replica that was frozen (SIGSTOP, a paused VM, a starved runtime) past its
//! deadline sends nothing when it wakes, even before its Lease loop has run again to notice.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The leadership of one Lease holding, shared by the Lease loop (which renews it) and every
/// reconcile (which asks it before each write).
#[derive(Clone, Debug)]
pub(crate) struct Leading(Arc<State>);

#[derive(Debug)]
struct State {
    /// When the request of the last successful renewal (or of the acquisition) started.
    renewed: Mutex<Instant>,
    renew_deadline: Duration,
    /// Cancelled when the Lease loop gives leadership up.
    lost: CancellationToken,
}

impl Leading {
    /// Leadership acquired by a request that started at `acquired`.
    pub(crate) fn new(acquired: Instant, renew_deadline: Duration) -> Self {
        Leading(Arc::new(State {
            renewed: Mutex::new(acquired),
            renew_deadline,
            lost: CancellationToken::new(),
        }))
    }

    /// A renewal whose request started at `started` succeeded.
    pub(crate) fn renewed(&self, started: Instant) {
        let mut renewed = self
            .0
            .renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *renewed = (*renewed).max(started);
    }

    /// When the last successful renewal started.
    pub(crate) fn last_renewed(&self) -> Instant {
        *self
            .0
            .renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether writes may land now: not lost, and renewed within the renew deadline.
    pub(crate) fn holds(&self) -> bool {
        self.holds_at(Instant::now())
    }

    /// Whether writes may land at `now` (see [`Leading::holds`]).
    fn holds_at(&self, now: Instant) -> bool {
        !self.0.lost.is_cancelled()
            && now.saturating_duration_since(self.last_renewed()) < self.0.renew_deadline
    }

    /// Leadership is given up: [`Leading::holds`] is false from now on.
    pub(crate) fn lose(&self) {
        self.0.lost.cancel();
    }

    /// Completes when leadership is given up.
    pub(crate) fn lost(&self) -> WaitForCancellationFutureOwned {
        self.0.lost.clone().cancelled_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leadership_stands_until_the_renew_deadline_of_the_last_renewal_start() {
        let deadline = Duration::from_secs(10);
        let acquired = Instant::now();
        let leading = Leading::new(acquired, deadline);
        let at = |secs: u64| acquired + Duration::from_secs(secs);
        assert!(leading.holds_at(at(9)));
        assert!(!leading.holds_at(at(10)), "the deadline passed");
        // A renewal whose request started at 6 s (answered at 9 s) counts from 6 s.
        leading.renewed(at(6));
        assert!(leading.holds_at(at(15)));
        assert!(!leading.holds_at(at(16)));
        // An older renewal answered late does not move the mark back.
        leading.renewed(at(5));
        assert_eq!(leading.last_renewed(), at(6));
    }

    #[tokio::test]
    async fn lost_leadership_holds_no_more_and_wakes_whoever_waits() {
        let leading = Leading::new(Instant::now(), Duration::from_secs(10));
        let lost = leading.lost();
        leading.lose();
        lost.await;
        assert!(!leading.holds());
    }
}
