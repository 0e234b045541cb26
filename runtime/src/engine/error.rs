//! The error of one reconcile, and how the engine classifies it (connection, overload).

use std::time::Duration;

use crate::handler::step_plan::StepError;
use crate::pure::backoff::Failure;
use crate::pure::decide::IllegalTransition;

/// Errors of one reconcile. Each leaves the stored status as it was (nothing illegal is
/// written); the controller retries with per-object backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The API server refused a request or could not be reached.
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
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
        if self.webhook_unreachable() {
            Failure::WebhookUnreachable
        } else if self.is_connection() {
            Failure::Server {
                retry_after: self.overload().flatten(),
            }
        } else {
            Failure::Other
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
    fn a_handlers_refused_request_is_a_connection_failure_as_the_engines_is() {
        for code in [429, 500, 503] {
            assert!(ReconcileError::Kube(api(code)).is_connection(), "{code}");
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
