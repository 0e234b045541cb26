//! Leader election through a Kubernetes Lease, with kube-lease-manager: of all replicas of a
//! controller, only the one holding the Lease reconciles.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};

use crate::controller::Stopped;

/// Completes when this replica loses the Lease.
pub(crate) type Lost = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// Which Lease to hold and how.
///
/// ```no_run
/// let election = kube_fsm::LeaderElection::new("database-operator", "operators")
///     .identity(std::env::var("POD_NAME").unwrap_or_else(|_| "local".into()))
///     .duration(std::time::Duration::from_secs(15));
/// # let _ = election;
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElection {
    lease: String,
    namespace: String,
    identity: String,
    duration_secs: u64,
    grace_secs: u64,
}

impl LeaderElection {
    /// The Lease `lease` in `namespace` (created when missing). Defaults: identity = the host
    /// name plus a random suffix, lease duration 15 s, renewal 5 s before expiry.
    pub fn new(lease: impl Into<String>, namespace: impl Into<String>) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kube-fsm".into());
        LeaderElection {
            lease: lease.into(),
            namespace: namespace.into(),
            identity: format!("{host}-{:08x}", fastrand::u32(..)),
            duration_secs: 15,
            grace_secs: 5,
        }
    }

    /// This replica's name in the Lease (unique among the replicas; a Pod name fits).
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// How long a Lease stays valid after its last renewal: a replica that stops renewing is
    /// replaced at most this long afterwards (whole seconds, at least 2).
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration_secs = duration.as_secs().max(2);
        self.grace_secs = self.grace_secs.min(self.duration_secs - 1);
        self
    }

    /// Renew this long before the Lease expires (whole seconds, at least 1, less than the
    /// duration).
    #[must_use]
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace_secs = grace.as_secs().clamp(1, self.duration_secs - 1);
        self
    }

    /// This replica's identity.
    pub fn identity_str(&self) -> &str {
        &self.identity
    }

    /// Waits for the Lease, runs `body` while holding it (`body` is given a future that
    /// completes when the Lease is lost), then releases it. Returns early on `signal`.
    pub(crate) async fn lead<S, F, Fut>(self, client: Client, signal: S, body: F) -> Stopped
    where
        S: Future<Output = ()> + Clone,
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = ()>,
    {
        let params = LeaseParams::new(&self.identity, self.duration_secs, self.grace_secs);
        let manager = loop {
            let build = LeaseManagerBuilder::new(client.clone(), &self.lease)
                .with_namespace(&self.namespace)
                .with_parameters(params.clone())
                .build();
            tokio::select! {
                () = signal.clone() => return Stopped::Signal,
                built = build => match built {
                    Ok(manager) => break manager,
                    Err(err) => tracing::warn!(lease = %self.lease, %err, "cannot use the Lease; retrying"),
                },
            }
            tokio::select! {
                () = signal.clone() => return Stopped::Signal,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        };
        let (mut leading, task) = manager.watch().await;
        let became = tokio::select! {
            () = signal.clone() => false,
            held = leading.wait_for(|held| *held) => held.is_ok(),
        };
        let mut stopped = Stopped::Signal;
        if became {
            tracing::info!(lease = %self.lease, identity = %self.identity, "leading");
            let mut watch = leading.clone();
            body(Box::pin(async move {
                // A closed channel (the Lease manager gave up) counts as lost too.
                let _ = watch.wait_for(|held| !*held).await;
            }))
            .await;
            if !*leading.borrow() {
                tracing::warn!(lease = %self.lease, identity = %self.identity, "lost the Lease; stopped");
                stopped = Stopped::LeaseLost;
            }
        }
        // Dropping the last receiver makes the manager release the Lease and end.
        drop(leading);
        match task.await {
            Ok(Ok(_)) => {
                tracing::info!(lease = %self.lease, identity = %self.identity, "released the Lease")
            }
            Ok(Err(err)) => {
                tracing::warn!(lease = %self.lease, %err, "could not release the Lease")
            }
            Err(err) => tracing::warn!(lease = %self.lease, %err, "the Lease manager failed"),
        }
        stopped
    }
}
