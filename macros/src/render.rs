//! Diagram text for a machine: Mermaid `stateDiagram-v2` and Graphviz DOT, emitted as constants.

use std::fmt::Write as _;

use crate::model::{Machine, Trigger};

/// The label of an edge: its event, its rule, or nothing for handler-only edges.
fn label(machine: &Machine, trigger: &Trigger) -> String {
    match trigger {
        Trigger::Manual => String::new(),
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

/// Mermaid state diagram.
pub fn mermaid(machine: &Machine) -> String {
    let mut out = String::from("stateDiagram-v2\n");
    if let Some(initial) = machine.phases.get(machine.initial) {
        let _ = writeln!(out, "    [*] --> {}", initial.name);
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

/// Graphviz digraph.
pub fn dot(machine: &Machine, kind: &str) -> String {
    let mut out =
        format!("digraph {kind} {{\n    rankdir=LR;\n    node [shape=box, style=rounded];\n");
    for (i, phase) in machine.phases.iter().enumerate() {
        let mut attrs = Vec::new();
        if i == machine.initial {
            attrs.push("penwidth=2");
        }
        if phase.terminal {
            attrs.push("peripheries=2");
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
            let _ = writeln!(
                out,
                "    {from} -> {to} [label=\"{}\"];",
                label.replace('"', "\\\"")
            );
        }
    }
    for phase in &machine.phases {
        if let Some(timeout) = &phase.timeout {
            let to = &machine.phases[timeout.to].name;
            let _ = writeln!(
                out,
                "    {} -> {to} [label=\"after {}\", style=dashed];",
                phase.name,
                millis(timeout.after_ms)
            );
        }
    }
    out.push_str("}\n");
    out
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
    fn millis_round_trips_units() {
        assert_eq!(millis(600_000), "10m");
        assert_eq!(millis(5_400_000), "1h30m");
        assert_eq!(millis(1_500), "1s500ms");
    }
}
