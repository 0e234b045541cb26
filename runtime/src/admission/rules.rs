//! The machine's rules on `status.phase`, as the CRD's CEL rules state them, for one write:
//! the phase before and after. Pure: no request, no I/O.

use crate::machine::crd::{FORBIDDEN, PHASE_REMOVED, REQUIRED, first_phases};
use crate::machine::data::{MachineData, TriggerData};
use crate::machine::description;

/// The field every rule is about.
pub const PHASE_FIELD: &str = "status.phase";
/// The cause of a value the machine does not declare (as the schema's enum reports it).
pub const NOT_SUPPORTED: &str = "FieldValueNotSupported";

/// Why a write of `status.phase` is refused: one cause of a `422 Invalid` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The cause type: `FieldValueForbidden`, `FieldValueRequired` or
    /// `FieldValueNotSupported`.
    pub reason: &'static str,
    /// What the client sees, after the API server's `admission webhook "…" denied the
    /// request: `.
    pub message: String,
    /// The field refused: [`PHASE_FIELD`] but for the machine's other status fields and the
    /// annotations that steer the engine.
    pub field: &'static str,
}

impl Violation {
    /// A `FieldValueForbidden` violation of `status.phase`.
    pub fn forbidden(message: String) -> Self {
        Self {
            reason: FORBIDDEN,
            message,
            field: PHASE_FIELD,
        }
    }

    /// The same violation, of `field`.
    #[must_use]
    pub fn of(self, field: &'static str) -> Self {
        Self { field, ..self }
    }
}

/// Checks one write of the phase against the machine: `old` is the stored phase, `new` the
/// written one (`None`: no phase). Staying is always allowed (even on a value the spec does
/// not declare, so that an object stored under an older spec can still have its finalizer
/// removed); otherwise the rules are the CEL rules of [`crate::crd()`]:
/// - once set, the phase is never removed;
/// - the written phase is declared;
/// - the first phase is the initial phase or one of its direct successors by an edge the
///   engine takes (not a manual one);
/// - a declared phase moves only along an edge, a retired name only to the phase it maps to,
///   and any other undeclared value may be left for any declared phase.
///
/// # Errors
/// The [`Violation`] of the first rule broken.
pub fn check(machine: &MachineData, old: Option<&str>, new: Option<&str>) -> Result<(), Violation> {
    let new = match (old, new) {
        (None, None) => return Ok(()),
        (Some(_), None) => {
            return Err(Violation {
                reason: REQUIRED,
                message: PHASE_REMOVED.to_owned(),
                field: PHASE_FIELD,
            });
        }
        (Some(old), Some(new)) if old == new => return Ok(()),
        (_, Some(new)) => new,
    };
    let Some(to) = index_of(machine, new) else {
        return Err(Violation {
            reason: NOT_SUPPORTED,
            message: unsupported(machine, new),
            field: PHASE_FIELD,
        });
    };
    let Some(old) = old else {
        // Never a phase reached only by a manual edge: that needs a person's move out of a
        // stored initial phase, which `manualBy` then judges.
        let first = to == machine.initial
            || machine.edges.iter().any(|e| {
                e.from == machine.initial && e.to == to && !matches!(e.trigger, TriggerData::Manual)
            });
        return if first {
            Ok(())
        } else {
            Err(Violation::forbidden(format!(
                "the first phase must be {}, not {new}",
                first_phases(machine)
            )))
        };
    };
    let legal = match index_of(machine, old) {
        Some(from) => machine.edges.iter().any(|e| e.from == from && e.to == to),
        None => machine
            .retired
            .iter()
            .find(|r| r.name == old)
            .is_none_or(|r| r.to == to),
    };
    if legal {
        Ok(())
    } else {
        Err(Violation::forbidden(description::no_such_transition(
            machine.kind,
            old,
            new,
        )))
    }
}

/// What kind of move a write of the phase is, as the policy's `manualBy` judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    /// No move, or one along an edge the engine takes.
    Engine,
    /// A manual edge of the machine (`manual: true`): only people take it.
    Manual,
    /// A move out of a stored value the spec does not declare (a phase an older spec had and
    /// this one dropped without `retired:`). No edge says where such an object goes, so a
    /// person's way out is judged as a manual move (who may take it); the operator may still
    /// write its drift repair.
    OutOfUndeclared,
}

/// The kind of the move `old -> new` (each `None`: no phase), for a move [`check`] allows.
pub fn classify(machine: &MachineData, old: Option<&str>, new: Option<&str>) -> Move {
    let (Some(old), Some(new)) = (old, new) else {
        return Move::Engine;
    };
    if old == new {
        return Move::Engine;
    }
    let Some(from) = index_of(machine, old) else {
        let retired = machine.retired.iter().any(|r| r.name == old);
        return if retired {
            Move::Engine
        } else {
            Move::OutOfUndeclared
        };
    };
    let manual = index_of(machine, new).is_some_and(|to| {
        machine
            .edges
            .iter()
            .any(|e| e.from == from && e.to == to && matches!(e.trigger, TriggerData::Manual))
    });
    if manual { Move::Manual } else { Move::Engine }
}

/// Whether `old -> new` is a manual edge of the machine (`manual: true`): only people take it.
pub fn is_manual(machine: &MachineData, old: Option<&str>, new: Option<&str>) -> bool {
    classify(machine, old, new) == Move::Manual
}

fn index_of(machine: &MachineData, name: &str) -> Option<usize> {
    machine.phases.iter().position(|p| p.name == name)
}

/// As the API server words an enum violation.
fn unsupported(machine: &MachineData, value: &str) -> String {
    let supported: Vec<String> = machine
        .phases
        .iter()
        .map(|p| format!("{:?}", p.name))
        .collect();
    format!(
        "Unsupported value: {value:?}: supported values: {}",
        supported.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::tests_support::{GATED, MACHINE};

    fn reason(old: Option<&str>, new: Option<&str>) -> Option<&'static str> {
        check(&MACHINE, old, new).err().map(|v| v.reason)
    }

    #[test]
    fn edges_and_staying_pass_and_other_moves_are_forbidden() {
        assert_eq!(reason(Some("Pending"), Some("Running")), None);
        assert_eq!(reason(Some("Done"), Some("Done")), None);
        let err = check(&MACHINE, Some("Pending"), Some("Done")).unwrap_err();
        assert_eq!(err.reason, FORBIDDEN);
        assert_eq!(
            err.message,
            "cannot move from Pending to Done: the Job state machine has no such transition"
        );
    }

    #[test]
    fn a_manual_edge_is_a_legal_move_and_known_as_manual() {
        assert_eq!(reason(Some("Failed"), Some("Pending")), None);
        assert!(is_manual(&MACHINE, Some("Failed"), Some("Pending")));
        assert!(!is_manual(&MACHINE, Some("Pending"), Some("Failed")));
        assert!(!is_manual(&MACHINE, None, Some("Pending")));
    }

    #[test]
    fn the_first_phase_is_the_initial_one_or_a_direct_successor() {
        for first in ["Pending", "Running", "Failed"] {
            assert_eq!(reason(None, Some(first)), None, "{first}");
        }
        let err = check(&MACHINE, None, Some("Done")).unwrap_err();
        assert_eq!(
            err.message,
            "the first phase must be Pending or one of its successors (Running, Failed), not Done"
        );
    }

    #[test]
    fn a_phase_reached_only_by_a_manual_edge_is_never_a_first_phase() {
        // Created (paused, say) and given `Approved` before the engine stored `Pending`: no
        // approver took the gate. Whoever writes it, the first phase is one the engine takes.
        let err = check(&GATED, None, Some("Approved")).unwrap_err();
        assert_eq!(err.reason, FORBIDDEN);
        assert_eq!(
            err.message,
            "the first phase must be Pending or one of its successors (Rejected), not Approved"
        );
        assert_eq!(check(&GATED, None, Some("Rejected")), Ok(()));
        assert_eq!(check(&GATED, Some("Pending"), Some("Approved")), Ok(()));
        assert!(is_manual(&GATED, Some("Pending"), Some("Approved")));
    }

    #[test]
    fn the_phase_cannot_be_removed_and_no_phase_stays_none() {
        assert_eq!(reason(Some("Running"), None), Some(REQUIRED));
        assert_eq!(reason(None, None), None);
    }

    #[test]
    fn only_declared_values_are_written() {
        let err = check(&MACHINE, Some("Pending"), Some("Paused")).unwrap_err();
        assert_eq!(err.reason, NOT_SUPPORTED);
        assert_eq!(
            err.message,
            "Unsupported value: \"Paused\": supported values: \"Pending\", \"Running\", \"Done\", \"Failed\""
        );
        assert_eq!(reason(None, Some("Starting")), Some(NOT_SUPPORTED));
        // Staying on an undeclared value is not a write of it.
        assert_eq!(reason(Some("Paused"), Some("Paused")), None);
    }

    #[test]
    fn a_way_out_of_an_undeclared_value_is_judged_as_a_manual_move_and_a_retired_name_is_not() {
        assert_eq!(
            classify(&MACHINE, Some("Paused"), Some("Pending")),
            Move::OutOfUndeclared
        );
        assert_eq!(
            classify(&MACHINE, Some("Starting"), Some("Running")),
            Move::Engine
        );
        assert_eq!(
            classify(&MACHINE, Some("Paused"), Some("Paused")),
            Move::Engine
        );
        assert_eq!(
            classify(&MACHINE, Some("Failed"), Some("Pending")),
            Move::Manual
        );
        assert_eq!(
            classify(&MACHINE, Some("Pending"), Some("Running")),
            Move::Engine
        );
        assert_eq!(classify(&MACHINE, None, Some("Pending")), Move::Engine);
    }

    #[test]
    fn a_retired_name_moves_only_to_its_phase_and_other_undeclared_values_anywhere() {
        assert_eq!(reason(Some("Starting"), Some("Running")), None);
        assert_eq!(reason(Some("Starting"), Some("Done")), Some(FORBIDDEN));
        assert_eq!(reason(Some("Paused"), Some("Done")), None);
    }
}
