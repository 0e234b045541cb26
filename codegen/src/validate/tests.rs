//! Tests of the validate stage as a whole: what reaches the machine and what is reported.

use super::tests_support::checked as check;
use super::*;
use crate::model::{Drift, Retired, Trigger};

#[test]
fn lowers_edges_in_spec_order_with_lists_expanded() {
    let (m, errors) = check(
        "phases(A(initial), B, C(terminal)), conditions(Ok), \
         transitions(A -> B on Go, [A, B] -> C when Ok, B -> A)",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let edges: Vec<(usize, usize)> = m.edges.iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(edges, [(0, 1), (0, 2), (1, 2), (1, 0)]);
    assert_eq!(m.edges[0].trigger, Trigger::Event(0));
    assert_eq!(m.edges[1].trigger, Trigger::When(vec![(0, true)]));
    assert_eq!(m.edges[3].trigger, Trigger::Handler);
    assert_eq!(m.targets(1), [0, 2]);
    assert_eq!(m.events_from(0), [(0, 1)]);
    assert_eq!(m.initial, 0);
}

#[test]
fn reports_every_error_and_keeps_a_consistent_best_effort_machine() {
    let (m, errors) = check(
        "phases(A(initial), A, b, C(terminal)), \
         transitions(A -> C on Go, A -> C on Go, A -> Cee, C -> A, A -> C on Stop)",
    );
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert!(errors[0].contains("phase `A` is declared twice"));
    assert!(errors[1].contains("invalid phase name"));
    assert!(errors[2].contains("duplicate transition `A -> C`"));
    assert!(errors[3].contains("unknown phase `Cee`"));
    assert!(errors[4].contains("transition out of terminal phase `C`"));
    // The skeleton keeps what was valid, and only that: no duplicate variants or edges.
    let names: Vec<&str> = m.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["A", "C"]);
    assert_eq!(m.edges.len(), 2, "A -> C on Go and A -> C on Stop");
    assert_eq!(
        m.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["Go", "Stop"]
    );
}

#[test]
fn graph_checks_wait_for_names_to_resolve() {
    // A typo in a target must not also report the phase it was meant to reach as unreachable.
    let (_, errors) = check("phases(A(initial), B(terminal)), transitions(A -> Bee)");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let (_, errors) = check("phases(A(initial), B, C(terminal)), transitions(A -> C)");
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("unreachable") && errors[1].contains("no transition out"));
}

#[test]
fn ready_names_phases_and_conditions_the_spec_declares() {
    use crate::model::Ready;
    // Without `ready`, a condition named Ready is the handlers': the engine keeps none.
    let (m, errors) =
        check("phases(A(initial), B(terminal)), conditions(X, Ready), transitions(A -> B)");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(m.ready, None);
    let (m, errors) = check(
        "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), \
         ready = Sinced, drift = revrt",
    );
    assert_eq!(m.ready, Some(Ready::default()), "what resolved of it");
    assert_eq!(m.drift, Drift::Adopt);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("unknown condition `Sinced` in `ready`"));
    assert!(errors[1].contains("unknown drift policy `revrt`"));
    let (m, errors) = check(
        "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), \
         ready = Synced, drift = revert",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let one = Ready {
        phases: vec![],
        conditions: vec![0],
    };
    assert_eq!((m.ready, m.drift), (Some(one), Drift::Revert));
    let (m, errors) = check(
        "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), \
         ready(phases(B), conditions(Synced))",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let both = Ready {
        phases: vec![1],
        conditions: vec![0],
    };
    assert_eq!(m.ready, Some(both));
    let (_, errors) = check(
        "phases(A(initial), B(terminal)), conditions(Ready), transitions(A -> B), ready(phases(B))",
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("condition `Ready` is kube-fsm's own when the spec has `ready`"));
}

#[test]
fn retired_names_are_undeclared_valid_names_listed_once_that_map_to_declared_phases() {
    let (m, errors) = check(
        "phases(A(initial), B(terminal)), transitions(A -> B), retired(Old -> B, Older -> A)",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let retired = |name: &str, to| Retired {
        name: name.to_owned(),
        to,
    };
    assert_eq!(m.retired, [retired("Old", 1), retired("Older", 0)]);

    let (m, errors) = check(
        "phases(A(initial), B(terminal)), transitions(A -> B), \
         retired(A -> B, Old -> Bee, Old -> A, Self -> A, Gone -> Older, Older -> B)",
    );
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert_eq!(errors[0], "retired phase `A` is still declared");
    assert_eq!(errors[1], "unknown phase `Bee` in `retired`");
    assert_eq!(errors[2], "retired phase `Old` is listed twice");
    assert_eq!(
        errors[3],
        "invalid retired phase name: `Self` is a Rust keyword"
    );
    assert_eq!(errors[4], "unknown phase `Older` in `retired`");
    // Only the valid entry reaches the best-effort machine.
    assert_eq!(m.retired, [retired("Older", 1)]);
}

#[test]
fn graph_checks_wait_for_a_complete_read_and_one_initial_phase() {
    // `B` is unreachable and a dead end, but the spec did not read completely.
    let file = crate::diag::SourceFile::new(
        "t.yaml",
        "phases:\n  A: { initial: true, bogus: 1 }\n  B: {}\n  C: { terminal: true }\n\
         transitions:\n  - { from: A, to: C }\n",
    );
    let node = crate::read::yaml::parse(&file.text).unwrap();
    let mut diags = Diagnostics::default();
    let raw = crate::read::from_yaml::read(&node, &file, &mut diags);
    assert!(!raw.complete);
    validate(&raw, &mut diags);
    let errors: Vec<String> = diags.into_vec().into_iter().map(|d| d.message).collect();
    assert_eq!(errors, ["unknown key `bogus` in a phase"]);

    // With two initial phases, "unreachable from the initial phase" means nothing.
    let (_, errors) =
        check("phases(A(initial), B(initial), C(terminal), Z), transitions(A -> C, B -> C)");
    assert_eq!(errors, ["more than one initial phase: `A` and `B`"]);
}

#[test]
fn a_repeated_condition_names_the_line_of_its_first_declaration() {
    let file = crate::diag::SourceFile::new(
        "c.yaml",
        "phases:\n  A: { initial: true }\n  B: { terminal: true }\n\
         conditions:\n  \"bad type\": {}\n  Ok: {}\n  Ok: {}\n\
         transitions:\n  - { from: A, to: B, when: Ok }\n",
    );
    let node = crate::read::yaml::parse(&file.text).unwrap();
    let mut diags = Diagnostics::default();
    let raw = crate::read::from_yaml::read(&node, &file, &mut diags);
    validate(&raw, &mut diags);
    let errors = diags.into_vec();
    let twice = errors
        .iter()
        .find(|e| e.message == "condition `Ok` is declared twice")
        .unwrap_or_else(|| panic!("{errors:?}"));
    // `Ok` is first declared on line 6 (line 5 holds the rejected condition).
    assert_eq!(
        twice.help,
        ["it is first declared on line 6; remove one"],
        "{twice:?}"
    );
}

#[test]
fn manual_edges_leave_terminal_phases_and_stay_out_of_the_handlers_choices() {
    let (m, errors) = check(
        "phases(A(initial), B, C(terminal)), \
         transitions(A -> B on Go, B -> C, C -> A manual, B -> A manual)",
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(m.edges[2].trigger, Trigger::Manual);
    assert_eq!(m.targets(2), [0], "a person may move C to A: a legal edge");
    assert_eq!(m.targets(1), [0, 2]);
    assert_eq!(
        m.handler_targets(1),
        [2],
        "the handler of B cannot choose A"
    );
}

#[test]
fn a_manual_edge_is_never_also_automatic() {
    let (_, errors) = check(
        "phases(A(initial), B(terminal)), conditions(Ok), \
         transitions(A -> B on Go, A -> B manual)",
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("transition `A -> B` is both manual and automatic"),
        "{errors:?}"
    );
    let (_, errors) = check("phases(A(initial), B), transitions(A -> B, B -> A manual)");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .contains("phase `B` is not terminal and only people leave it (manual transitions)"),
        "only people would ever move it: {errors:?}"
    );
}
