//! What the webhook tells about itself: [`WebhookHealth`] for the probes (live: it serves;
//! ready: it serves a certificate still valid) and [`WebhookMetrics`] for Prometheus.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::admission::tls::timestamp;

/// Whether the webhook serves, for the operator's probes. Cloning shares it.
///
/// [`WebhookHealth::live`] is for the liveness probe (`/healthz`): it fails only when the
/// server no longer serves at all, which a restart can mend. [`WebhookHealth::ready`] is for
/// the readiness probe (`/readyz`): it also fails once the certificate served has expired, when
/// no client can complete a handshake anyway. Changed certificate files that do not load are
/// neither: the old certificate is still served and works, every replica reads the same
/// Secret, and failing a probe on it would take every replica out of the Service (or restart
/// them into a crash loop) and turn a degraded webhook into a cluster-wide outage. That is
/// told by [`WebhookHealth::certificate_problem`], a Warning Event ([`super::Webhook::events`])
/// and the metrics instead.
#[derive(Clone, Debug, Default)]
pub struct WebhookHealth {
    serving: Arc<AtomicBool>,
    certificate_error: Arc<Mutex<Option<String>>>,
    expires: Arc<Mutex<Option<SystemTime>>>,
}

impl WebhookHealth {
    /// `Ok` while [`super::Webhook::run`] accepts connections, whatever its certificate.
    ///
    /// # Errors
    /// The webhook is not serving (not started, or its task ended).
    pub fn live(&self) -> Result<(), String> {
        if self.serving.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err("the admission webhook is not serving".to_owned())
        }
    }

    /// `Ok` while [`super::Webhook::run`] accepts connections with a certificate still valid;
    /// otherwise why not: not serving, or the certificate served has expired (and no newer one
    /// loads).
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn ready(&self) -> Result<(), String> {
        self.live()?;
        let expires = *self.expires.lock().unwrap_or_else(PoisonError::into_inner);
        match expires {
            Some(at) if at <= SystemTime::now() => {
                let mut reason = format!(
                    "the admission webhook's certificate expired at {}",
                    timestamp(at)
                );
                if let Some(problem) = self.certificate_problem() {
                    reason.push_str(&format!(", and the new one does not load: {problem}"));
                }
                Err(reason)
            }
            _ => Ok(()),
        }
    }

    /// Why the changed certificate files do not load, while they do not (the old certificate is
    /// served meanwhile); `None` when the files served are the current ones.
    pub fn certificate_problem(&self) -> Option<String> {
        self.certificate_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Release);
    }

    /// Records the outcome of a certificate (re)load: the problem, if any, and when the
    /// certificate served now expires. Returns whether the problem changed.
    pub(super) fn set_certificate(
        &self,
        error: Option<String>,
        expires: Option<SystemTime>,
    ) -> bool {
        *self.expires.lock().unwrap_or_else(PoisonError::into_inner) = expires;
        let mut current = self
            .certificate_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let changed = *current != error;
        *current = error;
        changed
    }
}

/// Why the server closed a connection (the `reason` of
/// `kube_fsm_webhook_connections_closed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Closed {
    /// The TLS handshake did not end within [`super::Limits::handshake`].
    HandshakeTimeout,
    /// A request's head did not arrive within [`super::Limits::header`].
    HeaderTimeout,
    /// No request came for [`super::Limits::idle`].
    Idle,
    /// A response write made no progress for [`super::Limits::write`].
    WriteTimeout,
    /// Closed to make room for a newcomer.
    Evicted,
    /// Not served at all: no room, and nothing to evict.
    Refused,
    /// Older than [`super::Limits::max_age`]: shut down gracefully.
    MaxAge,
}

impl Closed {
    fn label(self) -> &'static str {
        match self {
            Closed::HandshakeTimeout => "handshake_timeout",
            Closed::HeaderTimeout => "header_timeout",
            Closed::Idle => "idle",
            Closed::WriteTimeout => "write_timeout",
            Closed::Evicted => "evicted",
            Closed::Refused => "refused",
            Closed::MaxAge => "max_age",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    webhook: String,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The webhook's metrics, under controller-runtime's names where it has them:
///
/// - `controller_runtime_webhook_requests_total` (`webhook`, `code`): every answer, by route
///   (the path served: `/validate`, `/validate/tier/NAME` of a known tier, `/convert`; any
///   other path is `other`) and HTTP code, the short ones (400, 404, 405, 408, 413, 503)
///   included;
/// - `controller_runtime_webhook_latency_seconds` (`webhook`): the time to answer;
/// - `kube_fsm_admission_denied_total` (`webhook`): admission reviews refused;
/// - `kube_fsm_conversion_failures_total`: conversion reviews answered with a failure, or
///   with an object of a list left unconverted;
/// - `kube_fsm_webhook_serving`: 1 while it accepts connections with a certificate still
///   valid (as [`WebhookHealth::ready`]);
/// - `kube_fsm_webhook_certificate_errors_total`: certificate reloads that failed (changed
///   files that do not load; retried every 10 s, the old certificate served meanwhile);
/// - `kube_fsm_webhook_certificate_expiry_timestamp_seconds`: when the certificate served
///   expires (Unix time; alert on it as on cert-manager's own);
/// - `kube_fsm_webhook_connections`: connections open;
/// - `kube_fsm_webhook_connections_closed_total` (`reason`): connections the server closed:
///   `handshake_timeout`, `header_timeout`, `idle`, `write_timeout`, `evicted` (for a
///   newcomer), `refused` (no room), `max_age`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    requests: Family<Labels, Counter>,
    latency: Family<WebhookLabel, Histogram>,
    denied: Family<WebhookLabel, Counter>,
    conversion_failures: Counter,
    serving: Gauge,
    certificate_errors: Counter,
    certificate_expiry: Gauge,
    connections: Gauge,
    closed: Family<ReasonLabel, Counter>,
    body_bytes: Gauge,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
            }),
            denied: Family::default(),
            conversion_failures: Counter::default(),
            serving: Gauge::default(),
            certificate_errors: Counter::default(),
            certificate_expiry: Gauge::default(),
            connections: Gauge::default(),
            closed: Family::default(),
            body_bytes: Gauge::default(),
        }
    }
}

impl WebhookMetrics {
    /// Registers the metrics (once per registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_webhook_requests",
            "Webhook requests answered, by route and HTTP code",
            self.requests.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Time to answer a webhook request",
            self.latency.clone(),
        );
        registry.register(
            "kube_fsm_admission_denied",
            "Admission reviews refused, by webhook path",
            self.denied.clone(),
        );
        registry.register(
            "kube_fsm_conversion_failures",
            "Conversion reviews answered with a failure",
            self.conversion_failures.clone(),
        );
        registry.register(
            "kube_fsm_webhook_serving",
            "1 while the admission webhook accepts connections with a certificate still valid",
            self.serving.clone(),
        );
        registry.register(
            "kube_fsm_webhook_certificate_errors",
            "Webhook certificate reloads that failed (the old certificate is still served)",
            self.certificate_errors.clone(),
        );
        registry.register(
            "kube_fsm_webhook_certificate_expiry_timestamp_seconds",
            "When the webhook's certificate served now expires (Unix time)",
            self.certificate_expiry.clone(),
        );
        registry.register(
            "kube_fsm_webhook_connections",
            "Connections to the webhook open now",
            self.connections.clone(),
        );
        registry.register(
            "kube_fsm_webhook_connections_closed",
            "Connections the webhook closed, by reason",
            self.closed.clone(),
        );
        registry.register(
            "kube_fsm_webhook_body_bytes",
            "Bytes of request bodies the webhook holds now (read, not yet answered)",
            self.body_bytes.clone(),
        );
    }

    /// Bytes of request bodies the webhook holds now: read, and not yet answered or refused.
    pub fn body_bytes(&self) -> i64 {
        self.body_bytes.get()
    }

    /// What counts the bytes of bodies held ([`WebhookMetrics::body_bytes`]).
    pub(super) fn body_bytes_gauge(&self) -> &Gauge {
        &self.body_bytes
    }

    /// Counts one answer of `code` on `route` that took `seconds`.
    pub(super) fn answered(&self, route: &str, code: u16, seconds: f64) {
        self.requests
            .get_or_create(&Labels {
                webhook: route.to_owned(),
                code,
            })
            .inc();
        self.latency
            .get_or_create(&WebhookLabel {
                webhook: route.to_owned(),
            })
            .observe(seconds);
    }

    /// Counts one admission review refused on `route`.
    pub(super) fn denied(&self, route: &str) {
        self.denied
            .get_or_create(&WebhookLabel {
                webhook: route.to_owned(),
            })
            .inc();
    }

    /// Counts one conversion review answered with a failure.
    pub(super) fn conversion_failed(&self) {
        self.conversion_failures.inc();
    }

    /// Counts one connection closed by the server.
    pub(super) fn closed(&self, reason: Closed) {
        self.closed
            .get_or_create(&ReasonLabel {
                reason: reason.label(),
            })
            .inc();
    }

    /// The connections open now.
    pub(super) fn open(&self, open: usize) {
        self.connections
            .set(i64::try_from(open).unwrap_or(i64::MAX));
    }

    /// Marks the webhook serving a certificate still valid or not.
    pub(super) fn set_serving(&self, serving: bool) {
        self.serving.set(i64::from(serving));
    }

    /// Counts one failed certificate reload.
    pub(super) fn certificate_error(&self) {
        self.certificate_errors.inc();
    }

    /// Records when the certificate served expires.
    pub(super) fn certificate_expires(&self, at: Option<SystemTime>) {
        let seconds = at
            .and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.certificate_expiry.set(seconds);
    }
}
