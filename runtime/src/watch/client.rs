//! The operator's kube client, without kube's own retry and with a deadline on every request
//! that is not a watch.
//!
//! kube's default client retries a 429, 503 or 504 up to 15 times, backing off to 1 000 s: the
//! engine then sees an overloaded API server only minutes later, and a reconcile holds its slot
//! all that time. The engine retries every failed reconcile itself — per object, with backoff,
//! no sooner than the server's `Retry-After` — and paces the whole operator on what it sees, so
//! [`client`] leaves kube's retry out. kube sets no read timeout either (it would cut idle
//! watches), so a request to a server that stops answering waits forever; [`client`] bounds each
//! request but watches by [`REQUEST_DEADLINE`], and the engine counts a request that ran out of
//! time as overload, as it counts the server's own `504 Timeout`.

use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::{Body, ClientBuilder, DynBody};
use tower::{BoxError, Service};

/// The longest a request other than a watch may take until its response starts: longer than
/// kube-apiserver's own limit (`--request-timeout`, one minute, after which it answers `504`),
/// so a server that answers is always heard; a server that does not is given up on.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(70);

/// A client for `config` without kube's built-in retry of 429, 503 and 504 (up to 15 times,
/// over minutes), so that each such answer reaches the engine's pacing and per-object backoff
/// at once, and with a deadline of 70 s on every request but watches (longer than the API
/// server's own one-minute limit; a request that runs out of it counts as overload). Use it
/// for the client given to [`crate::Operator::new`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube_fsm::client(kube::Config::infer().await?)?;
/// # let _ = client; Ok(()) }
/// ```
///
/// # Errors
/// When kube cannot build a client of `config` (its TLS or auth settings).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    with_deadline(config, REQUEST_DEADLINE)
}

fn with_deadline(
    mut config: kube::Config,
    deadline: Duration,
) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let layer = tower::layer::layer_fn(move |inner| Deadline { inner, deadline });
    // Its connections' tasks run on the gated executor: shut while leadership has lapsed.
    let builder = ClientBuilder::try_from((config, crate::watch::gate::Gated))?;
    Ok(builder.with_layer(&layer).build())
}

/// A request that ran out of its [`REQUEST_DEADLINE`]: reported as an I/O timeout, as a
/// connection's own read timeout is.
fn timed_out(deadline: Duration) -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the API server did not answer within {deadline:?}"),
    ))
}

/// Whether `request` is a watch (or a followed log): a stream that stays open by design.
fn streams(request: &Request<Body>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "follow=true"))
    })
}

struct Deadline<S> {
    inner: S,
    deadline: Duration,
}

impl<S> Service<Request<Body>> for Deadline<S>
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
        let streams = streams(&request);
        let answer = self.inner.call(request);
        let deadline = self.deadline;
        Box::pin(async move {
            if streams {
                return answer.await;
            }
            tokio::time::timeout(deadline, answer)
                .await
                .unwrap_or_else(|_| Err(timed_out(deadline)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback server that accepts connections and never answers.
    async fn silent_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                open.push(stream);
            }
        });
        url
    }

    #[tokio::test]
    async fn a_request_to_a_server_that_never_answers_ends_at_its_deadline_as_overload() {
        let url = silent_server().await;
        let config = kube::Config::new(url.parse().expect("url"));
        let client = with_deadline(config, Duration::from_millis(300)).expect("client");
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        let started = std::time::Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(5), api.get("x"))
            .await
            .expect("the request ended by itself")
            .expect_err("nobody answered");
        assert!(started.elapsed() < Duration::from_secs(2), "{error}");
        assert_eq!(
            crate::watch::pace::overload(&error),
            Some(None),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_watch_is_not_cut_by_the_deadline() {
        let url = silent_server().await;
        let config = kube::Config::new(url.parse().expect("url"));
        let client = with_deadline(config, Duration::from_millis(100)).expect("client");
        let request = Request::get("/api/v1/configmaps?watch=true&resourceVersion=1")
            .body(Vec::new())
            .expect("request");
        let watch = tokio::time::timeout(Duration::from_millis(600), client.request_text(request));
        assert!(watch.await.is_err(), "the watch request was cut");
    }
}
