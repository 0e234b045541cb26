//! Why an object is where it is, from its machine and its stored state: pure (the caller reads
//! the object and its Events), so every phase's explanation is testable without a cluster.

use std::fmt::{self, Write as _};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube_fsm::machine::{Description, READY, STALLED, TriggerDescription};
use serde::Serialize;

use crate::object::{Stored, human, spec_duration};

pub mod children;

pub use children::{ChildLine, Found};

/// What takes a way out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum By {
    /// A `when` rule, when its conditions hold.
    Rule,
    /// The handler firing an event.
    Event,
    /// The handler choosing it.
    Handler,
    /// The phase's timeout.
    Timeout,
    /// A person (a manual edge).
    Manual,
}

/// One way out of the phase.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WayOut {
    /// The phase it leads to.
    pub to: String,
    /// What takes it.
    pub by: By,
    /// The event, for `event`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// For a rule: each condition it reads, what it needs and what it is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Requirement>,
    /// For a rule: whether it holds now (the next step takes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holds: Option<bool>,
    /// For the timeout: when it is due (time paused excluded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due: Option<String>,
}

/// A condition a rule reads.
#[derive(Debug, Serialize)]
pub struct Requirement {
    /// The condition type.
    pub condition: String,
    /// `True` or `False`: what the rule needs.
    pub needs: &'static str,
    /// What the object has: `True`, `False`, `Unknown` or `absent`.
    pub is: String,
}

/// Why an object is where it is.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `Kind/name`.
    pub object: String,
    /// The namespace, or "".
    pub namespace: String,
    /// The stored phase, if any.
    pub phase: Option<String>,
    /// The phase's description from the spec.
    pub description: String,
    /// When the phase was entered, if recorded for it.
    pub entered: Option<String>,
    /// How long it has been in the phase.
    pub for_: Option<String>,
    /// Whether the engine leaves it only by people's moves.
    pub terminal: bool,
    /// The spec's `handlerTimeout` for the phase (`1m`), when it sets one.
    pub handler_timeout: Option<String>,
    /// The ways out the engine takes, and the manual ones.
    pub ways_out: Vec<WayOut>,
    /// The pause annotation's reason, while paused.
    pub paused: Option<String>,
    /// `Stalled`'s reason and message, while stalled.
    pub stalled: Option<String>,
    /// `Ready`'s status and message.
    pub ready: Option<String>,
    /// What keeps it here (unless it is Ready): each rule's conditions that do not have the
    /// status it needs.
    pub waiting_for: Vec<String>,
    /// The children declared in its phase, each with its object and readiness.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildLine>,
    /// The last transitions, oldest first (from Events).
    pub history: Vec<String>,
}

/// The ways out of `phase`, as of `object` at `now`.
pub fn ways_out(
    machine: &Description,
    object: &Stored<'_>,
    phase: &str,
    now: Timestamp,
) -> Vec<WayOut> {
    let mut out = Vec::new();
    for t in machine.out_of(phase) {
        let mut way = WayOut {
            to: t.to.clone(),
            by: By::Handler,
            event: None,
            requires: Vec::new(),
            holds: None,
            due: None,
        };
        match &t.trigger {
            TriggerDescription::Handler => {}
            TriggerDescription::Manual => way.by = By::Manual,
            TriggerDescription::On(event) => {
                way.by = By::Event;
                way.event = Some(event.clone());
            }
            TriggerDescription::When(reqs) => {
                way.by = By::Rule;
                way.requires = reqs
                    .iter()
                    .map(|r| Requirement {
                        condition: r.condition.clone(),
                        needs: if r.status { "True" } else { "False" },
                        is: object.condition_status(&r.condition).to_owned(),
                    })
                    .collect();
                way.holds = Some(way.requires.iter().all(|r| r.is == r.needs));
            }
        }
        out.push(way);
    }
    if let Some(timeout) = machine.phase(phase).and_then(|p| p.timeout.as_ref()) {
        let due = object.entered().map(|entered| {
            let after =
                SignedDuration::from_millis(i64::try_from(timeout.after_ms).unwrap_or(i64::MAX));
            let at = entered + object.paused_for(now) + after;
            let left = at.duration_since(now);
            if left.is_negative() {
                format!("{} (overdue by {})", round(at), human(-left))
            } else {
                format!("{} (in {})", round(at), human(left))
            }
        });
        out.push(WayOut {
            to: timeout.to.clone(),
            by: By::Timeout,
            event: Some(timeout.reason.clone()),
            requires: Vec::new(),
            holds: None,
            due: Some(due.unwrap_or_else(|| {
                format!(
                    "{} after the operator next sees it",
                    spec_duration(timeout.after_ms)
                )
            })),
        });
    }
    out
}

fn round(t: Timestamp) -> String {
    t.round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or(t)
        .to_string()
}

/// `text` safe to print to a terminal: control characters (an escape sequence that would
/// recolour or rewrite the screen, a carriage return, a newline inside a message) are shown
/// escaped. Condition messages, Event notes and descriptions are anyone's to write.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let shown: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            shown
        })
        .collect()
}

/// The explanation of `object` (a `kind` object) at `now`, with `history` from its Events
/// and what was `found` of its declared children.
pub fn explain(
    machine: &Description,
    object: &Stored<'_>,
    history: Vec<String>,
    found: &Found,
    now: Timestamp,
) -> Explanation {
    let phase = object.phase().map(str::to_owned);
    let spec_phase = phase.as_deref().and_then(|p| machine.phase(p));
    let condition_text = |type_: &str| {
        object.condition(type_).map(|c| {
            let (status, reason, message) = (
                c["status"].as_str().unwrap_or_default(),
                c["reason"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default(),
            );
            printable(&if message.is_empty() {
                format!("{status} ({reason})")
            } else {
                format!("{status} ({reason}): {message}")
            })
        })
    };
    let ways_out = phase
        .as_deref()
        .map(|p| ways_out(machine, object, p, now))
        .unwrap_or_default();
    // What keeps it here, unless it is where it should be (Ready).
    let ready = object.condition_status(READY) == "True";
    let waiting_for = ways_out
        .iter()
        .filter(|_| !ready)
        .filter(|w| w.holds == Some(false))
        .flat_map(|w| {
            w.requires.iter().filter(|r| r.is != r.needs).map(|r| {
                let waiting = format!(
                    "{} to be {} (it is {}) for {}",
                    r.condition, r.needs, r.is, w.to
                );
                // A condition the engine derives from a child: which one, and what it says.
                let Some(child) =
                    (machine.children.iter()).find(|c| c.derives.contains(&r.condition))
                else {
                    return waiting;
                };
                let from = format!(
                    "{waiting}, from the child `{}` ({})",
                    child.name, child.type_path
                );
                match object
                    .condition(&r.condition)
                    .and_then(|c| c["message"].as_str())
                {
                    Some(says) if !says.is_empty() => printable(&format!("{from}: {says}")),
                    _ => printable(&from),
                }
            })
        })
        .collect();
    Explanation {
        object: printable(&format!("{}/{}", machine.kind, object.name())),
        namespace: printable(object.namespace()),
        description: spec_phase
            .map(|p| printable(&p.description))
            .unwrap_or_default(),
        terminal: spec_phase.is_some_and(|p| p.terminal),
        handler_timeout: spec_phase
            .and_then(|p| p.handler_timeout_ms)
            .map(spec_duration),
        entered: object.entered().map(round),
        for_: object.entered().map(|e| human(now.duration_since(e))),
        phase: phase.as_deref().map(printable),
        ways_out,
        paused: object.paused().map(printable),
        stalled: condition_text(STALLED).filter(|s| s.starts_with("True")),
        ready: condition_text(READY),
        waiting_for,
        children: (phase.as_deref())
            .map(|p| children::lines(machine, p, found, now))
            .unwrap_or_default(),
        history: history.iter().map(|line| printable(line)).collect(),
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        let _ = write!(out, "{}", self.object);
        if !self.namespace.is_empty() {
            let _ = write!(out, " in {}", self.namespace);
        }
        out.push('\n');
        match &self.phase {
            None => out.push_str("Phase:    none yet (the operator has not seen it)\n"),
            Some(phase) => {
                let _ = write!(out, "Phase:    {phase}");
                if !self.description.is_empty() {
                    let _ = write!(out, " — {}", self.description);
                }
                out.push('\n');
                match (&self.entered, &self.for_) {
                    (Some(at), Some(for_)) => {
                        let _ = writeln!(out, "Since:    {at} ({for_})");
                    }
                    _ => out.push_str("Since:    unknown (moved by another writer; its clock starts when the operator sees it)\n"),
                }
            }
        }
        if let Some(deadline) = &self.handler_timeout {
            let _ = writeln!(
                out,
                "Handler:  each call may run {deadline} (the spec's handlerTimeout), then it is dropped"
            );
        }
        if let Some(ready) = &self.ready {
            let _ = writeln!(out, "Ready:    {ready}");
        }
        if let Some(paused) = &self.paused {
            let _ = writeln!(
                out,
                "Paused:   {paused} (no step runs; `kubectl fsm resume` ends it)"
            );
        }
        if let Some(stalled) = &self.stalled {
            let _ = writeln!(out, "Stalled:  {stalled}");
        }
        if !self.children.is_empty() {
            out.push_str("Children:\n");
        }
        for child in &self.children {
            let object = child.object.as_deref().unwrap_or("(none)");
            let _ = writeln!(
                out,
                "  {:<12} {} {object} — {}",
                child.name, child.kind, child.says
            );
        }
        let (manual, engine): (Vec<&WayOut>, Vec<&WayOut>) =
            self.ways_out.iter().partition(|w| w.by == By::Manual);
        if self.terminal {
            out.push_str("The engine never leaves this phase (terminal).\n");
        } else if !engine.is_empty() {
            out.push_str("Ways out:\n");
        }
        for way in engine {
            let _ = match way.by {
                By::Rule => {
                    let reads: Vec<String> = way
                        .requires
                        .iter()
                        .map(|r| format!("{} {} (is {})", r.condition, r.needs, r.is))
                        .collect();
                    let verdict = if way.holds == Some(true) {
                        "holds: the next step moves it"
                    } else {
                        "does not hold"
                    };
                    writeln!(
                        out,
                        "  → {:<12} when {} — {verdict}",
                        way.to,
                        reads.join(" and ")
                    )
                }
                By::Event => writeln!(
                    out,
                    "  → {:<12} when the handler fires {}",
                    way.to,
                    way.event.as_deref().unwrap_or_default()
                ),
                By::Timeout => writeln!(
                    out,
                    "  → {:<12} timeout {}, due {}",
                    way.to,
                    way.event.as_deref().unwrap_or_default(),
                    way.due.as_deref().unwrap_or_default()
                ),
                By::Handler | By::Manual => {
                    writeln!(out, "  → {:<12} when the handler chooses it", way.to)
                }
            };
        }
        if !self.waiting_for.is_empty() {
            let _ = writeln!(out, "Waiting for: {}", self.waiting_for.join("; "));
        }
        if !manual.is_empty() {
            let targets: Vec<&str> = manual.iter().map(|w| w.to.as_str()).collect();
            let _ = writeln!(
                out,
                "Manual moves (people only): {} — `kubectl fsm move {} PHASE --reason ...`",
                targets.join(", "),
                self.object.to_ascii_lowercase()
            );
        }
        if !self.history.is_empty() {
            out.push_str("Last transitions:\n");
            for line in &self.history {
                let _ = writeln!(out, "  {line}");
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests;
