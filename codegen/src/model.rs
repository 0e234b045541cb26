//! The validated machine: everything the emitter needs, indices instead of names, no
//! source locations. Both spec forms lower to this one type, so equal machines emit equal code.

/// A checked state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub phases: Vec<Phase>,
    pub conditions: Vec<Condition>,
    pub events: Vec<Event>,
    /// Every legal edge in spec order, list forms (`from: [A, B]`) expanded.
    pub edges: Vec<Edge>,
    pub initial: usize,
    pub finalizer: Option<String>,
    /// What makes an object Ready (`ready:`): the engine then keeps the `Ready` condition.
    pub ready: Option<Ready>,
    pub drift: Drift,
    /// Phase names of older specs and the declared phase each moves to, in spec order.
    pub retired: Vec<Retired>,
}

/// `ready:`: an object is Ready in one of `phases` (any non-terminal phase when empty) while
/// every one of `conditions` is True.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub phases: Vec<usize>,
    pub conditions: Vec<usize>,
}

/// A phase name an older spec had: objects stored in it move to the declared phase `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    pub name: String,
    pub to: usize,
}

/// What the controller does with a phase it did not write and that is not a legal successor
/// of what it last wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Drift {
    /// Continue from the observed phase (the default).
    #[default]
    Adopt,
    /// Write back the phase the controller last wrote.
    Revert,
}

impl Drift {
    pub const NAMES: &[&str] = &["adopt", "revert"];
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase {
    pub name: String,
    pub description: Option<String>,
    pub terminal: bool,
    pub requeue_after_ms: Option<u64>,
    /// How long one handler call may run (`handlerTimeout`), milliseconds.
    pub handler_timeout_ms: Option<u64>,
    pub timeout: Option<Timeout>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeout {
    pub after_ms: u64,
    pub to: usize,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    /// The `metav1.Condition.type` string.
    pub type_name: String,
    /// The Rust variant name.
    pub variant: String,
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub trigger: Trigger,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Taken only when the phase handler picks it.
    Handler,
    /// Taken only by people (`manual: true`): never by the engine, not in the handler's types.
    Manual,
    /// Taken when the handler fires this event.
    Event(usize),
    /// Taken automatically when every (condition, status) holds.
    When(Vec<(usize, bool)>),
}

impl Machine {
    /// Distinct targets reachable in one step from `from`, in phase order.
    pub fn targets(&self, from: usize) -> Vec<usize> {
        let mut targets: Vec<usize> = self
            .edges
            .iter()
            .filter(|e| e.from == from)
            .map(|e| e.to)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Distinct targets the phase handler may choose from `from` (no manual edge), in phase
    /// order.
    pub fn handler_targets(&self, from: usize) -> Vec<usize> {
        let mut targets: Vec<usize> = self
            .edges
            .iter()
            .filter(|e| e.from == from && e.trigger != Trigger::Manual)
            .map(|e| e.to)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
    }

    /// Events accepted in `from`, in event order, with their target.
    pub fn events_from(&self, from: usize) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = self
            .edges
            .iter()
            .filter(|e| e.from == from)
            .filter_map(|e| match e.trigger {
                Trigger::Event(ev) => Some((ev, e.to)),
                _ => None,
            })
            .collect();
        out.sort_unstable();
        out
    }
}
