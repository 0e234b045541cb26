//! The static description of a machine, emitted by `#[state_machine]`, and the traits of
//! the generated phase and condition enums.

use std::fmt::{Debug, Display};
use std::hash::Hash;

use kube::core::TypeMeta;

/// Everything the spec says, as static data: the runtime never parses a spec.
#[derive(Debug)]
pub struct MachineData {
    /// The custom resource kind, e.g. `Database`.
    pub kind: &'static str,
    /// Phases in spec order; a phase's index is its position here.
    pub phases: &'static [PhaseData],
    /// Condition types the controller owns, in spec order.
    pub conditions: &'static [ConditionData],
    /// The children the engine applies (the spec's `children:`), in spec order.
    pub children: &'static [ChildData],
    /// Event names, in order of declaration (or first use).
    pub events: &'static [&'static str],
    /// Every legal edge, in spec order.
    pub edges: &'static [EdgeData],
    /// Index of the initial phase.
    pub initial: usize,
    /// The finalizer that guards deletion, when the spec has one.
    pub finalizer: Option<&'static str>,
    /// What makes an object Ready (the spec's `ready:`): the engine then keeps the `Ready`
    /// condition. `None`: the handlers' own `Ready` condition, if the spec declares one.
    pub ready: Option<ReadyData>,
    /// What the controller does with a phase it finds but did not write (the spec's `drift:`).
    pub drift: DriftPolicy,
    /// Phase names of older specs and the declared phase each moves to (the spec's `retired:`).
    pub retired: &'static [RetiredData],
    /// The machine as a Mermaid `stateDiagram-v2`.
    pub mermaid: &'static str,
    /// The machine as a Graphviz DOT digraph.
    pub dot: &'static str,
    /// The machine drawn as SVG by the macro, or why it is not (too large to lay out).
    pub picture: Result<PictureData, &'static str>,
    /// The CEL rule for `status.phase`: stay, move along a declared edge, move from a retired
    /// name to the phase it maps to, or leave any other value the spec does not declare.
    pub cel_phase_rule: &'static str,
    /// The CEL rule on the object (root) that the first phase written is the initial phase or
    /// one of its direct successors.
    pub cel_first_phase_rule: &'static str,
    /// Where the spec came from: the spec file's path, or `inline`.
    pub source: &'static str,
}

/// The machine drawn as SVG at build time: the operator shows it (with live counts) without a
/// layout engine of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PictureData {
    /// The picture as the phase enum's documentation shows it.
    pub plain: &'static str,
    /// The same machine with a second line under each phase name for its number of objects,
    /// cut where the numbers go: `pieces[0]`, the count of phase `slots[0]`, `pieces[1]`, …,
    /// and the last piece.
    pub pieces: &'static [&'static str],
    /// The index (in [`MachineData::phases`]) of the phase whose count follows each piece but
    /// the last.
    pub slots: &'static [usize],
}

impl PictureData {
    /// The counted picture with `count(i)`, the number of objects of the `i`-th phase, under
    /// each phase's name.
    pub fn counted(&self, count: impl Fn(usize) -> usize) -> String {
        let mut svg = String::new();
        for (i, piece) in self.pieces.iter().enumerate() {
            svg.push_str(piece);
            if let Some(&phase) = self.slots.get(i) {
                svg.push_str(&count(phase).to_string());
            }
        }
        svg
    }
}

/// What the controller does when it finds a stored phase it did not write that is not a legal
/// successor of the phase it last wrote (a hand edit, or another writer), or a phase the spec
/// does not declare at all. Either way it counts `kube_fsm_drift_total` and emits a Warning
/// Event `PhaseDrift`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DriftPolicy {
    /// Continue from the phase found (the default): the controller never itself writes a move
    /// that is not an edge, and a deliberate edit by a human is not fought.
    #[default]
    Adopt,
    /// Write back the phase the controller last wrote, so the controller stays the only one
    /// that moves the phase. If the API server refuses the write (its CEL rule forbids the way
    /// back), the phase found is adopted instead.
    Revert,
}

/// A phase name of an older spec, and where objects stored in it move.
#[derive(Debug)]
pub struct RetiredData {
    /// The retired name as stored in `status.phase`.
    pub name: &'static str,
    /// Index of the declared phase it moves to.
    pub to: usize,
}

/// One phase of a machine.
#[derive(Debug)]
pub struct PhaseData {
    /// The phase name as stored in `status.phase`.
    pub name: &'static str,
    /// The spec's description, or "".
    pub description: &'static str,
    /// Terminal phases have no handler and no way out.
    pub terminal: bool,
    /// Reconcile at least this often while in the phase (milliseconds).
    pub requeue_after_ms: Option<u64>,
    /// How long one call of the phase's handler may run (milliseconds; `None`: the machine's
    /// default, see `Operator::handler_timeout`).
    pub handler_timeout_ms: Option<u64>,
    /// Leave the phase after this long in it.
    pub timeout: Option<TimeoutData>,
}

/// A phase timeout: after `after_ms` in the phase, move to `to`.
#[derive(Debug)]
pub struct TimeoutData {
    /// Time in phase before the timeout fires (milliseconds).
    pub after_ms: u64,
    /// Index of the target phase (always a declared edge).
    pub to: usize,
    /// The reason recorded for the transition.
    pub reason: &'static str,
}

/// The spec's `ready:`: an object is Ready in one of `phases` (when empty: any phase that is
/// not terminal) while every one of `conditions` is True.
#[derive(Debug)]
pub struct ReadyData {
    /// Indices into [`MachineData::phases`].
    pub phases: &'static [usize],
    /// Indices into [`MachineData::conditions`].
    pub conditions: &'static [usize],
}

/// A condition type the controller owns.
#[derive(Debug)]
pub struct ConditionData {
    /// The `metav1.Condition.type` string.
    pub name: &'static str,
    /// The spec's description, or "".
    pub description: &'static str,
    /// The child the engine derives it from (`from:`); `None`: the handlers set it.
    pub from: Option<DerivedData>,
}

/// A condition derived from a child: `from: child.ready` or `from: child.Condition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DerivedData {
    /// Index of the child in [`MachineData::children`].
    pub child: usize,
    /// What of the child it reads.
    pub source: SourceData,
}

/// What of a child a derived condition, or its readiness, reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceData {
    /// Its readiness: by kstatus's rules for its kind, or by the condition its `ready:` names.
    Ready,
    /// One of its own conditions, by type.
    Condition(&'static str),
}

impl SourceData {
    /// The condition it names, if it names one.
    pub fn condition(self) -> Option<&'static str> {
        match self {
            SourceData::Ready => None,
            SourceData::Condition(type_) => Some(type_),
        }
    }
}

/// A child declared in the spec: applied by the engine in its phases, from the handler's
/// builder of the same name.
#[derive(Debug)]
pub struct ChildData {
    /// The spec's name (the builder method; its object is `{object}-{name}` unless the
    /// builder names it).
    pub name: &'static str,
    /// Its Rust type as written in the spec.
    pub type_path: &'static str,
    /// The spec's description, or "".
    pub description: &'static str,
    /// Indices of the phases it exists in.
    pub phases: &'static [usize],
    /// Indices of the children that must be ready before it is applied.
    pub after: &'static [usize],
    /// What makes it ready: kstatus ([`SourceData::Ready`]) or one of its conditions.
    pub ready: SourceData,
    /// Deleted while the object is in a phase not among `phases` (else kept).
    pub delete_on_leave: bool,
    /// Created when missing, never updated.
    pub once: bool,
    /// Its `apiVersion` and `kind`, from its type's `kube::Resource` (a function: kube's are
    /// not `const`), for tools that read children without its Rust type.
    pub type_meta: fn() -> TypeMeta,
}

/// The `apiVersion` and `kind` of `C`, as [`ChildData::type_meta`] gives them.
pub fn type_meta<C: kube::Resource<DynamicType = ()>>() -> TypeMeta {
    TypeMeta {
        api_version: C::api_version(&()).into_owned(),
        kind: C::kind(&()).into_owned(),
    }
}

impl ChildData {
    /// Whether it exists in phase `phase`.
    pub fn in_phase(&self, phase: usize) -> bool {
        self.phases.contains(&phase)
    }
}

/// One legal edge.
#[derive(Debug)]
pub struct EdgeData {
    /// Index of the source phase.
    pub from: usize,
    /// Index of the target phase.
    pub to: usize,
    /// What takes the edge.
    pub trigger: TriggerData,
}

/// What takes an edge.
#[derive(Debug)]
pub enum TriggerData {
    /// Only the phase handler, explicitly.
    Handler,
    /// Only people (`manual: true`): the engine never takes it, handlers cannot return it.
    Manual,
    /// The handler firing this event (index into [`MachineData::events`]).
    Event(usize),
    /// Automatically, when every requirement holds (a `when` rule).
    When(&'static [Requirement]),
}

/// One `when` requirement: a condition must have the given status.
#[derive(Debug)]
pub struct Requirement {
    /// Index into [`MachineData::conditions`].
    pub condition: usize,
    /// `true` for `Cond`, `false` for `!Cond`.
    pub status: bool,
}

/// Implemented by the generated `{Kind}Phase` enum.
pub trait Phase: Copy + Eq + Ord + Hash + Debug + Display + Send + Sync + Unpin + 'static {
    /// The machine this phase belongs to.
    const MACHINE: &'static MachineData;
    /// Position in [`MachineData::phases`].
    fn index(self) -> usize;
    /// The phase at `index`, if any.
    fn from_index(index: usize) -> Option<Self>;
    /// Whether the spec declares the edge `self -> to` (a constant bit-matrix lookup), manual
    /// edges included.
    fn can_transition_to(self, to: Self) -> bool;
    /// Whether `self -> to` is a manual edge (`manual: true`): only people take it.
    fn is_manual_edge(self, to: Self) -> bool {
        Self::MACHINE.edges.iter().any(|e| {
            e.from == self.index() && e.to == to.index() && matches!(e.trigger, TriggerData::Manual)
        })
    }
    /// Whether the engine may take `self -> to`: a declared edge that is not manual (an edge
    /// is never both).
    fn engine_takes(self, to: Self) -> bool {
        self.can_transition_to(to) && !self.is_manual_edge(to)
    }
    /// The initial phase.
    fn initial() -> Self {
        Self::from_index(Self::MACHINE.initial)
            .expect("the generated initial index is a declared phase")
    }
    /// The phase name.
    fn name(self) -> &'static str {
        Self::MACHINE.phases[self.index()].name
    }
    /// The phase's static data.
    fn data(self) -> &'static PhaseData {
        &Self::MACHINE.phases[self.index()]
    }
}

/// Implemented by the generated `{Kind}Condition` enum.
pub trait ConditionType: Copy + Eq + Debug + Send + Sync + 'static {
    /// The `metav1.Condition.type` string.
    fn as_str(self) -> &'static str;
}

/// The error of a phase name that the spec does not declare.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown phase {value:?}; the phases are: {}", valid.join(", "))]
pub struct UnknownPhase {
    /// The rejected text.
    pub value: String,
    /// Every declared phase.
    pub valid: &'static [&'static str],
}
