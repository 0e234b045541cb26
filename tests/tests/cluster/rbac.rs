//! The generated RBAC on the real API server (scripts/envtest runs it with `--authorization-mode
//! RBAC`): each example operator runs as its own ServiceAccount, with a token from the
//! TokenRequest API and only the Role `Operator::rbac` computed from its wiring — it converges,
//! cleans up on deletion and records Events with 0 × 403; and without any one of the rules it
//! reports the missing permission by name, at a bounded request rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use kube_fsm::Operator;
use kube_fsm::admission::{
    Endpoint, FailurePolicy, Policy, ServingCertificate, Validator, Webhook, WebhookOptions,
    validating_webhook_configuration,
};
use kube_fsm::manager::Readiness;
use kube_fsm::operator::rbac::{Rbac, Verb};
use kube_fsm::replicas::{LeaderElection, Sharding};
use kube_fsm::watch::Connection;
use kube_fsm_examples::riskengine::{self, RiskEngine};
use kube_fsm_examples::stand_in::{self, Database, Handlers};
use kube_fsm_generate::rbac::RbacObjects;
use kube_fsm_testkit::admission;
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::sample;
use kube_fsm_testkit::service_account::{self, Tally};

/// Runs `operator` (built on the ServiceAccount's `account` client) with exactly `rbac` granted.
async fn granted<K, H>(
    admin: &Client,
    account: &Client,
    ns: &str,
    rbac: &Rbac,
    operator: Operator<K, H>,
) -> Running
where
    K: kube_fsm::Reconcilable<H>,
    H: Send + Sync + 'static,
{
    service_account::grant(admin, &RbacObjects::new(rbac, ns, "operator", ns), account).await;
    Running::spawn(operator)
}

/// Creates three Databases, waits until they run, deletes them and waits until they and their
/// children are gone (the cleanup handler deletes the children as the operator).
async fn converge_and_clean_up(admin: &Client, ns: &str) {
    let api: Api<Database> = Api::namespaced(admin.clone(), ns);
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &sample(name))
            .await
            .expect("create");
    }
    for name in ["a", "b", "c"] {
        wait_phase(&api, name, "Running").await;
    }
    for name in ["a", "b", "c"] {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    let children: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let selector = ListParams::default().labels(&stand_in::child_selector());
    let gone = eventually(Duration::from_secs(30), || async {
        let left = api.list(&ListParams::default()).await.ok()?.items.len()
            + children.list(&selector).await.ok()?.items.len();
        (left == 0).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the Databases and their children are deleted"
    );
}

fn assert_no_forbidden(tally: &Tally, what: &str) {
    assert!(tally.requests() > 0, "{what}: the operator sent requests");
    assert_eq!(
        tally.forbidden(),
        0,
        "{what}: answers 403 out of {}",
        tally.requests()
    );
}

#[tokio::test]
async fn the_database_operator_runs_as_its_service_account_with_leader_election_and_the_webhook() {
    let Some(admin) = cluster::client("rbac_database").await else {
        return;
    };
    cluster::install_crds(&admin).await;
    let ns = admission::namespace(&admin, "fsm-rbac-db", &[]).await;
    let (client, tally) = service_account::client(&admin, &ns, "operator").await;
    let operator = stand_in::operator(client.clone(), Handlers::new(), Some(&ns))
        .replicas(LeaderElection::new("database-operator", &ns))
        .needs::<ValidatingWebhookConfiguration>(
            &[Verb::Create, Verb::Patch],
            "registers the admission webhook (server-side apply)",
        );
    let rbac = operator.rbac();
    let running = granted(&admin, &client, &ns, &rbac, operator).await;

    // The webhook, registered by the operator's own account for this namespace only.
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).expect("certificate");
    let ca = certificate.ca_bundle().map(str::to_owned);
    let validator = Validator::new::<Database>(Policy::default()).expect("validator");
    let webhook = Webhook::bind("127.0.0.1:0".parse().expect("addr"), validator, certificate)
        .await
        .expect("bind");
    let mut options =
        WebhookOptions::new(Endpoint::Url(format!("https://{}", webhook.local_addr())));
    options.ca_bundle = ca;
    options.failure_policy = FailurePolicy::Fail;
    options.namespace_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([(
            admission::SCOPE_LABEL.to_owned(),
            ns.clone(),
        )])),
        ..LabelSelector::default()
    });
    tokio::spawn(webhook.run());
    let mut registration =
        validating_webhook_configuration::<Database>(&options, &Policy::default());
    let name = format!("{ns}.webhook");
    registration.metadata.name = Some(name.clone());
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("database-operator").force(),
            &Patch::Apply(&registration),
        )
        .await
        .expect("the operator's account registers its webhook");

    // The API server calls it: a hand edit the machine has no edge for is refused.
    let api: Api<Database> = Api::namespaced(admin.clone(), &ns);
    api.create(&PostParams::default(), &sample("probe"))
        .await
        .expect("create");
    wait_phase(&api, "probe", "Running").await;
    let by_hand = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let pending = Patch::Merge(serde_json::json!({ "status": { "phase": "Pending" } }));
    let refused = eventually(Duration::from_secs(30), || async {
        match api.patch_status("probe", &by_hand, &pending).await {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(status.message),
            _ => None,
        }
    })
    .await;
    assert!(
        refused.is_some_and(|m| m.contains("no such transition")),
        "the webhook refuses Running → Pending"
    );
    api.delete("probe", &DeleteParams::default())
        .await
        .expect("delete");

    converge_and_clean_up(&admin, &ns).await;
    let events = cluster::all_events(&admin, &ns).await;
    assert!(
        events.iter().any(|reason| reason == "Accept"),
        "transition Events recorded: {events:?}"
    );
    running.stop().await;
    let _ = Api::<ValidatingWebhookConfiguration>::all(admin.clone())
        .delete(&name, &DeleteParams::default())
        .await;
    service_account::revoke(&admin, &RbacObjects::new(&rbac, &ns, "operator", &ns)).await;
    assert_no_forbidden(&tally, "Database with leader election and webhook");
}

#[tokio::test]
async fn the_sharded_database_operator_runs_as_its_service_account() {
    let Some((admin, ns)) = cluster::prepare("rbac_sharded", "fsm-rbac-shard").await else {
        return;
    };
    let (client, tally) = service_account::client(&admin, &ns, "operator").await;
    let sharding = Sharding::new("database-operator", &ns, 3).duration(Duration::from_secs(4));
    let operator =
        stand_in::operator(client.clone(), Handlers::new(), Some(&ns)).replicas(sharding);
    let rbac = operator.rbac();
    let running = granted(&admin, &client, &ns, &rbac, operator).await;
    converge_and_clean_up(&admin, &ns).await;
    running.stop().await;
    assert_no_forbidden(&tally, "sharded Database");
}

#[tokio::test]
async fn the_riskengine_operator_runs_as_its_service_account() {
    let Some((admin, ns)) = cluster::prepare("rbac_riskengine", "fsm-rbac-risk").await else {
        return;
    };
    cluster::install_crd(&admin, riskengine::crd()).await;
    riskengine::apply_allow_list(&admin, &ns, "1.4, 2.0")
        .await
        .expect("the allow-list");
    let (client, tally) = service_account::client(&admin, &ns, "operator").await;
    let operator =
        riskengine::operator(client.clone(), riskengine::Handlers::new(ns.clone())).namespace(&ns);
    let rbac = operator.rbac();
    let running = granted(&admin, &client, &ns, &rbac, operator).await;
    let api: Api<RiskEngine> = Api::namespaced(admin.clone(), &ns);
    let engine = riskengine::engine("risk", "2.0");
    api.create(&PostParams::default(), &engine)
        .await
        .expect("create");
    wait_phase(&api, "risk", "Active").await;
    api.delete("risk", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = eventually(Duration::from_secs(30), || async {
        api.get_opt("risk").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "the RiskEngine is deleted after its cleanup"
    );
    running.stop().await;
    assert_no_forbidden(&tally, "RiskEngine");
}

/// What one rule's removal did: how it was reported, and the operator's request rate after.
struct Ablated {
    rule: String,
    reported: Option<String>,
    per_second: f64,
}

/// What an ablation runs, with leader election: the Database machine alone, or both example
/// machines in one Manager under the union of their roles (as `operator manifests` grants it).
#[derive(Clone, Copy)]
enum Subject {
    Database,
    Both,
}

impl Subject {
    fn databases(client: &Client, ns: &str) -> Operator<Database, Handlers> {
        stand_in::operator(client.clone(), Handlers::new(), Some(ns))
    }

    fn engines(client: &Client, ns: &str) -> Operator<RiskEngine, riskengine::Handlers> {
        riskengine::operator(client.clone(), riskengine::Handlers::new(ns.to_owned())).namespace(ns)
    }

    /// The role it needs (each machine's with the Lease's grant, merged).
    fn rbac(self, client: &Client, ns: &str) -> Rbac {
        let election = LeaderElection::new("operator", ns);
        let mut rbac = Self::databases(client, ns)
            .replicas(election.clone())
            .rbac();
        if let Subject::Both = self {
            rbac.merge(&Self::engines(client, ns).replicas(election).rbac());
        }
        rbac
    }

    /// Starts it on `client`, and its readiness.
    fn start(self, client: &Client, ns: &str) -> (Readiness, Running) {
        let election = LeaderElection::new("operator", ns);
        match self {
            Subject::Database => {
                let operator = Self::databases(client, ns).replicas(election);
                (Readiness::from(operator.health()), Running::spawn(operator))
            }
            Subject::Both => {
                let manager = kube_fsm::Manager::new(client.clone())
                    .machine(Self::databases(client, ns))
                    .machine(Self::engines(client, ns))
                    .replicas(election);
                (manager.readiness(), Running::manager(manager))
            }
        }
    }

    /// Gives it work: a Database, and with both machines a RiskEngine (and its allow-list).
    async fn create(self, admin: &Client, ns: &str) {
        Api::<Database>::namespaced(admin.clone(), ns)
            .create(&PostParams::default(), &sample("db"))
            .await
            .expect("create");
        if let Subject::Both = self {
            riskengine::apply_allow_list(admin, ns, "2.0")
                .await
                .expect("the allow-list");
            Api::<RiskEngine>::namespaced(admin.clone(), ns)
                .create(&PostParams::default(), &riskengine::engine("risk", "2.0"))
                .await
                .expect("create");
        }
    }
}

/// Runs `subject` with the rule at `rule` of its role removed, or, with `verb`, only that
/// verb of it.
async fn without_rule(admin: Client, subject: Subject, rule: usize, verb: Option<Verb>) -> Ablated {
    let ns = cluster::namespace(&admin, "fsm-ablate").await;
    let (client, tally) = service_account::client(&admin, &ns, "operator").await;
    let full = subject.rbac(&client, &ns);
    let missing = full.permissions()[rule].clone();
    let mut rbac = full.without(rule);
    let removed: Vec<Verb> = match verb {
        Some(verb) => {
            let kept = missing.verbs.iter().copied().filter(|v| *v != verb);
            rbac.grant(
                &missing.group,
                &missing.resource,
                missing.scope.clone(),
                kept,
                "kept",
            );
            vec![verb]
        }
        None => missing.verbs.iter().copied().collect(),
    };
    let group = if missing.group.is_empty() {
        "core"
    } else {
        &missing.group
    };
    let verbs: Vec<&str> = removed.iter().map(|v| v.as_str()).collect();
    let described = format!("{group} {} [{}]", missing.resource, verbs.join(", "));
    service_account::grant(
        &admin,
        &RbacObjects::new(&rbac, &ns, "operator", &ns),
        &client,
    )
    .await;
    let (readiness, running) = subject.start(&client, &ns);
    subject.create(&admin, &ns).await;
    let names = |reason: &str| {
        reason.contains(&missing.resource)
            && verb.is_none_or(|verb| reason.contains(&format!("cannot {}", verb.as_str())))
    };
    // Every machine that needs the permission names it: both machines own ConfigMaps, through
    // one shared watch whose refusal each must report.
    let needed_by = match subject {
        Subject::Both if missing.resource == "configmaps" => 2,
        _ => 1,
    };
    let reported = eventually(Duration::from_secs(30), || async {
        let reasons: Vec<String> = readiness
            .parts()
            .filter_map(|(_, connection)| match connection {
                Connection::Refused { reason } if names(&reason) => Some(reason),
                _ => None,
            })
            .collect();
        (reasons.len() >= needed_by).then(|| reasons.join(" | "))
    })
    .await;
    // The request rate once the refusal stands: retried at the reconnect cap, no hot loop.
    let (before, started) = (tally.requests(), Instant::now());
    tokio::time::sleep(Duration::from_secs(6)).await;
    let per_second = (tally.requests() - before) as f64 / started.elapsed().as_secs_f64();
    running.crash().await;
    Ablated {
        rule: described,
        reported,
        per_second,
    }
}

/// Runs `subject` once without each rule of its role (and `extra` verbs alone) and checks
/// that every absence is reported by name, at a bounded request rate.
async fn ablate(admin: Client, subject: Subject, extra: &[(usize, Verb)]) {
    let rules = subject.rbac(&admin, "x").permissions().len();
    let runs = (0..rules)
        .map(|rule| (rule, None))
        .chain(extra.iter().map(|&(rule, verb)| (rule, Some(verb))))
        .map(|(rule, verb)| without_rule(admin.clone(), subject, rule, verb));
    let ablated = futures::future::join_all(runs).await;
    println!("rule removed → what the operator reports (requests per second after)");
    for a in &ablated {
        println!(
            "{} → {} ({:.1}/s)",
            a.rule,
            a.reported.as_deref().unwrap_or("NOTHING"),
            a.per_second
        );
    }
    for a in &ablated {
        assert!(
            a.reported.is_some(),
            "without {} the operator reported nothing",
            a.rule
        );
        assert!(
            a.per_second < 5.0,
            "without {}: {:.1} requests per second",
            a.rule,
            a.per_second
        );
    }
}

#[tokio::test]
async fn every_generated_rule_is_needed_and_its_absence_is_reported_by_name() {
    let Some(admin) = cluster::client("rbac_ablation").await else {
        return;
    };
    cluster::install_crds(&admin).await;
    let children = Subject::Database
        .rbac(&admin, "x")
        .permissions()
        .iter()
        .position(|p| p.resource == "configmaps")
        .expect("the children's rule");
    // Each rule, and the one verb a first look might think superfluous: `create` on the
    // children (a server-side apply of a new object needs it).
    ablate(admin, Subject::Database, &[(children, Verb::Create)]).await;
}

/// The union of both machines' roles, as the two-kind process is deployed: no rule of it is
/// superfluous, and the Manager's readiness names the one missing.
#[tokio::test]
async fn every_rule_of_the_two_kind_role_is_needed_and_its_absence_is_reported_by_name() {
    let Some(admin) = cluster::client("rbac_ablation_both").await else {
        return;
    };
    cluster::install_crds(&admin).await;
    cluster::install_crd(&admin, riskengine::crd()).await;
    ablate(admin, Subject::Both, &[]).await;
}

/// Both example machines in one Manager, as `operator manifests` deploys them: one
/// ServiceAccount granted the union of their roles (`Rbac::merge`), one Lease. Both converge
/// and clean up with 0 × 403.
#[tokio::test]
async fn both_machines_in_one_process_run_as_one_service_account_with_the_union_of_their_roles() {
    let Some((admin, ns)) = cluster::prepare("rbac_manager", "fsm-rbac-both").await else {
        return;
    };
    cluster::install_crd(&admin, riskengine::crd()).await;
    riskengine::apply_allow_list(&admin, &ns, "2.0")
        .await
        .expect("the allow-list");
    let (client, tally) = service_account::client(&admin, &ns, "operator").await;
    let election = || LeaderElection::new("examples", &ns);
    let databases = stand_in::operator(client.clone(), Handlers::new(), Some(&ns));
    let engines =
        riskengine::operator(client.clone(), riskengine::Handlers::new(ns.clone())).namespace(&ns);
    // Each machine's role as the Manager runs it (the Lease's grant included), merged.
    let mut rbac = Rbac::default();
    rbac.merge(
        &stand_in::operator(client.clone(), Handlers::new(), Some(&ns))
            .replicas(election())
            .rbac(),
    );
    rbac.merge(
        &riskengine::operator(client.clone(), riskengine::Handlers::new(ns.clone()))
            .namespace(&ns)
            .replicas(election())
            .rbac(),
    );
    service_account::grant(
        &admin,
        &RbacObjects::new(&rbac, &ns, "operator", &ns),
        &client,
    )
    .await;
    let running = Running::manager(
        kube_fsm::Manager::new(client.clone())
            .machine(databases)
            .machine(engines)
            .replicas(election()),
    );
    let engine = riskengine::engine("risk", "2.0");
    let api: Api<RiskEngine> = Api::namespaced(admin.clone(), &ns);
    api.create(&PostParams::default(), &engine)
        .await
        .expect("create");
    let databases: Api<Database> = Api::namespaced(admin.clone(), &ns);
    databases
        .create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&databases, "db", "Running").await;
    wait_phase(&api, "risk", "Active").await;
    databases
        .delete("db", &DeleteParams::default())
        .await
        .expect("delete");
    api.delete("risk", &DeleteParams::default())
        .await
        .expect("delete");
    // Each cleanup handler deletes its children (the Database's ConfigMap is named after it).
    let children: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    let gone = eventually(Duration::from_secs(30), || async {
        let left = usize::from(databases.get_opt("db").await.ok()?.is_some())
            + usize::from(api.get_opt("risk").await.ok()?.is_some())
            + usize::from(children.get_opt("db").await.ok()?.is_some());
        (left == 0).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "both objects and the Database's child are deleted after their cleanup"
    );
    running.stop().await;
    assert_no_forbidden(&tally, "Database and RiskEngine in one Manager");
}
