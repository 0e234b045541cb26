//! The connection to the API server as the controller sees it: up, down since when and why,
//! or refused a watch or request it needs. Watch failures mark it down; a watch event or a landed write
//! marks it up again. Each change is logged once at warn, counted, and (when it comes back)
//! wakes the recovery that reschedules the objects whose reconcile failed for want of a
//! connection meanwhile, so they do not wait out a backoff grown during the outage (objects
//! whose handlers fail keep their backoff). A watch or request the API server refuses (401, 403:
//! RBAC) is no outage but a configuration problem: reported once per kind or permission (an
//! error log, a metric, the readiness reason naming the verb, the resource and the namespace)
//! and retried at the reconnect cap.
//! Also the watches' reconnect backoff.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::metrics::MachineMetrics;
use crate::pure::refusal::Refusal;

/// What [`Health::status`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Watches and writes go through.
    Up,
    /// The API server has not been reachable since `since`.
    Down {
        /// When the connection was lost.
        since: Timestamp,
        /// The error that showed it.
        reason: String,
    },
    /// The API server answers but refuses a watch or a request this controller needs (its
    /// RBAC lacks a verb): what needs it waits, retried every reconnect cap, until that is
    /// fixed.
    Refused {
        /// What is refused, e.g. `cannot watch ConfigMap: configmaps is forbidden: …` or
        /// `cannot patch databases/status (API group example.com) in namespace a: …`.
        reason: String,
    },
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    at: Timestamp,
    reason: String,
}

/// A watch or request the API server refuses: why, and when it last did.
#[derive(Debug)]
struct Refused {
    reason: String,
    at: Instant,
}

#[derive(Debug)]
struct State {
    outage: Mutex<Option<Outage>>,
    /// Refused watches (by kind) and requests (by the permission they lack).
    refused: Mutex<std::collections::BTreeMap<String, Refused>>,
    /// How long a refusal stands without being seen again (three reconnect caps).
    refusal_lasts: Mutex<Duration>,
    /// Bumped each time the connection comes back.
    restored: watch::Sender<u64>,
    metrics: Mutex<Option<Arc<MachineMetrics>>>,
    /// Other machines' healths this one's watch reports also go to (a shared watch, see
    /// [`Health::also_report_to`]).
    followers: Mutex<Vec<Health>>,
}

/// A handle on the controller's connection state, for readiness probes (see
/// [`crate::Operator::health`]). Cloning shares it.
///
/// ```no_run
/// # async fn demo<K, H>(operator: kube_fsm::Operator<K, H>)
/// # where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
/// let health = operator.health();
/// tokio::spawn(operator.run());
/// // e.g. in a `/readyz` handler:
/// match health.status() {
///     kube_fsm::watch::Connection::Up => println!("ok"),
///     kube_fsm::watch::Connection::Down { since, reason } => println!("down since {since}: {reason}"),
///     kube_fsm::watch::Connection::Refused { reason } => println!("misconfigured: {reason}"),
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Health(Arc<State>);

impl Default for Health {
    fn default() -> Self {
        Health(Arc::new(State {
            outage: Mutex::new(None),
            refused: Mutex::new(std::collections::BTreeMap::new()),
            refusal_lasts: Mutex::new(Duration::from_secs(90)),
            restored: watch::channel(0).0,
            metrics: Mutex::new(None),
            followers: Mutex::new(Vec::new()),
        }))
    }
}

impl Health {
    /// Up, down since when and why, or refused a watch or request (the first refusal's reason).
    pub fn status(&self) -> Connection {
        if let Some(outage) = &*self.0.outage.lock().unwrap_or_else(PoisonError::into_inner) {
            return Connection::Down {
                since: outage.at,
                reason: outage.reason.clone(),
            };
        }
        let lasts = *self
            .0
            .refusal_lasts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let refused = self
            .0
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match refused.values().find(|r| r.at.elapsed() < lasts) {
            Some(refusal) => Connection::Refused {
                reason: refusal.reason.clone(),
            },
            None => Connection::Up,
        }
    }

    /// A watch of `kind` failed with `err`. Returns whether the API server refused it (401,
    /// 403): then the refusal is recorded for [`Health::status`] (logged the first time), and
    /// no outage; any other failure is a lost connection.
    pub(crate) fn watch_failed(&self, kind: &str, err: &watcher::Error) -> bool {
        for follower in self.followers() {
            follower.watch_failed(kind, err);
        }
        let Some(status) = refusal(err) else {
            self.lost(err);
            return false;
        };
        let verb = match err {
            watcher::Error::InitialListFailed(_) => "list",
            _ => "watch",
        };
        let reason = format!("cannot {verb} {kind}: {}", status.message);
        if self.refuse(kind, reason) {
            tracing::error!(kind, verb, code = status.code, message = %status.message, "the API server refuses a watch this controller needs; grant the verb in its RBAC (retried every reconnect cap)");
        }
        if let Some(metrics) = self.metrics() {
            metrics.watch_refused(kind);
        }
        true
    }

    /// A request was answered with `status`. Returns whether it is an RBAC refusal (403 naming
    /// the missing permission, or 401): then it is recorded for [`Health::status`] as the
    /// permission it names, logged the first time and counted; the caller retries at the
    /// reconnect cap.
    pub(crate) fn request_refused(&self, status: &kube::core::Status) -> bool {
        let Some(permission) = Refusal::of(status) else {
            return false;
        };
        let key = permission.to_string();
        if self.refuse(&key, format!("{key}: {}", status.message)) {
            tracing::error!(verb = %permission.verb, resource = %permission.resource, group = %permission.group, namespace = permission.namespace.as_deref().unwrap_or("(cluster)"), message = %status.message, "the API server refuses a request this controller needs; grant it in the controller's RBAC (retried every reconnect cap)");
        }
        if let Some(metrics) = self.metrics() {
            metrics.request_refused(&permission.verb, &permission.resource);
        }
        true
    }

    /// Whether `err` is an RBAC refusal, recorded as [`Health::request_refused`] does.
    pub(crate) fn refused(&self, err: &kube::Error) -> bool {
        matches!(err, kube::Error::Api(status) if self.request_refused(status))
    }

    /// Records a refusal of `key` for [`Health::status`]; whether it is new (not seen within
    /// the time a refusal stands), to be logged.
    fn refuse(&self, key: &str, reason: String) -> bool {
        let lasts = *self
            .0
            .refusal_lasts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut refused = self
            .0
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fresh = refused.get(key).is_none_or(|r| r.at.elapsed() >= lasts);
        refused.insert(
            key.to_owned(),
            Refused {
                reason,
                at: Instant::now(),
            },
        );
        fresh
    }

    /// Refusals stand for three of the watches' reconnect caps without being seen again.
    pub(crate) fn refusals_last_for(&self, reconnect_max: Duration) {
        *self
            .0
            .refusal_lasts
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = reconnect_max * 3;
    }

    /// Whether the connection is up.
    pub fn is_up(&self) -> bool {
        self.status() == Connection::Up
    }

    pub(crate) fn record_into(&self, metrics: Arc<MachineMetrics>) {
        metrics.connected(self.is_up());
        *self
            .0
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(metrics);
    }

    /// What a watch reports here (failures, refusals, events) `other` gets too: a watch
    /// shared by several machines reports to each machine's health, so that each one's
    /// readiness says its children's watch is refused or down.
    pub(crate) fn also_report_to(&self, other: &Health) {
        let mut followers = self
            .0
            .followers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let known = |h: &Health| Arc::ptr_eq(&h.0, &other.0);
        if !Arc::ptr_eq(&self.0, &other.0) && !followers.iter().any(known) {
            followers.push(other.clone());
        }
    }

    fn followers(&self) -> Vec<Health> {
        self.0
            .followers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn metrics(&self) -> Option<Arc<MachineMetrics>> {
        self.0
            .metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A watch (or a request) failed with `reason`.
    pub(crate) fn lost(&self, reason: &dyn std::fmt::Display) {
        if let Some(metrics) = self.metrics() {
            metrics.watch_restart();
        }
        let mut outage = self.0.outage.lock().unwrap_or_else(PoisonError::into_inner);
        if outage.is_none() {
            tracing::warn!(%reason, "lost the connection to the API server; retrying with backoff");
            *outage = Some(Outage {
                since: Instant::now(),
                at: Timestamp::now(),
                reason: reason.to_string(),
            });
            if let Some(metrics) = self.metrics() {
                metrics.connected(false);
            }
        } else {
            tracing::debug!(%reason, "still no connection to the API server");
        }
    }

    /// The API server answered (a watch event, or a landed write).
    pub(crate) fn restored(&self) {
        for follower in self.followers() {
            follower.restored();
        }
        let Some(outage) = self
            .0
            .outage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let took = outage.since.elapsed();
        tracing::warn!(after = ?took, "the connection to the API server is back");
        if let Some(metrics) = self.metrics() {
            metrics.connected(true);
            metrics.disconnected_for(took);
        }
        self.0.restored.send_modify(|epoch| *epoch += 1);
    }

    /// Completes the next time the connection comes back.
    pub(crate) async fn wait_restored(&self) {
        let mut restored = self.0.restored.subscribe();
        let _ = restored.changed().await;
    }
}

/// The watches' reconnect backoff: from 800 ms, doubling, jittered into the upper half, capped
/// at `max` (client-go's reflector caps at 30 s), and starting over once the watch has been
/// healthy for a minute.
#[derive(Debug)]
pub(crate) struct ReconnectBackoff {
    max: Duration,
    next: Duration,
    last: Option<Instant>,
}

const RECONNECT_BASE: Duration = Duration::from_millis(800);
/// How long a watch must go without a failure before its backoff starts over.
pub(crate) const HEALTHY_RESET: Duration = Duration::from_secs(60);

/// The API server's refusal (401 Unauthorized, 403 Forbidden) in a watch failure, if it is one.
fn refusal(err: &watcher::Error) -> Option<&kube::core::Status> {
    let status = match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status.as_ref(),
        _ => return None,
    };
    matches!(status.code, 401 | 403).then_some(status)
}

impl ReconnectBackoff {
    pub fn new(max: Duration) -> Self {
        ReconnectBackoff {
            max: max.max(RECONNECT_BASE),
            next: RECONNECT_BASE,
            last: None,
        }
    }
}

impl Iterator for ReconnectBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self
            .last
            .is_some_and(|last| last.elapsed() > HEALTHY_RESET + self.max)
        {
            self.next = RECONNECT_BASE;
        }
        self.last = Some(Instant::now());
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        Some(delay / 2 + delay.mul_f64(fastrand::f64() / 2.0))
    }
}

impl Backoff for ReconnectBackoff {
    fn reset(&mut self) {
        self.next = RECONNECT_BASE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_backoff_doubles_up_to_its_cap_and_starts_over_on_reset() {
        let mut backoff = ReconnectBackoff::new(Duration::from_secs(5));
        let delays: Vec<Duration> = (&mut backoff).take(6).collect();
        for (delay, ceiling) in delays.iter().zip([0.8, 1.6, 3.2, 5.0, 5.0, 5.0]) {
            let ceiling = Duration::from_secs_f64(ceiling);
            assert!(
                *delay <= ceiling && *delay >= ceiling / 2,
                "{delay:?} vs {ceiling:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next().unwrap() <= RECONNECT_BASE);
    }

    #[test]
    fn an_outage_is_reported_once_and_ends_with_the_first_answer() {
        let health = Health::default();
        assert!(health.is_up());
        health.lost(&"connection refused");
        health.lost(&"connection refused again");
        let Connection::Down { reason, .. } = health.status() else {
            panic!("down");
        };
        assert_eq!(
            reason, "connection refused",
            "the first error names the outage"
        );
        let restored = health.0.restored.subscribe();
        health.restored();
        assert!(health.is_up());
        assert!(restored.has_changed().unwrap(), "recovery is woken");
    }
}
