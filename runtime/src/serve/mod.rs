//! The operator's own HTTP endpoint (feature `serve`), as controller-runtime's manager serves
//! it: `GET /metrics` (Prometheus text format), `GET /healthz` (liveness: the process serves,
//! and so does its admission webhook when it has one), `GET /readyz` (the readiness probe),
//! `GET /readyz/watches` (503 while a machine's watches are down or a kind it watches is not
//! served, naming it and saying since when and why) and `GET /machine`, every machine drawn
//! with the number of objects in each phase.
//!
//! What `/readyz` answers depends on what the Pod serves. Without a webhook it is the watches'
//! health (`/readyz/watches`): a replica cut off from the API server leaves the Service. With an
//! admission or conversion webhook it is the webhook's own readiness only (it serves, with a
//! certificate still valid), never the watches': the webhook's Service selects these Pods by
//! readiness, and under `failurePolicy: Fail` a Pod that left it for want of a watch would
//! refuse every write of the kind cluster-wide — the operator's own status writes included —
//! and, with a conversion webhook, stop the very lists its watches wait for. The watches'
//! health is then read at `/readyz/watches` (and in the metrics and the logs).
//!
//! A certificate that does not load is a readiness problem, not a liveness one: the webhook
//! still serves the old certificate, and a restarted process would not load the new one
//! either (it would crash-loop instead of serving).
//!
//! Served on hyper's HTTP/1 connection API, as the admission webhook is: five fixed paths need
//! no router, and the webhook's hardening (header-read timeouts, connection caps) is written
//! against that API. With [`Endpoints::tls`] (feature `admission`, which has the certificate
//! handling) it serves HTTPS, as controller-runtime's secure metrics serving does: scrapers'
//! bearer tokens then never cross the network in clear text.

mod authorize;
mod page;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

#[cfg(feature = "admission")]
use crate::admission::{ServeError, ServingCertificate, WebhookHealth};
use crate::machine::description::Description;
use crate::machine::state_machine::StateMachine;
use crate::manager::{Manager, Readiness};
use crate::metrics::Metrics;
use authorize::{Authorizer, Verdict};
use page::Shown;

/// What the endpoint serves: build it, then [`Endpoints::serve`].
#[derive(Debug)]
pub struct Endpoints {
    registry: Registry,
    readiness: Readiness,
    #[cfg(feature = "admission")]
    webhook: Option<WebhookHealth>,
    /// Each machine `/machine` draws, with the metrics that count its objects.
    machines: Vec<(Description, Metrics)>,
    /// Who may read `/metrics` and `/machine` (anyone: `None`).
    authorizer: Option<Authorizer>,
    /// HTTPS with this certificate (plain HTTP: `None`).
    #[cfg(feature = "admission")]
    tls: Option<Tls>,
}

/// The endpoint's TLS: the acceptor, and the certificate it re-reads.
#[cfg(feature = "admission")]
struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    certificate: ServingCertificate,
}

#[cfg(feature = "admission")]
impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("certificate", &self.certificate)
            .finish_non_exhaustive()
    }
}

/// How long a client has to finish its TLS handshake.
#[cfg(feature = "admission")]
const HANDSHAKE: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a certificate read from files is read again (cert-manager renews it in place).
#[cfg(feature = "admission")]
const RELOAD: std::time::Duration = std::time::Duration::from_secs(60);

impl Endpoints {
    /// `/metrics` from `registry`, `/readyz` from `readiness` (a [`Manager`]'s, or one
    /// operator's [`crate::watch::Health`]).
    #[must_use]
    pub fn new(registry: Registry, readiness: impl Into<Readiness>) -> Self {
        Endpoints {
            registry,
            readiness: readiness.into(),
            #[cfg(feature = "admission")]
            webhook: None,
            machines: Vec::new(),
            authorizer: None,
            #[cfg(feature = "admission")]
            tls: None,
        }
    }

    /// Everything `manager` runs: its metrics registered in a new registry, its readiness,
    /// and each of its machines drawn on `/machine`.
    #[must_use]
    pub fn of(manager: &Manager) -> Self {
        let mut registry = Registry::default();
        manager.metrics().register(&mut registry);
        let mut endpoints = Endpoints::new(registry, manager.readiness());
        endpoints.machines = manager
            .descriptions()
            .into_iter()
            .map(|description| (description, manager.metrics().clone()))
            .collect();
        endpoints
    }

    /// The registry `/metrics` serves, to register more into it.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// `/healthz` fails while the admission webhook does not serve
    /// ([`WebhookHealth::live`]); `/readyz` is then the webhook's readiness
    /// ([`WebhookHealth::ready`]: it serves, with a certificate still valid) and no longer the
    /// watches', which `/readyz/watches` still tells.
    #[cfg(feature = "admission")]
    #[must_use]
    pub fn webhook(mut self, webhook: Option<WebhookHealth>) -> Self {
        self.webhook = webhook;
        self
    }

    /// `/machine` draws `K`'s machine with the objects per phase that `metrics` (the ones
    /// given to its operator) count in the controller's cache.
    #[must_use]
    pub fn machine<K: StateMachine>(mut self, metrics: &Metrics) -> Self {
        self.machines
            .push((Description::of(K::machine()), metrics.clone()));
        self
    }

    /// Serves `/metrics` and `/machine` only to subjects the API server authenticates and
    /// authorizes, as controller-runtime's `FilterProvider` does: a request's bearer token is
    /// reviewed (`TokenReview`), then its subject's right to `get` the path
    /// (`SubjectAccessReview` of a non-resource URL): 401 without a token the API server
    /// accepts, 403 without the right, 503 when the API server cannot be asked; verdicts are
    /// remembered 10 s. `/healthz` and `/readyz` stay open (the kubelet probes them). The
    /// operator needs `create` on `tokenreviews` and `subjectaccessreviews`; a scraper, a
    /// ClusterRole allowing `get` on the non-resource URL `/metrics` (both generated by
    /// `manifests --metrics-auth`).
    #[must_use]
    pub fn authorize(mut self, client: kube::Client) -> Self {
        self.authorizer = Some(Authorizer::new(client));
        self
    }

    /// Serves HTTPS with `certificate` (re-read every minute when it comes from files), the
    /// probes included (the kubelet's HTTPS probes do not verify it).
    ///
    /// # Errors
    ///
    /// The certificate cannot serve TLS.
    #[cfg(feature = "admission")]
    pub fn tls(mut self, certificate: ServingCertificate) -> Result<Self, ServeError> {
        let acceptor = crate::admission::acceptor(&certificate, None)?;
        self.tls = Some(Tls {
            acceptor,
            certificate,
        });
        Ok(self)
    }

    /// Binds `addr` and serves until the task is dropped; returns the bound address (port 0
    /// picks a free port).
    ///
    /// # Errors
    ///
    /// The address cannot be bound.
    pub async fn serve(
        self,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = TcpListener::bind(addr).await?;
        let bound = listener.local_addr()?;
        let served = Arc::new(self);
        let task = tokio::spawn(async move {
            #[cfg(feature = "admission")]
            let mut reload = tokio::time::interval(RELOAD);
            loop {
                #[cfg(feature = "admission")]
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = reload.tick() => {
                        served.reload();
                        continue;
                    }
                };
                #[cfg(not(feature = "admission"))]
                let accepted = listener.accept().await;
                let Ok((stream, _)) = accepted else {
                    continue;
                };
                let served = served.clone();
                tokio::spawn(async move {
                    #[cfg(feature = "admission")]
                    if let Some(tls) = &served.tls {
                        match tokio::time::timeout(HANDSHAKE, tls.acceptor.accept(stream)).await {
                            Ok(Ok(stream)) => connection(stream, served.clone()).await,
                            Ok(Err(err)) => tracing::debug!(%err, "metrics TLS handshake"),
                            Err(_) => tracing::debug!("metrics TLS handshake timed out"),
                        }
                        return;
                    }
                    connection(stream, served).await;
                });
            }
        });
        Ok((bound, task))
    }

    /// Re-reads the certificate when it comes from files.
    #[cfg(feature = "admission")]
    fn reload(&self) {
        let Some(tls) = &self.tls else { return };
        match tls.certificate.reload() {
            Ok(true) => tracing::info!("metrics certificate reloaded"),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(%err, "cannot reload the metrics certificate; serving the old one");
            }
        }
    }

    fn live(&self) -> Result<(), String> {
        #[cfg(feature = "admission")]
        if let Some(webhook) = &self.webhook {
            return webhook.live();
        }
        Ok(())
    }

    /// The readiness probe's answer: the webhook's own readiness when it serves one, else the
    /// watches' (see the module's documentation).
    fn ready(&self) -> Result<(), String> {
        #[cfg(feature = "admission")]
        if let Some(webhook) = &self.webhook {
            return webhook.ready();
        }
        self.readiness.check()
    }
}

/// Serves one connection (plain, or TLS once the handshake is done).
async fn connection<S>(stream: S, served: Arc<Endpoints>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| respond(request, served.clone()));
    if let Err(err) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(%err, "metrics connection");
    }
}

async fn respond(
    request: Request<Incoming>,
    served: Arc<Endpoints>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path();
    let protected = matches!(path, "/metrics" | "/machine");
    let refused = match (&served.authorizer, protected) {
        (Some(authorizer), true) => {
            let header = request.headers().get(hyper::header::AUTHORIZATION);
            match authorizer
                .check(header.and_then(|h| h.to_str().ok()), path)
                .await
            {
                Verdict::Allowed => None,
                Verdict::Unauthenticated(why) => Some((StatusCode::UNAUTHORIZED, why)),
                Verdict::Forbidden(why) => Some((StatusCode::FORBIDDEN, why)),
                Verdict::Unavailable(why) => Some((StatusCode::SERVICE_UNAVAILABLE, why)),
            }
        }
        _ => None,
    };
    let (status, content_type, body) = match (refused, path) {
        (Some((status, why)), _) => (status, "text/plain", format!("{why}\n")),
        (None, path) => answer(path, &served),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    Ok(response)
}

/// The answer at `path`: status, content type, body.
fn answer(path: &str, served: &Endpoints) -> (StatusCode, &'static str, String) {
    match path {
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, &served.registry) {
                Ok(()) => (
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ),
                Err(err) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain",
                    err.to_string(),
                ),
            }
        }
        "/machine" => {
            let shown: Vec<Shown<'_>> = served
                .machines
                .iter()
                .map(|(machine, metrics)| Shown {
                    machine,
                    counts: metrics.objects(&machine.kind),
                })
                .collect();
            (
                StatusCode::OK,
                "text/html; charset=utf-8",
                page::page(&shown),
            )
        }
        "/healthz" => verdict(served.live()),
        "/readyz" => verdict(served.ready()),
        "/readyz/watches" => verdict(served.readiness.check()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    }
}

/// A probe's answer: 200 `ok`, or 503 with the reason.
fn verdict(result: Result<(), String>) -> (StatusCode, &'static str, String) {
    match result {
        Ok(()) => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            format!("{reason}\n"),
        ),
    }
}
