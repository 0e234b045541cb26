//! `kubectl fsm` against the real API server: it finds the Database's machine in its CRD, lists
//! and explains objects, refuses a move the machine has no edge for (with the API server's own
//! words), retries a failed Database by its manual edge (the operator converges it and names
//! `kubectl-fsm` as the writer), pauses, resumes, asks for a reconcile and draws the live
//! machine. Behind the webhook's policy, a tenant (`--as`) is refused the manual move and the
//! pause that a member of `sre` takes.

use std::path::Path;
use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::resources::{Database, sample};
use serde_json::json;

/// Runs `kubectl-fsm` with `args` in namespace `ns`: success and output.
async fn fsm(ns: &str, args: &[&str]) -> (bool, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-fsm"))
        .args(args)
        .args(["-n", ns])
        .output()
        .await
        .expect("run kubectl-fsm");
    let mut said = String::from_utf8_lossy(&output.stdout).into_owned();
    said.push_str(&String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

async fn ok(ns: &str, args: &[&str]) -> String {
    let (ok, said) = fsm(ns, args).await;
    assert!(ok, "kubectl fsm {args:?} failed: {said}");
    said
}

#[tokio::test]
async fn an_on_call_engineer_explains_retries_pauses_and_draws_a_database() {
    let Some((client, ns)) = cluster::prepare("kubectl_fsm", "fsm-plugin").await else {
        return;
    };
    let operator = Running::spawn(operator::in_namespace::<Database, _>(
        &client, &ns, Databases,
    ));
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    wait_phase(&api, "db", "Running").await;

    let table = ok(&ns, &["get", "databases"]).await;
    assert!(table.starts_with("NAME   PHASE"), "{table}");
    assert!(table.contains("db     Running"), "{table}");
    assert!(table.contains("Degraded when !ServiceAvailable"), "{table}");
    let explained = ok(&ns, &["explain", "db/db"]).await;
    assert!(
        explained.contains("Phase:    Running — Serving."),
        "{explained}"
    );
    assert!(explained.contains("Ready:    True"), "{explained}");
    assert!(
        explained.contains("Accept"),
        "the history from Events: {explained}"
    );
    let as_json: serde_json::Value =
        serde_json::from_str(&ok(&ns, &["explain", "database/db", "-o", "json"]).await)
            .expect("json");
    assert_eq!(as_json["phase"], "Running");

    // The handler gave up (as a Fail event would leave it): Failed.
    let failed = json!({ "status": { "phase": "Failed" } });
    api.patch_status("db", &PatchParams::default(), &Patch::Merge(&failed))
        .await
        .expect("fail it");
    let (moved, said) = fsm(&ns, &["move", "database/db", "Running", "--reason", "try"]).await;
    assert!(!moved, "{said}");
    assert!(
        said.contains(
            "cannot move from Failed to Running: the Database state machine has no such transition"
        ),
        "{said}"
    );
    let said = ok(
        &ns,
        &[
            "move",
            "database/db",
            "Pending",
            "--reason",
            "disk replaced",
        ],
    )
    .await;
    assert!(
        said.contains("moved from Failed to Pending (a manual transition)"),
        "{said}"
    );
    wait_phase(&api, "db", "Running").await;
    let events = eventually(Duration::from_secs(15), || async {
        let all = cluster::events(&client, &ns, "ManualTransition").await;
        let moved = cluster::events(&client, &ns, "MovedByHand").await;
        (!all.is_empty() && !moved.is_empty()).then_some((all, moved))
    })
    .await
    .expect("the engine's and the plugin's Events");
    assert!(
        events.0[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("by field manager kubectl-fsm"),
        "{:?}",
        events.0[0].note
    );
    assert!(
        events.1[0]
            .note
            .as_deref()
            .unwrap_or_default()
            .ends_with("disk replaced"),
        "{:?}",
        events.1[0].note
    );

    // Pause, resume, reconcile.
    ok(&ns, &["pause", "database/db", "--reason", "INC-42"]).await;
    let paused = eventually(Duration::from_secs(15), || async {
        let db = api.get("db").await.ok()?;
        let paused = db.status.as_ref()?.machine.condition("Paused")?.status == "True";
        paused.then_some(())
    })
    .await;
    assert!(paused.is_some(), "the operator did not say it is paused");
    let table = ok(&ns, &["get", "db"]).await;
    assert!(table.contains("paused"), "{table}");
    ok(&ns, &["resume", "database/db"]).await;
    let said = ok(&ns, &["reconcile", "database/db"]).await;
    let at = said.rsplit(' ').next().expect("a time").trim().to_owned();
    let handled = eventually(Duration::from_secs(15), || async {
        let db = api.get("db").await.ok()?;
        (db.status?.machine.last_handled_reconcile_at? == at).then_some(())
    })
    .await;
    assert!(
        handled.is_some(),
        "the reconcile request {at} was not handled"
    );

    let drawn = ok(&ns, &["diagram", "databases", "--live"]).await;
    assert!(drawn.starts_with("stateDiagram-v2\n"), "{drawn}");
    assert!(
        drawn.contains("state \"Running (1)\" as Running"),
        "{drawn}"
    );
    assert!(drawn.contains("Failed --> Pending: manual"), "{drawn}");
    let dot = ok(&ns, &["diagram", "databases", "--format", "dot"]).await;
    assert!(
        dot.contains("Failed -> Pending [label=\"manual\", style=dotted, color=\"#1f6feb\"];"),
        "{dot}"
    );
    let svg = ok(&ns, &["diagram", "databases", "--live", "--format", "svg"]).await;
    assert!(
        svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    assert!(svg.contains(">Running<") && svg.contains(">1<"), "{svg}");
    // Before releasing a spec: the stored objects it would hold. Today's spec holds none; one
    // that renames Running without retiring it holds `db`, and passes once it retires it.
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../specs/database.yaml");
    let today = ok(
        &ns,
        &[
            "check",
            "databases",
            "--spec",
            spec.to_str().expect("UTF-8"),
        ],
    )
    .await;
    assert!(
        today.contains("none of the 1 stored objects would be held"),
        "{today}"
    );
    let renamed = std::fs::read_to_string(&spec)
        .expect("the spec")
        .replace("Running", "Serving");
    let new_spec = std::env::temp_dir().join(format!("kube-fsm-check-{ns}.yaml"));
    std::fs::write(&new_spec, &renamed).expect("a temporary spec");
    let new = new_spec.to_str().expect("UTF-8");
    let (passed, said) = fsm(&ns, &["check", "databases", "--spec", new]).await;
    assert!(
        !passed
            && said.contains(&format!(
                "{ns}/db: phase `Running` is neither declared nor retired"
            )),
        "{said}"
    );
    std::fs::write(
        &new_spec,
        format!("{renamed}retired:\n  Running: Serving\n"),
    )
    .expect("a spec");
    let retired = ok(&ns, &["check", "databases", "--spec", new]).await;
    assert!(
        retired.contains("none of the 1 stored objects would be held"),
        "{retired}"
    );
    let _ = std::fs::remove_file(&new_spec);

    // A kubeconfig and a context named on the command line, as kubectl takes them.
    let kubeconfig = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let table = ok(&ns, &["get", "databases", "--kubeconfig", &kubeconfig]).await;
    assert!(table.contains("db     Running"), "{table}");
    let (found, said) = fsm(&ns, &["get", "databases", "--context", "no-such-context"]).await;
    assert!(!found && said.contains("no-such-context"), "{said}");
    let (found, said) = fsm(&ns, &["get", "configmaps"]).await;
    assert!(
        !found && said.contains("no custom resource named \"configmaps\""),
        "{said}"
    );
    operator.stop().await;
}

/// Runs `kubectl-fsm` as `user` in `groups` (impersonated): success and output.
async fn fsm_as(ns: &str, user: &str, groups: &[&str], args: &[&str]) -> (bool, String) {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--as", user]);
    for group in groups {
        all.extend(["--as-group", group]);
    }
    fsm(ns, &all).await
}

#[tokio::test]
async fn the_webhook_refuses_a_tenant_the_plugins_manual_move_and_pause_and_admits_sre() {
    use kube_fsm::admission::{FailurePolicy, OperatorIdentity, People, Policy, PolicyRule};
    use kube_fsm_testkit::admission::{self, PROBE};
    let Some(client) = cluster::client("kubectl_fsm::policy").await else {
        return;
    };
    cluster::install_crds(&client).await;
    let ns = admission::namespace(&client, "fsm-plugin-policy", &[]).await;
    let sre = People {
        users: Vec::new(),
        groups: vec!["sre".to_owned()],
    };
    let policy = Policy {
        operator: OperatorIdentity {
            users: Vec::new(),
            field_managers: vec!["kube-fsm".to_owned()],
            trust_field_managers: true,
        },
        platform: vec![PolicyRule::ManualBy(sre.clone()), PolicyRule::PauseBy(sre)],
        tiers: Vec::new(),
    };
    let registration =
        admission::serve(&client, &ns, sample(PROBE), policy, FailurePolicy::Fail).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    // No operator runs: walked to Failed along the machine's edges by hand.
    for phase in ["Pending", "Provisioning", "Failed"] {
        let stored = json!({ "status": { "phase": phase } });
        api.patch_status("db", &PatchParams::default(), &Patch::Merge(&stored))
            .await
            .unwrap_or_else(|e| panic!("{phase}: {e}"));
    }

    let tenant = ["system:masters"];
    let (moved, said) = fsm_as(
        &ns,
        "tenant",
        &tenant,
        &["move", "database/db", "Pending", "--reason", "retry"],
    )
    .await;
    assert!(!moved, "{said}");
    assert!(
        said.contains("only group sre may take the manual transition Failed -> Pending"),
        "{said}"
    );
    let (paused, said) = fsm_as(&ns, "tenant", &tenant, &["pause", "database/db"]).await;
    assert!(!paused, "{said}");
    assert!(
        said.contains("only group sre may pause or resume an object"),
        "{said}"
    );
    let on_call = ["sre", "system:masters"];
    let (moved, said) = fsm_as(
        &ns,
        "carol",
        &on_call,
        &["move", "database/db", "Pending", "--reason", "retry"],
    )
    .await;
    assert!(moved, "{said}");
    let (paused, said) = fsm_as(&ns, "carol", &on_call, &["pause", "database/db"]).await;
    assert!(paused, "{said}");
    registration.remove().await;
}
