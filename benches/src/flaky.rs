//! A flaky API server for operators that run as processes of their own: a plain-HTTP reverse
//! proxy on loopback that forwards every request to the real API server with the harness's
//! own client (its credentials and TLS) and answers a share of them, at random, itself with
//! 429 (`Retry-After: 1`), 500 or 503 — the server idle, not overloaded. The operator is
//! pointed at it with a kubeconfig of its own ([`FlakyProxy::kubeconfig`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::client::DynBody;
use kube_fsm_testkit::overload::{flaky_code, refusal, status_answer};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Answer = Response<Box<DynBody>>;

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct FlakyProxy {
    addr: SocketAddr,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Counts {
    refused: AtomicU64,
    forwarded: AtomicU64,
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FlakyProxy {
    /// A proxy on an ephemeral loopback port in front of `client`'s API server that refuses
    /// `share` of all requests (reads, watches and writes alike).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(client: kube::Client, share: f64) -> Result<Self, BoxError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let shared = counts.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let client = client.clone();
                let counts = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        answer(client.clone(), counts.clone(), share, request)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FlakyProxy { addr, counts, task })
    }

    /// A kubeconfig naming this proxy (plain HTTP, no credentials: the proxy adds its own).
    #[must_use]
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: flaky\n  cluster:\n    server: http://{}\n\
             users:\n- name: flaky\n  user: {{}}\ncontexts:\n- name: flaky\n  context:\n    cluster: flaky\n    user: flaky\n\
             current-context: flaky\n",
            self.addr
        )
    }

    /// The requests refused so far, and those forwarded.
    #[must_use]
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.refused.load(Ordering::SeqCst),
            self.counts.forwarded.load(Ordering::SeqCst),
        )
    }
}

async fn answer(
    client: kube::Client,
    counts: Arc<Counts>,
    share: f64,
    request: Request<Incoming>,
) -> Result<Answer, Infallible> {
    if fastrand::f64() < share {
        counts.refused.fetch_add(1, Ordering::SeqCst);
        return Ok(refusal(flaky_code(), 1));
    }
    counts.forwarded.fetch_add(1, Ordering::SeqCst);
    let (mut parts, body) = request.into_parts();
    for hop in ["host", "connection", "content-length", "transfer-encoding"] {
        parts.headers.remove(hop);
    }
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Ok(plain(StatusCode::BAD_REQUEST, "unreadable request body"));
    };
    let forwarded = Request::from_parts(parts, kube::client::Body::from(body));
    Ok(match client.send(forwarded).await {
        Ok(response) => response
            .map(|body| Box::new(body.map_err(|e| -> BoxError { Box::new(e) })) as Box<DynBody>),
        Err(error) => plain(StatusCode::BAD_GATEWAY, &error.to_string()),
    })
}

/// The proxy's own refusal: `code` with `message`.
fn plain(code: StatusCode, message: &str) -> Answer {
    let reason = code.canonical_reason().unwrap_or_default().replace(' ', "");
    status_answer(code, &reason, message, None)
}
