//! Manual transitions on the real API server: a Database that failed is retried by a person
//! (`Failed -> Pending`, a manual edge of `specs/database.yaml`) and converges; the webhook
//! refuses the same move by the operator's identity, a move that is no edge at all, and, under
//! a `manualBy` policy, a person outside the group named. The engine announces the person's move
//! (a `ManualTransition` Event naming the field manager that wrote it) and takes it as legal.
//! A phase reached only by a manual edge out of the initial phase (an approval gate) is no
//! object's first phase, for anyone: a tenant cannot walk around `manualBy` by writing it
//! before the engine stores the initial phase (the object created paused).

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm::admission::{FailurePolicy, OperatorIdentity, People, Policy, PolicyRule};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Next, Step};
use kube_fsm_testkit::admission::{self, PROBE};
use kube_fsm_testkit::cluster::{self, client, client_as, eventually, install_crds, wait_phase};
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::resources::*;
use serde_json::json;
use std::time::Duration;

/// The example's handlers, except that provisioning fails for a Database asked for no replicas:
/// a mistake in the spec only a person can fix, then retry.
#[derive(Clone, Default)]
struct FailsWithoutReplicas;

impl DatabaseHandler for FailsWithoutReplicas {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        db: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
        if db.spec.replicas == 0 {
            return Ok(DatabaseProvisioningEvent::Fail.into());
        }
        step.set_condition(DatabaseCondition::PodsReady, true, "Up", "")?;
        step.set_condition(DatabaseCondition::ServiceAvailable, true, "Answers", "")?;
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, ConditionError> {
        Ok(Next::Stay)
    }

    async fn cleanup(
        &self,
        _: &Database,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, ConditionError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

/// The operator is field manager `kube-fsm` (the test's operator and people share one
/// administrator identity, so only field managers and impersonation tell them apart); manual
/// transitions are for group `sre`.
fn sre_policy() -> Policy {
    Policy {
        operator: OperatorIdentity {
            users: Vec::new(),
            field_managers: vec!["kube-fsm".to_owned()],
            trust_field_managers: true,
        },
        platform: vec![PolicyRule::ManualBy(People {
            users: Vec::new(),
            groups: vec!["sre".to_owned()],
        })],
        tiers: Vec::new(),
    }
}

fn broken(name: &str) -> Database {
    let mut db = sample(name);
    db.spec.replicas = 0;
    db
}

/// `status.phase` set to `phase` with field manager `manager`, as `kubectl fsm move` writes it.
async fn move_to<K>(api: &Api<K>, name: &str, phase: &str, manager: &str) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(json!({ "status": { "phase": phase } }));
    api.patch_status(name, &params, &patch).await
}

fn refused(result: Result<Database, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == 422 => status.message,
        other => panic!("expected the webhook's refusal, got {other:?}"),
    }
}

/// As a person would: fix the spec, then retry.
async fn fix_replicas(api: &Api<Database>, name: &str) {
    let patch = Patch::Merge(json!({ "spec": { "replicas": 1 } }));
    api.patch(name, &PatchParams::default(), &patch)
        .await
        .expect("fix the spec");
}

#[tokio::test]
async fn a_failed_database_is_retried_by_a_person_and_only_by_the_people_the_policy_names() {
    let Some(admin) = client("manual::retry").await else {
        return;
    };
    install_crds(&admin).await;
    let ns = admission::namespace(&admin, "manual", &[]).await;
    let registration = admission::serve(
        &admin,
        &ns,
        sample(PROBE),
        sre_policy(),
        FailurePolicy::Fail,
    )
    .await;
    let recorded = Recorded::default();
    let operator = Running::spawn(
        in_namespace::<Database, _>(&admin, &ns, FailsWithoutReplicas).metrics(recorded.metrics()),
    );
    let api: Api<Database> = Api::namespaced(admin.clone(), &ns);
    api.create(&PostParams::default(), &broken("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Failed").await;
    fix_replicas(&api, "db").await;

    // Nobody takes Failed -> Running: it is no edge at all.
    let message = refused(move_to(&api, "db", "Running", "kubectl-fsm").await);
    assert!(
        message.contains("cannot move from Failed to Running"),
        "{message}"
    );
    // The operator's identity never takes a manual edge.
    let message = refused(move_to(&api, "db", "Pending", "kube-fsm").await);
    assert!(
        message.contains("Failed -> Pending is a manual transition: only people take it"),
        "{message}"
    );
    // A person outside group sre may not.
    let outsider = client_as("mallory", &["system:masters"]).await;
    let as_outsider: Api<Database> = Api::namespaced(outsider, &ns);
    let message = refused(move_to(&as_outsider, "db", "Pending", "kubectl-fsm").await);
    assert!(
        message.contains(
            "on this platform, only group sre may take the manual transition Failed -> Pending; \
             user mallory (field manager kubectl-fsm) may not"
        ),
        "{message}"
    );
    assert_eq!(
        cluster::phase_of(&api.get("db").await.expect("get")).as_deref(),
        Some("Failed"),
        "every refused move left the object where it was"
    );

    // A member of sre retries it: the engine takes the move as legal and converges.
    let sre: Client = client_as("carol", &["sre", "system:masters"]).await;
    let as_sre: Api<Database> = Api::namespaced(sre, &ns);
    move_to(&as_sre, "db", "Pending", "kubectl-fsm")
        .await
        .expect("a person in sre retries");
    let running = wait_phase(&api, "db", "Running").await;
    let status = &running.status.as_ref().expect("status").machine;
    assert_eq!(
        status.entered_phase.as_ref().map(|p| p.as_str()),
        Some("Running")
    );
    let announced = eventually(Duration::from_secs(15), || async {
        cluster::events(&admin, &ns, "ManualTransition")
            .await
            .into_iter()
            .find_map(|e| e.note)
    })
    .await
    .expect("a ManualTransition Event");
    assert!(
        announced.starts_with("Failed → Pending by field manager kubectl-fsm"),
        "{announced}"
    );
    assert!(
        cluster::events(&admin, &ns, "PhaseDrift").await.is_empty(),
        "a manual move is no drift"
    );
    let metrics = recorded.text();
    assert!(
        metrics.contains(
            "kube_fsm_transitions_total{machine=\"Database\",from=\"Failed\",to=\"Pending\"} 1"
        ),
        "{metrics}"
    );
    operator.stop().await;
    registration.remove().await;
}

/// Changes stay Pending until a person approves them.
#[derive(Clone, Copy, Debug)]
struct Gate;

impl ChangeHandler for Gate {
    type Error = std::convert::Infallible;

    async fn on_pending(
        &self,
        _: &Change,
        _: &mut Step<Change>,
    ) -> Result<ChangePendingNext, Self::Error> {
        Ok(Next::Stay)
    }
}

/// `status.phase` of a Change set to `phase` (by field manager `kubectl-fsm`).
async fn approve(api: &Api<Change>, name: &str, phase: &str) -> Result<Change, kube::Error> {
    let params = PatchParams {
        field_manager: Some("kubectl-fsm".to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(json!({ "status": { "phase": phase } }));
    api.patch_status(name, &params, &patch).await
}

fn refused_change(result: Result<Change, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == 422 => status.message,
        other => panic!("expected the webhook's refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_gate_only_people_open_is_no_first_phase_and_only_approvers_open_it() {
    let Some(admin) = client("manual::gate").await else {
        return;
    };
    install_crds(&admin).await;
    let ns = admission::namespace(&admin, "manual-gate", &[]).await;
    let mut policy = sre_policy();
    policy.platform = vec![PolicyRule::ManualBy(People {
        users: Vec::new(),
        groups: vec!["approvers".to_owned()],
    })];
    let probe = Change::new(PROBE, ChangeSpec {});
    let registration = admission::serve(&admin, &ns, probe, policy, FailurePolicy::Fail).await;
    let operator = Running::spawn(in_namespace::<Change, _>(&admin, &ns, Gate));
    let tenant = client_as("tenant", &["system:masters"]).await;
    let as_tenant: Api<Change> = Api::namespaced(tenant, &ns);
    let approver = client_as("ana", &["approvers", "system:masters"]).await;
    let as_approver: Api<Change> = Api::namespaced(approver, &ns);

    // Created paused: the engine writes only its Paused condition, no phase.
    let mut change = Change::new("c", ChangeSpec {});
    change.metadata.annotations = Some(
        [("kube-fsm.dev/paused".to_owned(), "true".to_owned())]
            .into_iter()
            .collect(),
    );
    as_tenant
        .create(&PostParams::default(), &change)
        .await
        .expect("create");
    let api: Api<Change> = Api::namespaced(admin.clone(), &ns);
    eventually(Duration::from_secs(20), || async {
        let c = api.get("c").await.ok()?;
        c.status
            .as_ref()
            .and_then(|s| s.machine.condition("Paused"))
            .map(|_| ())
    })
    .await
    .expect("paused");

    // Approved as its first phase: refused to the tenant, and to an approver too (the gate is
    // taken out of a stored Pending, which the engine writes).
    for (who, api) in [("tenant", &as_tenant), ("approver", &as_approver)] {
        let message = refused_change(approve(api, "c", "Approved").await);
        assert!(
            message.contains(
                "the first phase must be Pending or one of its successors (Rejected), not Approved"
            ),
            "{who}: {message}"
        );
    }

    // Nor does anyone but the operator write the machine's own status fields: a paused time
    // that would hold a timeout off forever, a condition the engine keeps.
    let params = PatchParams {
        field_manager: Some("kubectl-fsm".to_owned()),
        ..PatchParams::default()
    };
    for (field, patch) in [
        (
            "status.pausedSeconds",
            json!({ "status": { "pausedSeconds": 3_000_000_000u64 } }),
        ),
        (
            "status.conditions[Stalled]",
            json!({ "status": { "conditions": [{
                "type": "Stalled", "status": "True", "reason": "Forged", "message": "",
                "lastTransitionTime": "2026-12-03T10:00:00Z",
            }] } }),
        ),
    ] {
        let message = refused_change(
            as_approver
                .patch_status("c", &params, &Patch::Merge(&patch))
                .await,
        );
        assert!(
            message.contains("only the operator writes") && message.contains(field),
            "{message}"
        );
    }

    // Resumed, the engine stores Pending; then only an approver opens the gate.
    let resume =
        Patch::Merge(json!({ "metadata": { "annotations": { "kube-fsm.dev/paused": null } } }));
    api.patch("c", &PatchParams::default(), &resume)
        .await
        .expect("resume");
    wait_phase(&api, "c", "Pending").await;
    let message = refused_change(approve(&as_tenant, "c", "Approved").await);
    assert!(
        message.contains("only group approvers may take the manual transition Pending -> Approved"),
        "{message}"
    );
    approve(&as_approver, "c", "Approved")
        .await
        .expect("an approver opens the gate");
    wait_phase(&api, "c", "Approved").await;
    operator.stop().await;
    registration.remove().await;
}

#[tokio::test]
async fn the_way_out_of_a_phase_the_spec_dropped_is_taken_only_by_the_people_manual_by_names() {
    let Some(admin) = client("manual::undeclared").await else {
        return;
    };
    install_crds(&admin).await;
    let ns = admission::namespace(&admin, "manual-undeclared", &[]).await;
    let api: Api<Guarded> = Api::namespaced(admin.clone(), &ns);
    // Stored under an older spec, which had an `Archived` phase this one dropped without
    // `retired:` (so no edge says where such an object goes).
    for name in ["g", "h"] {
        api.create(&PostParams::default(), &Guarded::new(name, GuardedSpec {}))
            .await
            .expect("create");
        cluster::hand_edit(&api, name, json!({ "phase": "Archived" })).await;
    }
    let mut policy = sre_policy();
    policy.platform = vec![PolicyRule::ManualBy(People {
        users: Vec::new(),
        groups: vec!["approvers".to_owned()],
    })];
    let probe = Guarded::new(PROBE, GuardedSpec {});
    let registration = admission::serve(&admin, &ns, probe, policy, FailurePolicy::Fail).await;
    let tenant = client_as("tenant", &["system:masters"]).await;
    let as_tenant: Api<Guarded> = Api::namespaced(tenant, &ns);
    let approver = client_as("ana", &["approvers", "system:masters"]).await;
    let as_approver: Api<Guarded> = Api::namespaced(approver, &ns);

    let message = match move_to(&as_tenant, "g", "Active", "kubectl-fsm").await {
        Err(kube::Error::Api(status)) if status.code == 422 => status.message,
        other => panic!("expected the webhook's refusal, got {other:?}"),
    };
    assert!(
        message.contains(
            "only group approvers may move an object out of Archived, which the spec does not \
             declare (as a manual transition); user tenant (field manager kubectl-fsm) may not"
        ),
        "{message}"
    );
    move_to(&as_approver, "g", "Active", "kubectl-fsm")
        .await
        .expect("an approver takes it out");
    // The operator's drift repair is no manual move.
    move_to(&api, "h", "Active", "kube-fsm")
        .await
        .expect("the operator writes its repair");
    registration.remove().await;
}
