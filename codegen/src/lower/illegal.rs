//! What a handler is told when it names a target its phase cannot move to: rustc reports the
//! use of `{Kind}{Phase}Target::{Other}` (a hidden constant that fails to evaluate), and the
//! words are these — why not, which targets are legal from that phase, and the spec lines that
//! declare them.

use crate::lower::Target;
use crate::model::{Machine, Trigger};

/// Per phase the handler of `from` cannot name (by phase index): the sentence it is told.
pub fn targets(
    machine: &Machine,
    target: &Target<'_>,
    from: usize,
    legal: &[usize],
) -> Vec<(usize, String)> {
    let kind = target.kind;
    let name = |i: usize| machine.phases[i].name.as_str();
    // ` (specs/x.yaml:12)` for a spec file; nothing for the inline DSL (its edges are right
    // above the handler, in the attribute).
    let at = |edge: usize| match target.edge_lines.get(edge).copied().flatten() {
        Some(line) => format!(" ({}:{line})", target.source),
        None => String::new(),
    };
    let first_edge = |to: usize, manual: bool| {
        machine
            .edges
            .iter()
            .position(|e| e.from == from && e.to == to && (e.trigger == Trigger::Manual) == manual)
    };
    let legal_list: Vec<String> = legal
        .iter()
        .map(|&to| match first_edge(to, false) {
            Some(edge) => format!("`{}`{}", name(to), at(edge)),
            None => format!("`{}`", name(to)),
        })
        .collect();
    let allowed = if legal_list.is_empty() {
        format!(
            "the handler of `{}` can name no target (it stays, or fires an event)",
            name(from)
        )
    } else {
        format!(
            "from `{}` the handler may name {}",
            name(from),
            legal_list.join(", ")
        )
    };
    (0..machine.phases.len())
        .filter(|to| !legal.contains(to))
        .map(|to| {
            let (phase, other) = (name(from), name(to));
            let why = if to == from {
                format!("a handler stays in `{phase}` with `Next::Stay`, not by naming it")
            } else if let Some(edge) = first_edge(to, true) {
                format!(
                    "`{phase} -> {other}` is a manual transition{}: only a person takes it \
                     (`kubectl fsm move`), never a handler",
                    at(edge)
                )
            } else {
                let add = if target.edge_lines.iter().any(Option::is_some) {
                    format!(
                        "`{{ from: {phase}, to: {other} }}` to the transitions of {}",
                        target.source
                    )
                } else {
                    format!("`{phase} -> {other}` to the spec's transitions")
                };
                format!(
                    "the spec declares no transition `{phase} -> {other}` (add {add} to allow it)"
                )
            };
            (
                to,
                format!("`{kind}{phase}Target::{other}` is not a legal target: {why}; {allowed}."),
            )
        })
        .collect()
}
