//! What a phase handler returns, typed so that only the phase's legal moves can be named.

use std::time::Duration;

/// A phase handler's decision. `T` lists the phase's legal targets and `E` the events the phase
/// accepts; both are generated per phase, so an illegal move does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next<T, E> {
    /// Stay in the phase; `when` rules and timeouts may still move the object.
    Stay,
    /// Move to a legal target.
    To(T),
    /// Fire an event the phase accepts; the spec says where it leads.
    Fire(E),
}

/// A handler's decision with the per-phase types erased, as the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice<P> {
    /// No explicit move.
    Stay,
    /// An explicit move, and the event that caused it (if any).
    To {
        /// The target phase.
        phase: P,
        /// The event fired, when the move came from an event.
        event: Option<&'static str>,
    },
}

/// What `{Kind}{Phase}Target::{Other}` is when `Other` is not a target the handler of `Phase`
/// may name: not a target, so the handler does not compile, and the constant's deprecation
/// note (shown by rustc beside the error) says why and which targets are legal, with the
/// spec lines that declare them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IllegalTarget;

/// What a `cleanup` handler reports during deletion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Cleanup is finished: the finalizer may be removed.
    Done,
    /// Cleanup is still running: reconcile again after this long.
    InProgress(Duration),
}

/// What `before_transition` says about a proposed transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let the transition happen.
    Allow,
    /// Refuse it; the object stays and a Warning event carries the message.
    Veto(String),
}

/// A handler picked a target the spec does not allow (only possible by bypassing the typed
/// API); the engine refuses it and writes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal transition {from} -> {to}: the spec declares no such edge")]
pub struct IllegalTransition {
    /// The phase the object is in.
    pub from: &'static str,
    /// The target that was refused.
    pub to: &'static str,
}
