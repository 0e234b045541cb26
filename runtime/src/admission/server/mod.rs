//! The webhook's HTTPS server (hyper on rustls): `POST` [`PATH`] for the machine and the
//! platform layer, `POST` [`TIER_PATH`]`NAME` for a tier, and, with a [`Converter`], `POST`
//! [`CONVERT_PATH`] for the CRD's conversions; everything else is 404 or 405, which the API
//! server treats under the webhook's failure policy.
//!
//! The port faces the cluster network, so nothing a client sends can make the operator grow
//! without bound, nor hold it away from the API server ([`Limits`]): at most 1 024
//! connections, 256 from one address, a newcomer taking the place of the connection waiting
//! longest (never of one being answered); a TLS handshake within 3 s; a request's head
//! within 10 s of its first byte (the first one within 10 s of the handshake); its body
//! within 10 s; a response write stalled for 10 s closes the connection; a connection is
//! shut down gracefully at 10 minutes. Idle keep-alive connections stay open 120 s, longer
//! than the API server keeps them (90 s), so that it never sends a review on a connection
//! the server is closing. A body is at most [`MAX_BODY`](answer::MAX_BODY), and of all
//! bodies being read at once, only the first [`SMALL_BODY`](answer::SMALL_BODY) of each is
//! free: the rest draws on one shared budget of [`BODY_BUDGET`], and a request finding it
//! spent is answered 503. An API server's review (two objects, typically a few KiB) never
//! needs the budget, so stalled large bodies cannot starve it. JSON decoding is
//! serde_json's, bounded by the body and its nesting limit. Optionally, only clients with a
//! certificate from a given CA are served ([`Webhook::client_ca`]): the API server presents
//! one to webhooks when its admission configuration says so.
//!
//! The parts: [`answer`] (one request: route, body, review, its metrics), `connections`
//! (the registry that admits and evicts, each connection's phase and deadlines, the IO
//! wrapper that sees them), `serve` (one connection's life), `health` ([`WebhookHealth`],
//! [`WebhookMetrics`]), `limits` ([`Limits`]), `certificate` (what a certificate reload tells).

mod answer;
mod certificate;
mod connections;
mod health;
mod limits;
mod serve;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Recorder;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use super::conversion::Converter;
use super::review::Validator;
use super::tls::{ServingCertificate, TlsError};
#[cfg(doc)]
use super::{configuration::PATH, configuration::TIER_PATH, conversion::CONVERT_PATH};
use answer::{BODY_BUDGET, Shared};
use connections::Registry;
pub use health::{WebhookHealth, WebhookMetrics};
pub use limits::Limits;

/// How often certificate files are checked for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Why the webhook cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS's reason.
        source: std::io::Error,
    },
    /// The TLS configuration was refused.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// A [`Validator`] served over HTTPS on a bound address.
///
/// ```no_run
/// # async fn demo<K: kube_fsm::StateMachine + kube::CustomResourceExt + kube::Resource<DynamicType = ()>>(client: kube::Client)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use kube_fsm::admission::{
///     Endpoint, Policy, ServingCertificate, Validator, Webhook, WebhookOptions,
///     validating_webhook_configuration,
/// };
/// let certificate = ServingCertificate::from_files("/tls/tls.crt", "/tls/tls.key")?;
/// let validator = Validator::new::<K>(Policy::default())?;
/// let webhook = Webhook::bind("0.0.0.0:9443".parse()?, validator, certificate).await?;
/// let health = webhook.health(); // `live()` for `/healthz`, `ready()` for `/readyz`
/// tokio::spawn(webhook.run());
/// // Registered once, e.g. by the deployment (the Service `db-webhook` in front of the pods):
/// let options = WebhookOptions::new(Endpoint::Service {
///     namespace: "databases".into(),
///     name: "db-webhook".into(),
///     port: Some(443),
/// });
/// let configuration = validating_webhook_configuration::<K>(&options, &Policy::default());
/// # Ok(()) }
/// ```
pub struct Webhook {
    listener: TcpListener,
    validators: Vec<Validator>,
    converters: Vec<Converter>,
    certificate: ServingCertificate,
    tls: TlsAcceptor,
    health: WebhookHealth,
    metrics: WebhookMetrics,
    limits: Limits,
    reload_every: Duration,
    events: Option<(Recorder, ObjectReference)>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("listener", &self.listener)
            .field("certificate", &self.certificate)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Webhook {
    /// Binds `addr` (port 0 picks a free port) for `validator` with `certificate`.
    ///
    /// # Errors
    /// When the address cannot be bound or rustls refuses the configuration.
    pub async fn bind(
        addr: SocketAddr,
        validator: Validator,
        certificate: ServingCertificate,
    ) -> Result<Self, ServeError> {
        let tls = acceptor(&certificate, None)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok(Self {
            listener,
            validators: vec![validator],
            converters: Vec::new(),
            certificate,
            tls,
            health: WebhookHealth::default(),
            metrics: WebhookMetrics::default(),
            limits: Limits::default(),
            reload_every: RELOAD_EVERY,
            events: None,
        })
    }

    /// Serves only clients presenting a certificate signed by a CA of `ca_pem` (PEM): the
    /// API server authenticates to webhooks with the client certificate its admission
    /// configuration names (`--admission-control-config-file`, `kubeConfigFile` per webhook).
    ///
    /// # Errors
    /// When `ca_pem` holds no usable CA certificate.
    pub fn client_ca(mut self, ca_pem: &[u8]) -> Result<Self, ServeError> {
        self.tls = acceptor(&self.certificate, Some(ca_pem))?;
        Ok(self)
    }

    /// Also reviews another kind's writes, at the same paths: each review goes to the
    /// validator of its kind (`request.kind`), so that one Service, one certificate and one
    /// registration with a webhook per kind serve every machine of a process.
    #[must_use]
    pub fn validator(mut self, validator: Validator) -> Self {
        self.validators.push(validator);
        self
    }

    /// Also serves a CRD's conversions at [`CONVERT_PATH`] (same server, certificate and
    /// limits), as [`crate::admission::conversion_webhook`] registers them. Called for several
    /// kinds, each review goes to the converter of its objects' kind and group.
    #[must_use]
    pub fn converter(mut self, converter: Converter) -> Self {
        self.converters.push(converter);
        self
    }

    /// Limits its clients with `limits` instead of [`Limits::default`] (smaller numbers for
    /// tests, say).
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The bound address.
    ///
    /// # Panics
    /// Never after a successful bind (the OS knows the address of a bound socket).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The handle for health checks.
    pub fn health(&self) -> WebhookHealth {
        self.health.clone()
    }

    /// Tells of certificate problems with Events about `regarding` (the operator's Pod, say):
    /// a Warning `CertificateNotLoaded` when changed certificate files do not load (the old
    /// certificate is still served), a Normal `CertificateLoaded` when they load again.
    #[must_use]
    pub fn events(mut self, recorder: Recorder, regarding: ObjectReference) -> Self {
        self.events = Some((recorder, regarding));
        self
    }

    /// Records into `metrics` (register them once with [`WebhookMetrics::register`]).
    #[must_use]
    pub fn metrics(mut self, metrics: &WebhookMetrics) -> Self {
        self.metrics = metrics.clone();
        self
    }

    /// Serves until the future is dropped, re-reading certificate files when they change.
    pub async fn run(self) {
        let Self {
            listener,
            validators,
            converters,
            certificate,
            tls,
            health,
            metrics,
            limits,
            reload_every,
            events,
        } = self;
        health.set_serving(true);
        certificate::record(&health, &metrics, None, certificate.expires());
        let _serving = Serving(health.clone(), metrics.clone());
        let shared = Arc::new(Shared {
            validators,
            converters,
            metrics: metrics.clone(),
            budget: Semaphore::new(BODY_BUDGET),
            body: limits.body,
        });
        let registry = Registry::new(limits, metrics.clone());
        let mut reload = tokio::time::interval(reload_every);
        reload.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(accepted) => accepted,
                        Err(err) => {
                            // E.g. out of file descriptors: do not spin on it.
                            tracing::warn!(%err, "webhook accept failed");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let Some(ticket) = registry.admit(peer.ip().to_canonical()) else {
                        tracing::debug!(%peer, "webhook connection refused: every connection is answering a request, or closing");
                        continue;
                    };
                    let task = serve::connection(stream, ticket, tls.clone(), shared.clone(), limits);
                    tokio::spawn(task);
                }
                _ = reload.tick(), if certificate.from_disk() => {
                    certificate::reloaded(&certificate, &health, &metrics, events.as_ref());
                }
            }
        }
    }
}

/// Marks the webhook down when `run` ends (dropped or panicked).
struct Serving(WebhookHealth, WebhookMetrics);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.set_serving(false);
        self.1.set_serving(false);
    }
}

/// The TLS acceptor serving `certificate`, verifying clients against `client_ca` if given.
pub(crate) fn acceptor(
    certificate: &ServingCertificate,
    client_ca: Option<&[u8]>,
) -> Result<TlsAcceptor, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::from)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => builder.with_client_cert_verifier(super::tls::client_verifier(pem, provider)?),
    };
    let mut config = builder.with_cert_resolver(certificate.resolver());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests;
