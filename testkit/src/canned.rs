//! A client over a canned API server, for handler tests without a cluster: `answer` gives
//! each request's status code and JSON body, and every request is recorded as `METHOD path`.

use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use kube::client::Body;

/// The requests a canned client sent, as `METHOD path`, in order.
pub type Log = Arc<Mutex<Vec<String>>>;

/// How a canned server answers: from the method, the path and the request body, a status
/// code and a JSON body.
pub trait Answer:
    Fn(&str, &str, &[u8]) -> (u16, serde_json::Value) + Send + Sync + 'static
{
}
impl<F: Fn(&str, &str, &[u8]) -> (u16, serde_json::Value) + Send + Sync + 'static> Answer for F {}

/// A client (default namespace `default`) whose requests `answer` answers, and their log.
///
/// # Panics
/// When a request is sent while another thread panicked holding the log.
#[must_use]
pub fn client(answer: impl Answer) -> (kube::Client, Log) {
    let seen = Log::default();
    let log = Arc::clone(&seen);
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let (method, path) = (
            request.method().to_string(),
            request.uri().path().to_owned(),
        );
        log.lock().expect("log").push(format!("{method} {path}"));
        let answer = Arc::clone(&answer);
        async move {
            let body = request.into_body().collect().await?.to_bytes();
            let (code, json) = answer(&method, &path, &body);
            http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(json.to_string().into_bytes()))
                .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> { e.into() })
        }
    });
    (kube::Client::new(service, "default"), seen)
}

/// An answer that echoes the request body with 200, as the server answers an apply of a new
/// object.
#[must_use]
pub fn echo(_: &str, _: &str, body: &[u8]) -> (u16, serde_json::Value) {
    (200, serde_json::from_slice(body).unwrap_or_default())
}

/// A Kubernetes `Status` failure body with `code` and `reason`.
#[must_use]
pub fn failure(code: u16, reason: &str) -> serde_json::Value {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": reason, "code": code, "message": reason,
    })
}
