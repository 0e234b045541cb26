//! The webhook's HTTPS server (hyper on rustls): `POST` [`PATH`] for the machine and the
//! platform layer, `POST` [`TIER_PATH`]`NAME` for a tier, and, with a [`Converter`], `POST`
//! [`CONVERT_PATH`] for the CRD's conversions; everything else is 404 or 405, which the API
//! server treats under the webhook's failure policy.
//!
//! The port faces the cluster network, so nothing a client sends can make the operator grow
//! without bound: at most [`MAX_CONNECTIONS`] connections (more are closed at once); a TLS
//! handshake and a request's headers within [`HANDSHAKE_TIMEOUT`], its body within
//! [`REQUEST_DEADLINE`]; a body of at most [`MAX_BODY`]; and of all bodies being read at
//! once, only the first [`SMALL_BODY`] of each is free: the rest draws on one shared budget
//! of [`BODY_BUDGET`], and a request finding it spent is answered 503. An API server's review
//! (two objects, typically a few KiB) never needs the budget, so stalled large bodies cannot
//! starve it. JSON decoding is serde_json's, bounded by the body and its nesting limit.
//! Optionally, only clients with a certificate from a given CA are served
//! ([`Webhook::client_ca`]): the API server presents one to webhooks when its admission
//! configuration says so.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_rustls::TlsAcceptor;

use super::configuration::{PATH, TIER_PATH};
use super::conversion::{CONVERT_PATH, Converter};
use super::policy::Tier;
use super::review::Validator;
use super::tls::{ServingCertificate, TlsError};

/// How often certificate files are checked for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(10);
/// The largest review accepted: two objects of etcd's 1.5 MiB limit, JSON-encoded, and room.
pub const MAX_BODY: usize = 8 << 20;
/// Time for a client to finish the TLS handshake, and to send a request's headers.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a client to send a request's body once its headers are in (the API server sends
/// a review at once; it waits at most 30 s, `timeoutSeconds`, for the answer).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Connections open at once; more are closed as they come.
pub const MAX_CONNECTIONS: usize = 1024;
/// What each request may buffer of its body without drawing on [`BODY_BUDGET`].
pub const SMALL_BODY: usize = 64 << 10;
/// Bytes of bodies, beyond each one's first [`SMALL_BODY`], buffered at once over all requests.
pub const BODY_BUDGET: usize = 32 << 20;

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
/// `controller_runtime_webhook_latency_seconds` (`webhook`),
/// `kube_fsm_admission_denied_total` (`webhook`) and `kube_fsm_webhook_serving` (1 while it
/// accepts connections with a current certificate, as [`WebhookHealth::status`]).
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    requests: Family<Labels, Counter>,
    latency: Family<WebhookLabel, Histogram>,
    denied: Family<WebhookLabel, Counter>,
    serving: Gauge,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.000_1, 2.0, 16))
            }),
            denied: Family::default(),
            serving: Gauge::default(),
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
        registry.register(
            "kube_fsm_webhook_serving",
            "1 while the admission webhook accepts connections with a current certificate",
            self.serving.clone(),
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
    converter: Option<Arc<Converter>>,
    certificate: ServingCertificate,
    tls: TlsAcceptor,
    health: WebhookHealth,
    metrics: WebhookMetrics,
}

/// What one connection's requests share: the decision, the metrics, the body budget.
struct Shared {
    validator: Arc<Validator>,
    converter: Option<Arc<Converter>>,
    metrics: WebhookMetrics,
    budget: Semaphore,
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
        let tls = acceptor(&certificate, None)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok(Self {
            listener,
            validator: Arc::new(validator),
            converter: None,
            certificate,
            tls,
            health: WebhookHealth::default(),
            metrics: WebhookMetrics::default(),
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

    /// Also serves the CRD's conversions at [`CONVERT_PATH`] (same server, certificate and
    /// limits), as [`crate::admission::conversion_webhook`] registers them.
    #[must_use]
    pub fn converter(mut self, converter: Converter) -> Self {
        self.converter = Some(Arc::new(converter));
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
            converter,
            certificate,
            tls,
            health,
            metrics,
        } = self;
        health.serving.store(true, Ordering::Release);
        metrics.serving.set(1);
        let _serving = Serving(health.clone(), metrics.serving.clone());
        let up = metrics.serving.clone();
        let shared = Arc::new(Shared {
            validator,
            converter,
            metrics,
            budget: Semaphore::new(BODY_BUDGET),
        });
        let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
                    let Ok(open) = connections.clone().try_acquire_owned() else {
                        tracing::debug!(%peer, "webhook connection refused: {MAX_CONNECTIONS} are open");
                        continue;
                    };
                    let (tls, shared) = (tls.clone(), shared.clone());
                    tokio::spawn(async move {
                        let _open = open;
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                            Ok(Ok(stream)) => serve(stream, shared).await,
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
                    up.set(i64::from(result.is_ok()));
                    *health.certificate_error.lock().unwrap_or_else(PoisonError::into_inner) =
                        result.err().map(|err| err.to_string());
                }
            }
        }
    }
}

/// Marks the webhook down when `run` ends (dropped or panicked).
struct Serving(WebhookHealth, Gauge);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.store(false, Ordering::Release);
        self.1.set(0);
    }
}

/// The TLS acceptor serving `certificate`, verifying clients against `client_ca` if given.
fn acceptor(
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

async fn serve<S>(stream: S, shared: Arc<Shared>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(request, &shared).await) }
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

async fn answer(request: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let (validator, metrics) = (&shared.validator, &shared.metrics);
    let started = Instant::now();
    let path = request.uri().path().to_owned();
    let route = match path.strip_prefix(TIER_PATH) {
        Some(name) => match validator.policy().tier(name) {
            Some(tier) => Route::Review(Some(tier)),
            None => return text(StatusCode::NOT_FOUND, format!("no tier {name:?}\n")),
        },
        None if path == PATH => Route::Review(None),
        None if path == CONVERT_PATH => match &shared.converter {
            Some(converter) => Route::Convert(converter),
            None => return text(StatusCode::NOT_FOUND, "no conversions served\n".to_owned()),
        },
        None => return text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    };
    if request.method() != Method::POST {
        let what = match route {
            Route::Review(_) => "an AdmissionReview",
            Route::Convert(_) => "a ConversionReview",
        };
        return text(StatusCode::METHOD_NOT_ALLOWED, format!("POST {what}\n"));
    }
    let body = match tokio::time::timeout(
        REQUEST_DEADLINE,
        read_body(request.into_body(), &shared.budget),
    )
    .await
    {
        Ok(Ok((body, _budget))) => body,
        Ok(Err((status, message))) => return text(status, message),
        Err(_) => {
            return text(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {REQUEST_DEADLINE:?}\n"),
            );
        }
    };
    let (answered, denied) = match route {
        Route::Review(tier) => {
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
            (serde_json::to_vec(&answered), denied)
        }
        Route::Convert(converter) => match serde_json::from_slice(&body) {
            Ok(review) => {
                let answered = converter.review(review);
                let failed = answered
                    .response
                    .as_ref()
                    .is_some_and(|r| r.result.is_failure());
                (serde_json::to_vec(&answered), failed)
            }
            Err(err) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("not a ConversionReview: {err}\n"),
                );
            }
        },
    };
    let response = match answered {
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

/// What a request asks for.
enum Route<'a> {
    /// An admission review, for the machine (`None`) or a tier.
    Review(Option<&'a Tier>),
    /// A conversion review.
    Convert(&'a Converter),
}

/// A body as read, and its share of the budget (held until the request is answered).
type Read<'a> = (Bytes, Option<SemaphorePermit<'a>>);

/// Reads a request's body: at most [`MAX_BODY`], and beyond its first [`SMALL_BODY`] only
/// while the shared `budget` has room.
async fn read_body(
    mut body: Incoming,
    budget: &Semaphore,
) -> Result<Read<'_>, (StatusCode, String)> {
    let announced = body.size_hint().lower();
    if usize::try_from(announced).is_ok_and(|n| n > MAX_BODY) {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a review is at most {MAX_BODY} bytes\n"),
        ));
    }
    // The frames as they came (no buffer grown by doubling), joined once complete.
    let mut frames: Vec<Bytes> = Vec::new();
    let mut read = 0;
    let mut held: Option<SemaphorePermit<'_>> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| (StatusCode::BAD_REQUEST, format!("{err}\n")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = read + data.len();
        if total > MAX_BODY {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a review is at most {MAX_BODY} bytes\n"),
            ));
        }
        let reserved = held.as_ref().map_or(0, |p| p.num_permits());
        let needed = total.saturating_sub(SMALL_BODY).saturating_sub(reserved);
        if needed > 0 {
            let more = u32::try_from(needed)
                .ok()
                .and_then(|n| budget.try_acquire_many(n).ok())
                .ok_or_else(|| {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too many large reviews are being read; try again\n".to_owned(),
                    )
                })?;
            match &mut held {
                Some(permit) => permit.merge(more),
                None => held = Some(more),
            }
        }
        read = total;
        frames.push(data);
    }
    let body = match frames.as_slice() {
        [one] => one.clone(),
        _ => Bytes::from(frames.concat()),
    };
    Ok((body, held))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::TlsConnector;
    use tokio_rustls::client::TlsStream;

    use super::*;
    use crate::admission::Policy;
    use crate::admission::tests_support::{MACHINE, status_update};

    /// A TLS client trusting the webhook's development CA.
    fn connector(ca: &str) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }

    async fn connect(tls: &TlsConnector, addr: SocketAddr) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        tls.connect(name, tcp).await.unwrap()
    }

    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * 4096
    }

    /// POSTs one legal review on a new connection; the whole answer.
    async fn review(tls: &TlsConnector, addr: SocketAddr) -> String {
        let body = status_update(Some("Pending"), Some("Running"), "kube-fsm").to_string();
        post(tls, addr, PATH, &body).await
    }

    /// POSTs `body` to `path` on a new connection; the whole answer.
    async fn post(tls: &TlsConnector, addr: SocketAddr, path: &str, body: &str) -> String {
        let mut stream = connect(tls, addr).await;
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap_or_default();
        answer
    }

    #[tokio::test]
    async fn conversions_are_served_at_their_path_beside_the_reviews_and_only_when_given() {
        let conversion = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {
                "uid": "u-2",
                "desiredAPIVersion": "example.com/v1",
                "objects": [{
                    "apiVersion": "example.com/v1alpha1",
                    "kind": "Ticket",
                    "metadata": { "name": "t", "namespace": "ns" },
                    "spec": { "title": "t", "assignee": null },
                    "status": { "phase": "Working" },
                }],
            },
        })
        .to_string();
        let mut served = Vec::new();
        for converts in [true, false] {
            let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).unwrap();
            let tls = connector(certificate.ca_bundle().unwrap());
            let validator = Validator::for_machine(&MACHINE, Policy::default());
            let mut webhook = Webhook::bind("127.0.0.1:0".parse().unwrap(), validator, certificate)
                .await
                .unwrap();
            if converts {
                webhook = webhook.converter(crate::admission::conversion::tests::converter());
            }
            let addr = webhook.local_addr();
            let server = tokio::spawn(webhook.run());
            let converted = post(&tls, addr, CONVERT_PATH, &conversion).await;
            let reviewed = review(&tls, addr).await;
            server.abort();
            served.push((converted, reviewed));
        }
        let (converted, reviewed) = &served[0];
        assert!(converted.starts_with("HTTP/1.1 200"), "{converted}");
        assert!(converted.contains(r#""summary":"t""#), "{converted}");
        assert!(
            converted.contains(r#""status":{"phase":"Working"}"#),
            "{converted}"
        );
        assert!(reviewed.starts_with("HTTP/1.1 200"), "{reviewed}");
        let (converted, _) = &served[1];
        assert!(converted.starts_with("HTTP/1.1 404"), "{converted}");
        assert!(converted.contains("no conversions served"), "{converted}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[expect(
        clippy::await_holding_lock,
        reason = "held by the test's own future (block_on never moves it) to keep the property tests' allocations out of the measurement"
    )]
    async fn stalled_large_bodies_neither_grow_the_process_nor_starve_a_review() {
        let _memory = crate::test_machines::MEMORY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).unwrap();
        let tls = connector(certificate.ca_bundle().unwrap());
        let validator = Validator::for_machine(&MACHINE, Policy::default());
        let webhook = Webhook::bind("127.0.0.1:0".parse().unwrap(), validator, certificate)
            .await
            .unwrap();
        let addr = webhook.local_addr();
        let server = tokio::spawn(webhook.run());
        assert!(review(&tls, addr).await.starts_with("HTTP/1.1 200"));
        let before = resident_bytes();

        // 100 clients announce 8 MiB, send all but the last byte, and stall. They share one
        // buffer: what grows is the server's memory, not theirs.
        let chunk: Arc<[u8]> = vec![b' '; 1 << 20].into();
        let mut stalled = Vec::new();
        for _ in 0..100 {
            let mut stream = connect(&tls, addr).await;
            let head =
                format!("POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {MAX_BODY}\r\n\r\n");
            let chunk = chunk.clone();
            stalled.push(tokio::spawn(async move {
                stream.write_all(head.as_bytes()).await.ok()?;
                for _ in 0..7 {
                    stream.write_all(&chunk[..]).await.ok()?;
                }
                stream.write_all(&chunk[..chunk.len() - 1]).await.ok()?;
                stream.flush().await.ok()?;
                tokio::time::sleep(Duration::from_secs(30)).await;
                Some(stream)
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let grown = resident_bytes().saturating_sub(before);

        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(2), review(&tls, addr))
            .await
            .expect("a review is answered within 2 s while the bodies stall");
        let took = started.elapsed();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("\"allowed\":true"), "{answer}");
        eprintln!(
            "100 stalled 8 MiB bodies: RSS grew by {} MiB; a review took {took:?}",
            grown >> 20
        );
        assert!(grown < 64 << 20, "RSS grew by {} MiB", grown >> 20);
        for task in stalled {
            task.abort();
        }
        server.abort();
    }
}
