//! Leader election through a Kubernetes Lease, with client-go's semantics: of all replicas of
//! a controller, only the one holding the Lease reconciles, and a holder that cannot renew
//! within its renew deadline stops by itself before any other replica may take over.
//!
//! The timing contract (client-go's `LeaseDuration` / `RenewDeadline` / `RetryPeriod`):
//! - the holder tries to renew every `retry_period`;
//! - if no renewal has succeeded for `renew_deadline` (counted from the start of the last
//!   successful request), it gives leadership up: no new reconcile starts, in-flight ones get
//!   half the margin (`duration - renew_deadline`) to finish and are then cancelled, and `run`
//!   returns [`Stopped::LeaseLost`];
//! - another replica takes over only after the record has not changed for `duration` on its
//!   own clock. Since `renew_deadline < duration`, the old holder has stopped by then.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::time::Instant;

use crate::controller::Stopped;
use crate::lease::{LeaseLock, Observed};

/// Completes when this replica loses the Lease.
pub(crate) type Lost = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// Which Lease to hold and how.
///
/// ```no_run
/// let election = kube_fsm::LeaderElection::new("database-operator", "operators")
///     .identity(std::env::var("POD_NAME").unwrap_or_else(|_| "local".into()))
///     .duration(std::time::Duration::from_secs(15))
///     .renew_deadline(std::time::Duration::from_secs(10));
/// # let _ = election;
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElection {
    lease: String,
    namespace: String,
    identity: String,
    duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl LeaderElection {
    /// The Lease `lease` in `namespace` (created when missing). Defaults (client-go's): identity
    /// = the host name plus a random suffix, lease duration 15 s, renew deadline 10 s, retry
    /// period 2 s.
    pub fn new(lease: impl Into<String>, namespace: impl Into<String>) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kube-fsm".into());
        LeaderElection {
            lease: lease.into(),
            namespace: namespace.into(),
            identity: format!("{host}-{:08x}", fastrand::u32(..)),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// This replica's name in the Lease (unique among the replicas; a Pod name fits).
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// How long the Lease stays valid after its last renewal: another replica takes over at
    /// most this long after the holder stopped renewing (whole seconds, at least 2). The renew
    /// deadline and retry period shrink to fit when needed (at most 2/3 and 1/5 of it).
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = Duration::from_secs(duration.as_secs().max(2));
        self.renew_deadline = self.renew_deadline.min(self.duration * 2 / 3);
        self.retry_period = self.retry_period.min(self.duration / 5);
        self
    }

    /// Give leadership up when no renewal succeeded for this long (less than the duration;
    /// at least twice the retry period).
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline.clamp(self.retry_period * 2, self.duration * 9 / 10);
        self
    }

    /// How often the holder renews, and others try to acquire (at least 100 ms).
    #[must_use]
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period
            .max(Duration::from_millis(100))
            .min(self.renew_deadline / 2);
        self
    }

    /// This replica's identity.
    pub fn identity_str(&self) -> &str {
        &self.identity
    }

    fn lock(&self, client: Client) -> LeaseLock {
        LeaseLock {
            api: Api::<Lease>::namespaced(client, &self.namespace),
            name: self.lease.clone(),
            identity: self.identity.clone(),
            duration: self.duration,
        }
    }

    /// A pause of about one retry period (jittered by up to 20 %, as client-go's).
    async fn pause(&self) {
        tokio::time::sleep(self.retry_period.mul_f64(1.0 + fastrand::f64() * 0.2)).await;
    }

    /// Waits for the Lease, runs `body` while holding it (`body` is given a future that
    /// completes when the Lease is lost, after which it must stop), then releases it. Returns
    /// early on `signal`.
    pub(crate) async fn lead<S, F, Fut>(self, client: Client, signal: S, body: F) -> Stopped
    where
        S: Future<Output = ()> + Clone,
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = ()>,
    {
        let lock = self.lock(client);
        let mut observed = Observed::default();
        loop {
            let started = Instant::now();
            tokio::select! {
                () = signal.clone() => return Stopped::Signal,
                held = lock.try_acquire_or_renew(&mut observed) => match held {
                    Ok(true) => return self.serve(&lock, started, body).await,
                    Ok(false) => {}
                    Err(err) => tracing::warn!(lease = %self.lease, %err, "cannot acquire the Lease; retrying"),
                },
            }
            tokio::select! {
                () = signal.clone() => return Stopped::Signal,
                () = self.pause() => {}
            }
        }
    }

    /// Runs `body` while renewing; returns once `body` ends (then releases the Lease) or
    /// leadership is lost and `body` has stopped (or was cancelled).
    async fn serve<F, Fut>(&self, lock: &LeaseLock, acquired: Instant, body: F) -> Stopped
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = ()>,
    {
        tracing::info!(lease = %self.lease, identity = %self.identity, "leading");
        let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
        let body = body(Box::pin(async move {
            let _ = lost_rx.await;
        }));
        tokio::pin!(body);
        let renewing = self.renew(lock, acquired);
        tokio::pin!(renewing);
        tokio::select! {
            () = &mut body => {
                match lock.release().await {
                    Ok(()) => tracing::info!(lease = %self.lease, identity = %self.identity, "released the Lease"),
                    Err(err) => tracing::warn!(lease = %self.lease, %err, "could not release the Lease"),
                }
                return Stopped::Signal;
            }
            () = &mut renewing => {}
        }
        let _ = lost_tx.send(());
        // In-flight reconciles may finish within half the margin before the Lease could expire
        // for others; past that they are cancelled, so nothing of this replica's runs once
        // another may lead.
        let grace = self.duration.saturating_sub(self.renew_deadline) / 2;
        if tokio::time::timeout(grace, body).await.is_err() {
            tracing::warn!(lease = %self.lease, ?grace, "in-flight reconciles cancelled after losing the Lease");
        }
        tracing::warn!(lease = %self.lease, identity = %self.identity, "lost the Lease; stopped");
        Stopped::LeaseLost
    }

    /// Renews every retry period; returns when leadership is lost (another holder, or no
    /// successful renewal within the renew deadline).
    async fn renew(&self, lock: &LeaseLock, acquired: Instant) {
        let mut observed = Observed::default();
        let mut last_renewed = acquired;
        loop {
            self.pause().await;
            let started = Instant::now();
            let left = self.renew_deadline.saturating_sub(last_renewed.elapsed());
            match tokio::time::timeout(left, lock.try_acquire_or_renew(&mut observed)).await {
                Ok(Ok(true)) => last_renewed = started,
                // Refused: a conflict while we still hold it is retried; another holder is loss.
                Ok(Ok(false)) if !observed.held_by(&lock.identity) => {
                    tracing::warn!(lease = %self.lease, identity = %self.identity, "another replica holds the Lease; stopping");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(err)) => {
                    tracing::warn!(lease = %self.lease, %err, "cannot renew the Lease");
                }
                Err(_) => {}
            }
            if last_renewed.elapsed() >= self.renew_deadline {
                tracing::warn!(
                    lease = %self.lease,
                    identity = %self.identity,
                    deadline = ?self.renew_deadline,
                    "could not renew the Lease within the renew deadline; stopping"
                );
                return;
            }
        }
    }
}
