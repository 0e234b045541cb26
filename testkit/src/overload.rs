//! An API server that refuses writes as an overloaded one does: a layer in a client's stack
//! that answers every mutating request (POST, PUT, PATCH, DELETE) with `429 Too Many
//! Requests`, `Retry-After` and the Status body kube-apiserver's priority and fairness filter
//! sends, while reads and watches go through to the real server. (The real 1.20 server exempts
//! its `system:masters` test user from priority and fairness, so it cannot be made to refuse
//! that user itself.) The layer sits outside kube's own retry layer, so the engine sees each
//! refusal, as it does once kube's retries are spent.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::{Body, ClientBuilder, DynBody};
use tower::{BoxError, Service};

/// The switch and the counts of one overloaded client.
#[derive(Debug)]
pub struct Overload {
    refusing: AtomicBool,
    /// While not refusing everything: the share of writes refused at random (a flaky server),
    /// as `f64` bits, each with 429, 500 or 503.
    flaky: AtomicU64,
    retry_after: u32,
    refused: AtomicU64,
    passed: AtomicU64,
}

impl Overload {
    /// Starts refusing writes.
    pub fn refuse(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }

    /// Stops refusing.
    pub fn recover(&self) {
        self.refusing.store(false, Ordering::SeqCst);
        self.flaky.store(0f64.to_bits(), Ordering::SeqCst);
    }

    /// Refuses `share` of the writes at random, each with 429 (and `Retry-After`), 500 or 503:
    /// a flaky server, not an overloaded one.
    pub fn flaky(&self, share: f64) {
        self.flaky.store(share.to_bits(), Ordering::SeqCst);
    }

    /// Writes refused so far.
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// Writes let through so far.
    #[must_use]
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::SeqCst)
    }

    /// Whether to refuse the next write, and with what.
    fn refuses(&self) -> Option<StatusCode> {
        if self.refusing.load(Ordering::SeqCst) {
            return Some(StatusCode::TOO_MANY_REQUESTS);
        }
        let share = f64::from_bits(self.flaky.load(Ordering::SeqCst));
        (fastrand::f64() < share).then(flaky_code)
    }
}

/// One of a flaky server's answers, at random: 429, 500 or 503.
#[must_use]
pub fn flaky_code() -> StatusCode {
    [
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::INTERNAL_SERVER_ERROR,
        StatusCode::SERVICE_UNAVAILABLE,
    ][fastrand::usize(..3)]
}

/// The API server's refusal with `code` (429, 503, or else 500 as etcd's timeout), its Status
/// body and `Retry-After: retry_after`.
#[must_use]
pub fn refusal(code: StatusCode, retry_after: u32) -> Response<Box<DynBody>> {
    let (message, reason) = match code {
        StatusCode::TOO_MANY_REQUESTS => (
            "Too many requests, please try again later.",
            "TooManyRequests",
        ),
        StatusCode::SERVICE_UNAVAILABLE => (
            "the server is currently unable to handle the request",
            "ServiceUnavailable",
        ),
        _ => ("etcdserver: request timed out", "InternalError"),
    };
    status_answer(code, reason, message, Some(retry_after))
}

/// An API server's Status answer: `code` with `reason` and `message` (and `Retry-After`, in
/// the header and the details, when given), as kube-apiserver sends it.
///
/// # Panics
/// Never: the parts make a valid response.
#[must_use]
pub fn status_answer(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry_after: Option<u32>,
) -> Response<Box<DynBody>> {
    let status = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": { "retryAfterSeconds": retry_after.unwrap_or(0) },
        "code": code.as_u16(),
    });
    let body = http_body_util::Full::new(Bytes::from(status.to_string()))
        .map_err(|never: Infallible| -> BoxError { match never {} });
    let mut answer = Response::builder()
        .status(code)
        .header("Content-Type", "application/json");
    if let Some(after) = retry_after {
        answer = answer.header("Retry-After", after.to_string());
    }
    answer
        .body(Box::new(body) as Box<DynBody>)
        .expect("a valid response")
}

/// A client of `config` whose writes the returned [`Overload`] refuses on demand, each with
/// `Retry-After: retry_after` seconds.
///
/// # Panics
/// When the config cannot make a client.
#[must_use]
pub fn client(config: kube::Config, retry_after: u32) -> (kube::Client, Arc<Overload>) {
    let overload = Arc::new(Overload {
        refusing: AtomicBool::new(false),
        flaky: AtomicU64::new(0f64.to_bits()),
        retry_after,
        refused: AtomicU64::new(0),
        passed: AtomicU64::new(0),
    });
    let shared = overload.clone();
    let client = ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&tower::layer::layer_fn(move |inner| Refusing {
            inner,
            overload: shared.clone(),
        }))
        .build();
    (client, overload)
}

struct Refusing<S> {
    inner: S,
    overload: Arc<Overload>,
}

impl<S> Service<Request<Body>> for Refusing<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        if request.method() == Method::GET {
            return Box::pin(self.inner.call(request));
        }
        if let Some(code) = self.overload.refuses() {
            self.overload.refused.fetch_add(1, Ordering::SeqCst);
            let refusal = refusal(code, self.overload.retry_after);
            return Box::pin(async move { Ok(refusal) });
        }
        self.overload.passed.fetch_add(1, Ordering::SeqCst);
        Box::pin(self.inner.call(request))
    }
}
