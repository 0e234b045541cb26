//! Several machines in one process (`Manager`) on the real API server: the Database and the
//! RiskEngine examples, whose children carry one label, share one watch of ConfigMaps and one
//! of Secrets (each watch starts with a list: one list of each) and one Lease, and both converge with the API economy of each alone — counted
//! from the API server's audit log, not the operator's own account.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm::Manager;
use kube_fsm::replicas::LeaderElection;
use kube_fsm_examples::riskengine::{self, RiskEngine};
use kube_fsm_examples::stand_in::{self, Database, Handlers};
use kube_fsm_testkit::audit::{self, Request};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::sample;

const EACH: usize = 3;

/// The Manager of both example machines in `ns`, leading through one Lease.
fn both(client: &Client, ns: &str) -> Manager {
    Manager::new(client.clone())
        .machine(stand_in::operator(
            client.clone(),
            Handlers::new(),
            Some(ns),
        ))
        .machine(riskengine::operator(client.clone(), riskengine::Handlers::new(ns)).namespace(ns))
        .replicas(LeaderElection::new("examples", ns).identity("only"))
}

fn engine(name: &str) -> RiskEngine {
    riskengine::engine(name, "2.0")
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
    riskengine::apply_allow_list(&client, &ns, "2.0")
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

/// One webhook port for every machine, as `run --webhook-addr` serves it: one registration
/// with a webhook per kind, both at the same URL; the real API server's reviews of each kind
/// are answered by that kind's machine under that kind's policy. (Each policy keeps people out
/// of a phase the machine's edges — and so the CRD's CEL rule on current servers — allow, so
/// that only the webhook can refuse it.) The same port converts a third kind, served in two
/// versions, for the API server: a Ticket written as `v1alpha1` reads back as `v1`.
#[tokio::test]
async fn one_webhook_port_answers_the_api_server_for_both_kinds() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::DeleteParams;
    use kube_fsm::admission::{
        Endpoint, OperatorIdentity, Policy, PolicyRule, ServingCertificate, Validator, Webhook,
        WebhookOptions, conversion_webhook, validating_webhook_configuration_for,
    };
    use kube_fsm_testkit::admission::{SCOPE_LABEL, namespace};
    use kube_fsm_testkit::tickets::{self, v1, v1alpha1};
    let _one_at_a_time = crate::versions::TICKETS.lock().await;
    let Some(client) = cluster::client("manager::one_webhook_port").await else {
        return;
    };
    cluster::install_crds(&client).await;
    cluster::install_crd(&client, riskengine::crd()).await;
    let ns = namespace(&client, "fsm-kinds", &[]).await;
    let only_the_operator_enters = |phase: &str| Policy {
        operator: OperatorIdentity {
            users: Vec::new(),
            field_managers: vec!["kube-fsm".into()],
            trust_field_managers: true,
        },
        platform: vec![PolicyRule::OnlyOperatorEnters(vec![phase.into()])],
        tiers: Vec::new(),
    };
    let database_policy = only_the_operator_enters("Provisioning");
    let engine_policy = only_the_operator_enters("Validating");
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).expect("certificate");
    let ca_bundle = certificate.ca_bundle().map(str::to_owned);
    let webhook = Webhook::bind(
        "127.0.0.1:0".parse().expect("addr"),
        Validator::new::<Database>(database_policy.clone()).expect("policy"),
        certificate,
    )
    .await
    .expect("bind")
    .validator(Validator::new::<RiskEngine>(engine_policy.clone()).expect("policy"))
    .converter(tickets::converter());
    let mut options =
        WebhookOptions::new(Endpoint::Url(format!("https://{}", webhook.local_addr())));
    options.ca_bundle = ca_bundle;
    options.timeout_seconds = 5;
    options.namespace_selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some(BTreeMap::from([(SCOPE_LABEL.to_owned(), ns.clone())])),
            ..Default::default()
        },
    );
    let served = tokio::spawn(webhook.run());
    // Created before the registration, at their initial phase (no operator runs here).
    let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), &ns);
    databases
        .create(&PostParams::default(), &sample("db"))
        .await
        .expect("create a Database");
    engines
        .create(&PostParams::default(), &engine("risk"))
        .await
        .expect("create a RiskEngine");
    let pending = Patch::Merge(serde_json::json!({ "status": { "phase": "Pending" } }));
    let plain = PatchParams::default();
    databases
        .patch_status("db", &plain, &pending)
        .await
        .expect("Pending");
    engines
        .patch_status("risk", &plain, &pending)
        .await
        .expect("Pending");
    let mut registration =
        validating_webhook_configuration_for(&stand_in::crd(), &options, &database_policy);
    let other = validating_webhook_configuration_for(&riskengine::crd(), &options, &engine_policy);
    registration
        .webhooks
        .get_or_insert_with(Vec::new)
        .extend(other.webhooks.unwrap_or_default());
    let name = format!("{ns}.kinds");
    registration.metadata.name = Some(name.clone());
    let registrations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    registrations
        .create(&PostParams::default(), &registration)
        .await
        .expect("register");

    let by = |manager: &str| PatchParams {
        dry_run: true,
        field_manager: Some(manager.into()),
        ..PatchParams::default()
    };
    let to = |phase: &str| Patch::Merge(serde_json::json!({ "status": { "phase": phase } }));
    fn refused<T>(result: Result<T, kube::Error>) -> Option<String> {
        match result {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(status.message),
            _ => None,
        }
    }
    // A person's legal move into the phase each policy keeps for the operator: refused by the
    // webhook, by the rule of that kind's policy, once the API server calls it.
    let engine_refusal = cluster::eventually(Duration::from_secs(30), || async {
        refused(
            engines
                .patch_status("risk", &by("kubectl-edit"), &to("Validating"))
                .await,
        )
    })
    .await
    .expect("the API server calls the webhook for RiskEngines");
    assert!(
        engine_refusal.starts_with(
            "admission webhook \"phase.riskengines.example.kube-fsm.dev\" denied the request: "
        ) && engine_refusal.contains(
            "only the operator (field manager kube-fsm) may move an object to Validating"
        ),
        "{engine_refusal}"
    );
    let database_refusal = refused(
        databases
            .patch_status("db", &by("kubectl-edit"), &to("Provisioning"))
            .await,
    )
    .expect("the API server calls the webhook for Databases");
    assert!(
        database_refusal.starts_with(
            "admission webhook \"phase.databases.example.kube-fsm.dev\" denied the request: "
        ) && database_refusal.contains(
            "only the operator (field manager kube-fsm) may move an object to Provisioning"
        ),
        "{database_refusal}"
    );
    // The operator's moves pass, each judged by its own machine.
    engines
        .patch_status("risk", &by("kube-fsm"), &to("Validating"))
        .await
        .expect("the operator's Pending -> Validating");
    databases
        .patch_status("db", &by("kube-fsm"), &to("Provisioning"))
        .await
        .expect("the operator's Pending -> Provisioning");

    // Conversions, at the same port: the Ticket CRD sends them there.
    cluster::install_crd(&client, conversion_webhook(tickets::crd(), &options)).await;
    let old: Api<v1alpha1::Ticket> = Api::namespaced(client.clone(), &ns);
    let new: Api<v1::Ticket> = Api::namespaced(client.clone(), &ns);
    let spec = v1alpha1::TicketSpec {
        title: "one port".into(),
        assignee: Some("ana".into()),
    };
    // The first request after the CRD changed may still meet its previous configuration.
    cluster::eventually(Duration::from_secs(30), || async {
        old.create(
            &PostParams::default(),
            &v1alpha1::Ticket::new("t", spec.clone()),
        )
        .await
        .ok()
    })
    .await
    .expect("a v1alpha1 Ticket is stored (converted to v1 by the webhook)");
    let as_new = new.get("t").await.expect("read as v1");
    assert_eq!(as_new.spec, v1::TicketSpec::from(spec.clone()));
    assert_eq!(old.get("t").await.expect("read as v1alpha1").spec, spec);
    new.delete("t", &DeleteParams::default())
        .await
        .expect("delete the Ticket");
    registrations
        .delete(&name, &DeleteParams::default())
        .await
        .expect("unregister");
    served.abort();
}

/// `run --webhook-register bound` of an App whose machine has two versions (`tickets-operator`,
/// `tests/src/bin`): the installed CRD, which converts nothing, sends its conversions to the
/// process's webhook from then on, so a Ticket written as `v1alpha1` is stored as `v1` and
/// converges; at exit (SIGTERM) the admission registration is removed.
#[tokio::test]
async fn run_with_webhook_register_sends_a_versioned_kinds_conversions_to_its_webhook() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube_fsm_testkit::admission;
    use kube_fsm_testkit::tickets::{self, v1, v1alpha1};
    let _one_at_a_time = crate::versions::TICKETS.lock().await;
    let Some(client) = cluster::client("manager::run_registers_conversions").await else {
        return;
    };
    // Registered for this namespace alone (a registration a failed run leaves behind
    // reaches nothing else).
    let ns = admission::namespace(&client, "fsm-app-conversions", &[]).await;
    let scope = format!("{}={ns}", admission::SCOPE_LABEL);
    // As `tickets-operator crd | kubectl apply -f -` installs it: no conversion webhook.
    cluster::install_crd(&client, tickets::crd()).await;
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .to_string()
    };
    let (webhook, metrics) = (port(), port());
    let mut process = tokio::process::Command::new(env!("CARGO_BIN_EXE_tickets-operator"))
        .args(["run", "--namespace", &ns, "--metrics-addr", &metrics])
        .args(["--webhook-addr", &webhook, "--webhook-register", "bound"])
        .args(["--webhook-namespace-label", &scope])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("tickets-operator starts");
    let registrations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let registered = cluster::eventually(Duration::from_secs(30), || async {
        registrations
            .get_opt("tickets.fsm.example.com")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert!(registered.is_some(), "run registers the webhook");
    let old: Api<v1alpha1::Ticket> = Api::namespaced(client.clone(), &ns);
    let new: Api<v1::Ticket> = Api::namespaced(client.clone(), &ns);
    let spec = v1alpha1::TicketSpec {
        title: "converted by the App".into(),
        assignee: Some("ana".into()),
    };
    old.create(
        &PostParams::default(),
        &v1alpha1::Ticket::new("t", spec.clone()),
    )
    .await
    .expect("a v1alpha1 Ticket");
    // Stored as v1 through the webhook: its fields renamed, not dropped.
    assert_eq!(
        new.get("t").await.expect("read as v1").spec,
        v1::TicketSpec::from(spec.clone())
    );
    assert_eq!(old.get("t").await.expect("read as v1alpha1").spec, spec);
    wait_phase(&new, "t", "Closed").await;
    let pid = process.id().expect("running").to_string();
    let terminated = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(terminated.success());
    let exited = tokio::time::timeout(Duration::from_secs(30), process.wait()).await;
    assert!(
        exited.is_ok_and(|status| status.is_ok_and(|s| s.success())),
        "it exits 0 on SIGTERM"
    );
    assert!(
        registrations
            .get_opt("tickets.fsm.example.com")
            .await
            .expect("get")
            .is_none(),
        "the registration is removed at exit"
    );
}
