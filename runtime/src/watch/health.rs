//! The connection to the API server as the controller sees it, watch by watch: up, down since
//! when and why, not served, or refused a watch or request it needs. Each watch (a kind and its
//! selection) and the requests have their own state: a watch's failure marks that watch down
//! until it delivers again (an event, or the list after a re-connect), a failed request marks
//! the requests down until a write lands; the connection is up when every part is. A routine
//! `410 Gone` (the watch's resource version was compacted; kube lists again at once) is no
//! failure. A watch answered `404` is *not served*: its CustomResourceDefinition, or the
//! version this controller uses, is missing — a configuration problem, reported as such, that
//! lasts until the kind is served again. Each change is logged once, counted, and (when a part
//! comes back) wakes the recovery that reschedules the objects whose reconcile failed for want
//! of a connection meanwhile, so they do not wait out a backoff grown during the outage
//! (objects whose handlers fail keep their backoff). A watch or request the API server refuses
//! (401, 403: RBAC) is no outage but a configuration problem: reported once per watch or
//! permission (an error log, a metric, the readiness reason naming the verb, the resource and
//! the namespace) and retried at the reconnect cap.
//! Also the watches' reconnect backoff.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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
    /// A watch, or the requests, have failed since `since` (the API server is unreachable,
    /// or answers them with errors).
    Down {
        /// When the earliest failure still standing began.
        since: Timestamp,
        /// The error that showed it, naming the watch (`watching ConfigMap: …`) when a watch
        /// failed.
        reason: String,
    },
    /// The API server answers but does not serve a kind this controller watches (`404`):
    /// its CustomResourceDefinition, or the version this controller uses, is not installed.
    /// What needs it waits until it is.
    NotServed {
        /// Since when.
        since: Timestamp,
        /// Which kind and version, e.g. `the API server does not serve Database
        /// (example.com/v1): …`.
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

/// One part's failure, until it delivers again.
#[derive(Debug)]
struct Outage {
    at: Timestamp,
    reason: String,
    /// A 404: the kind is not served.
    unserved: bool,
}

/// The parts that fail now, and since when the connection has not been up.
#[derive(Debug, Default)]
struct Failing {
    /// Each failing watch by name; the requests under [`REQUESTS`].
    parts: BTreeMap<String, Outage>,
    /// When the first of them failed (none: up).
    since: Option<Instant>,
}

/// The key of the requests' part in [`Failing::parts`] (no watch is named so).
const REQUESTS: &str = "";

/// A watch or request the API server refuses: why, and when it last did.
#[derive(Debug)]
struct Refused {
    reason: String,
    at: Instant,
}

#[derive(Debug)]
struct State {
    failing: Mutex<Failing>,
    /// Refused watches (by name) and requests (by the permission they lack).
    refused: Mutex<BTreeMap<String, Refused>>,
    /// How long a refusal stands without being seen again (three reconnect caps).
    refusal_lasts: Mutex<Duration>,
    /// Bumped each time a failing part comes back.
    restored: watch::Sender<u64>,
    metrics: Mutex<Option<Arc<MachineMetrics>>>,
    /// Other machines' healths this one's watch reports also go to (a shared watch, see
    /// [`Health::also_report_to`]).
    followers: Mutex<Vec<Health>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
///     kube_fsm::watch::Connection::NotServed { reason, .. } => println!("not installed: {reason}"),
///     kube_fsm::watch::Connection::Refused { reason } => println!("misconfigured: {reason}"),
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Health(Arc<State>);

impl Default for Health {
    fn default() -> Self {
        Health(Arc::new(State {
            failing: Mutex::new(Failing::default()),
            refused: Mutex::new(BTreeMap::new()),
            refusal_lasts: Mutex::new(Duration::from_secs(90)),
            restored: watch::channel(0).0,
            metrics: Mutex::new(None),
            followers: Mutex::new(Vec::new()),
        }))
    }
}

impl Health {
    /// Up; a kind not served; down since when and why (the earliest failure still standing);
    /// or refused a watch or request (the first refusal's reason).
    pub fn status(&self) -> Connection {
        {
            let failing = lock(&self.0.failing);
            if let Some(outage) = failing.parts.values().find(|o| o.unserved) {
                return Connection::NotServed {
                    since: outage.at,
                    reason: outage.reason.clone(),
                };
            }
            if let Some(outage) = failing.parts.values().min_by_key(|o| o.at) {
                return Connection::Down {
                    since: outage.at,
                    reason: outage.reason.clone(),
                };
            }
        }
        let lasts = *lock(&self.0.refusal_lasts);
        let refused = lock(&self.0.refused);
        match refused.values().find(|r| r.at.elapsed() < lasts) {
            Some(refusal) => Connection::Refused {
                reason: refusal.reason.clone(),
            },
            None => Connection::Up,
        }
    }

    /// The watch `watch` failed with `err`. Returns whether the API server refused it (401,
    /// 403): then the refusal is recorded for [`Health::status`] (logged the first time), and
    /// no outage; a 404 marks the watch not served; any other failure marks it down.
    pub(crate) fn watch_failed(&self, watch: &Watch, err: &watcher::Error) -> bool {
        for follower in self.followers() {
            follower.watch_failed(watch, err);
        }
        let Some(status) = answer(err) else {
            self.fail(
                &watch.name,
                format!("watching {}: {err}", watch.name),
                false,
            );
            return false;
        };
        if status.code == 404 {
            let reason = format!(
                "the API server does not serve {} ({}): its CustomResourceDefinition, or that version of it, is not installed ({})",
                watch.name, watch.api_version, status.message
            );
            self.fail(&watch.name, reason, true);
            return false;
        }
        if !matches!(status.code, 401 | 403) {
            self.fail(
                &watch.name,
                format!("watching {}: {err}", watch.name),
                false,
            );
            return false;
        }
        let verb = match err {
            watcher::Error::InitialListFailed(_) => "list",
            _ => "watch",
        };
        let reason = format!("cannot {verb} {}: {}", watch.name, status.message);
        if self.refuse(&watch.name, reason) {
            tracing::error!(watch = %watch.name, verb, code = status.code, message = %status.message, "the API server refuses a watch this controller needs; grant the verb in its RBAC (retried every reconnect cap)");
        }
        if let Some(metrics) = self.metrics() {
            metrics.watch_refused(&watch.name);
        }
        true
    }

    /// The watch `watch` delivered (an event, or a list): it is up.
    pub(crate) fn delivered(&self, watch: &Watch) {
        for follower in self.followers() {
            follower.delivered(watch);
        }
        self.clear(&watch.name);
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
        let lasts = *lock(&self.0.refusal_lasts);
        let mut refused = lock(&self.0.refused);
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
        *lock(&self.0.refusal_lasts) = reconnect_max * 3;
    }

    /// Whether the connection is up.
    pub fn is_up(&self) -> bool {
        self.status() == Connection::Up
    }

    pub(crate) fn record_into(&self, metrics: Arc<MachineMetrics>) {
        metrics.connected(self.is_up());
        *lock(&self.0.metrics) = Some(metrics);
    }

    /// What a watch reports here (failures, refusals, events) `other` gets too: a watch
    /// shared by several machines reports to each machine's health, so that each one's
    /// readiness says its children's watch is refused or down.
    pub(crate) fn also_report_to(&self, other: &Health) {
        let mut followers = lock(&self.0.followers);
        let known = |h: &Health| Arc::ptr_eq(&h.0, &other.0);
        if !Arc::ptr_eq(&self.0, &other.0) && !followers.iter().any(known) {
            followers.push(other.clone());
        }
    }

    fn followers(&self) -> Vec<Health> {
        lock(&self.0.followers).clone()
    }

    fn metrics(&self) -> Option<Arc<MachineMetrics>> {
        lock(&self.0.metrics).clone()
    }

    /// A request failed with `reason` (the API server did not answer it).
    pub(crate) fn lost(&self, reason: &dyn std::fmt::Display) {
        self.fail(REQUESTS, reason.to_string(), false);
    }

    /// A request landed: the requests are up.
    pub(crate) fn restored(&self) {
        self.clear(REQUESTS);
    }

    /// `part` fails with `reason` (`unserved`: a 404).
    fn fail(&self, part: &str, reason: String, unserved: bool) {
        let metrics = self.metrics();
        if let Some(metrics) = metrics.as_ref().filter(|_| part != REQUESTS) {
            metrics.watch_restart();
        }
        let mut failing = lock(&self.0.failing);
        let was_up = failing.since.is_none();
        let known = failing
            .parts
            .get(part)
            .map(|outage| outage.unserved == unserved);
        match known {
            Some(true) => {
                tracing::debug!(%reason, "still failing");
                return;
            }
            Some(false) | None if unserved => {
                tracing::error!(watch = part, %reason, "a kind this controller watches is not served; install its CustomResourceDefinition (retried with backoff)");
            }
            _ if was_up => {
                tracing::warn!(%reason, "lost the connection to the API server; retrying with backoff");
            }
            _ => tracing::debug!(%reason, "another watch or request fails"),
        }
        let at = failing
            .parts
            .get(part)
            .map_or_else(Timestamp::now, |outage| outage.at);
        failing.parts.insert(
            part.to_owned(),
            Outage {
                at,
                reason,
                unserved,
            },
        );
        failing.since.get_or_insert_with(Instant::now);
        drop(failing);
        if let Some(metrics) = metrics {
            if was_up {
                metrics.connected(false);
            }
            if part != REQUESTS {
                metrics.watch_state(part, false, unserved);
            }
        }
    }

    /// `part` delivered: it is up, and the connection too once no other part fails.
    fn clear(&self, part: &str) {
        let mut failing = lock(&self.0.failing);
        let Some(outage) = failing.parts.remove(part) else {
            return;
        };
        let took = failing
            .parts
            .is_empty()
            .then(|| failing.since.take())
            .flatten()
            .map(|since| since.elapsed());
        drop(failing);
        if outage.unserved {
            tracing::warn!(
                watch = part,
                "a kind this controller watches is served again"
            );
        }
        let metrics = self.metrics();
        if let Some(metrics) = &metrics
            && part != REQUESTS
        {
            metrics.watch_state(part, true, false);
        }
        if let Some(took) = took {
            tracing::warn!(after = ?took, "the connection to the API server is back");
            if let Some(metrics) = &metrics {
                metrics.connected(true);
                metrics.disconnected_for(took);
            }
        }
        self.0.restored.send_modify(|epoch| *epoch += 1);
    }

    /// Completes the next time a failing watch or the requests come back.
    pub(crate) async fn wait_restored(&self) {
        let mut restored = self.0.restored.subscribe();
        let _ = restored.changed().await;
    }
}

/// One watch as health reports it: its kind and selection, and the version it lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Watch {
    /// The kind, and its selectors when it has any: `ConfigMap (labels app=db)`.
    pub name: String,
    /// The API version watched, e.g. `example.com/v1`.
    pub api_version: String,
}

impl Watch {
    /// The watch of `R`'s objects that `config` selects; `note` (e.g. `unlabelled`) told
    /// apart from other watches of `R` with the same selectors.
    pub(crate) fn of<R: kube::Resource<DynamicType = ()>>(
        config: &watcher::Config,
        note: Option<&str>,
    ) -> Self {
        let mut about: Vec<String> = note.map(str::to_owned).into_iter().collect();
        if let Some(labels) = &config.label_selector {
            about.push(format!("labels {labels}"));
        }
        if let Some(fields) = &config.field_selector {
            about.push(format!("fields {fields}"));
        }
        let kind = R::kind(&());
        Watch {
            name: if about.is_empty() {
                kind.into_owned()
            } else {
                format!("{kind} ({})", about.join("; "))
            },
            api_version: R::api_version(&()).into_owned(),
        }
    }
}

/// A watch failure that is routine: the watch's resource version is too old (`410 Gone`,
/// after a compaction); kube lists again at once.
pub(crate) fn relists(err: &watcher::Error) -> bool {
    matches!(err, watcher::Error::WatchError(status) if status.code == 410)
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

/// The API server's answer in a watch failure (the error is a status it sent), if it is one.
fn answer(err: &watcher::Error) -> Option<&kube::core::Status> {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => Some(status.as_ref()),
        _ => None,
    }
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

    fn status(code: u16, message: &str) -> Box<kube::core::Status> {
        let mut status = kube::core::Status::failure(message, "");
        status.code = code;
        Box::new(status)
    }

    fn watch(name: &str) -> Watch {
        Watch {
            name: name.to_owned(),
            api_version: "example.com/v1".to_owned(),
        }
    }

    #[test]
    fn a_watch_stays_down_until_it_delivers_itself_whatever_the_others_do() {
        let health = Health::default();
        let (databases, configmaps) = (watch("Database"), watch("ConfigMap"));
        let failed = watcher::Error::WatchError(status(500, "etcd is unhappy"));
        assert!(!health.watch_failed(&configmaps, &failed));
        health.delivered(&databases);
        health.restored();
        let Connection::Down { reason, .. } = health.status() else {
            panic!("another watch's event and a landed write do not clear it");
        };
        assert!(reason.starts_with("watching ConfigMap: "), "{reason}");
        health.delivered(&configmaps);
        assert!(health.is_up());
    }

    #[test]
    fn a_404_says_the_kind_is_not_served_until_it_is() {
        let health = Health::default();
        let databases = watch("Database");
        let missing = watcher::Error::InitialListFailed(kube::Error::Api(status(
            404,
            "the server could not find the requested resource",
        )));
        assert!(!health.watch_failed(&databases, &missing), "no refusal");
        health.restored();
        let Connection::NotServed { reason, .. } = health.status() else {
            panic!("not served: {:?}", health.status());
        };
        assert_eq!(
            reason,
            "the API server does not serve Database (example.com/v1): its CustomResourceDefinition, or that version of it, is not installed (the server could not find the requested resource)"
        );
        health.lost(&"connection refused");
        assert!(
            matches!(health.status(), Connection::NotServed { .. }),
            "a missing kind is named before an outage"
        );
        health.restored();
        health.delivered(&databases);
        assert!(health.is_up());
    }

    #[test]
    fn a_watch_is_named_by_its_kind_and_selection() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let plain = Watch::of::<ConfigMap>(&watcher::Config::default(), None);
        assert_eq!(
            (plain.name.as_str(), plain.api_version.as_str()),
            ("ConfigMap", "v1")
        );
        let selected = watcher::Config::default()
            .labels("app=db")
            .fields("metadata.name=a");
        assert_eq!(
            Watch::of::<ConfigMap>(&selected, Some("unlabelled")).name,
            "ConfigMap (unlabelled; labels app=db; fields metadata.name=a)"
        );
    }
}
