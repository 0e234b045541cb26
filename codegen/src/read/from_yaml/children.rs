//! The spec's children (`children:`) and the conditions that may be derived from them
//! (`conditions: { X: { from: child.ready } }`).

use crate::read::yaml::{Node, Value};
use crate::spec::{Name, RawChild, RawCondition};

use super::Reader;

const CONDITION_KEYS: &[&str] = &["description", "from"];
const CHILD_KEYS: &[&str] = &[
    "type",
    "description",
    "phases",
    "after",
    "ready",
    "onLeave",
    "apply",
];

impl Reader<'_> {
    /// A condition: `{}`, `{ description: .. }`, `{ from: child.ready }`.
    pub(super) fn condition(&mut self, name: Name, body: &Node) -> RawCondition {
        let mut condition = RawCondition {
            name,
            description: None,
            from: None,
        };
        if matches!(body.value, Value::Null) {
            return condition;
        }
        let Some(entries) = self.fields(body, CONDITION_KEYS, "a condition") else {
            return condition;
        };
        for (key, value) in entries {
            match key.text.as_str() {
                "description" => {
                    condition.description = self.string(value, "`description`").map(|t| t.text)
                }
                "from" => condition.from = self.string(value, "`from`"),
                _ => {}
            }
        }
        condition
    }

    /// A child: `{ type: Job, phases: [Running], after: [..], ready: .., onLeave: .., apply: .. }`.
    pub(super) fn child(&mut self, name: Name, body: &Node) -> RawChild {
        let mut child = RawChild {
            name,
            type_path: None,
            description: None,
            phases: Vec::new(),
            after: Vec::new(),
            ready: None,
            on_leave: None,
            apply: None,
        };
        let Some(entries) = self.fields(body, CHILD_KEYS, "a child") else {
            return child;
        };
        for (key, value) in entries {
            match key.text.as_str() {
                "type" => child.type_path = self.string(value, "`type`"),
                "description" => {
                    child.description = self.string(value, "`description`").map(|t| t.text)
                }
                "phases" => child.phases = self.names(value, "`phases`"),
                "after" => child.after = self.names(value, "`after`"),
                "ready" => child.ready = self.string(value, "`ready`"),
                "onLeave" => child.on_leave = self.string(value, "`onLeave`"),
                "apply" => child.apply = self.string(value, "`apply`"),
                _ => {}
            }
        }
        child
    }
}
