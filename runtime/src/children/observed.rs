//! What a step saw of each declared child, and the conditions derived from it.

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::children::kstatus::{self, Health};
use crate::machine::conditions;
use crate::machine::data::{ChildData, MachineData, SourceData};
use crate::pure::message;

/// One condition of a child's `status.conditions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildCondition {
    /// Its type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its reason, possibly empty.
    pub reason: String,
    /// Its message, possibly empty.
    pub message: String,
}

/// A child as a step saw it: its kind and name, and what it reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Its kind, e.g. `Job`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// kstatus's verdict.
    pub health: Health,
    /// Its conditions.
    pub conditions: Vec<ChildCondition>,
}

impl Observed {
    /// The child `object` (as served: `apiVersion`, `kind`, `metadata`, `status`) at `now`.
    pub fn of(object: &Value, now: Timestamp) -> Self {
        let text = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let conditions = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| ChildCondition {
                type_: text(c, "type"),
                status: text(c, "status"),
                reason: text(c, "reason"),
                message: text(c, "message"),
            })
            .collect();
        Observed {
            kind: text(object, "kind"),
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            health: kstatus::compute(object, now),
            conditions,
        }
    }

    fn condition(&self, type_: &str) -> Option<&ChildCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether it is ready: by kstatus's rules, or, `by` a condition type, that condition
    /// `True`.
    pub fn is_ready(&self, by: Option<&str>) -> bool {
        match by {
            None => self.health.is_ready(),
            Some(type_) => self.condition(type_).is_some_and(|c| c.status == "True"),
        }
    }

    /// Its readiness (`by` as in [`Observed::is_ready`]) as a condition says it: whether it
    /// is ready, a CamelCase reason and a sentence, e.g. "The StatefulSet db is not ready
    /// yet: Ready: 2/3."
    pub fn readiness(&self, by: Option<&str>) -> (bool, String, String) {
        let ready = self.is_ready(by);
        let what = self.what();
        let Some(type_) = by else {
            let health = &self.health;
            let state = match health.status {
                kstatus::Status::Current => "is ready",
                kstatus::Status::InProgress => "is not ready yet",
                kstatus::Status::Failed => "has failed",
                kstatus::Status::Terminating => "is being deleted",
                kstatus::Status::Unknown => "is in a state kstatus does not know",
            };
            let reason = if ready { "Ready" } else { &health.reason };
            let message = sentence(&format!("{what} {state}"), &health.message);
            return (ready, reason.to_owned(), message);
        };
        match self.condition(type_) {
            Some(c) => (ready, c.reason.clone(), carried(&what, c)),
            None => (false, "NotReported".to_owned(), not_reported(&what, type_)),
        }
    }

    /// "The Job migrate-1".
    fn what(&self) -> String {
        format!("The {} {}", self.kind, self.name)
    }
}

/// What a step knows of one declared child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Applied (or found, for `apply: once`) in this step.
    Observed(Observed),
    /// Not applied: it waits for these children (by name) to be ready.
    Waiting(Vec<&'static str>),
}

impl Seen {
    /// Whether the child is ready by its `ready:` rule.
    pub fn is_ready(&self, data: &ChildData) -> bool {
        match self {
            Seen::Observed(o) => o.is_ready(data.ready.condition()),
            Seen::Waiting(_) => false,
        }
    }
}

/// A derived condition as the engine writes it: its index in the machine's conditions,
/// status, reason and message (a sentence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    /// Index of the condition.
    pub condition: usize,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// A CamelCase reason.
    pub reason: String,
    /// A sentence.
    pub message: String,
}

/// The derived conditions of `machine` whose child the step saw (`seen`, one entry per
/// child), in condition order. A child the step did not see (outside its phases) derives
/// nothing: its conditions stay as they were written.
pub fn derived(machine: &MachineData, seen: &[Option<Seen>]) -> Vec<Derived> {
    machine
        .conditions
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let from = c.from?;
            let child = &machine.children[from.child];
            let seen = seen.get(from.child)?.as_ref()?;
            let (status, reason, message) = derive(child, from.source, seen);
            Some(Derived {
                condition: i,
                status,
                reason: reason_text(&reason),
                message: message::bounded(message, message::CONDITION_MESSAGE_LIMIT),
            })
        })
        .collect()
}

fn derive(child: &ChildData, source: SourceData, seen: &Seen) -> (&'static str, String, String) {
    let observed = match seen {
        Seen::Observed(o) => o,
        Seen::Waiting(on) => {
            let on: Vec<String> = on.iter().map(|n| format!("`{n}`")).collect();
            return (
                "False",
                "Waiting".to_owned(),
                format!(
                    "The child `{}` waits for {} to be ready before it is applied.",
                    child.name,
                    on.join(" and ")
                ),
            );
        }
    };
    match source {
        SourceData::Ready => {
            let (ready, reason, message) = observed.readiness(child.ready.condition());
            (if ready { "True" } else { "False" }, reason, message)
        }
        SourceData::Condition(type_) => match observed.condition(type_) {
            Some(c) => {
                let status = match c.status.as_str() {
                    "True" => "True",
                    "False" => "False",
                    _ => "Unknown",
                };
                (status, c.reason.clone(), carried(&observed.what(), c))
            }
            None => (
                "Unknown",
                "NotReported".to_owned(),
                not_reported(&observed.what(), type_),
            ),
        },
    }
}

fn not_reported(what: &str, type_: &str) -> String {
    format!("{what} does not report `{type_}` yet.")
}

/// The child's condition as a sentence: its message, or what its status says.
fn carried(what: &str, c: &ChildCondition) -> String {
    let state = format!("{what} reports `{}` {}", c.type_, c.status);
    sentence(&state, &c.message)
}

/// `head` and, when there is one, `detail` after a colon, ending with a full stop.
fn sentence(head: &str, detail: &str) -> String {
    let detail = detail.trim();
    let mut out = if detail.is_empty() {
        head.to_owned()
    } else {
        format!("{head}: {detail}")
    };
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// A condition reason as the API server accepts it (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`):
/// the child's own when it is one, otherwise its letters and digits, or `Unspecified`.
fn reason_text(reason: &str) -> String {
    if conditions::validate_reason(reason).is_ok() {
        return reason.to_owned();
    }
    let kept: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let kept = kept.trim_start_matches(|c: char| !c.is_ascii_alphabetic());
    if kept.is_empty() {
        "Unspecified".to_owned()
    } else {
        kept.chars().take(1024).collect()
    }
}

#[cfg(test)]
mod tests;
