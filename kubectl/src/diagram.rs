//! `kubectl fsm diagram`: the machine's Mermaid or DOT text, with `--live` the number of
//! objects in each phase.

use std::collections::BTreeMap;

use kube_fsm::machine::Description;

/// The diagram in `format` (`mermaid` or `dot`), each phase labelled with its count when
/// `counts` is given.
pub fn diagram(
    machine: &Description,
    format: &str,
    counts: Option<&BTreeMap<String, usize>>,
) -> String {
    let (text, dot) = if format == "dot" {
        (&machine.dot, true)
    } else {
        (&machine.mermaid, false)
    };
    let Some(counts) = counts else {
        return text.clone();
    };
    let labels: Vec<String> = machine
        .phases
        .iter()
        .map(|p| {
            let n = counts.get(&p.name).copied().unwrap_or(0);
            if dot {
                format!("    {} [label=\"{}\\n{n}\"];", p.name, p.name)
            } else {
                format!("    state \"{} ({n})\" as {}", p.name, p.name)
            }
        })
        .collect();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if dot {
        // Before the closing brace: DOT merges a node's attributes.
        let close = lines
            .iter()
            .rposition(|l| l.trim() == "}")
            .unwrap_or(lines.len());
        lines.splice(close..close, labels);
    } else {
        lines.splice(1..1, labels);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out
}
