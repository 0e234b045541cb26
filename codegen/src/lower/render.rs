//! Diagram text for a machine: Mermaid `stateDiagram-v2` and Graphviz DOT, emitted as constants
//! (the DOT is also what [`crate::picture`] draws).

use std::fmt::Write as _;

use crate::model::{Machine, Trigger};

/// The label of an edge: its event, its rule, or nothing for handler-only edges.
fn label(machine: &Machine, trigger: &Trigger) -> String {
    match trigger {
        Trigger::Handler => String::new(),
        Trigger::Manual => "manual".to_owned(),
        Trigger::Event(e) => machine.events[*e].name.clone(),
        Trigger::When(reqs) => {
            let parts: Vec<String> = reqs
                .iter()
                .map(|&(c, status)| {
                    let name = &machine.conditions[c].type_name;
                    if status {
                        name.clone()
                    } else {
                        format!("!{name}")
                    }
                })
                .collect();
            format!("when {}", parts.join(" && "))
        }
    }
}

/// The declared children of phase `phase`, as a phase's second line in the pictures:
/// `[credentials, db]`, or `None` for a phase without children.
pub fn children_line(machine: &Machine, phase: usize) -> Option<String> {
    let names: Vec<&str> = (machine.children.iter())
        .filter(|c| c.phases.contains(&phase))
        .map(|c| c.name.as_str())
        .collect();
    (!names.is_empty()).then(|| format!("[{}]", names.join(", ")))
}

/// The DOT label of phase `phase`: its name, and its children below it.
pub fn dot_label(machine: &Machine, phase: usize) -> String {
    let name = &machine.phases[phase].name;
    match children_line(machine, phase) {
        Some(children) => format!("{name}\\n{children}"),
        None => name.clone(),
    }
}

/// Mermaid state diagram; a phase with declared children lists them as its description.
pub fn mermaid(machine: &Machine) -> String {
    let mut out = String::from("stateDiagram-v2\n");
    if let Some(initial) = machine.phases.get(machine.initial) {
        let _ = writeln!(out, "    [*] --> {}", initial.name);
    }
    for (i, phase) in machine.phases.iter().enumerate() {
        if let Some(children) = children_line(machine, i) {
            let _ = writeln!(out, "    {}: {} {children}", phase.name, phase.name);
        }
    }
    for edge in &machine.edges {
        let (from, to) = (
            &machine.phases[edge.from].name,
            &machine.phases[edge.to].name,
        );
        let label = label(machine, &edge.trigger);
        if label.is_empty() {
            let _ = writeln!(out, "    {from} --> {to}");
        } else {
            let _ = writeln!(out, "    {from} --> {to}: {label}");
        }
    }
    for phase in &machine.phases {
        if let Some(timeout) = &phase.timeout {
            let to = &machine.phases[timeout.to].name;
            let _ = writeln!(
                out,
                "    {} --> {to}: after {} ({})",
                phase.name,
                millis(timeout.after_ms),
                timeout.reason
            );
        }
    }
    for phase in machine.phases.iter().filter(|p| p.terminal) {
        let _ = writeln!(out, "    {} --> [*]", phase.name);
    }
    out
}

/// The colour of the edges people take (`manual: true`); the engine's own edges are black.
const MANUAL_COLOUR: &str = "#1f6feb";
/// The colour of timeout edges.
const TIMEOUT_COLOUR: &str = "#d4760a";
/// The fill of terminal phases.
const TERMINAL_FILL: &str = "#e6e6e6";

/// Graphviz digraph: terminal phases filled, manual edges blue, timeouts dashed and orange —
/// attributes both Graphviz and [`crate::picture`] read — and, for Graphviz alone, the initial
/// phase bold, terminal ones doubled, manual edges dotted.
pub fn dot(machine: &Machine, kind: &str) -> String {
    let mut out =
        format!("digraph {kind} {{\n    rankdir=LR;\n    node [shape=box, style=rounded];\n");
    for (i, phase) in machine.phases.iter().enumerate() {
        let mut attrs = Vec::new();
        if i == machine.initial {
            attrs.push("penwidth=2");
        }
        let label;
        if children_line(machine, i).is_some() {
            label = format!("label=\"{}\"", dot_label(machine, i));
            attrs.push(&label);
        }
        let fill;
        if phase.terminal {
            fill =
                format!("peripheries=2, style=\"rounded,filled\", fillcolor=\"{TERMINAL_FILL}\"");
            attrs.push(&fill);
        }
        if attrs.is_empty() {
            let _ = writeln!(out, "    {};", phase.name);
        } else {
            let _ = writeln!(out, "    {} [{}];", phase.name, attrs.join(", "));
        }
    }
    for edge in &machine.edges {
        let (from, to) = (
            &machine.phases[edge.from].name,
            &machine.phases[edge.to].name,
        );
        let label = label(machine, &edge.trigger);
        if label.is_empty() {
            let _ = writeln!(out, "    {from} -> {to};");
        } else {
            let style = if edge.trigger == Trigger::Manual {
                format!(", style=dotted, color=\"{MANUAL_COLOUR}\"")
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "    {from} -> {to} [label=\"{}\"{style}];",
                label.replace('"', "\\\"")
            );
        }
    }
    for phase in &machine.phases {
        if let Some(timeout) = &phase.timeout {
            let to = &machine.phases[timeout.to].name;
            let _ = writeln!(
                out,
                "    {} -> {to} [label=\"after {}\", style=dashed, color=\"{TIMEOUT_COLOUR}\"];",
                phase.name,
                millis(timeout.after_ms)
            );
        }
    }
    out.push_str("}\n");
    out
}

/// The CEL rule on `status.phase`: stay, move along a declared edge, move from a retired name
/// to the phase it maps to, or leave any other value the spec does not declare (a phase of an
/// older spec must not trap the object).
pub fn cel_transition_rule(machine: &Machine) -> String {
    let mut rule = String::from("self == oldSelf");
    for (from, phase) in machine.phases.iter().enumerate() {
        let targets = quoted(
            machine
                .targets(from)
                .into_iter()
                .filter(|&to| to != from)
                .map(|to| machine.phases[to].name.as_str()),
        );
        if !targets.is_empty() {
            let _ = write!(
                rule,
                " || (oldSelf == '{}' && self in [{targets}])",
                phase.name
            );
        }
    }
    for retired in &machine.retired {
        let _ = write!(
            rule,
            " || (oldSelf == '{}' && self in ['{}'])",
            retired.name, machine.phases[retired.to].name
        );
    }
    let known = quoted(
        machine
            .phases
            .iter()
            .map(|p| p.name.as_str())
            .chain(machine.retired.iter().map(|r| r.name.as_str())),
    );
    let _ = write!(rule, " || !(oldSelf in [{known}])");
    rule
}

/// `'A', 'B'`: phase names as a CEL list's items (names are identifiers: nothing to escape).
fn quoted<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CEL rule on the object that the first phase written is the initial phase or one of its
/// direct successors by an edge the engine takes: a phase reached only by a manual edge needs
/// a person's move out of a stored initial phase (CEL cannot tell who writes, so it is never a
/// first phase). It sits on the root, which exists on both sides of every update, so it needs
/// no `optionalOldSelf` whether or not the old object had a status.
pub fn cel_first_phase_rule(machine: &Machine) -> String {
    let successors = machine
        .handler_targets(machine.initial)
        .into_iter()
        .filter(|&t| t != machine.initial);
    let allowed = quoted(
        std::iter::once(machine.initial)
            .chain(successors)
            .map(|i| machine.phases[i].name.as_str()),
    );
    format!(
        "!has(self.status) || !has(self.status.phase) || \
         (has(oldSelf.status) && has(oldSelf.status.phase)) || self.status.phase in [{allowed}]"
    )
}

/// `600000` → `10m`, `5400000` → `1h30m`, `1500` → `1s500ms`.
pub fn millis(ms: u64) -> String {
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            let _ = write!(out, "{}{unit}", rest / size);
            rest %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cel_rules_list_every_edge_and_the_first_phases() {
        let machine = crate::validate::tests_support::machine(
            "phases(Pending(initial), Running, Done(terminal)), transitions(Pending -> Running on Go, Pending -> Done, Running -> Running on Again, Running -> Done)",
        );
        assert_eq!(
            cel_transition_rule(&machine),
            "self == oldSelf || (oldSelf == 'Pending' && self in ['Running', 'Done']) || (oldSelf == 'Running' && self in ['Done']) || !(oldSelf in ['Pending', 'Running', 'Done'])"
        );
        assert_eq!(
            cel_first_phase_rule(&machine),
            "!has(self.status) || !has(self.status.phase) || \
             (has(oldSelf.status) && has(oldSelf.status.phase)) || \
             self.status.phase in ['Pending', 'Running', 'Done']"
        );
    }

    #[test]
    fn a_phase_reached_only_by_a_manual_edge_is_not_a_first_phase() {
        let machine = crate::validate::tests_support::machine(
            "phases(Pending(initial), Approved(terminal), Rejected(terminal)), \
             transitions(Pending -> Approved manual, Pending -> Rejected)",
        );
        assert_eq!(
            cel_first_phase_rule(&machine),
            "!has(self.status) || !has(self.status.phase) || \
             (has(oldSelf.status) && has(oldSelf.status.phase)) || \
             self.status.phase in ['Pending', 'Rejected']"
        );
    }

    #[test]
    fn a_retired_name_may_move_only_to_its_phase_and_other_undeclared_values_anywhere() {
        let machine = crate::validate::tests_support::machine(
            "phases(Pending(initial), Creating, Running, Done(terminal)), \
             transitions(Pending -> Creating, Creating -> Running, Running -> Done), \
             retired(Provisioning -> Creating, Starting -> Running)",
        );
        assert_eq!(
            cel_transition_rule(&machine),
            "self == oldSelf || (oldSelf == 'Pending' && self in ['Creating']) || \
             (oldSelf == 'Creating' && self in ['Running']) || \
             (oldSelf == 'Running' && self in ['Done']) || \
             (oldSelf == 'Provisioning' && self in ['Creating']) || \
             (oldSelf == 'Starting' && self in ['Running']) || \
             !(oldSelf in ['Pending', 'Creating', 'Running', 'Done', 'Provisioning', 'Starting'])"
        );
    }

    #[test]
    fn millis_round_trips_units() {
        assert_eq!(millis(600_000), "10m");
        assert_eq!(millis(5_400_000), "1h30m");
        assert_eq!(millis(1_500), "1s500ms");
    }

    #[test]
    fn the_pictures_show_each_phases_children() {
        let machine = crate::validate::tests_support::machine(
            "phases(Pending(initial), Running, Done(terminal)), \
             children(seed(type = Secret, phases(Pending, Running)), db(type = StatefulSet, phases(Running))), \
             transitions(Pending -> Running, Running -> Done)",
        );
        let mermaid = mermaid(&machine);
        assert!(
            mermaid.contains("    Pending: Pending [seed]\n"),
            "{mermaid}"
        );
        assert!(
            mermaid.contains("    Running: Running [seed, db]\n"),
            "{mermaid}"
        );
        assert!(!mermaid.contains("Done: "), "{mermaid}");
        let dot = dot(&machine, "K");
        assert!(
            dot.contains("    Running [label=\"Running\\n[seed, db]\"];\n"),
            "{dot}"
        );
        assert!(dot.contains("    Done [peripheries=2"), "{dot}");
        let svg = crate::picture::svg(&dot).expect("drawn");
        assert!(svg.contains("[seed, db]"), "the children are drawn");
    }
}
