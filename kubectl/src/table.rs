//! `kubectl fsm get`: one row per object — phase, for how long, Ready, what moves it next.

use k8s_openapi::jiff::Timestamp;
use kube_fsm::machine::{Description, READY};
use serde::Serialize;

use crate::explain::{By, ways_out};
use crate::object::{Stored, human};

/// One object's row.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The namespace, or "".
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The stored phase, or "".
    pub phase: String,
    /// How long it has been in the phase, or "".
    #[serde(rename = "for")]
    pub for_: String,
    /// The `Ready` condition's status, or "".
    pub ready: String,
    /// What moves it next.
    pub next: String,
}

/// The row of `object` at `now`.
pub fn row(machine: &Description, object: &Stored<'_>, now: Timestamp) -> Row {
    let phase = object.phase().unwrap_or_default();
    let next = if object.paused().is_some() {
        "paused".to_owned()
    } else if phase.is_empty() {
        "the operator's first step".to_owned()
    } else {
        let ways: Vec<String> = ways_out(machine, object, phase, now)
            .into_iter()
            .filter(|w| w.by != By::Manual)
            .map(|w| match w.by {
                By::Rule => {
                    let reads: Vec<String> = w
                        .requires
                        .iter()
                        .map(|r| {
                            if r.needs == "True" {
                                r.condition.clone()
                            } else {
                                format!("!{}", r.condition)
                            }
                        })
                        .collect();
                    format!("{} when {}", w.to, reads.join(" && "))
                }
                By::Event => format!("{} on {}", w.to, w.event.unwrap_or_default()),
                By::Timeout => format!("{} by timeout", w.to),
                By::Handler | By::Manual => format!("{} by its handler", w.to),
            })
            .collect();
        if ways.is_empty() {
            "-".to_owned()
        } else {
            ways.join(", ")
        }
    };
    let ready = match object.condition_status(READY) {
        "absent" => String::new(),
        status => status.to_owned(),
    };
    Row {
        namespace: object.namespace().to_owned(),
        name: object.name().to_owned(),
        phase: phase.to_owned(),
        for_: object
            .entered()
            .map(|e| human(now.duration_since(e)))
            .unwrap_or_default(),
        ready,
        next,
    }
}

/// The rows as kubectl prints a table, with a NAMESPACE column when `namespaces`.
pub fn render(rows: &[Row], namespaces: bool) -> String {
    let mut lines: Vec<Vec<&str>> = vec![vec!["NAME", "PHASE", "FOR", "READY", "NEXT"]];
    if namespaces {
        lines[0].insert(0, "NAMESPACE");
    }
    for r in rows {
        let mut line = vec![r.name.as_str(), &r.phase, &r.for_, &r.ready, &r.next];
        if namespaces {
            line.insert(0, &r.namespace);
        }
        lines.push(line);
    }
    let columns = lines[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c + 1 == columns {
                    (*cell).to_owned()
                } else {
                    format!("{cell:<w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("   ").trim_end());
        out.push('\n');
    }
    out
}
