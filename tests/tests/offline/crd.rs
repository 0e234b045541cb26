//! The CRD helper: the CEL rules on `status.phase`, checked client-side (kube's `cel`) for every
//! legal and illegal pair of phases of the example specs and of a machine with retired phase
//! names, and the printer columns.

use kube_fsm::machine::PhaseValue;
use kube_fsm::machine::{CrdError, validate_update};
use kube_fsm::{MachineStatus, Phase, StateMachine};
use kube_fsm_testkit::resources::{
    Database, DatabasePhase, DatabaseSpec, DatabaseStatus, Pipeline, PipelinePhase, PipelineSpec,
    PipelineStatus,
};
use store::{Store, StorePhase, StoreSpec, StoreStatus};

mod store {
    use kube::CustomResource;
    use kube_fsm::{MachineStatus, state_machine};
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    /// An older spec had `Provisioning` and `Starting`; this one calls them `Creating` and
    /// `Running`.
    #[state_machine(
        phases(Pending(initial), Creating, Running, Done(terminal)),
        transitions(Pending -> Creating, Creating -> Running, Running -> Done),
        retired(Provisioning -> Creating, Starting -> Running),
    )]
    #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    #[kube(
        group = "fsm.example.com",
        version = "v1",
        kind = "Store",
        namespaced,
        status = "StoreStatus"
    )]
    pub struct StoreSpec {}

    #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    pub struct StoreStatus {
        #[serde(flatten)]
        pub machine: MachineStatus<StorePhase>,
    }
}

fn database(phase: Option<PhaseValue<DatabasePhase>>) -> Database {
    let mut db = Database::new("db", DatabaseSpec::default());
    db.status = Some(DatabaseStatus {
        machine: MachineStatus {
            phase,
            ..MachineStatus::default()
        },
        endpoint: None,
    });
    db
}

fn store(phase: Option<PhaseValue<StorePhase>>) -> Store {
    let mut store = Store::new("store", StoreSpec::default());
    store.status = Some(StoreStatus {
        machine: MachineStatus {
            phase,
            ..MachineStatus::default()
        },
    });
    store
}

fn pipeline(phase: Option<PhaseValue<PipelinePhase>>) -> Pipeline {
    let mut run = Pipeline::new("run", PipelineSpec::default());
    run.status = Some(PipelineStatus {
        machine: MachineStatus {
            phase,
            ..MachineStatus::default()
        },
    });
    run
}

/// Every ordered pair of phases: the update passes exactly when it stays or follows an edge,
/// and a refusal names both phases with reason `FieldValueForbidden`.
fn every_pair<K, P>(object: impl Fn(Option<PhaseValue<P>>) -> K) -> (usize, usize)
where
    K: kube::CustomResourceExt + StateMachine<Phase = P> + serde::Serialize,
    P: Phase,
{
    let phases: Vec<P> = (0..P::MACHINE.phases.len())
        .filter_map(P::from_index)
        .collect();
    let (mut legal, mut illegal) = (0, 0);
    for &from in &phases {
        for &to in &phases {
            let result = validate_update(
                &object(Some(PhaseValue::Known(to))),
                &object(Some(PhaseValue::Known(from))),
            );
            if from == to || from.can_transition_to(to) {
                legal += 1;
                assert!(result.is_ok(), "{from} -> {to} is an edge: {result:?}");
            } else {
                illegal += 1;
                let Err(CrdError::Rejected(errors)) = result else {
                    panic!("{from} -> {to} is not an edge, yet it passed: {result:?}");
                };
                assert_eq!(errors.len(), 1, "{errors:?}");
                let message = errors[0].to_string();
                assert!(
                    message.contains(&format!("cannot move from {from} to {to}")),
                    "{message}"
                );
                assert_eq!(errors[0].reason.as_deref(), Some("FieldValueForbidden"));
            }
        }
    }
    (legal, illegal)
}

#[test]
fn every_legal_pair_passes_and_every_illegal_pair_is_refused() {
    assert_eq!(every_pair(database), (5 + 8, 25 - 13));
    assert_eq!(every_pair(pipeline), (4 + 4, 16 - 8));
    assert_eq!(every_pair(store), (4 + 3, 16 - 7));
}

/// The admission webhook's rules are the CEL rules, message for message: every write from no
/// phase, a declared, a retired or an unknown value to no phase or a declared one (a value the
/// spec does not declare is refused by the schema's enum before either rule runs).
fn webhook_agrees_with_cel<K, P>(object: impl Fn(Option<PhaseValue<P>>) -> K) -> usize
where
    K: kube::CustomResourceExt + StateMachine<Phase = P> + serde::Serialize,
    P: Phase,
{
    let machine = P::MACHINE;
    let declared = (0..machine.phases.len()).filter_map(P::from_index);
    let value = |name: Option<&str>| name.map(PhaseValue::<P>::parse);
    let mut olds: Vec<Option<&str>> = vec![None];
    olds.extend(machine.phases.iter().map(|p| Some(p.name)));
    olds.extend(machine.retired.iter().map(|r| Some(r.name)));
    olds.push(Some("Archived"));
    let mut news: Vec<Option<&str>> = vec![None];
    news.extend(declared.map(|p| Some(p.name())));
    let mut compared = 0;
    for &old in &olds {
        for &new in &news {
            let cel = validate_update(&object(value(new)), &object(value(old)));
            let webhook = kube_fsm::admission::check(machine, old, new);
            match (&cel, &webhook) {
                (Ok(()), Ok(())) => {}
                (Err(CrdError::Rejected(errors)), Err(violation)) => {
                    assert_eq!(errors.len(), 1, "{old:?} -> {new:?}: {errors:?}");
                    // The root rules' field path is `.status.phase`.
                    assert_eq!(
                        errors[0].to_string().trim_start_matches('.'),
                        format!("status.phase: {}", violation.message),
                        "{old:?} -> {new:?}"
                    );
                    assert_eq!(errors[0].reason.as_deref(), Some(violation.reason));
                }
                _ => panic!("{old:?} -> {new:?}: CEL says {cel:?}, the webhook {webhook:?}"),
            }
            compared += 1;
        }
    }
    compared
}

#[test]
fn the_webhook_applies_the_cel_rules_with_the_same_messages() {
    assert_eq!(webhook_agrees_with_cel(database), (1 + 5 + 1) * (1 + 5));
    assert_eq!(webhook_agrees_with_cel(pipeline), (1 + 4 + 1) * (1 + 4));
    assert_eq!(webhook_agrees_with_cel(store), (1 + 4 + 2 + 1) * (1 + 4));
}

#[test]
fn pending_to_succeeded_is_refused_with_both_phases_named() {
    let result = validate_update(
        &pipeline(Some(PhaseValue::Known(PipelinePhase::Succeeded))),
        &pipeline(Some(PhaseValue::Known(PipelinePhase::Pending))),
    );
    let Err(err) = result else {
        panic!("Pending -> Succeeded passed")
    };
    assert_eq!(
        err.to_string(),
        "status.phase: cannot move from Pending to Succeeded: \
         the Pipeline state machine has no such transition"
    );
}

#[test]
fn the_first_phase_is_the_initial_one_or_a_direct_successor() {
    let initial = DatabasePhase::initial();
    let mut no_status = database(None);
    no_status.status = None;
    for (phase, old) in DatabasePhase::ALL
        .into_iter()
        .flat_map(|p| [(p, database(None)), (p, no_status.clone())])
    {
        let result = validate_update(&database(Some(PhaseValue::Known(phase))), &old);
        if phase == initial || initial.can_transition_to(phase) {
            assert!(result.is_ok(), "first phase {phase}: {result:?}");
        } else {
            let message = result.expect_err("refused").to_string();
            assert!(
                message.contains(&format!(
                    "the first phase must be Pending or one of its successors (Provisioning), not {phase}"
                )),
                "{message}"
            );
        }
    }
}

#[test]
fn a_phase_the_spec_does_not_declare_may_be_left_for_any_phase() {
    for phase in DatabasePhase::ALL {
        let result = validate_update(
            &database(Some(PhaseValue::Known(phase))),
            &database(Some(PhaseValue::Unknown("Archived".into()))),
        );
        assert!(result.is_ok(), "Archived -> {phase}: {result:?}");
    }
}

#[test]
fn a_retired_phase_may_be_left_only_for_the_phase_it_maps_to() {
    for (retired, mapped) in [
        ("Provisioning", StorePhase::Creating),
        ("Starting", StorePhase::Running),
    ] {
        for phase in StorePhase::ALL {
            let result = validate_update(
                &store(Some(PhaseValue::Known(phase))),
                &store(Some(PhaseValue::Unknown(retired.into()))),
            );
            if phase == mapped {
                assert!(result.is_ok(), "{retired} -> {phase}: {result:?}");
            } else {
                let message = result.expect_err("refused").to_string();
                assert!(
                    message.contains(&format!("cannot move from {retired} to {phase}")),
                    "{message}"
                );
            }
        }
    }
    // A value that is neither declared nor retired may still be left for any phase.
    for phase in StorePhase::ALL {
        let result = validate_update(
            &store(Some(PhaseValue::Known(phase))),
            &store(Some(PhaseValue::Unknown("Archived".into()))),
        );
        assert!(result.is_ok(), "Archived -> {phase}: {result:?}");
    }
}

#[test]
fn the_phase_cannot_be_removed_once_set() {
    let result = validate_update(
        &database(None),
        &database(Some(PhaseValue::Known(DatabasePhase::Running))),
    );
    let message = result.expect_err("refused").to_string();
    assert!(
        message.contains("status.phase cannot be removed once set"),
        "{message}"
    );
}

#[test]
fn the_whole_status_cannot_be_removed_once_a_phase_is_set() {
    let mut without_status = database(None);
    without_status.status = None;
    let result = validate_update(
        &without_status,
        &database(Some(PhaseValue::Known(DatabasePhase::Running))),
    );
    let message = result.expect_err("refused").to_string();
    assert!(
        message.contains("status.phase cannot be removed once set"),
        "{message}"
    );
    let mut never_had_one = database(None);
    never_had_one.status = None;
    assert!(validate_update(&never_had_one, &never_had_one).is_ok());
}

#[test]
fn printer_columns_show_phase_ready_and_age() {
    let crd = kube_fsm::crd::<Database>();
    let columns: Vec<(&str, &str)> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.json_path.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("Phase", ".status.phase"),
            ("Ready", ".status.conditions[?(@.type==\"Ready\")].status"),
            ("Age", ".metadata.creationTimestamp"),
        ]
    );
    // Pipeline declares no Ready condition and names none: no column that would stay empty.
    let crd = kube_fsm::crd::<Pipeline>();
    let names: Vec<&str> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["Phase", "Age"]);
}
