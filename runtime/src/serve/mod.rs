//! The operator's own HTTP endpoint: `GET /metrics` (Prometheus text format), `GET /healthz`
//! (liveness: the process serves, and so does its admission webhook when it has one) and
//! `GET /readyz` (503 while the API server is unreachable, saying since when and why, or
//! while the webhook's new certificate does not load), on hyper, as controller-runtime's
//! manager serves them; and `GET /machine`, each machine drawn with the number of objects in
//! each phase ([`page`]).
//!
//! A certificate that does not load is a readiness problem, not a liveness one: the webhook
//! still serves the old certificate, and a restarted process would not load the new one
//! either (it would crash-loop instead of serving).

pub mod page;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kube_fsm::StateMachine;
use kube_fsm::admission::WebhookHealth;
use kube_fsm::controller::{Connection, Health};
use kube_fsm::machine::Description;
use kube_fsm::metrics::Metrics;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use page::Shown;

/// What the endpoint serves: build it, then [`Endpoints::serve`].
#[derive(Debug)]
pub struct Endpoints {
    registry: Registry,
    health: Health,
    webhook: Option<WebhookHealth>,
    /// Each machine `/machine` draws, with the metrics that count its objects.
    machines: Vec<(Description, Metrics)>,
}

impl Endpoints {
    /// `/metrics` from `registry`, `/readyz` from the operator's `health`.
    #[must_use]
    pub fn new(registry: Registry, health: Health) -> Self {
        Endpoints {
            registry,
            health,
            webhook: None,
            machines: Vec::new(),
        }
    }

    /// `/healthz` also fails while the admission webhook does not serve
    /// ([`WebhookHealth::live`]), `/readyz` while its certificate has expired
    /// ([`WebhookHealth::ready`]).
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
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let served = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| respond(request, served.clone()));
                    if let Err(err) = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(%err, "metrics connection");
                    }
                });
            }
        });
        Ok((bound, task))
    }
}

async fn respond(
    request: Request<Incoming>,
    served: Arc<Endpoints>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match request.uri().path() {
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
        "/healthz" => match served.webhook.as_ref().map(WebhookHealth::live) {
            None | Some(Ok(())) => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
            Some(Err(reason)) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{reason}\n"),
            ),
        },
        "/readyz" => match served.health.status() {
            Connection::Up => match served.webhook.as_ref().map(WebhookHealth::ready) {
                None | Some(Ok(())) => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
                Some(Err(reason)) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{reason}\n"),
                ),
            },
            Connection::Down { since, reason } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("the API server has been unreachable since {since}: {reason}\n"),
            ),
            Connection::Refused { reason } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("the API server refuses a watch: {reason}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
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

/// Logs to stderr, filtered by `RUST_LOG` (default: `default`, e.g. `info`).
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
