//! Health watch by watch, on the real API server: a kind whose CustomResourceDefinition is
//! deleted under a running operator keeps it NotReady, saying the kind is not served, however
//! busy its other watches are, until the kind is served again; a watch whose connection hangs
//! open without delivering is restarted within the stall timeout.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource};
use kube_fsm::machine::ConditionError;
use kube_fsm::manager::Readiness;
use kube_fsm::{MachineStatus, Step, state_machine};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::operator::{Running, in_namespace};
use kube_fsm_testkit::proxy::Proxy;
use kube_fsm_testkit::resources::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A kind of its own (no other test uses its CRD, which this one deletes).
#[state_machine(
    phases(Pending(initial), Done(terminal)),
    transitions(Pending -> Done on Finish),
)]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "vanishing.example.com",
    version = "v1",
    kind = "Errand",
    namespaced,
    status = "ErrandStatus"
)]
pub struct ErrandSpec {}

/// Status of [`Errand`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ErrandStatus {
    /// The machine's fields.
    #[serde(flatten)]
    pub machine: MachineStatus<ErrandPhase>,
}

/// Pending finishes at once.
struct Errands;

impl ErrandHandler for Errands {
    type Error = ConditionError;

    async fn on_pending(
        &self,
        _: &Errand,
        _: &mut Step<Errand>,
    ) -> Result<ErrandPendingNext, ConditionError> {
        Ok(ErrandPendingEvent::Finish.into())
    }
}

/// Changes a ConfigMap in `namespace` every 100 ms: events on the operator's child watch.
async fn chatter(client: Client, namespace: String) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let params = PatchParams::apply("chatter").force();
    for i in 0u64.. {
        let map = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "chatter" },
            "data": { "tick": i.to_string() },
        });
        let _ = api.patch("chatter", &params, &Patch::Apply(&map)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_deleted_crd_keeps_the_operator_not_ready_saying_why_until_it_is_served_again() {
    let test = "a_deleted_crd_keeps_the_operator_not_ready";
    let Some(client) = cluster::client(test).await else {
        return;
    };
    let crd = kube_fsm::crd::<Errand>();
    cluster::install_crd(&client, crd.clone()).await;
    let ns = cluster::namespace(&client, "fsm-unserved").await;
    let errands: Api<Errand> = Api::namespaced(client.clone(), &ns);
    let recorded = Recorded::default();
    let operator = in_namespace::<Errand, _>(&client, &ns, Errands)
        .owns::<ConfigMap>(watcher::Config::default())
        .reconnect_backoff(Duration::from_secs(2))
        .metrics(recorded.metrics());
    let readiness = Readiness::from(operator.health());
    let running = Running::spawn(operator);
    errands
        .create(&PostParams::default(), &Errand::new("first", ErrandSpec {}))
        .await
        .expect("create");
    wait_phase(&errands, "first", "Done").await;
    eventually(Duration::from_secs(10), || async { readiness.check().ok() })
        .await
        .expect("ready once the watches deliver");
    let chatter = tokio::spawn(chatter(client.clone(), ns.clone()));

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("crd name");
    crds.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    eventually(Duration::from_secs(60), || async {
        crds.get_opt(&name)
            .await
            .expect("get crd")
            .is_none()
            .then_some(())
    })
    .await
    .expect("the CRD is gone");
    let not_served = |said: &Result<(), String>| {
        said.as_ref().is_err_and(|reason| {
            reason.contains("does not serve Errand (vanishing.example.com/v1)")
        })
    };
    let said = eventually(Duration::from_secs(30), || async {
        let said = readiness.check();
        not_served(&said).then_some(said)
    })
    .await;
    assert!(
        said.is_some(),
        "readiness does not say the kind is not served: {:?}",
        readiness.check()
    );
    // Child events flow all along: none of them makes the operator ready.
    let sampled = Instant::now();
    while sampled.elapsed() < Duration::from_secs(5) {
        let said = readiness.check();
        assert!(not_served(&said), "while the CRD is gone: {said:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let shown = |value: f64| {
        recorded.sum(
            "kube_fsm_watch_not_served",
            &[("machine", "Errand"), ("kind", "Errand")],
        ) == value
    };
    assert!(shown(1.0), "{}", recorded.text());

    cluster::install_crd(&client, crd).await;
    eventually(Duration::from_secs(30), || async { readiness.check().ok() })
        .await
        .unwrap_or_else(|| panic!("ready again once served: {:?}", readiness.check()));
    assert!(shown(0.0), "{}", recorded.text());
    errands
        .create(
            &PostParams::default(),
            &Errand::new("second", ErrandSpec {}),
        )
        .await
        .expect("create");
    wait_phase(&errands, "second", "Done").await;
    chatter.abort();
    running.stop().await;
}

#[tokio::test]
async fn a_stalled_watch_is_restarted_within_the_stall_timeout() {
    let test = "a_stalled_watch_is_restarted_within_the_stall_timeout";
    let Some((client, ns)) = cluster::prepare(test, "fsm-stalled").await else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (proxy, through) = Proxy::in_front_of(config).await;
    let stall = Duration::from_secs(8);
    let operator = in_namespace::<Database, _>(&through, &ns, Databases).watch_stall_timeout(stall);
    let running = Running::spawn(operator);
    api.create(&PostParams::default(), &sample("busy"))
        .await
        .expect("create");
    wait_phase(&api, "busy", "Running").await;
    // Events flow on the operator's watch, so its connection is busy when it freezes.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                let patch = json!({ "metadata": { "annotations": { "tick": i.to_string() } } });
                let _ = api
                    .patch("busy", &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.freeze();
    let frozen = Instant::now();
    writer.abort();
    api.create(&PostParams::default(), &sample("later"))
        .await
        .expect("create");
    // Only a new watch sees it: the frozen one delivers nothing.
    let reached = eventually(stall + Duration::from_secs(10), || async {
        let later = api.get("later").await.expect("get");
        (cluster::phase_of(&later).as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "an object created at the freeze is not reconciled {:?} later: the stalled watch was not restarted",
        frozen.elapsed()
    );
    eprintln!(
        "a stalled watch (stall timeout {stall:?}): an object created at the freeze reached Running after {:?}",
        frozen.elapsed()
    );
    proxy.heal();
    running.stop().await;
}
