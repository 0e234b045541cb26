//! The status the ecosystem reads, on the real API server: for every phase of both examples
//! (Database, RiskEngine) the object the engine stored gets, from kstatus itself (the Go library
//! behind `kpt`, Flux's health checks and Argo CD's, run as `testkit/kstatus`), the verdict the
//! spec means — Current, InProgress or Failed — and `kubectl wait --for=condition=Ready` (the
//! 1.20 kubectl) returns for a converged Database and times out for a stuck one.

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, Resource};
use kube_fsm::machine::ConditionError;
use kube_fsm::{Next, StateMachine, Step};
use kube_fsm_testkit::cluster::{self, eventually, install_crd, kubectl, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::kstatus;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::*;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::time::Duration;

/// Handlers that never move an object and leave its conditions as stored: the phase and
/// conditions are the test's, the Ready, Reconciling and Stalled conditions the engine's.
#[derive(Clone, Copy)]
struct Frozen;

impl DatabaseHandler for Frozen {
    type Error = ConditionError;
    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn on_provisioning(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, ConditionError> {
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

impl RiskEngineHandler for Frozen {
    type Error = ConditionError;
    async fn on_pending(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEnginePendingNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn on_validating(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineValidatingNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn on_deploying(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineDeployingNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn on_active(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineActiveNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn on_degraded(
        &self,
        _: &RiskEngine,
        _: &mut Step<RiskEngine>,
    ) -> Result<RiskEngineDegradedNext, ConditionError> {
        Ok(Next::Stay)
    }
    async fn cleanup(
        &self,
        _: &RiskEngine,
        _: &kube_fsm::Context,
    ) -> Result<kube_fsm::Cleanup, ConditionError> {
        Ok(kube_fsm::Cleanup::Done)
    }
}

fn conditions(set: &[(&str, bool)]) -> Value {
    set.iter()
        .map(|(type_, status)| {
            json!({
                "type": type_, "status": if *status { "True" } else { "False" },
                "reason": "SetByTest", "message": "", "lastTransitionTime": "2026-12-01T00:00:00Z",
            })
        })
        .collect()
}

/// Walks one object of `K` through `phases` (each along an edge; the phase and the spec's
/// conditions written as a handler would, the engine's added by its next step) and returns
/// kstatus's verdict on the stored object in each (`None`: no kstatus command, skipped loudly).
async fn verdicts<K>(
    client: &Client,
    ns: &str,
    name: &str,
    phases: &[(&str, &[(&str, bool)])],
) -> Option<Vec<(String, String)>>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + StateMachine
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let raw: Api<kube::core::DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kube::api::ApiResource::erase::<K>(&()));
    let mut stored_in = Vec::new();
    for (phase, set) in phases {
        let patch = json!({ "status": { "phase": phase, "conditions": conditions(set) } });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("move it");
        // The engine's step on it: its entry time stamped for this phase, its conditions kept
        // (both machines have `ready:`, so the engine's `Ready` is there in every phase).
        let stored = eventually(Duration::from_secs(15), || async {
            let object = raw.get(name).await.ok()?;
            let data = serde_json::to_value(&object).ok()?;
            let stepped = data["status"]["enteredPhase"] == json!(phase)
                && data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready"));
            stepped.then_some(data)
        })
        .await
        .unwrap_or_else(|| panic!("{name}: the engine did not step it in {phase}"));
        stored_in.push(stored);
    }
    let verdicts = kstatus::verdicts("kstatus::every_phase", &stored_in).await?;
    Some(
        phases
            .iter()
            .zip(verdicts)
            .map(|((phase, _), verdict)| ((*phase).to_owned(), verdict.status))
            .collect(),
    )
}

fn expected(pairs: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    Some(
        pairs
            .iter()
            .map(|(p, v)| ((*p).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[tokio::test]
async fn kstatus_reads_every_phase_of_both_examples_as_the_spec_means_it() {
    let Some((client, ns)) = cluster::prepare("kstatus::every_phase", "fsm-kstatus").await else {
        return;
    };
    install_crd(&client, RiskEngine::crd()).await;
    let databases = Running::spawn(operator::in_namespace::<Database, _>(&client, &ns, Frozen));
    let engines = Running::spawn(operator::in_namespace::<RiskEngine, _>(
        &client, &ns, Frozen,
    ));

    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Pending").await;
    let database = verdicts::<Database>(
        &client,
        &ns,
        "db",
        &[
            ("Pending", &[]),
            ("Provisioning", &[("PodsReady", false)]),
            (
                "Running",
                &[("PodsReady", true), ("ServiceAvailable", true)],
            ),
            (
                "Degraded",
                &[("PodsReady", true), ("ServiceAvailable", false)],
            ),
            (
                "Failed",
                &[("PodsReady", true), ("ServiceAvailable", false)],
            ),
        ],
    )
    .await;
    assert_eq!(
        database,
        expected(&[
            ("Pending", "InProgress"),
            ("Provisioning", "InProgress"),
            ("Running", "Current"),
            ("Degraded", "InProgress"),
            ("Failed", "Failed"),
        ])
    );
    assert_eq!(
        Some(DatabasePhase::ALL.len()),
        database.map(|d| d.len()),
        "every phase"
    );

    let api: Api<RiskEngine> = Api::namespaced(client.clone(), &ns);
    let engine = RiskEngine::new(
        "re",
        RiskEngineSpec {
            version: "1.0".into(),
            timeout_seconds: 60,
            parameters: std::collections::BTreeMap::new(),
        },
    );
    api.create(&PostParams::default(), &engine)
        .await
        .expect("create");
    wait_phase(&api, "re", "Pending").await;
    let (allowed, config) = ("VersionAllowed", "ConfigReady");
    let risk = verdicts::<RiskEngine>(
        &client,
        &ns,
        "re",
        &[
            ("Pending", &[]),
            ("Validating", &[(allowed, false)]),
            ("Deploying", &[(allowed, true), (config, false)]),
            ("Active", &[(allowed, true), (config, true)]),
            ("Degraded", &[(allowed, true), (config, false)]),
            ("Failed", &[(allowed, true), (config, false)]),
        ],
    )
    .await;
    assert_eq!(
        risk,
        expected(&[
            ("Pending", "InProgress"),
            ("Validating", "InProgress"),
            ("Deploying", "InProgress"),
            ("Active", "Current"),
            ("Degraded", "InProgress"),
            ("Failed", "Failed"),
        ])
    );
    assert_eq!(
        Some(RiskEnginePhase::ALL.len()),
        risk.map(|r| r.len()),
        "every phase"
    );

    // A spec change not yet observed is InProgress, whatever the conditions say.
    let mut stored = serde_json::to_value(api.get("re").await.expect("get")).expect("json");
    stored["metadata"]["generation"] =
        json!(stored["status"]["observedGeneration"].as_i64().unwrap_or(1) + 1);
    stored["status"]["conditions"] = json!([]);
    if let Some(verdict) = kstatus::verdicts("kstatus::every_phase", &[stored]).await {
        assert_eq!(verdict[0].status, "InProgress", "{verdict:?}");
    }
    databases.stop().await;
    engines.stop().await;
}

#[tokio::test]
async fn kubectl_wait_for_ready_returns_for_a_converged_database_and_times_out_for_a_stuck_one() {
    let Some((client, ns)) = cluster::prepare("kstatus::kubectl_wait", "fsm-wait").await else {
        return;
    };
    let converging = cluster::fresh_name("fsm-wait-stuck");
    cluster::create_namespace(&client, &converging, Default::default()).await;
    let good = Running::spawn(operator::in_namespace::<Database, _>(
        &client, &ns, Databases,
    ));
    let stuck = Running::spawn(operator::in_namespace::<Database, _>(
        &client,
        &converging,
        Frozen,
    ));
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    let stuck_api: Api<Database> = Api::namespaced(client.clone(), &converging);
    stuck_api
        .create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");

    let resource = "databases.example.kube-fsm.dev/db";
    let Some((ok, output)) = kubectl(
        "kstatus::kubectl_wait",
        &[
            "wait",
            "--for=condition=Ready",
            resource,
            "-n",
            &ns,
            "--timeout=30s",
        ],
    )
    .await
    else {
        return;
    };
    assert!(
        ok,
        "kubectl wait failed for the converging Database: {output}"
    );
    assert!(output.contains("condition met"), "{output}");
    // Stuck in Pending (its handler never accepts it): Ready stays False.
    wait_phase(&stuck_api, "db", "Pending").await;
    let (ok, output) = kubectl(
        "kstatus::kubectl_wait",
        &[
            "wait",
            "--for=condition=Ready",
            resource,
            "-n",
            &converging,
            "--timeout=3s",
        ],
    )
    .await
    .expect("kubectl");
    assert!(!ok, "kubectl wait returned for a stuck Database: {output}");
    assert!(output.contains("timed out"), "{output}");
    good.stop().await;
    stuck.stop().await;
}
