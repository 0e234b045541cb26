//! `explain` of a Database in every phase, against the checked-in snapshots
//! (`tests/snapshots/explain-*.txt`; `UPDATE_SNAPSHOTS=1` rewrites them after a deliberate
//! change).

use k8s_openapi::jiff::Timestamp;
use kube_fsm::machine::Description;
use kube_fsm_testkit::resources::DatabasePhase;
use serde_json::{Value, json};

use super::explain;
use crate::object::Stored;

const NOW: &str = "2026-12-02T10:00:00Z";

fn database(phase: &str, entered: &str, conditions: &[(&str, &str)], annotations: Value) -> Value {
    let conditions: Vec<Value> = conditions
        .iter()
        .map(|(t, s)| json!({ "type": t, "status": s, "reason": "Test", "message": "", "lastTransitionTime": "2026-12-02T09:00:00Z" }))
        .collect();
    json!({
        "metadata": { "name": "db", "namespace": "shop", "annotations": annotations },
        "status": {
            "phase": phase, "enteredPhase": phase, "lastPhaseTransitionTime": entered,
            "conditions": conditions,
        },
    })
}

fn check(name: &str, object: &Value, history: Vec<String>) {
    let machine = Description::of(DatabasePhase::MACHINE);
    let now: Timestamp = NOW.parse().unwrap();
    let text = explain(&machine, &Stored(object), history, &Vec::new(), now).to_string();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/snapshots/explain-{name}.txt"));
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SNAPSHOTS=1 writes it)", path.display()));
    assert_eq!(
        text, expected,
        "explain-{name} changed; rerun with UPDATE_SNAPSHOTS=1 if on purpose"
    );
}

#[test]
fn every_phase_of_the_database_is_explained_as_the_snapshots_say() {
    let none = json!({});
    check(
        "pending",
        &database("Pending", "2026-12-02T09:59:30Z", &[], none.clone()),
        vec![],
    );
    // Stuck: the rule out waits for PodsReady, and the timeout is due in 4 minutes.
    check(
        "provisioning",
        &database(
            "Provisioning",
            "2026-12-02T09:54:00Z",
            &[("PodsReady", "False"), ("Reconciling", "True")],
            none.clone(),
        ),
        vec!["2026-12-02T09:54:00Z  Accept               Pending → Provisioning".into()],
    );
    check(
        "running",
        &database(
            "Running",
            "2026-12-01T10:00:00Z",
            &[
                ("PodsReady", "True"),
                ("ServiceAvailable", "True"),
                ("Ready", "True"),
            ],
            none.clone(),
        ),
        vec![],
    );
    check(
        "degraded",
        &database(
            "Degraded",
            "2026-12-02T09:58:00Z",
            &[
                ("PodsReady", "True"),
                ("ServiceAvailable", "False"),
                ("Ready", "False"),
            ],
            none.clone(),
        ),
        vec![],
    );
    check(
        "failed",
        &database(
            "Failed",
            "2026-12-02T08:00:00Z",
            &[("Stalled", "True")],
            none,
        ),
        vec![],
    );
    // Paused mid-Provisioning for 30 minutes: the timeout moves out by as much.
    let mut paused = database(
        "Provisioning",
        "2026-12-02T09:54:00Z",
        &[("PodsReady", "False")],
        json!({ "kube-fsm.dev/paused": "INC-42" }),
    );
    paused["status"]["pausedSeconds"] = json!(1800);
    check("provisioning-paused", &paused, vec![]);
}

#[test]
fn what_anyone_wrote_is_printed_escaped_never_as_terminal_control() {
    let mut stalled = database(
        "Failed",
        "2026-12-02T08:00:00Z",
        &[("Stalled", "True")],
        json!({ "kube-fsm.dev/paused": "INC\u{1b}]0;owned\u{7}" }),
    );
    stalled["status"]["conditions"][0]["message"] = json!("disk full\u{1b}[2J\rall good\nreally");
    let machine = Description::of(DatabasePhase::MACHINE);
    let now: Timestamp = NOW.parse().unwrap();
    let history = vec!["2026-12-02T08:00:00Z  Fail  Provisioning → Failed\u{1b}[31m".to_owned()];
    let text = explain(&machine, &Stored(&stalled), history, &Vec::new(), now).to_string();
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "control characters printed raw:\n{text:?}"
    );
    assert!(
        text.contains(r"disk full\u{1b}[2J\rall good\nreally"),
        "{text}"
    );
    assert!(text.contains(r"Failed\u{1b}[31m"), "{text}");
    assert!(text.contains(r"INC\u{1b}]0;owned\u{7}"), "{text}");
}

#[test]
fn a_phase_with_its_own_handler_deadline_says_so() {
    let machine = Description::of(kube_fsm_testkit::resources::ChorePhase::MACHINE);
    let object = json!({
        "metadata": { "name": "c", "namespace": "shop" },
        "status": {
            "phase": "Working", "enteredPhase": "Working",
            "lastPhaseTransitionTime": "2026-12-02T09:59:59Z",
        },
    });
    let text = explain(
        &machine,
        &Stored(&object),
        vec![],
        &Vec::new(),
        NOW.parse().unwrap(),
    )
    .to_string();
    assert!(
        text.contains(
            "Handler:  each call may run 1s (the spec's handlerTimeout), then it is dropped\n"
        ),
        "{text}"
    );
    let plain = Description::of(DatabasePhase::MACHINE);
    let pending = database("Pending", "2026-12-02T09:59:30Z", &[], json!({}));
    let text = explain(
        &plain,
        &Stored(&pending),
        vec![],
        &Vec::new(),
        NOW.parse().unwrap(),
    )
    .to_string();
    assert!(!text.contains("Handler:"), "{text}");
}

#[test]
fn a_condition_derived_from_a_child_names_the_child_and_says_what_it_reports() {
    let mut machine = Description::of(DatabasePhase::MACHINE);
    machine.children.push(kube_fsm::machine::ChildDescription {
        name: "db".into(),
        type_path: "StatefulSet".into(),
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        ready_when: None,
        phases: vec!["Provisioning".into()],
        after: vec![],
        derives: vec!["PodsReady".into()],
    });
    let mut object = database(
        "Provisioning",
        "2026-12-02T09:54:00Z",
        &[("PodsReady", "False")],
        json!({}),
    );
    object["status"]["conditions"][0]["message"] =
        json!("The StatefulSet db is not ready yet: Ready: 2/3.");
    let now: Timestamp = NOW.parse().unwrap();
    let explained = explain(&machine, &Stored(&object), vec![], &Vec::new(), now);
    assert!(
        explained.waiting_for.iter().any(|w| w.ends_with(
            "from the child `db` (StatefulSet): The StatefulSet db is not ready yet: Ready: 2/3."
        )),
        "{:?}",
        explained.waiting_for
    );
}

fn child(name: &str, kind: &str, after: &[&str]) -> kube_fsm::machine::ChildDescription {
    kube_fsm::machine::ChildDescription {
        name: name.into(),
        type_path: kind.into(),
        api_version: "v1".into(),
        kind: kind.into(),
        ready_when: None,
        phases: vec!["Provisioning".into(), "Running".into()],
        after: after.iter().map(|a| (*a).to_owned()).collect(),
        derives: vec![],
    }
}

#[test]
fn the_phases_children_are_listed_with_their_objects_and_readiness() {
    let mut machine = Description::of(DatabasePhase::MACHINE);
    machine.children = vec![
        child("credentials", "Secret", &[]),
        child("db", "StatefulSet", &["credentials"]),
        child("service", "Service", &[]),
    ];
    let object = database("Provisioning", "2026-12-02T09:54:00Z", &[], json!({}));
    let now: Timestamp = NOW.parse().unwrap();
    let secret = json!({ "apiVersion": "v1", "kind": "Secret",
                         "metadata": { "name": "db-credentials" } });
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "db-db", "generation": 1 },
        "spec": { "replicas": 3 },
        "status": { "observedGeneration": 1, "replicas": 3, "readyReplicas": 2,
                    "currentReplicas": 3, "updatedReplicas": 3,
                    "currentRevision": "r1", "updateRevision": "r1" },
    });
    let says = |found: super::Found| {
        let explained = explain(&machine, &Stored(&object), vec![], &found, now);
        (explained.children.iter())
            .map(|c| (c.name.clone(), c.object.clone(), c.ready, c.says.clone()))
            .collect::<Vec<_>>()
    };

    // Nothing applied yet: the StatefulSet waits for its Secret; what cannot be read says so.
    let lines = says(vec![
        ("credentials".into(), Ok(vec![])),
        ("db".into(), Ok(vec![])),
        ("service".into(), Err("services is forbidden".into())),
    ]);
    assert_eq!(lines[0].3, "Not there yet: the next step applies it.");
    assert_eq!(
        lines[1].3,
        "Not applied yet: it waits for `credentials` to be ready."
    );
    assert_eq!(lines[2].3, "It could not be read: services is forbidden.");

    // The Secret is there: the StatefulSet's own readiness, by kstatus's rules.
    let found = vec![
        ("credentials".into(), Ok(vec![secret.clone()])),
        ("db".into(), Ok(vec![sts.clone()])),
    ];
    let lines = says(found.clone());
    assert_eq!(
        lines[0],
        (
            "credentials".into(),
            Some("db-credentials".into()),
            true,
            "The Secret db-credentials is ready: Resource is always ready.".into()
        )
    );
    assert_eq!(lines[1].1.as_deref(), Some("db-db"));
    assert!(!lines[1].2);
    assert_eq!(
        lines[1].3,
        "The StatefulSet db-db is not ready yet: Ready: 2/3."
    );
    let text = explain(&machine, &Stored(&object), vec![], &found, now).to_string();
    assert!(
        text.contains("Children:\n  credentials  Secret db-credentials — The Secret db-credentials is ready: Resource is always ready.\n  db           StatefulSet db-db — The StatefulSet db-db is not ready yet: Ready: 2/3.\n"),
        "{text}"
    );
}
