//! The rules of the spec language, one small function each: a rule looks at one item, reports
//! into [`Ctxt`] when the item breaks it, and returns whether the item may stay in the
//! machine. Resolve applies them as it meets each item (see [`super::resolve`]).

use crate::diag::{Diagnostic, Loc};
use crate::model::{Edge, Machine, Phase, Trigger};
use crate::names;
use crate::spec::{Name, RawPhase, RawRequirement, RawSpec, RawTimeout, RawTransition};

use super::{Ctxt, Locations};

// ---- phases, conditions, events ----------------------------------------------------------

/// A machine has at least one phase.
pub fn has_phases(cx: &Ctxt, spec: &RawSpec) {
    if spec.phases.is_empty() {
        cx.error(
            Diagnostic::new(spec.loc, "the spec declares no phases")
                .help("a machine needs at least one phase: `phases: { Pending: { initial: true }, Done: { terminal: true } }`"),
        );
    }
}

/// Phase and event names become Rust enum variants: `what` is `phase` or `event`.
pub fn variant_name(cx: &Ctxt, what: &str, name: &Name) -> bool {
    let Some(problem) = names::camel_ident_problem(&name.text) else {
        return true;
    };
    cx.error(
        Diagnostic::new(name.loc, format!("invalid {what} name: {problem}")).help(format!(
            "{what}s become Rust enum variants; rename it, e.g. `{}`",
            suggest_camel(&name.text)
        )),
    );
    false
}

/// A name is declared once; `first` is where it was declared before, if it was. `what` is
/// `phase`, `condition` or `event`; `fix` ends the help.
pub fn declared_once(cx: &Ctxt, what: &str, name: &Name, first: Option<Loc>, fix: &str) -> bool {
    let Some(first) = first else {
        return true;
    };
    cx.error(
        Diagnostic::new(
            name.loc,
            format!("{what} `{}` is declared twice", name.text),
        )
        .help(format!("it is first declared {}; {fix}", earlier(first))),
    );
    false
}

/// Two phases do not share a handler method; `other` is the phase that has `on_{method}`.
pub fn distinct_method(cx: &Ctxt, name: &Name, method: &str, other: Option<&Name>) -> bool {
    let Some(other) = other else {
        return true;
    };
    cx.error(
        Diagnostic::new(
            name.loc,
            format!(
                "phases `{}` and `{}` both map to the handler method `on_{method}`",
                other.text, name.text
            ),
        )
        .help("rename one of them so their snake_case spellings differ"),
    );
    false
}

/// A terminal phase is never reconciled again: it has no `requeueAfter`.
pub fn terminal_without_requeue(cx: &Ctxt, phase: &RawPhase) {
    if let (Some(_), Some(requeue)) = (phase.terminal, &phase.requeue_after) {
        cx.error(
            Diagnostic::new(requeue.loc, format!("terminal phase `{}` has `requeueAfter`", phase.name.text))
                .help("a terminal phase is never reconciled again; remove `requeueAfter` or make the phase non-terminal"),
        );
    }
}

/// A terminal phase has no handler: it has no `handlerTimeout`.
pub fn terminal_without_handler_timeout(cx: &Ctxt, phase: &RawPhase) {
    if let (Some(_), Some(deadline)) = (phase.terminal, &phase.handler_timeout) {
        cx.error(
            Diagnostic::new(deadline.loc, format!("terminal phase `{}` has `handlerTimeout`", phase.name.text))
                .help("a terminal phase has no handler to bound; remove `handlerTimeout` or make the phase non-terminal"),
        );
    }
}

/// Nothing leaves a terminal phase: it has no `timeout`.
pub fn terminal_without_timeout(cx: &Ctxt, phase: &RawPhase) {
    if let (Some(_), Some(timeout)) = (phase.terminal, &phase.timeout) {
        cx.error(
            Diagnostic::new(timeout.loc, format!("terminal phase `{}` has a `timeout`", phase.name.text))
                .help("nothing leaves a terminal phase; remove the timeout or make the phase non-terminal"),
        );
    }
}

/// Exactly one phase is initial: reports every phase marked after the first.
pub fn one_initial(cx: &Ctxt, spec: &RawSpec) -> bool {
    let mut marked = spec.phases.iter().filter(|p| p.initial.is_some());
    let Some(first) = marked.next() else {
        return true;
    };
    let mut one = true;
    for extra in marked {
        cx.error(
            Diagnostic::new(
                extra.initial.unwrap_or(extra.name.loc),
                format!(
                    "more than one initial phase: `{}` and `{}`",
                    first.name.text, extra.name.text
                ),
            )
            .help("exactly one phase is initial; remove `initial` from all but one"),
        );
        one = false;
    }
    one
}

/// A condition type is a `metav1.Condition` type.
pub fn condition_type(cx: &Ctxt, name: &Name) -> bool {
    let Some(problem) = names::condition_type_problem(&name.text) else {
        return true;
    };
    cx.error(
        Diagnostic::new(name.loc, format!("invalid condition type: {problem}")).help(
            "condition types are metav1.Condition types such as `Ready` or `example.com/PodsReady`",
        ),
    );
    false
}

/// The condition types the engine itself keeps on every object, and what each says.
pub const ENGINE_CONDITIONS: [(&str, &str); 3] = [
    (
        "Paused",
        "it marks an object paused by the `kube-fsm.dev/paused` annotation",
    ),
    (
        "Reconciling",
        "it says an object is still converging (kstatus, Flux, Argo CD read it)",
    ),
    (
        "Stalled",
        "it says an object cannot progress without help (kstatus, Flux, Argo CD read it)",
    ),
];

/// A condition type is not one the engine keeps itself.
pub fn not_engine_condition(cx: &Ctxt, name: &Name) -> bool {
    let Some((_, what)) = ENGINE_CONDITIONS.iter().find(|(t, _)| *t == name.text) else {
        return true;
    };
    cx.error(
        Diagnostic::new(
            name.loc,
            format!("condition `{}` is kube-fsm's own: {what}", name.text),
        )
        .help("rename the condition (the engine writes this type on every object)"),
    );
    false
}

/// Two conditions do not become the same Rust variant; `other` is the condition that did.
pub fn distinct_variant(cx: &Ctxt, name: &Name, variant: &str, other: Option<&str>) -> bool {
    let Some(other) = other else {
        return true;
    };
    cx.error(
        Diagnostic::new(
            name.loc,
            format!(
                "conditions `{other}` and `{}` both become the Rust variant `{variant}`",
                name.text
            ),
        )
        .help("rename one of them"),
    );
    false
}

// ---- transitions ---------------------------------------------------------------------------

/// A transition names at least one source phase.
pub fn has_sources(cx: &Ctxt, t: &RawTransition) -> bool {
    if !t.from.is_empty() {
        return true;
    }
    cx.error(
        Diagnostic::new(t.loc, "transition has an empty `from` list")
            .help("name at least one source phase: `from: [Provisioning, Running]`"),
    );
    false
}

/// A transition has an event or a rule, not both.
pub fn on_or_when(cx: &Ctxt, t: &RawTransition) -> bool {
    let (Some(on), false) = (&t.on, t.when.is_empty()) else {
        return true;
    };
    cx.error(
        Diagnostic::new(on.loc, "a transition has either `on` (an event) or `when` (a rule), not both")
            .help("split it into two transitions between the same phases, one with `on` and one with `when`"),
    );
    false
}

/// A manual edge (taken only by people) has no `on` and no `when`: nothing automatic takes it.
pub fn manual_alone(cx: &Ctxt, t: &RawTransition) -> bool {
    if t.manual.is_none() {
        return true;
    }
    let (what, at) = match (&t.on, t.when.first()) {
        (Some(on), _) => ("`on`", on.loc),
        (None, Some(req)) => ("`when`", req.condition.loc),
        (None, None) => return true,
    };
    cx.error(
        Diagnostic::new(at, format!("a `manual` transition has no {what}: only people take it"))
            .help("drop `manual: true` to let the engine take it, or declare the automatic move as a transition of its own"),
    );
    false
}

/// A `when` rule requires each condition once; `before` is the status an earlier requirement
/// of the same rule asked of this condition, if any.
pub fn required_once(cx: &Ctxt, req: &RawRequirement, before: Option<bool>) -> bool {
    let Some(status) = before else {
        return true;
    };
    let message = if status == req.status {
        format!(
            "`{}` is required twice in this `when` rule",
            req.condition.text
        )
    } else {
        format!(
            "contradictory `when` rule: `{0}` and `!{0}` can never hold together",
            req.condition.text
        )
    };
    cx.error(
        Diagnostic::new(req.condition.loc, message).help("keep one requirement per condition"),
    );
    false
}

/// Nothing leaves a terminal phase: no edge starts there. `written` is the source as written.
pub fn not_from_terminal(cx: &Ctxt, phases: &[Phase], edge: &Edge, written: &Name) -> bool {
    // Only people leave a terminal phase: it stays terminal for the engine.
    if !phases[edge.from].terminal || edge.trigger == Trigger::Manual {
        return true;
    }
    let from = &phases[edge.from].name;
    cx.error(
        Diagnostic::new(written.loc, format!("transition out of terminal phase `{from}`"))
            .help(format!("the engine never leaves a terminal phase; make it a move only people make (`manual: true`, in the DSL `{from} -> X manual`), remove it, or drop `terminal` from `{from}`")),
    );
    false
}

/// A `when` rule does not lead back to its own phase: it would fire on every reconcile.
pub fn no_when_self_loop(cx: &Ctxt, phases: &[Phase], edge: &Edge, t: &RawTransition) -> bool {
    if edge.from != edge.to || !matches!(edge.trigger, Trigger::When(_)) {
        return true;
    }
    let from = &phases[edge.from].name;
    cx.error(
        Diagnostic::new(t.loc, format!("`when` rule from `{from}` back to `{from}` would fire on every reconcile"))
            .help("a self-transition re-enters the phase; trigger it with an event (`on`) or from the handler"),
    );
    false
}

/// An edge is new: no earlier edge from its phase repeats it (an edge with `on` or `when` can
/// also be taken by the handler, so `A -> B` and `A -> B on Go` are the same move), and no
/// earlier edge gives its event another target. The first earlier edge that clashes is named.
pub fn edge_is_new(
    cx: &Ctxt,
    machine: &Machine,
    locations: &Locations,
    edge: &Edge,
    t: &RawTransition,
) -> bool {
    let phases = &machine.phases;
    let (from, to) = (&phases[edge.from].name, &phases[edge.to].name);
    for (other, &other_loc) in machine.edges.iter().zip(&locations.edges) {
        if other.from != edge.from {
            continue;
        }
        let manual = |e: &Edge| e.trigger == Trigger::Manual;
        if other.to == edge.to && manual(other) != manual(edge) {
            cx.error(
                Diagnostic::new(t.loc, format!("transition `{from} -> {to}` is both manual and automatic"))
                    .help(format!("it is already declared {}; an edge is either taken by people (`manual: true`) or by the engine, so keep one", earlier(other_loc))),
            );
            return false;
        }
        if other.to == edge.to
            && (other.trigger == edge.trigger
                || other.trigger == Trigger::Handler
                || edge.trigger == Trigger::Handler)
        {
            cx.error(
                Diagnostic::new(t.loc, format!("duplicate transition `{from} -> {to}`"))
                    .help(format!("it is already declared {}; an edge with `on` or `when` can also be taken by the handler, so list it once", earlier(other_loc))),
            );
            return false;
        }
        if let (Trigger::Event(a), Trigger::Event(b)) = (&other.trigger, &edge.trigger)
            && a == b
            && other.to != edge.to
        {
            let event = t.on.as_ref().map_or("", |n| n.text.as_str());
            cx.error(
                Diagnostic::new(
                    t.on.as_ref().map_or(t.loc, |n| n.loc),
                    format!(
                        "event `{event}` leads from `{from}` to both `{}` and `{to}`",
                        phases[other.to].name
                    ),
                )
                .help("an event must have one target per phase; use a different event name for one of them"),
            );
            return false;
        }
    }
    true
}

// ---- timeouts, settings, retired names -----------------------------------------------------

/// A timeout's reason is an UpperCamelCase word.
pub fn timeout_reason(cx: &Ctxt, timeout: &RawTimeout) {
    let Some(reason) = &timeout.reason else {
        return;
    };
    if let Some(problem) = names::camel_ident_problem(&reason.text) {
        cx.error(
            Diagnostic::new(reason.loc, format!("invalid timeout reason: {problem}")).help(
                format!(
                    "reasons are UpperCamelCase words, e.g. `{}`",
                    suggest_camel(&reason.text)
                ),
            ),
        );
    }
}

/// A timeout from phase `from` to `to` follows a declared transition.
pub fn timeout_along_edge(
    cx: &Ctxt,
    machine: &Machine,
    from: usize,
    to: usize,
    timeout: &RawTimeout,
) {
    let edge = machine.edges.iter().find(|e| e.from == from && e.to == to);
    let (from, target) = (&machine.phases[from].name, &machine.phases[to].name);
    match edge {
        Some(e) if e.trigger == Trigger::Manual => {
            cx.error(
                Diagnostic::new(timeout.to.loc, format!("timeout from `{from}` goes to `{target}`, but `{from} -> {target}` is a manual transition"))
                    .help(format!("the engine takes a timeout and never a manual transition; drop `manual: true` from `{from} -> {target}`, or time out to another target")),
            );
            return;
        }
        Some(_) => return,
        None => {}
    }
    cx.error(
        Diagnostic::new(timeout.to.loc, format!("timeout from `{from}` goes to `{target}`, but `{from} -> {target}` is not a declared transition"))
            .help(format!("add `- {{ from: {from}, to: {target} }}` to `transitions`, or time out to a declared target")),
    );
}

/// A finalizer is a domain-qualified name.
pub fn finalizer(cx: &Ctxt, finalizer: &Name) {
    let valid = finalizer
        .text
        .split_once('/')
        .is_some_and(|(domain, name)| {
            names::condition_type_problem(&format!("{domain}/X")).is_none()
                && !name.is_empty()
                && name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if !valid {
        cx.error(
            Diagnostic::new(
                finalizer.loc,
                format!("invalid finalizer `{}`", finalizer.text),
            )
            .help("finalizers are domain-qualified names such as `example.com/cleanup`"),
        );
    }
}

/// A retired name is listed once; `first` is where it was listed before, if it was.
pub fn retired_once(cx: &Ctxt, old: &Name, first: Option<Loc>) -> bool {
    let Some(first) = first else {
        return true;
    };
    cx.error(
        Diagnostic::new(
            old.loc,
            format!("retired phase `{}` is listed twice", old.text),
        )
        .help(format!(
            "it is first listed {}; an object stored in `{}` moves to one phase, so keep one entry",
            earlier(first),
            old.text
        )),
    );
    false
}

/// A retired name is a phase the spec no longer declares.
pub fn retired_not_declared(cx: &Ctxt, spec: &RawSpec, old: &Name) -> bool {
    let Some(declared) = spec.phases.iter().find(|p| p.name.text == old.text) else {
        return true;
    };
    let at = match declared.name.loc {
        Loc::File(pos) => format!("on line {}", pos.line),
        Loc::Span(_) => "in `phases(..)`".to_owned(),
    };
    cx.error(
        Diagnostic::new(old.loc, format!("retired phase `{}` is still declared", old.text))
            .help(format!(
                "it is declared {at}; a retired name is a phase this spec no longer has: remove `{}` from `retired`, or rename the declared phase",
                old.text
            )),
    );
    false
}

/// A retired name follows the rule of phase names.
pub fn retired_name(cx: &Ctxt, old: &Name) -> bool {
    let Some(problem) = names::camel_ident_problem(&old.text) else {
        return true;
    };
    cx.error(
        Diagnostic::new(old.loc, format!("invalid retired phase name: {problem}"))
            .help(format!(
                "a retired name is a phase of an older spec and follows the same rule as phases, e.g. `{}`",
                suggest_camel(&old.text)
            )),
    );
    false
}

// ---- wording ---------------------------------------------------------------------------------

/// How to refer to an earlier location in a message.
pub fn earlier(loc: Loc) -> String {
    match loc {
        Loc::File(pos) => format!("on line {}", pos.line),
        Loc::Span(_) => "earlier in this attribute".to_owned(),
    }
}

/// `` `A`, `B` ``: names as a message lists them.
pub fn list_in_order(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn suggest_camel(name: &str) -> String {
    let camel = names::to_upper_camel(name);
    if camel.is_empty() || names::camel_ident_problem(&camel).is_some() {
        format!("{camel}Phase")
    } else {
        camel
    }
}
