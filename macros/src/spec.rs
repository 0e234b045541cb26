//! The spec as written, in either form: names with their source locations, nothing checked
//! yet beyond shape. Both the YAML reader and the DSL parser produce a [`RawSpec`]; validation
//! turns it into a [`crate::model::Machine`].

use crate::diag::Loc;

/// A name (phase, condition, event, reason) and where it was written.
#[derive(Clone, Debug)]
pub struct Name {
    pub text: String,
    pub loc: Loc,
}

/// A string value (duration, description, finalizer) and where it was written.
pub type Text = Name;

#[derive(Debug)]
pub struct RawSpec {
    /// Where the spec as a whole starts (for "no phases").
    pub loc: Loc,
    pub phases: Vec<RawPhase>,
    pub conditions: Vec<RawCondition>,
    /// Declared events; when `None`, events are declared by using them in `on`.
    pub events: Option<Vec<RawEvent>>,
    pub transitions: Vec<RawTransition>,
    pub finalizer: Option<Text>,
    /// The condition shown as the CRD's Ready column (default: a condition named `Ready`).
    pub ready: Option<Name>,
    /// What the controller does when it finds a phase it did not write: `adopt` or `revert`.
    pub drift: Option<Text>,
    /// Phase names of older specs and the declared phase each moves to, in spec order.
    pub retired: Vec<RawRetired>,
}

/// `Provisioning: Creating` (YAML) or `Provisioning -> Creating` (DSL): objects stored in the
/// retired phase `name` move to the declared phase `to`.
#[derive(Debug)]
pub struct RawRetired {
    pub name: Name,
    pub to: Name,
}

#[derive(Debug)]
pub struct RawPhase {
    pub name: Name,
    /// `Some(loc)` when marked initial.
    pub initial: Option<Loc>,
    pub terminal: Option<Loc>,
    pub description: Option<String>,
    pub requeue_after: Option<Text>,
    pub timeout: Option<RawTimeout>,
}

#[derive(Debug)]
pub struct RawTimeout {
    pub loc: Loc,
    pub after: Text,
    pub to: Name,
    pub reason: Option<Name>,
}

#[derive(Debug)]
pub struct RawCondition {
    pub name: Name,
    pub description: Option<String>,
}

#[derive(Debug)]
pub struct RawEvent {
    pub name: Name,
    pub description: Option<String>,
}

#[derive(Debug)]
pub struct RawTransition {
    pub loc: Loc,
    pub from: Vec<Name>,
    pub to: Name,
    pub on: Option<Name>,
    /// `when` requirements, all of which must hold; empty when the edge has no rule.
    pub when: Vec<RawRequirement>,
}

/// `PodsReady` (must be True) or `!PodsReady` (must be False).
#[derive(Clone, Debug)]
pub struct RawRequirement {
    pub condition: Name,
    pub status: bool,
}
