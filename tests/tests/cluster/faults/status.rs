//! Statuses the operator did not write: a phase written by someone else starts its own clock
//! (also across restarts), a removed status is drift that revert writes back, and an object
//! whose status does not decode is skipped without stalling the others.

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm::{Cleanup, Next, Step};
use kube_fsm_testkit::cluster::{self, events, eventually, hand_edit, phase_of, wait_phase};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

use super::{Scripted, TestError, guarded};

/// Stays wherever it is; Provisioning reports its pods not ready.
#[derive(Clone, Default)]
struct Patient;

impl DatabaseHandler for Patient {
    type Error = TestError;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, TestError> {
        step.set_condition(DatabaseCondition::PodsReady, false, "Waiting", "")?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, TestError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, TestError> {
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Database, _: &kube_fsm::Context) -> Result<Cleanup, TestError> {
        Ok(Cleanup::Done)
    }
}

fn minutes_ago(minutes: i64) -> String {
    (Timestamp::now() - SignedDuration::from_mins(minutes))
        .round(k8s_openapi::jiff::Unit::Second)
        .expect("round")
        .to_string()
}

/// Provisioning (10 min timeout) must not inherit Pending's 15 minutes.
async fn assert_fresh_provisioning_clock(api: &Api<Database>) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let db = api.get("db").await.expect("get");
    let status = &db.status.as_ref().expect("status").machine;
    assert_eq!(
        phase_of(&db).as_deref(),
        Some("Provisioning"),
        "no timeout to Failed"
    );
    assert_eq!(
        status
            .entered_phase
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("Provisioning")
    );
    let entered = status.last_phase_transition_time.as_ref().expect("time").0;
    assert!(
        Timestamp::now().duration_since(entered) < SignedDuration::from_secs(30),
        "the clock started when the controller first saw Provisioning: {entered}"
    );
}

#[tokio::test]
async fn a_phase_written_by_someone_else_starts_its_own_clock_also_across_restarts() {
    let Some((client, ns)) = cluster::prepare("a_phase_written_by_someone_else", "fsm-clock").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let operator = Running::spawn(operator::in_namespace::<Database, _>(&client, &ns, Patient));
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Pending").await;
    // 15 minutes in Pending, then a legal hand edit to Provisioning that leaves the time.
    hand_edit(
        &api,
        "db",
        json!({ "lastPhaseTransitionTime": minutes_ago(15) }),
    )
    .await;
    hand_edit(&api, "db", json!({ "phase": "Provisioning" })).await;
    assert_fresh_provisioning_clock(&api).await;
    operator.crash().await;

    // A controller that starts on such a status has no memory of it: the status alone tells.
    hand_edit(
        &api,
        "db",
        json!({ "lastPhaseTransitionTime": minutes_ago(15), "enteredPhase": "Pending" }),
    )
    .await;
    let operator = Running::spawn(operator::in_namespace::<Database, _>(&client, &ns, Patient));
    assert_fresh_provisioning_clock(&api).await;
    operator.stop().await;
}

#[tokio::test]
async fn a_removed_status_is_drift_and_revert_writes_the_phase_back() {
    let Some((client, ns)) = cluster::prepare("a_removed_status_is_drift", "fsm-nostatus").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Scripted::default();
    let operator = Running::spawn(operator::in_namespace::<Guarded, _>(
        &client,
        &ns,
        handler.clone(),
    ));
    api.create(&PostParams::default(), &guarded("g", &[]))
        .await
        .expect("create");
    let before = wait_phase(&api, "g", "Active").await;
    let entered = before.status.unwrap().machine.last_phase_transition_time;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    api.patch_status(
        "g",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": null })),
    )
    .await
    .expect("remove the status");
    let drift = eventually(Duration::from_secs(15), || async {
        events(&client, &ns, "PhaseDrift")
            .await
            .into_iter()
            .find(|e| e.note.as_deref().is_some_and(|n| n.contains("was removed")))
    })
    .await;
    assert!(drift.is_some(), "no PhaseDrift event for the removal");
    let after = wait_phase(&api, "g", "Active").await;
    assert_eq!(
        after.status.unwrap().machine.last_phase_transition_time,
        entered,
        "a revert does not restart the clock of the phase it restores"
    );
    assert_eq!(
        handler.pending_runs.load(Ordering::SeqCst),
        1,
        "no restart at Pending"
    );
    operator.stop().await;
}

/// Relays straight through to the end.
struct Straight;

impl RelayHandler for Straight {
    type Error = TestError;

    async fn on_first(&self, _: &Relay, _: &mut Step<Relay>) -> Result<RelayFirstNext, TestError> {
        Ok(RelayFirstEvent::Go.into())
    }

    async fn on_second(
        &self,
        _: &Relay,
        _: &mut Step<Relay>,
    ) -> Result<RelaySecondNext, TestError> {
        Ok(RelaySecondEvent::Go.into())
    }

    async fn on_third(&self, _: &Relay, _: &mut Step<Relay>) -> Result<RelayThirdNext, TestError> {
        Ok(RelayThirdEvent::Go.into())
    }
}

#[tokio::test]
async fn an_object_whose_status_does_not_decode_is_skipped_and_does_not_stall_the_others() {
    let Some((client, ns)) = cluster::prepare("an_object_that_does_not_decode", "fsm-decode").await
    else {
        return;
    };
    let api: Api<Relay> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &Relay::new("bad", RelaySpec {}))
        .await
        .expect("create");
    // Its CRD lets any status through (as one installed by an older version might). Written
    // untyped: our own client could not read the answer either.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<Relay>(&()),
    );
    raw.patch_status(
        "bad",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": { "phase": "Second", "observedGeneration": "soon" } })),
    )
    .await
    .expect("store a status that does not decode");
    let recorded = Recorded::default();
    let operator = Running::spawn(
        operator::in_namespace::<Relay, _>(&client, &ns, Straight).metrics(recorded.metrics()),
    );
    api.create(&PostParams::default(), &Relay::new("good", RelaySpec {}))
        .await
        .expect("create");
    wait_phase(&api, "good", "Fourth").await;
    let text = recorded.text();
    assert!(
        text.contains("kube_fsm_undecodable_objects_total{machine=\"Relay\"} 1"),
        "{text}"
    );
    operator.stop().await;
}
