//! Graph checks: every phase reachable from the initial one, every non-terminal phase with a
//! way out, no `when` rule shadowed by an earlier one. They need the whole graph, so
//! [`super::validate`] runs them only on a machine that resolved cleanly.

use std::collections::{BTreeSet, VecDeque};

use crate::diag::Diagnostic;
use crate::model::{Machine, Trigger};

use super::check::earlier;
use super::{Ctxt, Locations};

/// Runs the graph checks, phase by phase, then the rule checks.
pub fn check(cx: &Ctxt, machine: &Machine, locations: &Locations) {
    if machine.phases.is_empty() {
        return;
    }
    let seen = reachable(machine);
    for phase in 0..machine.phases.len() {
        is_reachable(cx, machine, locations, phase, &seen);
        has_way_out(cx, machine, locations, phase);
    }
    shadowed_rules(cx, machine, locations);
}

/// Which phases the initial phase reaches, by index.
fn reachable(machine: &Machine) -> Vec<bool> {
    let mut seen = vec![false; machine.phases.len()];
    let mut queue = VecDeque::from([machine.initial]);
    seen[machine.initial] = true;
    while let Some(p) = queue.pop_front() {
        for e in machine.edges.iter().filter(|e| e.from == p) {
            if !seen[e.to] {
                seen[e.to] = true;
                queue.push_back(e.to);
            }
        }
    }
    seen
}

/// Every phase is reachable from the initial phase.
fn is_reachable(cx: &Ctxt, machine: &Machine, locations: &Locations, phase: usize, seen: &[bool]) {
    if seen[phase] {
        return;
    }
    let name = &machine.phases[phase].name;
    let initial = &machine.phases[machine.initial].name;
    cx.error(
        Diagnostic::new(
            locations.phases[phase],
            format!("phase `{name}` is unreachable from the initial phase `{initial}`"),
        )
        .help(format!(
            "add a transition into `{name}` from a reachable phase, or remove it"
        )),
    );
}

/// A phase that is not terminal has a transition out that the engine can take (a manual one
/// only people take).
fn has_way_out(cx: &Ctxt, machine: &Machine, locations: &Locations, phase: usize) {
    let engine_leaves = machine
        .edges
        .iter()
        .any(|e| e.from == phase && e.trigger != Trigger::Manual);
    if machine.phases[phase].terminal || engine_leaves {
        return;
    }
    let name = &machine.phases[phase].name;
    let manual = machine.edges.iter().any(|e| e.from == phase);
    let (message, help) = if manual {
        (
            format!("phase `{name}` is not terminal and only people leave it (manual transitions)"),
            format!(
                "mark it `terminal: true` (people may still take its manual transitions), or add a transition the engine takes from `{name}`"
            ),
        )
    } else {
        (
            format!("phase `{name}` is not terminal and has no transition out"),
            format!("mark it `terminal: true`, or add a transition from `{name}`"),
        )
    };
    cx.error(Diagnostic::new(locations.phases[phase], message).help(help));
}

/// A rule is dead when an earlier rule from the same phase requires a subset of its
/// conditions: whenever it holds, the earlier one holds too and wins.
fn shadowed_rules(cx: &Ctxt, machine: &Machine, locations: &Locations) {
    let phases = &machine.phases;
    for (j, later) in machine.edges.iter().enumerate() {
        let Trigger::When(later_reqs) = &later.trigger else {
            continue;
        };
        let later_set: BTreeSet<&(usize, bool)> = later_reqs.iter().collect();
        let shadow = machine.edges[..j].iter().position(|earlier| {
            earlier.from == later.from
                && matches!(&earlier.trigger, Trigger::When(reqs) if reqs.iter().all(|r| later_set.contains(r)))
        });
        if let Some(i) = shadow {
            let from = &phases[later.from].name;
            cx.error(
                Diagnostic::new(
                    locations.edges[j],
                    format!(
                        "this `when` rule from `{from}` to `{}` can never fire",
                        phases[later.to].name
                    ),
                )
                .help(format!(
                    "the earlier rule `{from} -> {}` ({}) holds whenever this one does and is tried first; put the more specific rule first or remove one",
                    phases[machine.edges[i].to].name,
                    earlier(locations.edges[i])
                )),
            );
        }
    }
}
