//! A client layer that sends a status write to the API server and then loses its answer, as a
//! proxy that times out or a connection reset after the request went out would: the write
//! lands, the client sees a 504 or a transport error.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::{Method, Request, Response, StatusCode};
use kube::client::{Body, DynBody};
use tower::{BoxError, Layer, Service};

/// How an answer is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// A `504 Gateway Timeout` Status in its place.
    GatewayTimeout,
    /// A transport error in its place (the connection reset).
    Reset,
}

/// Loses the answers of planned status writes; cloning shares the plan.
#[derive(Clone, Debug, Default)]
pub struct LoseAnswers {
    plan: Arc<Mutex<VecDeque<(String, Loss)>>>,
    lost: Arc<Mutex<Vec<String>>>,
}

impl LoseAnswers {
    /// Loses the answer of the next status write (PATCH) of the object `name`, as `loss`.
    pub fn next_status_write(&self, name: &str, loss: Loss) {
        self.plan
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back((format!("/{name}/status"), loss));
    }

    /// The objects whose status write's answer was lost, in order.
    #[must_use]
    pub fn lost(&self) -> Vec<String> {
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn take(&self, request: &Request<Body>) -> Option<Loss> {
        if request.method() != Method::PATCH {
            return None;
        }
        let path = request.uri().path();
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        let at = plan.iter().position(|(suffix, _)| path.ends_with(suffix))?;
        let (suffix, loss) = plan.remove(at)?;
        self.lost
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(suffix);
        Some(loss)
    }
}

impl<S> Layer<S> for LoseAnswers {
    type Service = Lossy<S>;

    fn layer(&self, inner: S) -> Lossy<S> {
        Lossy {
            inner,
            answers: self.clone(),
        }
    }
}

/// The service of [`LoseAnswers`].
#[derive(Clone, Debug)]
pub struct Lossy<S> {
    inner: S,
    answers: LoseAnswers,
}

type Answer = Response<Box<DynBody>>;

impl<S> Service<Request<Body>> for Lossy<S>
where
    S: Service<Request<Body>, Response = Answer, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let loss = self.answers.take(&request);
        let sent = self.inner.call(request);
        Box::pin(async move {
            let answer = sent.await?;
            match loss {
                None => Ok(answer),
                Some(Loss::Reset) => {
                    Err("connection reset by peer (after the request was sent)".into())
                }
                Some(Loss::GatewayTimeout) => Ok(crate::overload::status_answer(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    "the answer was lost on its way back",
                    None,
                )),
            }
        })
    }
}
