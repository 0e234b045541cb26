//! One request's answer: the route, the body (bounded in size, time and shared memory), the
//! review, and its metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::WebhookMetrics;
use crate::admission::configuration::{PATH, TIER_PATH};
use crate::admission::conversion::{CONVERT_PATH, Converter};
use crate::admission::policy::Tier;
use crate::admission::review::Validator;

/// The largest review accepted: two objects of etcd's 1.5 MiB limit, JSON-encoded, and room.
pub const MAX_BODY: usize = 8 << 20;
/// What each request may buffer of its body without drawing on [`BODY_BUDGET`].
pub const SMALL_BODY: usize = 64 << 10;
/// Bytes of bodies, beyond each one's first [`SMALL_BODY`], buffered at once over all requests.
pub const BODY_BUDGET: usize = 32 << 20;

/// What one connection's requests share: the decision, the metrics, the body budget.
pub(super) struct Shared {
    pub(super) validator: Arc<Validator>,
    pub(super) converter: Option<Arc<Converter>>,
    pub(super) metrics: WebhookMetrics,
    pub(super) budget: Semaphore,
    /// Time for a body once its head is in.
    pub(super) body: Duration,
}

/// Answers one request, and counts the answer by route and code.
pub(super) async fn answer(request: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let path = request.uri().path().to_owned();
    let (route, label) = route(&path, shared);
    let (response, verdict) = match route {
        Ok(route) => respond(request, route, shared).await,
        Err(message) => (text(StatusCode::NOT_FOUND, message), Verdict::Answered),
    };
    let metrics = &shared.metrics;
    let seconds = started.elapsed().as_secs_f64();
    metrics.answered(label, response.status().as_u16(), seconds);
    match verdict {
        Verdict::Denied => metrics.denied(label),
        Verdict::ConversionFailed => metrics.conversion_failed(),
        Verdict::Answered => {}
    }
    response
}

/// What a request asks for.
enum Route<'a> {
    /// An admission review, for the machine (`None`) or a tier.
    Review(Option<&'a Tier>),
    /// A conversion review.
    Convert(&'a Converter),
}

/// What a review decided, for the metrics.
enum Verdict {
    /// Answered (allowed, or not a review at all).
    Answered,
    /// An admission review refused.
    Denied,
    /// A conversion review failed.
    ConversionFailed,
}

/// The route of `path` (or why nothing is served there, for a 404), and its label in the
/// metrics: the path when it is served, `other` otherwise (so that clients cannot grow the
/// metrics with paths of their own).
fn route<'a>(path: &'a str, shared: &'a Shared) -> (Result<Route<'a>, String>, &'a str) {
    const OTHER: &str = "other";
    match path.strip_prefix(TIER_PATH) {
        Some(name) => match shared.validator.policy().tier(name) {
            Some(tier) => (Ok(Route::Review(Some(tier))), path),
            None => (Err(format!("no tier {name:?}\n")), OTHER),
        },
        None if path == PATH => (Ok(Route::Review(None)), PATH),
        None if path == CONVERT_PATH => match &shared.converter {
            Some(converter) => (Ok(Route::Convert(converter)), CONVERT_PATH),
            None => (Err("no conversions served\n".to_owned()), OTHER),
        },
        None => (Err("not found\n".to_owned()), OTHER),
    }
}

async fn respond(
    request: Request<Incoming>,
    route: Route<'_>,
    shared: &Shared,
) -> (Response<Full<Bytes>>, Verdict) {
    let short = |status, message| (text(status, message), Verdict::Answered);
    let what = match &route {
        Route::Review(_) => "an AdmissionReview",
        Route::Convert(_) => "a ConversionReview",
    };
    if request.method() != Method::POST {
        return short(StatusCode::METHOD_NOT_ALLOWED, format!("POST {what}\n"));
    }
    let deadline = shared.body;
    let held = shared.metrics.body_bytes_gauge();
    let read = read_body(request.into_body(), &shared.budget, held);
    let (body, _budget, _held) = match tokio::time::timeout(deadline, read).await {
        Ok(Ok(read)) => read,
        Ok(Err((status, message))) => return short(status, message),
        Err(_) => {
            let message = format!(
                "the body did not arrive within {} s\n",
                deadline.as_secs_f64()
            );
            return short(StatusCode::REQUEST_TIMEOUT, message);
        }
    };
    let (answered, verdict) = match route {
        Route::Review(tier) => {
            let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
                Ok(review) => review,
                Err(err) => {
                    return short(StatusCode::BAD_REQUEST, format!("not {what}: {err}\n"));
                }
            };
            let answered = shared.validator.review(tier, review);
            let denied = answered.response.as_ref().is_some_and(|r| !r.allowed);
            let verdict = if denied {
                Verdict::Denied
            } else {
                Verdict::Answered
            };
            (serde_json::to_vec(&answered), verdict)
        }
        Route::Convert(converter) => match serde_json::from_slice(&body) {
            Ok(review) => {
                let answered = converter.review(review);
                // Failed, or one object of a list answered unconverted.
                let failed = answered.response.as_ref().is_some_and(|r| {
                    r.result.is_failure()
                        || r.converted_objects.iter().any(|o| {
                            o["metadata"]["annotations"][crate::admission::CONVERSION_ERROR]
                                .is_string()
                        })
                });
                let verdict = if failed {
                    Verdict::ConversionFailed
                } else {
                    Verdict::Answered
                };
                (serde_json::to_vec(&answered), verdict)
            }
            Err(err) => {
                return short(StatusCode::BAD_REQUEST, format!("not {what}: {err}\n"));
            }
        },
    };
    match answered {
        Ok(json) => {
            let mut response = Response::new(Full::new(Bytes::from(json)));
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            (response, verdict)
        }
        Err(err) => short(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
    }
}

/// A body as read, its share of the budget and its count in the held bytes (both given back
/// when the request is answered).
type Read<'a> = (Bytes, Option<SemaphorePermit<'a>>, Held<'a>);

/// Bytes of a body counted in the webhook's held bytes, until dropped.
struct Held<'a> {
    gauge: &'a Gauge,
    bytes: i64,
}

impl Held<'_> {
    fn add(&mut self, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        self.gauge.inc_by(bytes);
        self.bytes += bytes;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gauge.dec_by(self.bytes);
    }
}

/// Reads a request's body: at most [`MAX_BODY`], and beyond its first [`SMALL_BODY`] only
/// while the shared `budget` has room; what it holds is counted in `gauge` meanwhile.
async fn read_body<'a>(
    mut body: Incoming,
    budget: &'a Semaphore,
    gauge: &'a Gauge,
) -> Result<Read<'a>, (StatusCode, String)> {
    let mut counted = Held { gauge, bytes: 0 };
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
        counted.add(data.len());
        frames.push(data);
    }
    let body = match frames.as_slice() {
        [one] => one.clone(),
        _ => Bytes::from(frames.concat()),
    };
    Ok((body, held, counted))
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
