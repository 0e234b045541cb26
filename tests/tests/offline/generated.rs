//! The generated API of the example specs, checked at run time.

use kube_fsm::handler::Dispatch;
use kube_fsm::machine::TriggerData;
use kube_fsm::machine::{Choice, PhaseValue};
use kube_fsm::{MachineStatus, Next, Phase as _, StateMachine, Step};
use kube_fsm_testkit::resources::*;

#[test]
fn phase_enum_items() {
    use DatabasePhase::*;
    assert_eq!(
        DatabasePhase::ALL,
        [Pending, Provisioning, Running, Degraded, Failed]
    );
    assert_eq!(DatabasePhase::INITIAL, Pending);
    assert_eq!(DatabasePhase::default(), Pending);
    assert_eq!(Provisioning.as_str(), "Provisioning");
    assert_eq!(Running.to_string(), "Running");
    assert_eq!("Degraded".parse::<DatabasePhase>(), Ok(Degraded));
    let err = "Runing".parse::<DatabasePhase>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown phase \"Runing\"; the phases are: Pending, Provisioning, Running, Degraded, Failed"
    );
    assert!(Failed.is_terminal() && !Pending.is_terminal());
    assert_eq!(Provisioning.successors(), &[Running, Failed]);
    // Failed stays terminal for the engine; people may retry it (a manual edge).
    assert_eq!(Failed.successors(), &[Pending]);
    assert!(kube_fsm::Phase::is_manual_edge(Failed, Pending));
    assert!(!kube_fsm::Phase::engine_takes(Failed, Pending));
    assert_eq!(Pending.fire(DatabaseEvent::Accept), Some(Provisioning));
    assert_eq!(Pending.fire(DatabaseEvent::Fail), None);
    assert_eq!(Degraded.fire(DatabaseEvent::Fail), Some(Failed));
    assert!(Pending < Failed, "Ord follows spec order");
}

#[test]
fn can_transition_to_matches_the_spec_exactly() {
    let declared = [
        ("Pending", "Provisioning"),
        ("Provisioning", "Running"),
        ("Running", "Degraded"),
        ("Degraded", "Running"),
        ("Provisioning", "Failed"),
        ("Running", "Failed"),
        ("Degraded", "Failed"),
        ("Failed", "Pending"),
    ];
    for from in DatabasePhase::ALL {
        for to in DatabasePhase::ALL {
            let expected = declared.contains(&(from.as_str(), to.as_str()));
            assert_eq!(from.can_transition_to(to), expected, "{from} -> {to}");
            assert_eq!(kube_fsm::Phase::can_transition_to(from, to), expected);
        }
    }
}

#[test]
fn serde_and_schema() {
    assert_eq!(
        serde_json::to_string(&DatabasePhase::Running).unwrap(),
        "\"Running\""
    );
    assert_eq!(
        serde_json::from_str::<DatabasePhase>("\"Failed\"").unwrap(),
        DatabasePhase::Failed
    );
    assert!(serde_json::from_str::<DatabasePhase>("\"Nope\"").is_err());
    let schema = serde_json::to_value(schemars::schema_for!(DatabasePhase)).unwrap();
    assert_eq!(schema["type"], "string");
    assert_eq!(
        schema["enum"],
        serde_json::json!(["Pending", "Provisioning", "Running", "Degraded", "Failed"])
    );
}

#[test]
fn unknown_stored_phase_still_decodes() {
    let status: DatabaseStatus = serde_json::from_value(serde_json::json!({
        "phase": "Frobnicating", "conditions": [], "endpoint": "db:5432"
    }))
    .unwrap();
    assert_eq!(
        status.machine.phase,
        Some(PhaseValue::Unknown("Frobnicating".into()))
    );
    assert_eq!(status.machine.phase(), None);
    assert_eq!(status.endpoint.as_deref(), Some("db:5432"));
    let back = serde_json::to_value(&status).unwrap();
    assert_eq!(back["phase"], "Frobnicating");
}

#[test]
fn status_is_flattened_with_a_list_map_of_conditions() {
    let crd = serde_json::to_value(<Database as kube::CustomResourceExt>::crd()).unwrap();
    let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        serde_json::json!(["Pending", "Provisioning", "Running", "Degraded", "Failed"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    assert!(status["endpoint"].is_object());
    assert!(status["lastPhaseTransitionTime"].is_object());
}

#[test]
fn machine_data_describes_the_spec() {
    let m = DatabasePhase::MACHINE;
    assert_eq!(m.kind, "Database");
    assert_eq!(m.source, "../specs/stand-in.yaml");
    assert_eq!(m.finalizer, Some("example.com/cleanup"));
    assert_eq!(m.events, &["Accept", "Fail"]);
    assert_eq!(
        m.conditions.iter().map(|c| c.name).collect::<Vec<_>>(),
        ["PodsReady", "ServiceAvailable"]
    );
    let provisioning = &m.phases[1];
    assert_eq!(provisioning.requeue_after_ms, Some(10_000));
    assert_eq!(
        provisioning.handler_timeout_ms, None,
        "the machine's default"
    );
    // Written inline: `Working(initial, handler_timeout = "1s", timeout = "3s" -> Failed ...)`.
    let working = &ChorePhase::MACHINE.phases[0];
    assert_eq!(
        (
            working.handler_timeout_ms,
            working.timeout.as_ref().map(|t| t.after_ms)
        ),
        (Some(1_000), Some(3_000))
    );
    let timeout = provisioning.timeout.as_ref().unwrap();
    assert_eq!(
        (timeout.after_ms, m.phases[timeout.to].name, timeout.reason),
        (600_000, "Failed", "ProvisioningTimedOut")
    );
    assert_eq!(m.edges.len(), 8);
    assert!(matches!(m.edges[7].trigger, TriggerData::Manual));
    let TriggerData::When(reqs) = &m.edges[3].trigger else {
        panic!("edge 3 is a rule")
    };
    assert_eq!(
        reqs.iter()
            .map(|r| (r.condition, r.status))
            .collect::<Vec<_>>(),
        [(1, true), (0, true)]
    );
    assert!(
        m.mermaid
            .starts_with("stateDiagram-v2\n    [*] --> Pending\n")
    );
    assert!(
        m.mermaid
            .contains("Running --> Degraded: when !ServiceAvailable")
    );
    assert!(
        m.dot
            .contains("Pending -> Provisioning [label=\"Accept\"];")
    );
    assert_eq!(<Database as StateMachine>::machine().kind, "Database");
    assert_eq!(
        m.cel_phase_rule,
        "self == oldSelf || (oldSelf == 'Pending' && self in ['Provisioning']) || (oldSelf == 'Provisioning' && self in ['Running', 'Failed']) || (oldSelf == 'Running' && self in ['Degraded', 'Failed']) || (oldSelf == 'Degraded' && self in ['Running', 'Failed']) || (oldSelf == 'Failed' && self in ['Pending']) || !(oldSelf in ['Pending', 'Provisioning', 'Running', 'Degraded', 'Failed'])"
    );
    assert_eq!(
        m.cel_first_phase_rule,
        "!has(self.status) || !has(self.status.phase) || \
         (has(oldSelf.status) && has(oldSelf.status.phase)) || \
         self.status.phase in ['Pending', 'Provisioning']"
    );
    let ready = m
        .ready
        .as_ref()
        .expect("ready: { phases: [Running], conditions: [..] }");
    assert_eq!(
        (
            ready
                .phases
                .iter()
                .map(|&p| m.phases[p].name)
                .collect::<Vec<_>>(),
            ready
                .conditions
                .iter()
                .map(|&c| m.conditions[c].name)
                .collect::<Vec<_>>()
        ),
        (vec!["Running"], vec!["ServiceAvailable"])
    );
    assert_eq!(m.drift, kube_fsm::machine::DriftPolicy::Adopt);
    assert!(m.retired.is_empty(), "the reference spec retires no phase");
}

#[test]
fn yaml_and_inline_forms_describe_the_same_machine() {
    let (a, b) = (DatabasePhase::MACHINE, InlineDatabasePhase::MACHINE);
    assert_eq!(format!("{:?}", a.phases), format!("{:?}", b.phases));
    assert_eq!(format!("{:?}", a.edges), format!("{:?}", b.edges));
    assert_eq!(format!("{:?}", a.conditions), format!("{:?}", b.conditions));
    assert_eq!(
        (a.events, a.initial, a.finalizer, a.mermaid),
        (b.events, b.initial, b.finalizer, b.mermaid)
    );
    assert_eq!(
        a.dot.replace("digraph Database", "digraph InlineDatabase"),
        b.dot
    );
    assert_eq!(b.source, "inline");
}

#[test]
fn pipeline_machine() {
    use PipelinePhase::*;
    assert_eq!(PipelinePhase::ALL, [Pending, Running, Succeeded, Failed]);
    assert_eq!(
        PipelineCondition::ALL.map(PipelineCondition::as_str),
        ["Scheduled", "Complete", "Failed"]
    );
    assert!(Pending.can_transition_to(Failed) && Running.can_transition_to(Succeeded));
    assert!(
        !Pending.can_transition_to(Succeeded),
        "the spec forbids skipping Running"
    );
    assert_eq!(Running.fire(PipelineEvent::Cancel), Some(Failed));
    assert!(Succeeded.is_terminal() && Failed.is_terminal());
}

/// A handler written against the generated trait, driven through the runtime's `Dispatch`.
struct Handlers;

#[derive(Debug, thiserror::Error)]
#[error("handler failed")]
struct HandlerError;

impl DatabaseHandler for Handlers {
    type Error = HandlerError;

    async fn on_pending(
        &self,
        _db: &Database,
        _step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, HandlerError> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, HandlerError> {
        step.set_condition(
            DatabaseCondition::PodsReady,
            true,
            "PodsUp",
            format!("{} ready", db.spec.version),
        )
        .map_err(|_| HandlerError)?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _db: &Database,
        _step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, HandlerError> {
        Ok(DatabaseRunningTarget::Degraded.into())
    }

    async fn on_degraded(
        &self,
        _db: &Database,
        _step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, HandlerError> {
        Err(HandlerError)
    }

    async fn cleanup(
        &self,
        _db: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, HandlerError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

#[tokio::test]
async fn handlers_dispatch_with_typed_moves() {
    let db = sample("db");
    let mut step = Step::<Database>::new(
        &db,
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        kube_fsm::testing::no_cluster(),
    );
    let pending =
        <Database as Dispatch<Handlers>>::handle(&Handlers, DatabasePhase::Pending, &db, &mut step)
            .await
            .unwrap();
    assert_eq!(
        pending,
        Choice::To {
            phase: DatabasePhase::Provisioning,
            event: Some("Accept")
        }
    );
    let provisioning = <Database as Dispatch<Handlers>>::handle(
        &Handlers,
        DatabasePhase::Provisioning,
        &db,
        &mut step,
    )
    .await
    .unwrap();
    assert_eq!(provisioning, Choice::Stay);
    assert_eq!(
        step.condition_status(DatabaseCondition::PodsReady),
        Some(true)
    );
    assert_eq!(
        step.condition(DatabaseCondition::PodsReady)
            .unwrap()
            .message,
        "16 ready"
    );
    let running =
        <Database as Dispatch<Handlers>>::handle(&Handlers, DatabasePhase::Running, &db, &mut step)
            .await
            .unwrap();
    assert_eq!(
        running,
        Choice::To {
            phase: DatabasePhase::Degraded,
            event: None
        }
    );
    assert!(
        <Database as Dispatch<Handlers>>::handle(
            &Handlers,
            DatabasePhase::Degraded,
            &db,
            &mut step
        )
        .await
        .is_err()
    );
    let failed =
        <Database as Dispatch<Handlers>>::handle(&Handlers, DatabasePhase::Failed, &db, &mut step)
            .await
            .unwrap();
    assert_eq!(failed, Choice::Stay, "terminal phases have no handler");
}

#[test]
fn machine_status_accessors() {
    let mut db = Database::new("db", DatabaseSpec::default());
    assert!(db.machine_status().is_none());
    db.machine_status_mut().phase = Some(PhaseValue::Known(DatabasePhase::Running));
    assert_eq!(
        db.status.as_ref().unwrap().machine.phase(),
        Some(DatabasePhase::Running)
    );
    assert_eq!(DatabasePhase::Running.name(), "Running");
    let _: MachineStatus<DatabasePhase> = MachineStatus::default();
}
