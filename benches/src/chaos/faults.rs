//! A fault injector between an operator replica and the API server: a tower layer on the
//! replica's kube client. While faults are on, each request may be delayed, refused with 429
//! (Retry-After) or 503 before it reaches the server, answered with 500 after the server
//! handled it (a write that landed but whose answer was lost), or cut (a connection reset,
//! before or after the server saw it); a watch may stall or be dropped mid-stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body the fault layer returns.
pub type FaultBody = UnsyncBoxBody<Bytes, BoxError>;

/// Fault rates, each the chance per request (per watch for the watch faults), and the switch.
#[derive(Debug)]
pub struct FaultPlan {
    /// Faults happen only while this is on.
    pub on: AtomicBool,
    /// Up to this much latency is added to every request.
    pub max_latency: Duration,
    /// 429 with `Retry-After: 1`, before the server sees the request.
    pub too_many: f64,
    /// 503 before the server sees the request.
    pub unavailable: f64,
    /// 500 after the server handled the request (its answer is lost).
    pub lost_answer: f64,
    /// A connection reset before the server sees the request.
    pub reset_before: f64,
    /// A connection reset after the server handled it.
    pub reset_after: f64,
    /// A watch that stops delivering events (stalled until the client gives up, at most 20 s).
    pub stall_watch: f64,
    /// A watch dropped after a few seconds.
    pub drop_watch: f64,
    /// Requests seen, and faults injected.
    pub requests: AtomicU64,
    /// Faults injected.
    pub injected: AtomicU64,
    /// Requests per object (`namespace/name` of a Database) since the last [`FaultPlan::busiest`].
    pub per_object: Mutex<HashMap<String, u64>>,
}

impl FaultPlan {
    /// The most requests any one object received since the last call, and which object.
    pub fn busiest(&self) -> Option<(String, u64)> {
        let mut counts = self
            .per_object
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let busiest = counts
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(k, n)| (k.clone(), *n));
        counts.clear();
        busiest
    }

    fn count(&self, path: &str) {
        // .../namespaces/<ns>/databases/<name>[/status]
        let mut parts = path.split('/').skip_while(|p| *p != "namespaces").skip(1);
        let (Some(ns), Some("databases"), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        *self
            .per_object
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(format!("{ns}/{name}"))
            .or_default() += 1;
    }
}

impl FaultPlan {
    /// The chaos run's rates: about one request in six meets a fault.
    pub fn chaos() -> Self {
        FaultPlan {
            on: AtomicBool::new(false),
            max_latency: Duration::from_millis(300),
            too_many: 0.04,
            unavailable: 0.03,
            lost_answer: 0.03,
            reset_before: 0.03,
            reset_after: 0.03,
            stall_watch: 0.2,
            drop_watch: 0.3,
            requests: AtomicU64::new(0),
            injected: AtomicU64::new(0),
            per_object: Mutex::new(HashMap::new()),
        }
    }
}

/// The layer; one per replica, all sharing a plan.
#[derive(Clone, Debug)]
pub struct FaultLayer(pub Arc<FaultPlan>);

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        FaultService {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            plan: self.0.clone(),
        }
    }
}

/// The service the layer wraps around the client's stack.
#[derive(Debug)]
pub struct FaultService<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    plan: Arc<FaultPlan>,
}

enum Fault {
    None,
    TooMany,
    Unavailable,
    LostAnswer,
    ResetBefore,
    ResetAfter,
}

fn draw(plan: &FaultPlan) -> Fault {
    let mut roll = fastrand::f64();
    for (p, fault) in [
        (plan.too_many, Fault::TooMany),
        (plan.unavailable, Fault::Unavailable),
        (plan.lost_answer, Fault::LostAnswer),
        (plan.reset_before, Fault::ResetBefore),
        (plan.reset_after, Fault::ResetAfter),
    ] {
        if roll < p {
            return fault;
        }
        roll -= p;
    }
    Fault::None
}

fn status(code: StatusCode, reason: &str) -> Response<FaultBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("injected {code}"), "reason": reason, "code": code.as_u16(),
    });
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().expect("header"));
    if code == StatusCode::TOO_MANY_REQUESTS {
        response
            .headers_mut()
            .insert("retry-after", "1".parse().expect("header"));
    }
    response
}

fn reset() -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "injected connection reset",
    ))
}

/// The body of a watch that stalls (no more frames for up to 20 s, then a reset) or is dropped
/// (ends after 1–5 s).
fn faulty_watch<B>(body: B, stall: bool) -> FaultBody
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + Send,
{
    let until = tokio::time::Instant::now() + Duration::from_millis(1_000 + fastrand::u64(..4_000));
    let frames = futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        tokio::select! {
            frame = body.frame() => match frame {
                Some(Ok(frame)) => Some((Ok::<Frame<Bytes>, BoxError>(frame), Some(body))),
                Some(Err(err)) => Some((Err(err.into()), None)),
                None => None,
            },
            () = tokio::time::sleep_until(until) => {
                if stall {
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    Some((Err(reset()), None))
                } else {
                    None
                }
            }
        }
    });
    StreamBody::new(frames).boxed_unsync()
}

impl<S, B> Service<Request<kube::client::Body>> for FaultService<S>
where
    S: Service<Request<kube::client::Body>, Response = Response<B>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError> + Send,
{
    type Response = Response<FaultBody>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is checked under the lock in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let plan = self.plan.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            plan.requests.fetch_add(1, Ordering::Relaxed);
            plan.count(request.uri().path());
            let on = plan.on.load(Ordering::Relaxed);
            let watch = request
                .uri()
                .query()
                .is_some_and(|q| q.contains("watch=true") || q.contains("watch=1"));
            let fault = if on { draw(&plan) } else { Fault::None };
            if on && !plan.max_latency.is_zero() {
                tokio::time::sleep(plan.max_latency.mul_f64(fastrand::f64())).await;
            }
            if !matches!(fault, Fault::None) {
                plan.injected.fetch_add(1, Ordering::Relaxed);
            }
            match fault {
                Fault::TooMany => {
                    return Ok(status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"));
                }
                Fault::Unavailable => {
                    return Ok(status(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                    ));
                }
                Fault::ResetBefore => return Err(reset()),
                _ => {}
            }
            let response = {
                let mut service = inner.lock().await;
                futures::future::poll_fn(|cx| service.poll_ready(cx))
                    .await
                    .map_err(Into::into)?;
                service.call(request)
            }
            .await
            .map_err(Into::into)?;
            match fault {
                Fault::LostAnswer => {
                    return Ok(status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"));
                }
                Fault::ResetAfter => return Err(reset()),
                _ => {}
            }
            let (parts, body) = response.into_parts();
            let body = if on && watch {
                let roll = fastrand::f64();
                if roll < plan.stall_watch {
                    plan.injected.fetch_add(1, Ordering::Relaxed);
                    faulty_watch(body, true)
                } else if roll < plan.stall_watch + plan.drop_watch {
                    plan.injected.fetch_add(1, Ordering::Relaxed);
                    faulty_watch(body, false)
                } else {
                    body.map_err(Into::into).boxed_unsync()
                }
            } else {
                body.map_err(Into::into).boxed_unsync()
            };
            Ok(Response::from_parts(parts, body))
        })
    }
}
