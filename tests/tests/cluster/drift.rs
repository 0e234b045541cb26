//! Drift (a phase this controller did not write that does not follow the one it last wrote, or
//! a phase the spec does not declare) on the real API server: API servers before 1.25 run no
//! CEL rules, so hand edits of status land, as they would on a cluster without the CRD's rules.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::PostParams;
use kube::{Api, Client, Resource};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde_json::json;

#[derive(Clone, Default)]
struct Guards {
    pending_calls: Arc<AtomicUsize>,
}

impl GuardedHandler for Guards {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedPendingNext, ConditionError> {
        self.pending_calls.fetch_add(1, Ordering::SeqCst);
        Ok(GuardedPendingEvent::Activate.into())
    }

    async fn on_active(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedActiveNext, ConditionError> {
        Ok(Next::Stay)
    }
}

fn start<K, H>(client: &Client, namespace: &str, handler: H, recorded: &Recorded) -> Running
where
    K: kube_fsm::Reconcilable<H>,
    H: Send + Sync + 'static,
{
    Running::spawn(
        operator::in_namespace::<K, H>(client, namespace, handler).metrics(recorded.metrics()),
    )
}

/// Edits `status.phase` by hand, as `kubectl edit --subresource=status` would.
async fn hand_edit<K>(api: &Api<K>, name: &str, phase: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    cluster::hand_edit(api, name, json!({ "phase": phase })).await;
}

/// Waits for a `PhaseDrift` Warning Event in `ns` whose note contains `text`.
async fn drift_event(client: &Client, ns: &str, text: &str) {
    let found = eventually(Duration::from_secs(15), || async {
        cluster::events(client, ns, "PhaseDrift")
            .await
            .into_iter()
            .find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains(text))
            })
    })
    .await;
    assert!(found.is_some(), "no PhaseDrift event saying {text:?}");
}

#[tokio::test]
async fn a_hand_edited_phase_is_adopted_by_default() {
    let Some((client, ns)) =
        cluster::prepare("a_hand_edited_phase_is_adopted_by_default", "fsm-adopt").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let recorded = Recorded::default();
    let operator = start::<Database, _>(&client, &ns, Databases, &recorded);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Running").await;

    // Running -> Provisioning is not an edge: drift. `drift: adopt` (the default) continues
    // from Provisioning, whose handler leads back to Running along the spec's edges. (A server
    // that runs the CRD's CEL rules refuses the edit.)
    if !cluster::hand_edit_unless_refused(&api, "db", json!({ "phase": "Provisioning" })).await {
        operator.stop().await;
        return;
    }
    drift_event(&client, &ns, "continuing from Provisioning (drift: adopt)").await;
    wait_phase(&api, "db", "Running").await;
    let metrics = recorded.text();
    assert!(
        metrics.contains("kube_fsm_drift_total{machine=\"Database\",action=\"adopted\"} 1"),
        "{metrics}"
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_hand_edited_phase_is_written_back_under_drift_revert() {
    let Some((client, ns)) =
        cluster::prepare("a_hand_edited_phase_is_written_back", "fsm-revert").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let guards = Guards::default();
    let recorded = Recorded::default();
    let operator = start::<Guarded, _>(&client, &ns, guards.clone(), &recorded);
    api.create(&PostParams::default(), &Guarded::new("g", GuardedSpec {}))
        .await
        .expect("create");
    wait_phase(&api, "g", "Active").await;

    hand_edit(&api, "g", "Pending").await;
    drift_event(&client, &ns, "writing Active back (drift: revert)").await;
    wait_phase(&api, "g", "Active").await;
    assert_eq!(
        guards.pending_calls.load(Ordering::SeqCst),
        1,
        "the reverted object never ran Pending's handler again"
    );
    assert!(
        recorded
            .text()
            .contains("kube_fsm_drift_total{machine=\"Guarded\",action=\"reverted\"} 1")
    );
    operator.stop().await;
}

#[tokio::test]
async fn an_undeclared_phase_neither_stalls_the_others_nor_sticks() {
    let Some((client, ns)) = cluster::prepare(
        "an_undeclared_phase_neither_stalls_the_others",
        "fsm-undeclared",
    )
    .await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let recorded = Recorded::default();
    let operator = start::<Guarded, _>(&client, &ns, Guards::default(), &recorded);
    api.create(&PostParams::default(), &Guarded::new("a", GuardedSpec {}))
        .await
        .expect("create");
    wait_phase(&api, "a", "Active").await;

    // A phase of an older spec: it decodes, is drift, and is written back; meanwhile a new
    // object in the same watch goes its way.
    hand_edit(&api, "a", "Archived").await;
    api.create(&PostParams::default(), &Guarded::new("b", GuardedSpec {}))
        .await
        .expect("create");
    drift_event(
        &client,
        &ns,
        "\"Archived\", which the spec does not declare; writing Active back",
    )
    .await;
    wait_phase(&api, "a", "Active").await;
    wait_phase(&api, "b", "Active").await;
    operator.stop().await;

    // A controller that starts on it has nothing to go back to: it holds the object where it
    // is (no handler, its phase unwritten), says so once (an Event, and `Stalled`), and counts
    // it under one `Unknown` label.
    hand_edit(&api, "a", "Archived").await;
    let recorded = Recorded::default();
    let guards = Guards::default();
    let operator = start::<Guarded, _>(&client, &ns, guards.clone(), &recorded);
    drift_event(&client, &ns, "holding the object as it is").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = api.get("a").await.expect("get");
    assert_eq!(cluster::phase_of(&held).as_deref(), Some("Archived"));
    assert_eq!(
        guards.pending_calls.load(Ordering::SeqCst),
        0,
        "no handler ran"
    );
    let metrics = recorded.text();
    for line in [
        "kube_fsm_drift_total{machine=\"Guarded\",action=\"held\"} 1",
        "kube_fsm_objects{machine=\"Guarded\",phase=\"Unknown\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line} in\n{metrics}");
    }
    assert!(
        !metrics.contains("Archived"),
        "no label per undeclared value"
    );
    assert!(
        metrics.contains("kube_fsm_status_writes_total{machine=\"Guarded\"} 1"),
        "one write, of Stalled: {metrics}"
    );
    let stalled = held
        .status
        .as_ref()
        .and_then(|s| s.machine.condition("Stalled"))
        .map(|c| (c.status.as_str(), c.reason.as_str()));
    assert_eq!(stalled, Some(("True", "UndeclaredPhase")));
    // Corrected by hand, it goes on from there.
    hand_edit(&api, "a", "Pending").await;
    wait_phase(&api, "a", "Active").await;
    operator.stop().await;
}

#[tokio::test]
async fn a_retired_phase_moves_to_its_successor_without_running_a_handler() {
    let Some((client, ns)) =
        cluster::prepare("a_retired_phase_moves_to_its_successor", "fsm-retired").await
    else {
        return;
    };
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &Guarded::new("g", GuardedSpec {}))
        .await
        .expect("create");
    // Stored by an older version of the operator, whose spec called the phase `Activating`.
    let entered = "2026-01-02T03:04:05Z";
    cluster::hand_edit(
        &api,
        "g",
        json!({ "phase": "Activating", "lastPhaseTransitionTime": entered }),
    )
    .await;
    let guards = Guards::default();
    let recorded = Recorded::default();
    let operator = start::<Guarded, _>(&client, &ns, guards.clone(), &recorded);
    let migrated = wait_phase(&api, "g", "Active").await;
    let status = migrated.status.expect("status").machine;
    assert_eq!(
        status
            .last_phase_transition_time
            .map(|t| t.0.to_string())
            .as_deref(),
        Some(entered),
        "the object has been in the renamed phase since then"
    );
    assert_eq!(
        guards.pending_calls.load(Ordering::SeqCst),
        0,
        "no handler re-ran"
    );
    let found = eventually(Duration::from_secs(10), || async {
        cluster::events(&client, &ns, "PhaseMigrated")
            .await
            .into_iter()
            .find(|e| e.type_.as_deref() == Some("Normal"))
    })
    .await
    .expect("a PhaseMigrated event");
    assert!(
        found
            .note
            .unwrap_or_default()
            .contains("moving it to Active"),
        "the note says where it went"
    );
    let metrics = recorded.text();
    assert!(
        metrics.contains("kube_fsm_drift_total{machine=\"Guarded\",action=\"migrated\"} 1"),
        "{metrics}"
    );
    operator.stop().await;
}
