//! The spec as written, in either form: names with their source locations, nothing checked
//! yet beyond shape. Both the YAML reader and the DSL parser produce a [`RawSpec`]; validation
//! turns it into a [`crate::model::Machine`].

use crate::diag::Loc;

/// A top-level section of a spec: a key of the YAML document, a section of the inline DSL.
/// The one list of their names, so both forms accept (and suggest) the same ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Phases,
    Conditions,
    Children,
    Events,
    Transitions,
    Finalizer,
    Ready,
    Drift,
    Retired,
}

impl Section {
    /// Every section, in the order messages list them.
    pub const ALL: [Section; 9] = [
        Section::Phases,
        Section::Conditions,
        Section::Children,
        Section::Events,
        Section::Transitions,
        Section::Finalizer,
        Section::Ready,
        Section::Drift,
        Section::Retired,
    ];

    /// The name written in a spec.
    pub const fn name(self) -> &'static str {
        match self {
            Section::Phases => "phases",
            Section::Conditions => "conditions",
            Section::Children => "children",
            Section::Events => "events",
            Section::Transitions => "transitions",
            Section::Finalizer => "finalizer",
            Section::Ready => "ready",
            Section::Drift => "drift",
            Section::Retired => "retired",
        }
    }

    /// Every section's name, in [`Section::ALL`] order.
    pub fn names() -> [&'static str; 9] {
        Section::ALL.map(Section::name)
    }

    /// The section written as `name`, if there is one.
    pub fn named(name: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.name() == name)
    }
}

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
    /// The children the engine applies, in spec order.
    pub children: Vec<RawChild>,
    /// Declared events; when `None`, events are declared by using them in `on`.
    pub events: Option<Vec<RawEvent>>,
    pub transitions: Vec<RawTransition>,
    pub finalizer: Option<Text>,
    /// What makes the object Ready: phases and/or conditions (`ready: Cond` names one
    /// condition). Without it, a condition named `Ready` (the handler's) is the Ready column.
    pub ready: Option<RawReady>,
    /// What the controller does when it finds a phase it did not write: `adopt` or `revert`.
    pub drift: Option<Text>,
    /// Phase names of older specs and the declared phase each moves to, in spec order.
    pub retired: Vec<RawRetired>,
    /// Whether the reader took in the whole spec: `false` when it skipped what it could not
    /// read (unknown keys, wrong types), so graph checks on the rest would only echo that.
    pub complete: bool,
    /// Where each section's key is written (a spec file's; the DSL leaves it empty), for
    /// messages about what a section lacks.
    pub sections: Vec<(Section, Loc)>,
}

impl RawSpec {
    /// A spec with no sections yet, starting at `loc`.
    pub fn empty(loc: Loc) -> Self {
        RawSpec {
            loc,
            phases: Vec::new(),
            conditions: Vec::new(),
            children: Vec::new(),
            events: None,
            transitions: Vec::new(),
            finalizer: None,
            ready: None,
            drift: None,
            retired: Vec::new(),
            complete: true,
            sections: Vec::new(),
        }
    }

    /// Where `section` is written, if it is.
    pub fn section(&self, section: Section) -> Option<Loc> {
        self.sections
            .iter()
            .find(|(s, _)| *s == section)
            .map(|(_, loc)| *loc)
    }
}

/// `Provisioning: Creating` (YAML) or `Provisioning -> Creating` (DSL): objects stored in the
/// retired phase `name` move to the declared phase `to`.
#[derive(Debug)]
pub struct RawRetired {
    pub name: Name,
    pub to: Name,
}

/// `ready: { phases: [..], conditions: [..] }`, or `ready: Cond` (one condition).
#[derive(Debug)]
pub struct RawReady {
    /// Where `ready` is written.
    pub loc: Loc,
    pub phases: Vec<Name>,
    pub conditions: Vec<Name>,
}

#[derive(Debug)]
pub struct RawPhase {
    pub name: Name,
    /// `Some(loc)` when marked initial.
    pub initial: Option<Loc>,
    pub terminal: Option<Loc>,
    pub description: Option<String>,
    pub requeue_after: Option<Text>,
    /// How long one handler call may run (`handlerTimeout`).
    pub handler_timeout: Option<Text>,
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
    /// `from: child.ready` or `from: child.Condition`: the engine derives it from a child.
    pub from: Option<Name>,
}

/// A child the engine applies in some phases (`children:`).
#[derive(Debug)]
pub struct RawChild {
    pub name: Name,
    /// Its Rust type, as written (`Job`, `k8s_openapi::api::batch::v1::Job`).
    pub type_path: Option<Text>,
    pub description: Option<String>,
    /// The phases it exists in.
    pub phases: Vec<Name>,
    /// Children that must be ready before it is applied.
    pub after: Vec<Name>,
    /// `kstatus` (the default) or one of its condition types.
    pub ready: Option<Name>,
    /// `delete` (the default) or `keep`: what happens to it outside its phases.
    pub on_leave: Option<Name>,
    /// `always` (the default) or `once`: whether an existing child is updated.
    pub apply: Option<Name>,
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
    /// Where `manual: true` (or the DSL's `manual`) is written: an edge only people take.
    pub manual: Option<Loc>,
}

/// `PodsReady` (must be True) or `!PodsReady` (must be False).
#[derive(Clone, Debug)]
pub struct RawRequirement {
    pub condition: Name,
    pub status: bool,
}

#[cfg(test)]
mod tests {
    use super::Section;

    #[test]
    fn every_section_is_listed_once_and_found_by_its_name() {
        for (i, section) in Section::ALL.into_iter().enumerate() {
            assert_eq!(section as usize, i, "ALL is in declaration order");
            assert_eq!(Section::named(section.name()), Some(section));
        }
        assert_eq!(Section::named("phase"), None);
    }
}
