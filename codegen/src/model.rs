//! The validated machine: everything the emitter needs, indices instead of names, no
//! source locations. Both spec forms lower to this one type, so equal machines emit equal code.

/// A checked state machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub phases: Vec<Phase>,
    pub conditions: Vec<Condition>,
    /// The children the engine applies, in spec order.
    pub children: Vec<Child>,
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
    /// The child it is derived from, when the engine writes it (`from:`).
    pub from: Option<Derived>,
}

/// `from: child.ready` or `from: child.Condition`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    pub child: usize,
    pub source: Source,
}

/// What of a child a condition or its readiness reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Its readiness (`ready`), by its `ready:` rule.
    Ready,
    /// One of its own conditions, by type.
    Condition(String),
}

/// A child the engine applies while the object is in one of `phases`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    /// The spec's name: the builder method, and the last part of the child's default name.
    pub name: String,
    /// Its Rust type, as written.
    pub type_path: String,
    pub description: Option<String>,
    /// The phases it exists in, in phase order.
    pub phases: Vec<usize>,
    /// Children that must be ready before it is applied, in spec order.
    pub after: Vec<usize>,
    /// What makes it ready: kstatus (`Source::Ready`) or one of its conditions.
    pub ready: Source,
    /// Deleted outside its phases (`false`: kept).
    pub delete_on_leave: bool,
    /// Created when missing but never updated (`apply: once`).
    pub once: bool,
}

impl Child {
    pub const ON_LEAVE: &[&str] = &["delete", "keep"];
    pub const APPLY: &[&str] = &["always", "once"];
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
