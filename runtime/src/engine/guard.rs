//! The reconcile boundary: what one object's reconcile may not do to the others.
//!
//! A panic in a handler, a hook, a child builder or the engine's own step would unwind
//! through kube's controller into the Manager, and every kind and object of the process would
//! stop with it — then the restarted process meets the same object and panics again: a crash
//! loop caused by one bad object. So the reconcile is run here under `catch_unwind`: a panic
//! becomes [`ReconcileError::Panicked`], and the object is treated as any failed reconcile is
//! (`Stalled` with reason `HandlerPanicked`, an Event, its backoff), while everything else goes
//! on. The panic's own report (message, location, backtrace with `RUST_BACKTRACE`) is written
//! to the log by the panic hook, as for any panic. With recovery off
//! ([`crate::Operator::recover_panics`]), the panic goes on unwinding, as it did before.
//!
//! A binary built with `panic = "abort"` cannot recover: the process ends at the panic.
//!
//! A handler that never returns would hold its object "in flight" for good — kube's controller
//! never schedules it again, its phase timeout never fires, and under a concurrency limit it
//! holds a slot others wait for. So each call of user code in a step runs under a deadline
//! ([`bounded`]): on expiry its future is dropped and the reconcile fails with
//! [`ReconcileError::HandlerTimedOut`] (`Stalled`, reason `HandlerTimedOut`, its backoff).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt;

use crate::engine::ReconcileError;
use crate::pure::message;

/// What a caught panic said, and in which phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panic {
    /// The stored phase the reconcile ran in (`None`: no phase yet).
    pub phase: Option<String>,
    /// The panic's message (its first line, bounded), or a note that it had none.
    pub message: String,
}

impl std::fmt::Display for Panic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.phase {
            Some(phase) => write!(
                f,
                "the reconcile in phase {phase} panicked: {}",
                self.message
            ),
            None => write!(f, "the reconcile panicked: {}", self.message),
        }
    }
}

/// A call of user code that did not finish within its deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOut {
    /// What was called: "the handler of phase Working", "the after_transition hook of Working → Done".
    pub call: String,
    /// Its deadline.
    pub after: Duration,
}

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} did not finish within {}; the call was dropped",
            self.call,
            message::duration(self.after)
        )
    }
}

/// Runs `call` for at most `after`; on expiry `call` is dropped (cancelled at its current
/// await) and `Err(TimedOut)` names it as `what` says.
pub(crate) async fn bounded<T>(
    call: impl Future<Output = T>,
    after: Duration,
    what: impl FnOnce() -> String,
) -> Result<T, TimedOut> {
    tokio::time::timeout(after, call)
        .await
        .map_err(|_| TimedOut {
            call: what(),
            after,
        })
}

/// Runs `reconcile`; with `recover`, a panic in it is returned as
/// [`ReconcileError::Panicked`] (in `phase`) instead of unwinding further.
pub(crate) async fn guarded<T>(
    reconcile: impl Future<Output = Result<T, ReconcileError>>,
    recover: bool,
    phase: Option<&str>,
) -> Result<T, ReconcileError> {
    if !recover {
        return reconcile.await;
    }
    match AssertUnwindSafe(reconcile).catch_unwind().await {
        Ok(result) => result,
        Err(payload) => Err(ReconcileError::Panicked(Panic {
            phase: phase.map(str::to_owned),
            message: said(payload.as_ref()),
        })),
    }
}

/// The message of a panic's payload: its first line, at most 512 bytes.
fn said(payload: &(dyn Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "it carried no message".to_owned());
    let first = text.lines().next().unwrap_or_default().trim();
    let first = if first.is_empty() {
        "it carried no message"
    } else {
        first
    };
    message::bounded(first.to_owned(), 512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_returned_with_its_message_and_phase() {
        let result: Result<(), _> = guarded(
            async { panic!("index out of bounds\nmore detail") },
            true,
            Some("Working"),
        )
        .await;
        let Err(ReconcileError::Panicked(panic)) = result else {
            panic!("not caught: {result:?}");
        };
        assert_eq!(
            panic.to_string(),
            "the reconcile in phase Working panicked: index out of bounds"
        );
        let formatted: Result<(), _> =
            guarded(async { panic!("object {} is bad", 7) }, true, None).await;
        assert!(
            matches!(&formatted, Err(ReconcileError::Panicked(p)) if p.message == "object 7 is bad"),
            "{formatted:?}"
        );
    }

    #[tokio::test]
    async fn a_call_past_its_deadline_is_dropped_and_named() {
        let hung = bounded(
            std::future::pending::<()>(),
            Duration::from_millis(50),
            || "the handler of phase Working".to_owned(),
        )
        .await;
        assert_eq!(
            hung.unwrap_err().to_string(),
            "the handler of phase Working did not finish within 50ms; the call was dropped"
        );
        let quick = bounded(async { 7 }, Duration::from_secs(30), || unreachable!()).await;
        assert_eq!(quick, Ok(7));
    }

    #[tokio::test]
    async fn without_recovery_the_panic_goes_on() {
        let unwound = tokio::spawn(guarded(
            async {
                if true {
                    panic!("boom");
                }
                Ok::<(), ReconcileError>(())
            },
            false,
            None,
        ))
        .await;
        assert!(unwound.is_err_and(|e| e.is_panic()));
    }
}
