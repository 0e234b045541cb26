use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::{Observed, Seen, derived};
use crate::machine::data::{
    ChildData, ConditionData, DerivedData, DriftPolicy, MachineData, PhaseData, SourceData,
};

const fn phase(name: &'static str) -> PhaseData {
    PhaseData {
        name,
        description: "",
        terminal: false,
        requeue_after_ms: None,
        handler_timeout_ms: None,
        timeout: None,
    }
}

const fn condition(name: &'static str, child: usize, source: SourceData) -> ConditionData {
    ConditionData {
        name,
        description: "",
        from: Some(DerivedData { child, source }),
    }
}

static MACHINE: MachineData = MachineData {
    kind: "Migration",
    phases: &[phase("Running")],
    conditions: &[
        condition("JobComplete", 0, SourceData::Condition("Complete")),
        condition("JobFailed", 0, SourceData::Condition("Failed")),
        condition("JobReady", 0, SourceData::Ready),
        ConditionData {
            name: "Approved",
            description: "",
            from: None,
        },
    ],
    children: &[ChildData {
        name: "migrate",
        type_path: "Job",
        description: "",
        phases: &[0],
        after: &[],
        ready: SourceData::Ready,
        delete_on_leave: true,
        once: false,
        type_meta: crate::machine::data::type_meta::<k8s_openapi::api::batch::v1::Job>,
    }],
    events: &[],
    edges: &[],
    initial: 0,
    finalizer: None,
    ready: None,
    drift: DriftPolicy::Adopt,
    retired: &[],
    mermaid: "",
    dot: "",
    picture: Err("not drawn"),
    cel_phase_rule: "",
    cel_first_phase_rule: "",
    source: "inline",
};

fn now() -> Timestamp {
    "2026-12-07T10:00:00Z".parse().unwrap()
}

#[test]
fn a_failed_job_carries_its_reason_and_message_into_the_derived_conditions() {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "m-migrate", "generation": 1 },
        "status": { "failed": 1, "startTime": "2026-12-07T09:00:00Z", "conditions": [
            { "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
              "message": "Job has reached the specified backoff limit" }] },
    });
    let seen = [Some(Seen::Observed(Observed::of(&job, now())))];
    let conditions = derived(&MACHINE, &seen);
    let by_index = |i: usize| conditions.iter().find(|d| d.condition == i).unwrap();
    assert_eq!(
        conditions.len(),
        3,
        "the handler's condition is not derived"
    );
    let complete = by_index(0);
    assert_eq!(
        (complete.status, complete.reason.as_str()),
        ("Unknown", "NotReported")
    );
    let failed = by_index(1);
    assert_eq!(
        (
            failed.status,
            failed.reason.as_str(),
            failed.message.as_str()
        ),
        (
            "True",
            "BackoffLimitExceeded",
            "The Job m-migrate reports `Failed` True: Job has reached the specified backoff limit."
        )
    );
    let ready = by_index(2);
    assert_eq!(
        (ready.status, ready.reason.as_str(), ready.message.as_str()),
        (
            "False",
            "JobFailed",
            "The Job m-migrate has failed: Job Failed. failed: 1/1."
        )
    );
}

#[test]
fn a_child_not_seen_derives_nothing_and_a_waiting_one_is_false() {
    assert!(derived(&MACHINE, &[None]).is_empty());
    let waiting = derived(&MACHINE, &[Some(Seen::Waiting(vec!["credentials"]))]);
    assert!(
        waiting
            .iter()
            .all(|d| d.status == "False" && d.reason == "Waiting")
    );
    assert_eq!(
        waiting[0].message,
        "The child `migrate` waits for `credentials` to be ready before it is applied."
    );
}

#[test]
fn a_message_longer_than_a_condition_holds_is_cut_on_a_character_boundary() {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": { "name": "m-migrate", "generation": 1 },
        "status": { "conditions": [
            { "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
              "message": "é".repeat(20_000) },
        ] },
    });
    let seen = [Some(Seen::Observed(Observed::of(&job, now())))];
    let failed = (derived(&MACHINE, &seen).into_iter())
        .find(|d| d.condition == 1)
        .expect("JobFailed");
    assert!(failed.message.len() <= 32_768, "{}", failed.message.len());
    assert!(
        failed
            .message
            .starts_with("The Job m-migrate reports `Failed` True: é")
    );
}
