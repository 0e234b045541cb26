//! The admission webhook on the real API server (1.20: no CEL rules, so the webhook is what
//! refuses): illegal status writes are refused by the API server itself with the generated
//! message and a cause on `status.phase`, every legal move of both example specs is admitted,
//! the policy layers hold, the operator converges through the webhook, and its failure policy
//! decides what happens while it is down.

use std::collections::VecDeque;
use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, CustomResourceExt, Resource, ResourceExt};
use kube_fsm::admission::{FailurePolicy, OperatorIdentity, Policy, PolicyRule, Tier};
use kube_fsm::{Phase, StateMachine};
use kube_fsm_testkit::admission::{self, PROBE};
use kube_fsm_testkit::cluster::{self, client, install_crd, install_crds, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::resources::{Database, RiskEngine, RiskEngineSpec, sample};
use serde::Serialize;
use serde::de::DeserializeOwned;

const WEBHOOK: &str = "phase.databases.example.kube-fsm.dev";

async fn set_phase<K>(
    api: &Api<K>,
    name: &str,
    phase: Option<&str>,
    params: &PatchParams,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = Patch::Merge(serde_json::json!({ "status": { "phase": phase } }));
    api.patch_status(name, params, &patch).await
}

fn manager(name: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(name.to_owned()),
        ..PatchParams::default()
    }
}

fn dry_run() -> PatchParams {
    PatchParams {
        dry_run: true,
        field_manager: Some("hand-edit".to_owned()),
        ..PatchParams::default()
    }
}

/// The refusal's status: 422 Invalid, one cause on `status.phase`; returns the message.
fn refusal(result: Result<impl std::fmt::Debug, kube::Error>) -> String {
    let status = match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected a refusal from the API server, got {other:?}"),
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{status:?}"
    );
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.clone())
        .unwrap_or_default();
    assert_eq!(causes.len(), 1, "{status:?}");
    assert_eq!(causes[0].field, "status.phase", "{status:?}");
    status.message.clone()
}

/// A shortest path of phases from the initial phase to `to`.
pub(crate) fn path_to<P: Phase>(to: P) -> Vec<P> {
    let machine = P::MACHINE;
    let mut previous = vec![None; machine.phases.len()];
    let mut queue = VecDeque::from([machine.initial]);
    let mut seen = vec![false; machine.phases.len()];
    seen[machine.initial] = true;
    while let Some(at) = queue.pop_front() {
        for edge in machine.edges.iter().filter(|e| e.from == at) {
            if seen[edge.to] {
                continue;
            }
            seen[edge.to] = true;
            previous[edge.to] = Some(at);
            queue.push_back(edge.to);
        }
    }
    let mut path = vec![to.index()];
    while let Some(before) = previous[*path.last().expect("non-empty")] {
        path.push(before);
    }
    path.reverse();
    path.into_iter().filter_map(P::from_index).collect()
}

/// For every phase: an object walked there along the spec's edges (each step admitted),
/// then a dry run of every move from it, admitted exactly when it stays or is an edge, and
/// refused with the CEL rule's message otherwise. Also every first phase. Returns
/// (admitted, refused).
async fn every_pair<K>(api: &Api<K>, object: impl Fn(&str) -> K) -> (usize, usize)
where
    K: Resource<DynamicType = ()>
        + StateMachine
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let machine = <K::Phase as Phase>::MACHINE;
    let phases: Vec<K::Phase> = (0..machine.phases.len())
        .filter_map(K::Phase::from_index)
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    let fresh = api
        .create(&PostParams::default(), &object("fresh"))
        .await
        .expect("create");
    let fresh = fresh.meta().name.clone().expect("name");
    for &first in &phases {
        let result = set_phase(api, &fresh, Some(first.name()), &dry_run()).await;
        let successor =
            first.index() == machine.initial || K::Phase::initial().can_transition_to(first);
        if successor {
            result.unwrap_or_else(|err| panic!("first phase {first} refused: {err}"));
        } else {
            let message = refusal(result);
            assert!(
                message.contains(&format!("the first phase must be {}", K::Phase::initial())),
                "{message}"
            );
        }
    }
    for &from in &phases {
        let name = format!("at-{}", from.name().to_lowercase());
        api.create(&PostParams::default(), &object(&name))
            .await
            .expect("create");
        for step in path_to(from) {
            set_phase(api, &name, Some(step.name()), &manager("hand-edit"))
                .await
                .unwrap_or_else(|err| panic!("walking to {from}: {step} refused: {err}"));
        }
        for &to in &phases {
            let result = set_phase(api, &name, Some(to.name()), &dry_run()).await;
            if from == to || from.can_transition_to(to) {
                result
                    .unwrap_or_else(|err| panic!("{from} -> {to} is an edge, yet refused: {err}"));
                admitted += 1;
            } else {
                let message = refusal(result);
                let expected = format!(
                    "cannot move from {from} to {to}: the {} state machine has no such transition",
                    machine.kind
                );
                assert!(message.ends_with(&expected), "{message}");
                refused += 1;
            }
        }
        let message = refusal(set_phase(api, &name, None, &dry_run()).await);
        assert!(
            message.ends_with("status.phase cannot be removed once set"),
            "{message}"
        );
    }
    (admitted, refused)
}

#[tokio::test]
async fn the_api_server_refuses_every_illegal_move_and_admits_every_legal_one() {
    let Some(client) = client("admission::every_pair").await else {
        return;
    };
    install_crds(&client).await;
    install_crd(&client, RiskEngine::crd()).await;
    let ns = admission::namespace(&client, "admission-pairs", &[]).await;
    let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), &ns);
    let engine = |name: &str| {
        RiskEngine::new(
            name,
            RiskEngineSpec {
                version: "1.0".into(),
                timeout_seconds: 60,
                parameters: std::collections::BTreeMap::new(),
            },
        )
    };
    let fail = FailurePolicy::Fail;
    let probe = sample(PROBE);
    let db = admission::serve(&client, &ns, probe, Policy::default(), fail).await;
    let re = admission::serve(&client, &ns, engine(PROBE), Policy::default(), fail).await;

    // Database: 5 phases, 8 edges (one manual: admitted like the others); RiskEngine: 6
    // phases, 9 edges.
    assert_eq!(every_pair(&databases, sample).await, (5 + 8, 25 - 13));
    assert_eq!(every_pair(&engines, engine).await, (6 + 9, 36 - 15));

    // The message as a client sees it names the webhook — or, on a server that runs the CRD's
    // CEL rules (validation comes before validating webhooks), the field, in the same words.
    let message = refusal(set_phase(&databases, "at-pending", Some("Running"), &dry_run()).await);
    let refused_by = if cluster::enforces_cel(&client).await {
        "Database.example.kube-fsm.dev \"at-pending\" is invalid: status.phase: Forbidden: "
            .to_owned()
    } else {
        format!("admission webhook \"{WEBHOOK}\" denied the request: ")
    };
    assert_eq!(
        message,
        format!(
            "{refused_by}cannot move from Pending to Running: the Database state machine has no \
             such transition"
        )
    );
    db.remove().await;
    re.remove().await;
}

fn layered_policy() -> Policy {
    Policy {
        operator: OperatorIdentity {
            users: Vec::new(),
            // The test's operator and its "people" are one user: only field managers tell them apart.
            field_managers: vec!["kube-fsm".to_owned()],
            trust_field_managers: true,
        },
        platform: vec![PolicyRule::OnlyOperatorEnters(vec!["Failed".to_owned()])],
        tiers: vec![Tier {
            name: "restricted".to_owned(),
            namespace_selector: serde_json::from_value(
                serde_json::json!({ "matchLabels": { "tier": "restricted" } }),
            )
            .expect("selector"),
            rules: vec![PolicyRule::OnlyOperatorMovesPhase],
        }],
    }
}

#[tokio::test]
async fn policy_layers_leave_moves_to_the_operator_and_the_operator_converges_through_them() {
    let Some(client) = client("admission::policy").await else {
        return;
    };
    install_crds(&client).await;
    let open = admission::namespace(&client, "admission-open", &[]).await;
    let restricted =
        admission::namespace(&client, "admission-restricted", &[("tier", "restricted")]).await;
    let mut registrations = Vec::new();
    for ns in [&open, &restricted] {
        let probe = sample(PROBE);
        let policy = layered_policy();
        registrations.push(admission::serve(&client, ns, probe, policy, FailurePolicy::Fail).await);
    }

    // Open namespace: a human may move along edges, but not into Failed (platform rule).
    let api: Api<Database> = Api::namespaced(client.clone(), &open);
    api.create(&PostParams::default(), &sample("by-hand"))
        .await
        .expect("create");
    for phase in ["Pending", "Provisioning"] {
        set_phase(&api, "by-hand", Some(phase), &manager("hand-edit"))
            .await
            .expect("edge by hand");
    }
    let message = refusal(set_phase(&api, "by-hand", Some("Failed"), &manager("hand-edit")).await);
    assert!(message.contains("on this platform, only the operator (field manager kube-fsm) may move an object to Failed"), "{message}");
    set_phase(&api, "by-hand", Some("Failed"), &manager("kube-fsm"))
        .await
        .expect("the operator may");
    // Nobody is exempt from the machine: not even the operator's field manager.
    let message = refusal(set_phase(&api, "by-hand", Some("Running"), &manager("kube-fsm")).await);
    assert!(
        message.contains("cannot move from Failed to Running"),
        "{message}"
    );

    // Restricted namespace: a human may not move the phase at all; the operator converges.
    let api: Api<Database> = Api::namespaced(client.clone(), &restricted);
    api.create(&PostParams::default(), &sample("tenant"))
        .await
        .expect("create");
    let message = refusal(set_phase(&api, "tenant", Some("Pending"), &manager("hand-edit")).await);
    assert!(
        message.starts_with("admission webhook \"tier-restricted.databases.example.kube-fsm.dev\" denied the request: in namespaces of tier restricted, only the operator"),
        "{message}"
    );
    let operator = Running::spawn(in_namespace::<Database, _>(&client, &restricted, Databases));
    wait_phase(&api, "tenant", "Running").await;
    operator.stop().await;
    for registration in registrations {
        registration.remove().await;
    }
}

/// The Database webhook registered under `Fail` for `ns` and served behind a proxy that is
/// down: the API server cannot reach it until [`Proxy::heal`](kube_fsm_testkit::proxy::Proxy::heal).
async fn webhook_down(
    client: &kube::Client,
    ns: &str,
) -> (admission::Registration, kube_fsm_testkit::proxy::Proxy) {
    let (registration, webhook) = admission::serve_behind_proxy(
        client,
        ns,
        (admission::SCOPE_LABEL, ns),
        sample(PROBE),
        Policy::default(),
        FailurePolicy::Fail,
    )
    .await;
    webhook.down();
    (registration, webhook)
}

#[tokio::test]
async fn with_the_webhook_down_fail_refuses_every_write_and_ignore_lets_the_operator_go_on() {
    let Some(client) = client("admission::down").await else {
        return;
    };
    install_crds(&client).await;
    let ns = admission::namespace(&client, "admission-down", &[]).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let (registration, _webhook) = webhook_down(&client, &ns).await;

    let err = set_phase(&api, "db", Some("Pending"), &manager("kube-fsm"))
        .await
        .expect_err("Fail: a legal write is refused while the webhook is down");
    assert!(err.to_string().contains("failed calling webhook"), "{err}");
    // Only status writes can carry a phase (status is a subresource): creates and metadata
    // updates do not wait for the webhook.
    api.create(&PostParams::default(), &sample("created-while-down"))
        .await
        .expect("Fail: a create is not the webhook's");
    let label = Patch::Merge(serde_json::json!({ "metadata": { "labels": { "team": "db" } } }));
    api.patch("db", &PatchParams::default(), &label)
        .await
        .expect("Fail: a label is not the webhook's");

    // The operator's status writes are refused too: nothing is written, nothing is lost. Its
    // refused write is waited for in the API server's audit log (the test's own was one).
    let refused_writes = |audit: std::path::PathBuf| {
        let ns = ns.clone();
        move || {
            kube_fsm_testkit::audit::requests(&audit, &ns)
                .iter()
                .filter(|r| r.name == "db" && r.subresource == "status" && r.code >= 500)
                .count()
        }
    };
    let audit = kube_fsm_testkit::audit::log("admission::down").map(refused_writes);
    let refused_before = audit.as_ref().map(|count| count());
    let operator = Running::spawn(in_namespace::<Database, _>(&client, &ns, Databases));
    if let (Some(count), Some(before)) = (&audit, refused_before) {
        let tried = kube_fsm_testkit::cluster::eventually(Duration::from_secs(20), || async {
            (count() > before).then_some(())
        })
        .await;
        assert!(
            tried.is_some(),
            "the operator never tried to write the status"
        );
    }
    let db = api.get("db").await.expect("get");
    assert_eq!(
        kube_fsm_testkit::cluster::phase_of(&db),
        None,
        "Fail: no status write got through"
    );
    // Its finalizer went on, and comes off on deletion: a deletion does not hang.
    let created = api.get("created-while-down").await.expect("get");
    assert!(!created.finalizers().is_empty(), "the operator's finalizer");
    api.delete("created-while-down", &Default::default())
        .await
        .expect("delete");
    let gone = kube_fsm_testkit::cluster::eventually(Duration::from_secs(20), || async {
        api.get_opt("created-while-down")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    assert!(
        gone.is_some(),
        "Fail: the deletion finished while the webhook is down"
    );

    // With Ignore the same operator goes on from where it was refused.
    registration.set_failure_policy(FailurePolicy::Ignore).await;
    let db = tokio::time::timeout(Duration::from_secs(60), wait_phase(&api, "db", "Running"))
        .await
        .expect("Ignore: the operator converges while the webhook is down");
    assert_eq!(
        kube_fsm_testkit::cluster::phase_of(&db).as_deref(),
        Some("Running")
    );
    operator.stop().await;
    registration.remove().await;
}

#[tokio::test]
async fn after_a_webhook_outage_the_operator_resumes_within_seconds() {
    let Some(client) = client("admission::resume").await else {
        return;
    };
    install_crds(&client).await;
    let ns = admission::namespace(&client, "admission-resume", &[]).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let (registration, webhook) = webhook_down(&client, &ns).await;
    // The default backoff (0.5 s doubling up to 5 min): 20 s of refused writes grow it well
    // past 10 s, which a connection failure caps at 30 s (`reconnect_max`).
    let operator = Running::spawn(
        kube_fsm::Operator::<Database, _>::new(client.clone(), Databases).namespace(&ns),
    );
    for i in 0..10 {
        api.create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create");
    }
    tokio::time::sleep(Duration::from_secs(20)).await;
    let phased = || async {
        let list = api.list(&Default::default()).await.expect("list");
        list.items
            .iter()
            .filter(|db| db.name_any() != PROBE)
            .filter(|db| kube_fsm_testkit::cluster::phase_of(*db).is_some())
            .count()
    };
    assert_eq!(
        phased().await,
        0,
        "Fail: no status written while it is down"
    );
    // The webhook is back.
    webhook.heal();
    let back = std::time::Instant::now();
    let resumed = kube_fsm_testkit::cluster::eventually(Duration::from_secs(40), || async {
        (phased().await == 10).then_some(())
    })
    .await;
    let took = back.elapsed();
    eprintln!("every object written {took:?} after the webhook came back");
    assert!(resumed.is_some(), "the operator resumed");
    assert!(took < Duration::from_secs(10), "resumed after {took:?}");
    operator.stop().await;
    registration.remove().await;
}
