//! The error of one reconcile, and how the engine classifies it (connection, overload).

use std::time::Duration;

use crate::handler::step_error::StepError;
use crate::machine::next::IllegalTransition;
use crate::pure::backoff::Failure;
use crate::pure::refusal::Refusal;

/// Errors of one reconcile. Each leaves the stored status as it was (nothing illegal is
/// written); the controller retries with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The API server refused one of the engine's requests, or could not be reached.
    #[error("{request} failed: {source}")]
    Request {
        /// Which request.
        request: EngineRequest,
        /// What the API server (or the connection) answered.
        source: kube::Error,
    },
    /// A phase handler, hook or cleanup failed.
    #[error("handler failed: {0}")]
    Handler(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A handler chose a target the spec does not allow.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// Every write conflicted with another writer; the object is retried later.
    #[error("writes conflicted {0} times in a row; backing off")]
    Conflicts(u32),
    /// The status could not be encoded.
    #[error("cannot encode the status patch: {0}")]
    Encode(#[from] serde_json::Error),
    /// A cache handlers read has not been filled in time.
    #[error(transparent)]
    Context(#[from] crate::handler::context::ContextError),
    /// A child the spec declares could not be applied, found or deleted.
    #[error("the child `{child}` declared in the spec: {source}")]
    Child {
        /// Its name in the spec.
        child: &'static str,
        /// The request's error.
        source: crate::handler::context::ContextError,
    },
    /// The reconcile panicked (a handler, a hook, a child builder): caught at the reconcile
    /// boundary, the object is `Stalled` and retried with backoff (see
    /// [`crate::Operator::recover_panics`]).
    #[error("{0}")]
    Panicked(super::Panic),
    /// A handler or hook did not finish within its deadline (see
    /// [`crate::Operator::handler_timeout`]): its call was dropped, the object is `Stalled`
    /// and retried with backoff.
    #[error("{0}")]
    HandlerTimedOut(super::TimedOut),
}

/// Which of the engine's requests failed (see [`ReconcileError::Request`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineRequest {
    /// The resourceVersion-locked status patch of a step.
    StatusWrite,
    /// The patch that adds or removes the machine's finalizer.
    Finalizer,
    /// The GET of the object after a write conflicted.
    ReRead,
    /// A shard label written onto a child before the step (with sharding).
    ShardLabel,
}

impl std::fmt::Display for EngineRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineRequest::StatusWrite => "the status write",
            EngineRequest::Finalizer => "the finalizer update",
            EngineRequest::ReRead => "the re-read after a conflict",
            EngineRequest::ShardLabel => "a child's shard label write",
        })
    }
}

/// Names the request a `kube::Error` came from.
pub(crate) trait During<T> {
    /// This result, its error as the failure of `request`.
    fn during(self, request: EngineRequest) -> Result<T, ReconcileError>;
}

impl<T> During<T> for Result<T, kube::Error> {
    fn during(self, request: EngineRequest) -> Result<T, ReconcileError> {
        self.map_err(|source| ReconcileError::Request { request, source })
    }
}

impl ReconcileError {
    /// Whether the API server could not be reached or could not serve a request (transport
    /// errors, timeouts, 429, 5xx) somewhere in this error's chain — the engine's own request
    /// or a handler's —, as opposed to a refusal of this object's request or a handler's own
    /// failure.
    pub fn is_connection(&self) -> bool {
        self.kube_error().is_some_and(|error| match error {
            kube::Error::Api(status) => status.code == 429 || status.code >= 500,
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                true
            }
            _ => false,
        })
    }

    /// Whether the API server could not call an admission webhook for a request somewhere in
    /// this error's chain (see [`crate::watch::pace::webhook_unreachable`]).
    pub(crate) fn webhook_unreachable(&self) -> bool {
        self.kube_error().is_some_and(
            |e| matches!(e, kube::Error::Api(status) if crate::watch::pace::webhook_unreachable(status)),
        )
    }

    /// What the reconcile failed of, as far as its retry goes.
    pub(crate) fn failure(&self) -> Failure {
        if self.refusal().is_some() {
            Failure::Refused
        } else if self.webhook_unreachable() {
            Failure::WebhookUnreachable
        } else if self.is_connection() {
            Failure::Server {
                retry_after: self.overload().flatten(),
            }
        } else if matches!(self, ReconcileError::Conflicts(_)) {
            Failure::Conflicted
        } else {
            Failure::Other
        }
    }

    /// The API server's refusal for want of a permission somewhere in this error's chain (a
    /// handler's own request included): a 401, or a 403 that names the permission.
    pub(crate) fn refusal(&self) -> Option<&kube::core::Status> {
        match self.kube_error()? {
            kube::Error::Api(status) if Refusal::of(status).is_some() => Some(status),
            _ => None,
        }
    }

    /// The first Kubernetes error in this error's chain (a handler's own request included).
    fn kube_error(&self) -> Option<&kube::Error> {
        std::iter::successors(Some(self as &(dyn std::error::Error + 'static)), |e| {
            e.source()
        })
        .find_map(|e| e.downcast_ref::<kube::Error>())
    }

    /// Whether the API server signalled overload (429, 5xx) somewhere in this error's chain
    /// (a handler's own request included), and its `Retry-After`.
    pub(crate) fn overload(&self) -> Option<Option<Duration>> {
        self.kube_error().and_then(crate::watch::pace::overload)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<StepError<E>> for ReconcileError {
    fn from(err: StepError<E>) -> Self {
        match err {
            StepError::Handler(e) => ReconcileError::Handler(Box::new(e)),
            StepError::Illegal(e) => ReconcileError::Illegal(e),
            StepError::Encode(e) => ReconcileError::Encode(e),
            StepError::Child { child, source } => ReconcileError::Child { child, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("child ConfigMap: {0}")]
    struct ChildFailed(#[source] kube::Error);

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status {
                code,
                ..Default::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn an_engine_error_names_the_request_that_failed() {
        let refused = |request| ReconcileError::Request {
            request,
            source: api(500),
        };
        for (request, named) in [
            (EngineRequest::StatusWrite, "the status write failed: "),
            (EngineRequest::Finalizer, "the finalizer update failed: "),
            (
                EngineRequest::ReRead,
                "the re-read after a conflict failed: ",
            ),
            (
                EngineRequest::ShardLabel,
                "a child's shard label write failed: ",
            ),
        ] {
            let message = refused(request).to_string();
            assert!(message.starts_with(named), "{message}");
            assert!(refused(request).is_connection());
        }
    }

    #[test]
    fn a_handlers_refused_request_is_a_connection_failure_as_the_engines_is() {
        for code in [429, 500, 503] {
            let own = ReconcileError::Request {
                request: EngineRequest::StatusWrite,
                source: api(code),
            };
            assert!(own.is_connection(), "{code}");
            let handler = ReconcileError::Handler(Box::new(ChildFailed(api(code))));
            assert!(handler.is_connection(), "a handler's {code}");
        }
        for code in [403, 404, 409, 422] {
            let handler = ReconcileError::Handler(Box::new(ChildFailed(api(code))));
            assert!(!handler.is_connection(), "a handler's {code}");
        }
        let own = ReconcileError::Handler("the database said no".into());
        assert!(!own.is_connection(), "the handler's own failure");
    }
}
