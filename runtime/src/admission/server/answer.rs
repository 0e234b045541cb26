//! One request's answer: the route, the body (bounded in size, time and shared memory), the
//! review, and its metrics.

use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::conversion::ConversionReview;
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

/// What one connection's requests share: the decisions (one per kind), the metrics, the body
/// budget.
pub(super) struct Shared {
    pub(super) validators: Vec<Validator>,
    pub(super) converters: Vec<Converter>,
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
    /// An admission review, for the machines (`None`) or a tier (by name).
    Review(Option<&'a str>),
    /// A conversion review.
    Convert,
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
        Some(name)
            if shared
                .validators
                .iter()
                .any(|v| v.policy().tier(name).is_some()) =>
        {
            (Ok(Route::Review(Some(name))), path)
        }
        Some(name) => (Err(format!("no tier {name:?}\n")), OTHER),
        None if path == PATH => (Ok(Route::Review(None)), PATH),
        None if path == CONVERT_PATH && !shared.converters.is_empty() => {
            (Ok(Route::Convert), CONVERT_PATH)
        }
        None if path == CONVERT_PATH => (Err("no conversions served\n".to_owned()), OTHER),
        None => (Err("not found\n".to_owned()), OTHER),
    }
}

/// The validator of the review's kind (the only one, when the webhook reviews one kind), and
/// the tier named, if any; or why the review cannot be answered.
fn validator_for<'a>(
    shared: &'a Shared,
    tier: Option<&str>,
    review: &AdmissionReview<DynamicObject>,
) -> Result<(&'a Validator, Option<&'a Tier>), String> {
    let validator = match shared.validators.as_slice() {
        [only] => only,
        several => {
            let (group, kind) = review
                .request
                .as_ref()
                .map_or(("", ""), |r| (r.kind.group.as_str(), r.kind.kind.as_str()));
            let found = several.iter().find(|v| v.reviews(group, kind));
            found.ok_or_else(|| {
                let kinds: Vec<String> = several
                    .iter()
                    .map(|v| format!("{}.{}", v.kind(), v.group()))
                    .collect();
                format!(
                    "this webhook reviews {}, not {kind}.{group}: its registration names a kind it does not serve",
                    kinds.join(", ")
                )
            })?
        }
    };
    match tier {
        None => Ok((validator, None)),
        Some(name) => match validator.policy().tier(name) {
            Some(tier) => Ok((validator, Some(tier))),
            None => Err(format!(
                "the {} machine's policy has no tier {name:?}",
                validator.kind()
            )),
        },
    }
}

/// The converter of the review's kind (the only one, when the webhook converts one kind).
fn converter_for<'a>(shared: &'a Shared, review: &ConversionReview) -> Option<&'a Converter> {
    match shared.converters.as_slice() {
        [only] => Some(only),
        several => several.iter().find(|c| c.converts(review)),
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
        Route::Convert => "a ConversionReview",
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
            let answered = match validator_for(shared, tier, &review) {
                Ok((validator, tier)) => validator.review(tier, review),
                Err(message) => unanswerable(review, message),
            };
            let denied = answered.response.as_ref().is_some_and(|r| !r.allowed);
            let verdict = if denied {
                Verdict::Denied
            } else {
                Verdict::Answered
            };
            (serde_json::to_vec(&answered), verdict)
        }
        Route::Convert => match serde_json::from_slice::<ConversionReview>(&body) {
            Ok(review) => {
                let answered = match converter_for(shared, &review) {
                    Some(converter) => converter.review(review),
                    None => Converter::unconvertible(review),
                };
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

/// The refusal of a review no validator answers: an invalid request, for its own uid.
fn unanswerable(
    review: AdmissionReview<DynamicObject>,
    message: String,
) -> AdmissionReview<DynamicObject> {
    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    match request {
        Ok(request) => {
            let mut response = AdmissionResponse::from(&request).deny(message);
            response.result.code = 400;
            response.result.reason = "BadRequest".to_owned();
            response.into_review()
        }
        Err(err) => AdmissionResponse::invalid(err).into_review(),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
