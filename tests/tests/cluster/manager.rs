//! Several machines in one process (`Manager`) on the real API server: the Database and the
//! RiskEngine examples, whose children carry one label, share one watch of ConfigMaps and one
//! of Secrets (each watch starts with a list: one list of each) and one Lease, and both converge with the API economy of each alone — counted
//! from the API server's audit log, not the operator's own account.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm::Manager;
use kube_fsm::controller::LeaderElection;
use kube_fsm_examples::database::{self, Database, Handlers};
use kube_fsm_examples::riskengine::{self, ALLOW_LIST, RiskEngine, RiskEngineSpec};
use kube_fsm_testkit::audit::{self, Request};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::sample;

const EACH: usize = 3;

/// The Manager of both example machines in `ns`, leading through one Lease.
fn both(client: &Client, ns: &str) -> Manager {
    Manager::new(client.clone())
        .machine(database::operator(
            client.clone(),
            Handlers::new(),
            Some(ns),
        ))
        .machine(riskengine::operator(client.clone(), riskengine::Handlers::new(ns)).namespace(ns))
        .replicas(LeaderElection::new("examples", ns).identity("only"))
}

fn engine(name: &str) -> RiskEngine {
    RiskEngine::new(
        name,
        RiskEngineSpec {
            version: "2.0".into(),
            timeout_seconds: 60,
            parameters: BTreeMap::new(),
        },
    )
}

fn count(requests: &[Request], verb: &str, resource: &str, subresource: &str) -> usize {
    requests
        .iter()
        .filter(|r| r.verb == verb && r.resource == resource && r.subresource == subresource)
        .count()
}

#[tokio::test]
async fn two_machines_in_one_process_share_one_watch_per_kind_and_one_lease() {
    let Some((client, ns)) = cluster::prepare("manager::one_process", "fsm-manager").await else {
        return;
    };
    let Some(log) = audit::log("manager::one_process") else {
        return;
    };
    cluster::install_crd(&client, riskengine::crd()).await;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(
            ALLOW_LIST,
            &PatchParams::apply("platform-team"),
            &Patch::Apply(&riskengine::allow_list(&ns, "2.0")),
        )
        .await
        .expect("the allow-list");
    let manager = both(&client, &ns);
    let readiness = manager.readiness();
    let running = Running::manager(manager);
    let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), &ns);
    for i in 0..EACH {
        databases
            .create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create a Database");
        engines
            .create(&PostParams::default(), &engine(&format!("risk-{i}")))
            .await
            .expect("create a RiskEngine");
    }
    for i in 0..EACH {
        wait_phase(&databases, &format!("db-{i}"), "Running").await;
        wait_phase(&engines, &format!("risk-{i}"), "Active").await;
    }
    assert_eq!(
        readiness.check(),
        Ok(()),
        "both machines and the Lease are up"
    );
    let converged = audit::requests(&log, &ns).len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let leases = Api::<Lease>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect("list Leases");
    running.stop().await;

    let names: Vec<String> = leases
        .items
        .iter()
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    assert_eq!(names, ["examples"], "one Lease for both machines");
    // One watch of each kind: the Database's children and the RiskEngine's (ConfigMaps,
    // Secrets, and the allow-list among the ConfigMaps) through one watch each, each
    // starting with one list.
    let lists = audit::lists(&log, &ns);
    for resource in ["databases", "riskengines", "configmaps", "secrets"] {
        let listed: Vec<&Request> = lists.iter().filter(|l| l.resource == resource).collect();
        assert_eq!(listed.len(), 1, "one watch of {resource}: {listed:?}");
    }
    // The API economy of each machine alone: per Database two status writes and one child
    // apply; nothing written once everything converged.
    let requests = audit::requests(&log, &ns);
    assert_eq!(
        count(&requests, "patch", "databases", "status"),
        2 * EACH,
        "two status writes per Database"
    );
    let children = requests
        .iter()
        .filter(|r| r.verb == "patch" && r.resource == "configmaps" && r.name.starts_with("db-"))
        .count();
    assert_eq!(children, EACH, "one child write per Database");
    assert_eq!(
        requests.len(),
        converged,
        "nothing written after convergence: {:?}",
        &requests[converged..]
    );
}
