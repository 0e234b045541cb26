//! The error of one step: a handler's, an illegal target, the status's encoding, or a declared
//! child's request.

use crate::handler::context::ContextError;
use crate::machine::next::IllegalTransition;

/// Errors of a step.
#[derive(Debug, thiserror::Error)]
pub enum StepError<E: std::error::Error + 'static> {
    /// A phase handler or hook failed.
    #[error("handler failed: {0}")]
    Handler(#[source] E),
    /// A handler chose a target the spec does not allow.
    #[error(transparent)]
    Illegal(#[from] IllegalTransition),
    /// The status could not be encoded as JSON.
    #[error("cannot encode the status: {0}")]
    Encode(#[from] serde_json::Error),
    /// A child the spec declares could not be applied, found or deleted.
    #[error("the child `{child}`: {source}")]
    Child {
        /// Its name in the spec.
        child: &'static str,
        /// The request's error.
        source: ContextError,
    },
}

impl<E: std::error::Error + 'static> StepError<E> {
    /// The error of declared child `child`'s request (for the generated `Dispatch::children`).
    #[doc(hidden)]
    pub fn child(child: &'static str) -> impl FnOnce(ContextError) -> Self {
        move |source| StepError::Child { child, source }
    }
}
