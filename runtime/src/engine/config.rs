//! The engine's settings, filled by the `Operator` builder (the one way to configure it).

use std::time::Duration;

use crate::pure::backoff::Backoff;

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Attempts retried after a 409 Conflict (each after a fresh GET) before backing off.
    pub max_conflict_retries: u32,
    /// Backoff after failed reconciles, vetoed timeouts and held objects.
    pub backoff: Backoff,
    /// The reporting controller name on Events.
    pub reporter: String,
    /// The field manager of every write (`metadata.managedFields` names who wrote what).
    pub field_manager: String,
    /// The longest wait before a watch reconnects, and before an object whose reconcile failed
    /// for want of a connection (transport errors, 429, 5xx) is retried.
    pub reconnect_max: Duration,
    /// Which of the engine's own Kubernetes Events are recorded.
    pub events: RecordedEvents,
    /// Whether a panic in a reconcile is caught at the reconcile boundary (the object stalls)
    /// rather than unwinding through the process.
    pub recover_panics: bool,
    /// How long one call of a handler or hook may run, unless its phase's `handlerTimeout`
    /// says otherwise.
    pub handler_timeout: Duration,
    /// How long a watch may deliver nothing (no event, no bookmark) before it is restarted.
    pub watch_stall: Duration,
    /// How long reconciles under way at the stop signal may go on before they are cancelled.
    pub drain: Duration,
}

/// Which of the engine's own Kubernetes Events (transitions, vetoes, drift, failures) are
/// recorded. Each is a request to the API server: at thousands of objects, `Warnings` keeps
/// what needs a human and drops one write per transition. Events a handler publishes through
/// its step are not affected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordedEvents {
    /// Every Event: Normal ones (transitions, migrations) and Warnings (the default).
    #[default]
    All,
    /// Warning Events only (vetoes, drift, failed reconciles, held objects).
    Warnings,
    /// None.
    Off,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_conflict_retries: 3,
            backoff: Backoff::default(),
            reporter: "kube-fsm".into(),
            field_manager: "kube-fsm".into(),
            reconnect_max: Duration::from_secs(30),
            events: RecordedEvents::All,
            recover_panics: true,
            handler_timeout: Duration::from_secs(300),
            watch_stall: Duration::from_secs(60),
            drain: Duration::from_secs(20),
        }
    }
}
