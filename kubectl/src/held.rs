//! `kubectl fsm check`: which stored objects a new spec would hold — their phase neither
//! declared nor retired in it (the engine would hold them and report drift). Pure: the
//! objects and the new spec's names in, the held ones out.

use kube_fsm_codegen::Checked;
use serde_json::Value;

use crate::object::Stored;

/// One object the new spec would hold.
#[derive(Debug, PartialEq, Eq)]
pub struct Held<'a> {
    /// `metadata.namespace` ("" when cluster-scoped).
    pub namespace: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// Its stored phase.
    pub phase: &'a str,
}

/// The objects of `objects` whose stored phase `spec` neither declares nor retires (objects
/// with no phase yet start in the initial phase: never held).
pub fn held<'a>(objects: &'a [Value], spec: &Checked) -> Vec<Held<'a>> {
    let known = |phase: &str| spec.phases.iter().chain(&spec.retired).any(|p| p == phase);
    objects
        .iter()
        .filter_map(|object| {
            let stored = Stored(object);
            let phase = stored.phase().filter(|p| !known(p))?;
            Some(Held {
                namespace: stored.namespace(),
                name: stored.name(),
                phase,
            })
        })
        .collect()
}

/// What the command prints: every held object, then the count; `Err` (exit 1) when any is.
pub fn report(held: &[Held<'_>], of: usize, spec: &str) -> Result<String, String> {
    if held.is_empty() {
        return Ok(format!(
            "{spec}: none of the {of} stored objects would be held\n"
        ));
    }
    let mut out = String::new();
    for h in held {
        let object = if h.namespace.is_empty() {
            h.name.to_owned()
        } else {
            format!("{}/{}", h.namespace, h.name)
        };
        out.push_str(&format!(
            "{object}: phase `{}` is neither declared nor retired in {spec}\n",
            h.phase
        ));
    }
    out.push_str(&format!(
        "{} of the {of} stored objects would be held: add `retired: {{ Old: New }}` to {spec} for each phase above",
        held.len()
    ));
    Err(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn checked() -> Checked {
        kube_fsm_codegen::check(
            "specs/job.yaml",
            "phases:\n  Pending: { initial: true }\n  Done: { terminal: true }\nretired:\n  Queued: Pending\ntransitions:\n  - { from: Pending, to: Done }\n",
            None,
        )
        .expect("a valid spec")
    }

    fn object(ns: &str, name: &str, phase: Option<&str>) -> Value {
        json!({ "metadata": { "namespace": ns, "name": name }, "status": { "phase": phase } })
    }

    #[test]
    fn only_phases_the_new_spec_neither_declares_nor_retires_are_held() {
        let objects = [
            object("a", "pending", Some("Pending")),
            object("a", "queued", Some("Queued")),
            object("b", "running", Some("Running")),
            object("b", "new", None),
        ];
        let held = held(&objects, &checked());
        assert_eq!(
            held,
            [Held {
                namespace: "b",
                name: "running",
                phase: "Running"
            }]
        );
        let said = report(&held, objects.len(), "specs/job.yaml").unwrap_err();
        assert!(
            said.starts_with("b/running: phase `Running` is neither declared nor retired in specs/job.yaml\n1 of the 4 stored objects would be held"),
            "{said}"
        );
        assert_eq!(
            report(&[], 4, "specs/job.yaml").unwrap(),
            "specs/job.yaml: none of the 4 stored objects would be held\n"
        );
    }
}
