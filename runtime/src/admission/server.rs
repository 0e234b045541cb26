//! The webhook's HTTPS server (hyper on rustls): `POST` [`PATH`] for the machine and the
//! platform layer, `POST` [`TIER_PATH`]`NAME` for a tier; everything else is 404 or 405, which
//! the API server treats under the webhook's failure policy.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::configuration::{PATH, TIER_PATH};
use super::review::Validator;
use super::tls::{ServingCertificate, TlsError};

/// How often certificate files are checked for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// The largest review accepted: two objects of etcd's 1.5 MiB limit, JSON-encoded, and room.
const MAX_BODY: usize = 8 << 20;
/// Time for a client to finish the TLS handshake, and to send a request's headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    webhook: String,
    code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: String,
}

/// The webhook's metrics, under controller-runtime's names:
/// `controller_runtime_webhook_requests_total` (`webhook`, `code`),
/// `controller_runtime_webhook_latency_seconds` (`webhook`) and
/// `kube_fsm_admission_denied_total` (`webhook`).
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    requests: Family<Labels, Counter>,
    latency: Family<WebhookLabel, Histogram>,
    denied: Family<WebhookLabel, Counter>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
            }),
            denied: Family::default(),
        }
    }
}

impl WebhookMetrics {
    /// Registers the metrics (once per registry).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_webhook_requests",
            "Admission reviews answered, by webhook path and HTTP code",
            self.requests.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Time to answer an admission review",
            self.latency.clone(),
        );
        registry.register(
            "kube_fsm_admission_denied",
            "Admission reviews refused, by webhook path",
            self.denied.clone(),
        );
    }
}

/// Whether the webhook serves, for the operator's `/healthz`. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct WebhookHealth {
    serving: Arc<AtomicBool>,
    certificate_error: Arc<Mutex<Option<String>>>,
}

impl WebhookHealth {
    /// `Ok` while [`Webhook::run`] accepts connections with a current certificate; otherwise
    /// why not (not running, or the certificate files changed and do not load, in which case
    /// the old certificate is still served).
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn status(&self) -> Result<(), String> {
        if !self.serving.load(Ordering::Acquire) {
            return Err("the admission webhook is not serving".to_owned());
        }
        match &*self
            .certificate_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(err) => Err(format!(
                "the admission webhook's new certificate does not load (the old one is served): {err}"
            )),
            None => Ok(()),
        }
    }
}

/// A [`Validator`] served over HTTPS on a bound address.
///
/// ```no_run
/// # async fn demo<K: kube_fsm::StateMachine + kube::CustomResourceExt>(client: kube::Client)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// use kube_fsm::admission::{
///     Endpoint, Policy, ServingCertificate, Validator, Webhook, WebhookOptions,
///     validating_webhook_configuration,
/// };
/// let certificate = ServingCertificate::from_files("/tls/tls.crt", "/tls/tls.key")?;
/// let validator = Validator::new::<K>(Policy::default())?;
/// let webhook = Webhook::bind("0.0.0.0:9443".parse()?, validator, certificate).await?;
/// let health = webhook.health(); // for `/healthz`
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
    validator: Arc<Validator>,
    certificate: ServingCertificate,
    tls: TlsAcceptor,
    health: WebhookHealth,
    metrics: WebhookMetrics,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("listener", &self.listener)
            .field("certificate", &self.certificate)
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
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::from)?
            .with_no_client_auth()
            .with_cert_resolver(certificate.resolver());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok(Self {
            listener,
            validator: Arc::new(validator),
            certificate,
            tls: TlsAcceptor::from(Arc::new(config)),
            health: WebhookHealth::default(),
            metrics: WebhookMetrics::default(),
        })
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
            validator,
            certificate,
            tls,
            health,
            metrics,
        } = self;
        health.serving.store(true, Ordering::Release);
        let _serving = Serving(health.clone());
        let mut reload = tokio::time::interval(RELOAD_EVERY);
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
                    let (tls, validator, metrics) = (tls.clone(), validator.clone(), metrics.clone());
                    tokio::spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                            Ok(Ok(stream)) => serve(stream, validator, metrics).await,
                            Ok(Err(err)) => tracing::debug!(%peer, %err, "webhook TLS handshake failed"),
                            Err(_) => tracing::debug!(%peer, "webhook TLS handshake timed out"),
                        }
                    });
                }
                _ = reload.tick(), if certificate.from_disk() => {
                    let result = certificate.reload();
                    match &result {
                        Ok(true) => tracing::info!("webhook certificate reloaded"),
                        Ok(false) => {}
                        Err(err) => tracing::warn!(%err, "webhook certificate changed but does not load; serving the old one"),
                    }
                    *health.certificate_error.lock().unwrap_or_else(PoisonError::into_inner) =
                        result.err().map(|err| err.to_string());
                }
            }
        }
    }
}

/// Marks the webhook down when `run` ends (dropped or panicked).
struct Serving(WebhookHealth);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.store(false, Ordering::Release);
    }
}

async fn serve<S>(stream: S, validator: Arc<Validator>, metrics: WebhookMetrics)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let (validator, metrics) = (validator.clone(), metrics.clone());
        async move { Ok::<_, Infallible>(answer(request, &validator, &metrics).await) }
    });
    let result = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(err) = result {
        tracing::debug!(%err, "webhook connection");
    }
}

async fn answer(
    request: Request<Incoming>,
    validator: &Validator,
    metrics: &WebhookMetrics,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let path = request.uri().path().to_owned();
    let tier = match path.strip_prefix(TIER_PATH) {
        Some(name) => match validator.policy().tier(name) {
            Some(tier) => Some(tier),
            None => return text(StatusCode::NOT_FOUND, format!("no tier {name:?}\n")),
        },
        None if path == PATH => None,
        None => return text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    };
    if request.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "POST an AdmissionReview\n".to_owned(),
        );
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(err) => return text(StatusCode::PAYLOAD_TOO_LARGE, format!("{err}\n")),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(review) => review,
        Err(err) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("not an AdmissionReview: {err}\n"),
            );
        }
    };
    let answered = validator.review(tier, review);
    let denied = answered.response.as_ref().is_some_and(|r| !r.allowed);
    let response = match serde_json::to_vec(&answered) {
        Ok(json) => {
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
    };
    let webhook = WebhookLabel { webhook: path };
    metrics
        .requests
        .get_or_create(&Labels {
            webhook: webhook.webhook.clone(),
            code: response.status().as_u16(),
        })
        .inc();
    if denied {
        metrics.denied.get_or_create(&webhook).inc();
    }
    metrics
        .latency
        .get_or_create(&webhook)
        .observe(started.elapsed().as_secs_f64());
    response
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
