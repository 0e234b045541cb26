//! The declared children of the object's phase, as `explain` lists them: each with the object
//! the engine applied (found by its owner and the `kube-fsm.dev/child` label) and whether it
//! is ready, by the rule its declaration names. Pure: the caller reads the children.

use k8s_openapi::jiff::Timestamp;
use kube_fsm::children::Observed;
use kube_fsm::machine::{ChildDescription, Description};
use serde::Serialize;
use serde_json::Value;

use super::printable;

/// One declared child of the phase.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildLine {
    /// Its name in the spec.
    pub name: String,
    /// Its kind (its Rust type when the CRD's description predates kinds).
    pub kind: String,
    /// The object's name, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Whether it is ready.
    pub ready: bool,
    /// A sentence: what it reports, or why it is not there.
    pub says: String,
}

/// What the caller read of each child, by the child's name: the objects found, or why
/// they could not be read.
pub type Found = Vec<(String, Result<Vec<Value>, String>)>;

/// The children of `machine` declared in `phase`, in spec order, with what `found` holds
/// for each.
pub fn lines(machine: &Description, phase: &str, found: &Found, now: Timestamp) -> Vec<ChildLine> {
    let read = |name: &str| {
        found
            .iter()
            .find(|(child, _)| child == name)
            .map(|(_, r)| r)
    };
    let observed = |child: &ChildDescription| match read(&child.name) {
        Some(Ok(objects)) => objects.first().map(|object| Observed::of(object, now)),
        _ => None,
    };
    let ready = |child: &ChildDescription| {
        observed(child).is_some_and(|o| o.is_ready(child.ready_when.as_deref()))
    };
    let in_phase = |child: &&ChildDescription| child.phases.iter().any(|p| p == phase);
    (machine.children.iter().filter(in_phase))
        .map(|child| {
            let kind = if child.kind.is_empty() {
                child.type_path.clone()
            } else {
                child.kind.clone()
            };
            let unread = |says: String| ChildLine {
                name: printable(&child.name),
                kind: printable(&kind),
                object: None,
                ready: false,
                says: printable(&says),
            };
            if let Some(Err(why)) = read(&child.name) {
                return unread(format!("It could not be read: {why}."));
            }
            let Some(seen) = observed(child) else {
                let waits: Vec<String> = (child.after.iter())
                    .filter(|a| !(machine.children.iter()).any(|c| &c.name == *a && ready(c)))
                    .map(|a| format!("`{a}`"))
                    .collect();
                let says = if waits.is_empty() {
                    "Not there yet: the next step applies it.".to_owned()
                } else {
                    format!(
                        "Not applied yet: it waits for {} to be ready.",
                        waits.join(" and ")
                    )
                };
                return unread(says);
            };
            let (ready, _, says) = seen.readiness(child.ready_when.as_deref());
            ChildLine {
                name: printable(&child.name),
                kind: printable(&kind),
                object: Some(printable(&seen.name)),
                ready,
                says: printable(&says),
            }
        })
        .collect()
}
