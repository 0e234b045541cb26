//! The engine's Events policy on the real API server: `RecordedEvents::Warnings` records what needs a
//! human (drift) and no transitions; `RecordedEvents::Off` records nothing.

use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use kube_fsm::engine::RecordedEvents;
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::{Database, sample};
use serde_json::json;

/// Runs a Database to Running under `policy`, then hand-edits its phase to one that is not a
/// successor (drift, reported as a Warning); returns the reasons of the Events recorded.
async fn reasons_under(policy: RecordedEvents, test: &str, prefix: &str) -> Option<Vec<String>> {
    let (client, ns) = cluster::prepare(test, prefix).await?;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let recorded = Recorded::default();
    let operator = Running::spawn(
        operator::in_namespace::<Database, _>(&client, &ns, Databases)
            .record_events(policy)
            .metrics(recorded.metrics()),
    );
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Running").await;
    if !cluster::hand_edit_unless_refused(&api, "db", json!({ "phase": "Provisioning" })).await {
        operator.stop().await;
        return None;
    }
    eventually(Duration::from_secs(10), || async {
        (recorded.sum("kube_fsm_drift_total", &[]) >= 1.0).then_some(())
    })
    .await
    .expect("the drift is seen");
    let events = if policy == RecordedEvents::Off {
        // Nothing may come: a moment for a late Event that should not exist.
        tokio::time::sleep(Duration::from_millis(500)).await;
        cluster::all_events(&client, &ns).await
    } else {
        // The drift's Event, waited for (the transitions' came before it, if at all).
        eventually(Duration::from_secs(10), || async {
            let events = cluster::all_events(&client, &ns).await;
            events.iter().any(|r| r == "PhaseDrift").then_some(events)
        })
        .await
        .expect("the drift's Event")
    };
    operator.stop().await;
    Some(events)
}

#[tokio::test]
async fn warnings_only_records_drift_but_no_transitions() {
    let Some(reasons) = reasons_under(
        RecordedEvents::Warnings,
        "warnings_only_records_drift",
        "fsm-ev-warn",
    )
    .await
    else {
        return;
    };
    assert!(reasons.iter().any(|r| r == "PhaseDrift"), "{reasons:?}");
    assert!(
        !reasons.iter().any(|r| r == "Accept" || r == "PhaseChanged"),
        "no Normal transition Events: {reasons:?}"
    );
}

#[tokio::test]
async fn off_records_no_event() {
    let Some(reasons) =
        reasons_under(RecordedEvents::Off, "off_records_no_event", "fsm-ev-off").await
    else {
        return;
    };
    assert!(reasons.is_empty(), "{reasons:?}");
}
