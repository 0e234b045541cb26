//! The status fields the machine owns, beside `status.phase`: its clock and bookkeeping
//! (`observedGeneration`, `lastPhaseTransitionTime`, `enteredPhase`, `pausedSeconds`,
//! `lastHandledReconcileAt`) and its conditions — those the spec declares (which `when` rules
//! read) and those the engine keeps (`Ready`, `Reconciling`, `Stalled`, `Paused`). Anyone who
//! may write the status could otherwise steer the machine: write a condition a `when` rule
//! reads and let the operator, exempt from the policy, take the move; or push a timeout out
//! with a future entry time or a huge paused time. Pure: the review compares the stored and
//! the written status.

use serde_json::Value;

use crate::machine::data::MachineData;
use crate::pure::{pause, readiness};

/// The machine's own fields of `status`, other than `phase` and `conditions`.
pub(crate) const OWNED_FIELDS: [&str; 5] = [
    "observedGeneration",
    "lastPhaseTransitionTime",
    "enteredPhase",
    "pausedSeconds",
    "lastHandledReconcileAt",
];

/// The engine's own condition types.
pub(crate) const ENGINE_CONDITIONS: [&str; 4] = [
    readiness::READY,
    readiness::RECONCILING,
    readiness::STALLED,
    pause::PAUSED,
];

/// The owned fields a write changes, from the stored `old` status to the written `new` one,
/// named as `status.pausedSeconds` or `status.conditions[PodsReady]`.
pub(crate) fn changed(
    machine: &MachineData,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Vec<String> {
    let field = |status: Option<&Value>, name: &str| {
        status
            .and_then(|s| s.get(name))
            .filter(|v| !v.is_null())
            .cloned()
    };
    let mut changed: Vec<String> = OWNED_FIELDS
        .iter()
        .filter(|name| field(old, name) != field(new, name))
        .map(|name| format!("status.{name}"))
        .collect();
    let owned = |type_: &str| {
        ENGINE_CONDITIONS.contains(&type_) || machine.conditions.iter().any(|c| c.name == type_)
    };
    let condition = |status: Option<&Value>, type_: &str| {
        status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|all| all.iter().find(|c| c["type"] == type_))
            .cloned()
    };
    let mut types: Vec<String> = [old, new]
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("conditions").and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c["type"].as_str())
        .filter(|t| owned(t))
        .map(str::to_owned)
        .collect();
    types.sort();
    types.dedup();
    changed.extend(
        types
            .into_iter()
            .filter(|t| condition(old, t) != condition(new, t))
            .map(|t| format!("status.conditions[{t}]")),
    );
    changed
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::admission::tests_support::MACHINE;

    #[test]
    fn a_write_of_the_phase_alone_changes_nothing_owned() {
        let old = json!({ "phase": "Pending", "observedGeneration": 1, "conditions": [
            { "type": "Ready", "status": "False" },
            { "type": "example.com/Other", "status": "True" },
        ] });
        let mut new = old.clone();
        new["phase"] = json!("Running");
        new["conditions"][1]["status"] = json!("False");
        assert!(
            changed(&MACHINE, Some(&old), Some(&new)).is_empty(),
            "another team's condition is theirs"
        );
    }

    #[test]
    fn the_clock_the_bookkeeping_and_the_machines_conditions_are_named() {
        let old = json!({ "phase": "Pending", "lastPhaseTransitionTime": "2026-12-03T10:00:00Z",
            "conditions": [{ "type": "Stalled", "status": "False" }] });
        let new = json!({ "phase": "Pending", "lastPhaseTransitionTime": "2099-01-01T00:00:00Z",
            "pausedSeconds": 1000000000, "conditions": [
                { "type": "Stalled", "status": "True" }, { "type": "Paused", "status": "True" },
            ] });
        assert_eq!(
            changed(&MACHINE, Some(&old), Some(&new)),
            [
                "status.lastPhaseTransitionTime",
                "status.pausedSeconds",
                "status.conditions[Paused]",
                "status.conditions[Stalled]",
            ]
        );
        assert_eq!(
            changed(&MACHINE, None, Some(&new)).len(),
            4,
            "a first status too"
        );
    }
}
