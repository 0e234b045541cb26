//! Lower stage: [`Machine`] → [`Lowered`]: every name the generated code uses (`{Kind}Phase`,
//! `{Kind}{Phase}Target`, `on_{phase}`, ...), each phase's targets and events, the bit
//! matrices, the docs and the diagram text, computed once. [`crate::emit`] only splices them
//! into tokens.

use proc_macro2::{Ident, Span};
use quote::format_ident;

use crate::model::{Machine, Trigger};
use crate::names::to_snake;
use crate::picture::Pictures;

pub(crate) mod children;
mod illegal;

pub use children::LoweredChild;
pub(crate) mod render;

/// What lowering needs besides the machine.
#[derive(Debug)]
pub struct Target<'a> {
    /// The resource type (`#[kube(kind)]`), e.g. `Database`.
    pub kind: &'a Ident,
    /// The status struct's field holding the machine status, spanned at `#[kube(status)]`.
    pub status_field: Option<(&'a Ident, Span)>,
    /// Shown in `MachineData::source`.
    pub source: &'a str,
    /// Per edge, the spec file's line it was written on (empty, or `None`s, for the inline DSL).
    pub edge_lines: &'a [Option<usize>],
}

/// The machine as the generated code spells it.
#[derive(Debug)]
pub struct Lowered<'m> {
    /// The checked machine, for the data emitted as it is (`MachineData`).
    pub machine: &'m Machine,
    pub kind: Ident,
    /// `{Kind}Phase`, `{Kind}Condition`, `{Kind}Event` and `{Kind}Handler`.
    pub types: Types,
    /// The status field, spanned at `#[kube(status = "...")]`; without a status, nothing that
    /// needs `StateMachine` is generated.
    pub status_field: Option<(Ident, Span)>,
    pub source: String,
    /// Per phase, in spec order.
    pub phases: Vec<LoweredPhase>,
    pub conditions: Vec<Variant>,
    pub events: Vec<Variant>,
    /// The declared children, in the order a step applies them.
    pub children: Vec<LoweredChild>,
    /// `u64` words per phase set in the bit matrices.
    pub words: usize,
    /// Which phases are terminal, as bits.
    pub terminal_bits: Vec<u64>,
    /// Per phase, its targets as bits.
    pub edge_bits: Vec<Vec<u64>>,
    /// Whether every phase accepts every event (then `fire` needs no wildcard arm).
    pub fire_is_total: bool,
    pub docs: Docs,
    pub diagrams: Diagrams,
}

/// The names of the generated types that are not per phase.
#[derive(Debug)]
pub struct Types {
    pub phase: Ident,
    pub condition: Ident,
    pub event: Ident,
    pub handler: Ident,
}

/// A variant of a generated enum: its Rust name, the string it stands for, its doc.
#[derive(Debug)]
pub struct Variant {
    pub ident: Ident,
    pub name: String,
    pub doc: String,
}

#[derive(Debug)]
pub struct LoweredPhase {
    pub variant: Variant,
    /// Distinct targets in one step (manual edges included), in phase order.
    pub targets: Vec<usize>,
    /// The events accepted here with their target, in event order.
    pub events: Vec<(usize, usize)>,
    /// A non-terminal phase's own types and handler method; `None` for a terminal phase.
    pub handled: Option<Handled>,
}

/// What a non-terminal phase generates: `{Kind}{Phase}Target`, `{Kind}{Phase}Event`,
/// `{Kind}{Phase}Next` and the handler method `on_{phase}`, with their docs.
#[derive(Debug)]
pub struct Handled {
    pub target_ty: Ident,
    pub event_ty: Ident,
    pub next_ty: Ident,
    pub method: Ident,
    pub target_doc: String,
    pub event_doc: String,
    pub next_doc: String,
    pub method_doc: String,
    /// The targets the handler may choose (no manual edge), in phase order.
    pub targets: Vec<usize>,
    /// Per target: "Move from `A` to `B`."
    pub target_docs: Vec<String>,
    /// Per accepted event: "Fire `E`: `A` → `B`."
    pub event_docs: Vec<String>,
    /// Per phase the handler cannot name (by index): what rustc says when it does.
    pub illegal: Vec<(usize, String)>,
}

/// The docs of the generated items that are not per variant or per phase.
#[derive(Debug)]
pub struct Docs {
    pub phase_enum: String,
    pub from_str: String,
    pub condition_enum: String,
    pub event_enum: String,
    pub handler: String,
    /// The handler's `cleanup`, when the spec has a finalizer.
    pub cleanup: Option<String>,
}

/// The machine's diagrams and CEL rules, as `MachineData` carries them.
#[derive(Debug)]
pub struct Diagrams {
    pub mermaid: String,
    pub dot: String,
    /// The SVG pictures, plain and cut for counts (see `picture::pictures`), or why the
    /// machine is not drawn.
    pub pictures: Result<Pictures, String>,
    pub cel_phase_rule: String,
    pub cel_first_phase_rule: String,
}

/// The phase enum's doc: the machine drawn (inline SVG: rustdoc shows it without a script),
/// then its Mermaid text. A drawing that fails leaves the text alone.
fn phase_enum_doc(kind: &Ident, pictures: &Result<Pictures, String>, mermaid: &str) -> String {
    let picture = pictures
        .as_ref()
        .map(|pictures| format!("{}\n", pictures.plain))
        .unwrap_or_default();
    format!(
        "Phases of [`{kind}`], generated from its state-machine spec.\n\n{picture}```mermaid\n{mermaid}```"
    )
}

/// Lowers a checked machine for `target`.
pub fn lower<'m>(machine: &'m Machine, target: &Target<'_>) -> Lowered<'m> {
    let kind = target.kind;
    let count = machine.phases.len();
    let words = count.div_ceil(64).max(1);
    let mermaid = render::mermaid(machine);
    let dot = render::dot(machine, &kind.to_string());
    let phases: Vec<LoweredPhase> = (0..count)
        .map(|i| {
            let mut lowered = phase(machine, kind, i);
            if let Some(handled) = &mut lowered.handled {
                handled.illegal = illegal::targets(machine, target, i, &handled.targets);
            }
            lowered
        })
        .collect();
    let fire_arms: usize = phases.iter().map(|p| p.events.len()).sum();
    let names: Vec<&str> = machine.phases.iter().map(|p| p.name.as_str()).collect();
    let labels: Vec<(&str, String)> = (machine.phases.iter().enumerate())
        .map(|(i, p)| (p.name.as_str(), render::dot_label(machine, i)))
        .collect();
    let pictures = crate::picture::pictures(&dot, &labels);
    Lowered {
        machine,
        kind: kind.clone(),
        types: Types {
            phase: format_ident!("{kind}Phase"),
            condition: format_ident!("{kind}Condition"),
            event: format_ident!("{kind}Event"),
            handler: format_ident!("{kind}Handler"),
        },
        status_field: target
            .status_field
            .map(|(field, span)| (Ident::new(&field.to_string(), span), span)),
        source: target.source.to_owned(),
        conditions: conditions(machine),
        events: events(machine),
        children: children::children(machine),
        words,
        terminal_bits: bits(words, count, |i| machine.phases[i].terminal),
        edge_bits: phases
            .iter()
            .map(|p| bits(words, count, |to| p.targets.contains(&to)))
            .collect(),
        fire_is_total: fire_arms >= count * machine.events.len(),
        phases,
        docs: Docs {
            phase_enum: phase_enum_doc(kind, &pictures, &mermaid),
            from_str: format!(
                "Parses a phase name; the error lists the valid phases ({}).",
                names.join(", ")
            ),
            condition_enum: format!("Condition types the [`{kind}`] controller owns."),
            event_enum: format!("Events that move a [`{kind}`] along its machine's edges."),
            handler: format!(
                "The phase handlers of [`{kind}`]: one method per non-terminal phase, each able to return only that phase's legal moves."
            ),
            cleanup: machine.finalizer.as_ref().map(|f| {
                format!(
                    "Cleans up before deletion. The finalizer `{f}` is removed once this returns `Cleanup::Done`."
                )
            }),
        },
        diagrams: Diagrams {
            dot,
            pictures,
            cel_phase_rule: render::cel_transition_rule(machine),
            cel_first_phase_rule: render::cel_first_phase_rule(machine),
            mermaid,
        },
    }
}

fn variant(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// `words` bits per set: bit `i` is `set(i)`, for `i < count`.
fn bits(words: usize, count: usize, set: impl Fn(usize) -> bool) -> Vec<u64> {
    (0..words)
        .map(|w| {
            let mut word = 0u64;
            for bit in 0..64 {
                if w * 64 + bit < count && set(w * 64 + bit) {
                    word |= 1 << bit;
                }
            }
            word
        })
        .collect()
}

fn phase(machine: &Machine, kind: &Ident, i: usize) -> LoweredPhase {
    let p = &machine.phases[i];
    let mut doc = format!("Phase `{}`", p.name);
    if let Some(d) = &p.description {
        doc = format!("{doc}: {d}");
    }
    if p.terminal {
        doc.push_str(" (terminal)");
    }
    let targets = machine.targets(i);
    let events = machine.events_from(i);
    let handled = (!p.terminal).then(|| handled(machine, kind, i, &events));
    LoweredPhase {
        variant: Variant {
            ident: variant(&p.name),
            name: p.name.clone(),
            doc,
        },
        targets,
        events,
        handled,
    }
}

fn handled(machine: &Machine, kind: &Ident, i: usize, events: &[(usize, usize)]) -> Handled {
    let targets = machine.handler_targets(i);
    let phase = &machine.phases[i];
    let name = &phase.name;
    let target_name = |t: usize| &machine.phases[t].name;
    let moves: Vec<String> = targets
        .iter()
        .map(|&t| {
            let triggers: Vec<String> = machine
                .edges
                .iter()
                .filter(|e| e.from == i && e.to == t)
                .filter_map(|e| match &e.trigger {
                    Trigger::Handler | Trigger::Manual => None,
                    Trigger::Event(ev) => Some(format!("on `{}`", machine.events[*ev].name)),
                    Trigger::When(_) => Some("by a `when` rule".to_owned()),
                })
                .collect();
            let to = target_name(t);
            if triggers.is_empty() {
                format!("`{to}`")
            } else {
                format!("`{to}` ({})", triggers.join(", "))
            }
        })
        .collect();
    let mut method_doc = format!("Handles an object in phase `{name}`");
    if let Some(d) = &phase.description {
        method_doc.push_str(&format!(" ({d})"));
    }
    method_doc.push_str(&format!(". It may move to {}.", moves.join(", ")));
    Handled {
        target_ty: format_ident!("{kind}{name}Target"),
        event_ty: format_ident!("{kind}{name}Event"),
        next_ty: format_ident!("{kind}{name}Next"),
        method: format_ident!("on_{}", to_snake(name)),
        target_doc: format!("The legal targets of [`{kind}`] phase `{name}`."),
        event_doc: format!("The events [`{kind}`] phase `{name}` accepts."),
        next_doc: format!("What the handler of [`{kind}`] phase `{name}` returns."),
        method_doc,
        target_docs: targets
            .iter()
            .map(|&t| format!("Move from `{name}` to `{}`.", target_name(t)))
            .collect(),
        targets,
        event_docs: events
            .iter()
            .map(|&(e, to)| {
                format!(
                    "Fire `{}`: `{name}` → `{}`.",
                    machine.events[e].name,
                    target_name(to)
                )
            })
            .collect(),
        illegal: Vec::new(),
    }
}

fn conditions(machine: &Machine) -> Vec<Variant> {
    machine
        .conditions
        .iter()
        .map(|c| Variant {
            ident: variant(&c.variant),
            name: c.type_name.clone(),
            doc: match &c.description {
                Some(d) => format!("Condition type `{}`: {d}", c.type_name),
                None => format!("Condition type `{}`.", c.type_name),
            },
        })
        .collect()
}

fn events(machine: &Machine) -> Vec<Variant> {
    machine
        .events
        .iter()
        .map(|e| Variant {
            ident: variant(&e.name),
            name: e.name.clone(),
            doc: match &e.description {
                Some(d) => format!("Event `{}`: {d}", e.name),
                None => format!("Event `{}`.", e.name),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_targets_and_events_per_phase() {
        let machine = crate::validate::tests_support::machine(
            "phases(Pending(initial), HTTPReady, Done(terminal)), \
             transitions(Pending -> HTTPReady on Go, Pending -> Done, HTTPReady -> Done on Go)",
        );
        let kind = Ident::new("Site", Span::call_site());
        let target = Target {
            kind: &kind,
            status_field: None,
            source: "test",
            edge_lines: &[],
        };
        let lowered = lower(&machine, &target);
        assert_eq!(lowered.types.phase, "SitePhase");
        let ready = &lowered.phases[1];
        assert_eq!(ready.variant.ident, "HTTPReady");
        assert_eq!(
            (&ready.targets[..], &ready.events[..]),
            (&[2][..], &[(0, 2)][..])
        );
        let handled = ready.handled.as_ref().unwrap();
        assert_eq!(handled.target_ty, "SiteHTTPReadyTarget");
        assert_eq!(handled.next_ty, "SiteHTTPReadyNext");
        assert_eq!(handled.method, "on_http_ready");
        assert_eq!(
            handled.method_doc,
            "Handles an object in phase `HTTPReady`. It may move to `Done` (on `Go`)."
        );
        assert!(lowered.phases[2].handled.is_none(), "terminal");
        assert!(!lowered.fire_is_total, "`Done` accepts no event");
        assert_eq!(lowered.terminal_bits, [0b100]);
        assert_eq!(lowered.edge_bits, [[0b110], [0b100], [0]]);
    }
}
