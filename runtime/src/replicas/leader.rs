//! Leader election through a Kubernetes Lease, with client-go's semantics: of all replicas of
//! a controller, only the one holding the Lease reconciles, and a holder that cannot renew
//! within its renew deadline stops by itself before any other replica may take over.
//!
//! The timing contract (client-go's `LeaseDuration` / `RenewDeadline` / `RetryPeriod`):
//! - the holder tries to renew every `retry_period`;
//! - every write of a reconcile checks, right before its request, that the last successful
//!   renewal started less than `renew_deadline` ago on the monotonic clock (the fence, see
//!   [`crate::replicas::leading`]): a holder frozen or cut off past its deadline writes
//!   nothing, even before this loop has run again to notice; and the connections of
//!   [`crate::watch::client::client`] write nothing then either (see [`crate::watch::gate`]),
//!   so a request queued just before a freeze is not sent when the process wakes;
//! - if no renewal has succeeded for `renew_deadline`, or another replica holds the Lease, it
//!   gives leadership up: the reconciles under way are cancelled at once (their writes were
//!   fenced already), nothing new starts, and `run` returns [`crate::Stopped::LeaseLost`];
//! - another replica takes over only after the record has not changed for `duration` on its
//!   own clock. Since `renew_deadline < duration`, the old holder's fence is shut by then.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::time::Instant;

use crate::replicas::leading::Leading;
use crate::replicas::lease::{LeaseLock, Observed, Timing};
use crate::watch::gate;
use crate::watch::health::Health;

/// This replica lost the Lease (`Operator::run` returns `Stopped::LeaseLost`).
#[derive(Debug)]
pub(crate) struct LeaseLost;

/// How long the machines get to wind down once leadership is lost: their reconciles were
/// cancelled and their writes fenced, so this bounds only the return of `run`.
const WIND_DOWN: Duration = Duration::from_secs(1);

/// The longest the Lease release at a stop may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which Lease to hold and how.
///
/// ```no_run
/// let election = kube_fsm::replicas::LeaderElection::new("database-operator", "operators")
///     .identity(std::env::var("POD_NAME").unwrap_or_else(|_| "local".into()))
///     .duration(std::time::Duration::from_secs(15))
///     .renew_deadline(std::time::Duration::from_secs(10));
/// # let _ = election;
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElection {
    lease: String,
    namespace: String,
    timing: Timing,
}

impl LeaderElection {
    /// The Lease `lease` in `namespace` (created when missing). Defaults (client-go's): identity
    /// = the host name plus a random suffix, lease duration 15 s, renew deadline 10 s, retry
    /// period 2 s.
    pub fn new(lease: impl Into<String>, namespace: impl Into<String>) -> Self {
        LeaderElection {
            lease: lease.into(),
            namespace: namespace.into(),
            timing: Timing::default(),
        }
    }

    /// The Lease's namespace.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Lease's name.
    pub(crate) fn lease(&self) -> &str {
        &self.lease
    }

    /// This replica's name in the Lease (unique among the replicas; a Pod name fits).
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.timing.identity = identity.into();
        self
    }

    /// How long the Lease stays valid after its last renewal: another replica takes over at
    /// most this long after the holder stopped renewing (whole seconds, at least 2). The renew
    /// deadline and retry period shrink to fit when needed (at most 2/3 and 1/5 of it).
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.timing.set_duration(duration);
        self
    }

    /// Give leadership up when no renewal succeeded for this long (less than the duration;
    /// at least twice the retry period).
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.timing.set_renew_deadline(deadline);
        self
    }

    /// How often the holder renews, and others try to acquire (at least 100 ms).
    #[must_use]
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.timing.set_retry_period(period);
        self
    }

    /// This replica's identity.
    pub fn holder_identity(&self) -> &str {
        &self.timing.identity
    }

    fn lock(&self, client: Client) -> LeaseLock {
        let api = Api::<Lease>::namespaced(client, &self.namespace);
        self.timing.lock(&api, self.lease.clone())
    }

    /// Waits for the Lease, runs `body` while holding it (`body` is given the leadership,
    /// which fences its writes and says when it was lost, after which it must stop), then
    /// releases it. Returns early on `signal`.
    pub(crate) async fn lead<S, F, Fut>(
        self,
        client: Client,
        health: &Health,
        signal: S,
        body: F,
    ) -> Result<(), LeaseLost>
    where
        S: Future<Output = ()> + Clone,
        F: FnOnce(Leading) -> Fut,
        Fut: Future<Output = ()>,
    {
        let lock = self.lock(client);
        let mut observed = Observed::default();
        loop {
            let started = Instant::now();
            tokio::select! {
                () = signal.clone() => return Ok(()),
                held = lock.try_acquire_or_renew(&mut observed) => match held {
                    Ok(true) => return self.serve(&lock, started, health, body).await,
                    Ok(false) => {}
                    Err(err) if err.refused(health) => {}
                    Err(err) => tracing::warn!(lease = %self.lease, %err, "cannot acquire the Lease; retrying"),
                },
            }
            tokio::select! {
                () = signal.clone() => return Ok(()),
                () = self.timing.pause() => {}
            }
        }
    }

    /// Runs `body` while renewing; returns once `body` ends (then releases the Lease) or
    /// leadership is lost and `body` has stopped (or was dropped).
    async fn serve<F, Fut>(
        &self,
        lock: &LeaseLock,
        acquired: Instant,
        health: &Health,
        body: F,
    ) -> Result<(), LeaseLost>
    where
        F: FnOnce(Leading) -> Fut,
        Fut: Future<Output = ()>,
    {
        tracing::info!(lease = %self.lease, identity = %self.timing.identity, "leading");
        let leading = Leading::new(acquired, self.timing.renew_deadline);
        // While leading, the client's connections write nothing once the renewal is late (a
        // request queued before a freeze included), until leadership is given up below.
        let _shut_when_late = {
            let leading = leading.clone();
            gate::open_while(move || leading.holds())
        };
        let body = body(leading.clone());
        tokio::pin!(body);
        let renewing = self.renew(lock, &leading, health);
        tokio::pin!(renewing);
        tokio::select! {
            () = &mut body => {
                // Bounded: a stop must fit in the Pod's grace period even when the API server
                // does not answer (the successor then waits out the Lease's duration).
                match tokio::time::timeout(RELEASE_TIMEOUT, lock.release()).await {
                    Ok(Ok(())) => tracing::info!(lease = %self.lease, identity = %self.timing.identity, "released the Lease"),
                    Ok(Err(err)) => tracing::warn!(lease = %self.lease, %err, "could not release the Lease"),
                    Err(_) => tracing::warn!(lease = %self.lease, "could not release the Lease within {RELEASE_TIMEOUT:?}"),
                }
                return Ok(());
            }
            () = &mut renewing => {}
        }
        // The reconciles under way are cancelled at once (client-go's elector and
        // controller-runtime's manager stop on the spot too): none gets more time to write.
        leading.lose();
        if tokio::time::timeout(WIND_DOWN, body).await.is_err() {
            tracing::warn!(lease = %self.lease, "the machines did not wind down within a second of losing the Lease; dropped");
        }
        tracing::warn!(lease = %self.lease, identity = %self.timing.identity, "lost the Lease; stopped");
        Err(LeaseLost)
    }

    /// Renews every retry period; returns when leadership is lost (another holder, or no
    /// successful renewal within the renew deadline).
    async fn renew(&self, lock: &LeaseLock, leading: &Leading, health: &Health) {
        let mut observed = Observed::default();
        loop {
            self.timing.pause().await;
            // Woken past the deadline (a frozen process): lost, without a request.
            if !leading.holds() {
                break;
            }
            let started = Instant::now();
            let left = self
                .timing
                .renew_deadline
                .saturating_sub(leading.last_renewed().elapsed());
            match tokio::time::timeout(left, lock.try_acquire_or_renew(&mut observed)).await {
                Ok(Ok(true)) => leading.renewed(started),
                // Refused: a conflict while we still hold it is retried; another holder is loss.
                Ok(Ok(false)) if !observed.held_by(&lock.identity) => {
                    tracing::warn!(lease = %self.lease, identity = %self.timing.identity, "another replica holds the Lease; stopping");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(err)) if err.refused(health) => {}
                Ok(Err(err)) => {
                    tracing::warn!(lease = %self.lease, %err, "cannot renew the Lease");
                }
                Err(_) => {}
            }
            if !leading.holds() {
                break;
            }
        }
        tracing::warn!(
            lease = %self.lease,
            identity = %self.timing.identity,
            deadline = ?self.timing.renew_deadline,
            "could not renew the Lease within the renew deadline; stopping"
        );
    }
}
