//! The example operators as processes against the real API server: what the `stand_in`
//! Database operator serves (`/metrics`, `/healthz`, the admission webhook) on the bare API
//! server, and leader election between two replicas of the `operator` example (its Database
//! runs StatefulSets, so on the control plane) when the leader is killed (SIGKILL, so nothing
//! is released and the Lease has to expire) or frozen.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::example;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// Installs the Database CRD exactly as the database example's `crd` prints it (the
/// `stand_in` example's is the same).
async fn install_crd(client: &Client) {
    let out = std::process::Command::new(example("database"))
        .arg("crd")
        .output()
        .expect("crd runs");
    assert!(out.status.success(), "crd failed");
    let yaml = String::from_utf8(out.stdout).expect("utf-8");
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("CRD YAML");
    cluster::install_crd(client, crd).await;
}

/// The CRDs of the `operator` example's three machines.
async fn install_operator_crds(client: &Client) {
    install_crd(client).await;
    cluster::install_crd(client, kube_fsm_examples::riskengine::crd()).await;
    cluster::install_crd(client, kube_fsm_examples::migration::crd()).await;
}

/// The control plane's client and kubeconfig: the `operator` example's Database runs its
/// StatefulSets there (on a bare API server nothing would make their pods ready).
async fn on_control_plane(test: &str) -> Option<(Client, std::path::PathBuf)> {
    let client = cluster::control_plane(test).await?;
    let kubeconfig = std::env::var_os("KUBE_FSM_CONTROL_PLANE_KUBECONFIG")?;
    Some((client, kubeconfig.into()))
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// `EXAMPLE run` with `args`; killed when dropped.
fn operator(example_name: &str, args: &[&str]) -> Child {
    command(example_name, args)
        .spawn()
        .expect("operator starts")
}

/// The command of [`operator`], to add to before it starts.
fn command(example_name: &str, args: &[&str]) -> Command {
    let mut command = Command::new(example(example_name));
    command
        .arg("run")
        .args(args)
        .env(
            "RUST_LOG",
            std::env::var("KUBE_FSM_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(if std::env::var_os("KUBE_FSM_SHOW_OPERATOR").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .kill_on_drop(true);
    command
}

async fn create(api: &Api<DynamicObject>, name: &str) {
    let mut object = DynamicObject::new(name, &cluster::example_databases());
    object.data = json!({ "spec": {} });
    api.create(&PostParams::default(), &object)
        .await
        .expect("create");
}

async fn wait_running(api: &Api<DynamicObject>, name: &str) {
    wait_phase(api, name, "Running").await;
}

async fn wait_phase(api: &Api<DynamicObject>, name: &str, phase: &str) {
    // Generous: the last of ~40 objects of each kind arriving while a leader is frozen, on a
    // control plane that other tests have loaded, with the watches' stall bound at 60 s.
    let reached = eventually(Duration::from_secs(120), || async {
        let object = api.get(name).await.ok()?;
        (object.data["status"]["phase"] == phase).then_some(())
    })
    .await;
    if reached.is_none() {
        // What it says of itself and what its Events say (a step that keeps failing warns),
        // and who wrote its status last, for the reader of a failure.
        let object = api.get(name).await;
        let status = object.as_ref().map(|o| o.data["status"].clone());
        let writers: Vec<String> = (object.iter().flat_map(|o| o.managed_fields()))
            .map(|f| format!("{:?} {:?} {:?}", f.manager, f.subresource, f.time))
            .collect();
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(
            api.clone().into_client(),
            object
                .as_ref()
                .ok()
                .and_then(|o| o.namespace())
                .as_deref()
                .unwrap_or("default"),
        );
        let about = ListParams::default().fields(&format!("involvedObject.name={name}"));
        let said: Vec<String> = (events.list(&about).await.into_iter())
            .flat_map(|list| list.items)
            .map(|e| format!("{:?} {:?}: {:?}", e.type_, e.reason, e.message))
            .collect();
        panic!(
            "{name} did not reach {phase}; its status: {status:?}; written by {writers:?}; its \
             Events: {said:#?}"
        );
    }
}

/// The body of `GET path` when it is answered 200.
async fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    http_answer(addr, path)
        .await
        .and_then(|(code, body)| (code == 200).then_some(body))
}

/// The status code and body of `GET path`.
async fn http_answer(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let code = head.split(' ').nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// The value of the sample `series` (name and labels exactly as exposed).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[tokio::test]
async fn the_operator_serves_its_metrics() {
    let Some(client) = cluster::client("the_operator_serves_its_metrics").await else {
        return;
    };
    install_crd(&client).await;
    let ns = cluster::namespace(&client, "fsm-metrics").await;
    let addr = free_port();
    let _operator = operator(
        "stand_in",
        &["--namespace", &ns, "--metrics-addr", &addr.to_string()],
    );
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    for name in ["a", "b"] {
        create(&api, name).await;
    }
    for name in ["a", "b"] {
        wait_running(&api, name).await;
    }
    // Both Running in the cache, and the reconcile of the change that says so counted (it may
    // still be under way when the cache already has the object).
    let metrics = eventually(Duration::from_secs(10), || async {
        let text = http_get(addr, "/metrics").await?;
        let running = sample(
            &text,
            "kube_fsm_objects{machine=\"Database\",phase=\"Running\"}",
        ) == Some(2.0);
        let settled = sample(
            &text,
            "controller_runtime_reconcile_total{controller=\"database\",result=\"success\"}",
        )
        .is_some_and(|v| v >= 1.0);
        (running && settled).then_some(text)
    })
    .await
    .expect("/metrics shows both objects Running, and a reconcile that settled");
    let expect = [
        (
            "kube_fsm_transitions_total{machine=\"Database\",from=\"Pending\",to=\"Provisioning\"}",
            2.0,
        ),
        (
            "kube_fsm_transitions_total{machine=\"Database\",from=\"Provisioning\",to=\"Running\"}",
            2.0,
        ),
        ("kube_fsm_status_writes_total{machine=\"Database\"}", 4.0),
        (
            "kube_fsm_objects{machine=\"Database\",phase=\"Pending\"}",
            0.0,
        ),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&metrics, series), Some(value), "{series}\n{metrics}");
    }
    let workers = "controller_runtime_active_workers{controller=\"database\"}";
    assert!(sample(&metrics, workers).is_some(), "{workers}\n{metrics}");
    for series in [
        "controller_runtime_reconcile_total{controller=\"database\",result=\"success\"}",
        "controller_runtime_reconcile_time_seconds_count{controller=\"database\"}",
        "kube_fsm_time_in_phase_seconds_count{machine=\"Database\",phase=\"Provisioning\"}",
    ] {
        assert!(
            sample(&metrics, series).is_some_and(|v| v >= 1.0),
            "{series}\n{metrics}"
        );
    }
    assert_eq!(http_get(addr, "/healthz").await.as_deref(), Some("ok\n"));
    assert_eq!(
        http_get(addr, "/readyz").await.as_deref(),
        Some("ok\n"),
        "ready: the API server answers"
    );
    assert_eq!(
        http_get(addr, "/readyz/watches").await.as_deref(),
        Some("ok\n"),
        "the watches deliver"
    );

    // `kubectl get databases`: the API server's Table rendering of the example's CRD.
    let request = http::Request::get(format!(
        "/apis/example.kube-fsm.dev/v1/namespaces/{ns}/databases"
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .expect("request");
    let table: serde_json::Value =
        serde_json::from_str(&client.request_text(request).await.expect("table")).expect("json");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("a Table")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Phase", "Ready", "Age"]);
    for row in table["rows"].as_array().expect("rows") {
        assert_eq!(
            (&row["cells"][1], &row["cells"][2]),
            (&json!("Running"), &json!("True"))
        );
    }
}

/// The phases each object was seen in, in order, by name.
type Moves = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

/// Every phase each object of `api`'s kind is seen in, in order, while the test runs.
fn record_moves(api: Api<DynamicObject>) -> (Moves, tokio::task::JoinHandle<()>) {
    let seen: Moves = Arc::default();
    let recording = seen.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default()).applied_objects();
        futures::pin_mut!(stream);
        while let Some(Ok(object)) = stream.next().await {
            let Some(phase) = object.data["status"]["phase"].as_str() else {
                continue;
            };
            let name = object.metadata.name.clone().unwrap_or_default();
            let mut seen = recording.lock().expect("not poisoned");
            let phases = seen.entry(name).or_default();
            if phases.last().map(String::as_str) != Some(phase) {
                phases.push(phase.to_owned());
            }
        }
    });
    (seen, task)
}

/// Two replicas of the two-kind operator (Database and RiskEngine in one process, one Lease):
/// the leader is SIGKILLed while objects of both kinds are on their way, the standby takes both
/// kinds over once the Lease expires, everything converges, and every move any object made is
/// an edge of its machine.
#[tokio::test]
async fn a_killed_leader_of_both_kinds_is_replaced_once_its_lease_expires() {
    use kube_fsm::machine::Description;
    use kube_fsm_examples::database::DatabasePhase;
    use kube_fsm_examples::riskengine::{self, RiskEnginePhase};
    let Some((client, kubeconfig)) = on_control_plane("a_killed_leader_is_replaced").await else {
        return;
    };
    install_operator_crds(&client).await;
    let ns = cluster::namespace(&client, "fsm-kill").await;
    riskengine::apply_allow_list(&client, &ns, "2.0")
        .await
        .expect("the allow-list");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = || async {
        leases
            .get("kube-fsm-examples")
            .await
            .ok()?
            .spec?
            .holder_identity
    };
    let replica = |identity: &'static str| {
        let addr = free_port().to_string();
        let mut command = command(
            "operator",
            &[
                "--namespace",
                &ns,
                "--metrics-addr",
                &addr,
                "--leader-elect",
                "--identity",
                identity,
                "--lease-duration",
                "4",
            ],
        );
        command.env("KUBECONFIG", &kubeconfig);
        command.env("RISKENGINE_PLATFORM_NAMESPACE", &ns);
        command.spawn().expect("operator starts")
    };
    let databases: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    let engine_resource = kube::core::ApiResource::erase::<riskengine::RiskEngine>(&());
    let engines: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &engine_resource);
    let (database_moves, watching_databases) = record_moves(databases.clone());
    let (engine_moves, watching_engines) = record_moves(engines.clone());
    let mut a = replica("a");
    eventually(Duration::from_secs(15), || async {
        (holder().await? == "a").then_some(())
    })
    .await
    .expect("a leads");
    let _b = replica("b");
    let engine = |name: &str| {
        let mut object = DynamicObject::new(name, &engine_resource);
        object.data = json!({ "spec": { "version": "2.0", "timeoutSeconds": 60 } });
        object
    };
    create(&databases, "before").await;
    wait_running(&databases, "before").await;
    // Mid-flight: objects of both kinds created just before the kill.
    for i in 0..5 {
        create(&databases, &format!("db-{i}")).await;
        engines
            .create(&PostParams::default(), &engine(&format!("risk-{i}")))
            .await
            .expect("create a RiskEngine");
    }
    a.start_kill().expect("SIGKILL");
    let killed = Instant::now();
    a.wait().await.expect("reaped");
    eventually(Duration::from_secs(15), || async {
        (holder().await? == "b").then_some(())
    })
    .await
    .expect("b takes over");
    let took = killed.elapsed();
    eprintln!("failover after SIGKILL of the leader: {took:?} (lease duration 4 s)");
    // The standby takes the Lease once its record has not changed for the duration on its own
    // clock; it sees the last renewal up to a retry period (0.8 s for a 4 s Lease, jittered up
    // to 20 %) late, and tries again a retry period later.
    assert!(
        took <= Duration::from_millis(6_000),
        "failover took {took:?}"
    );
    for i in 0..5 {
        wait_running(&databases, &format!("db-{i}")).await;
        wait_phase(&engines, &format!("risk-{i}"), "Active").await;
    }
    watching_databases.abort();
    watching_engines.abort();
    let machines = [
        (Description::of(DatabasePhase::MACHINE), database_moves),
        (Description::of(RiskEnginePhase::MACHINE), engine_moves),
    ];
    for (machine, moves) in machines {
        let moves = moves.lock().expect("not poisoned");
        assert!(moves.len() >= 5, "{}: {moves:?}", machine.kind);
        for (name, phases) in moves.iter() {
            for pair in phases.windows(2) {
                machine
                    .check_move(Some(&pair[0]), &pair[1])
                    .unwrap_or_else(|err| {
                        panic!("{} {name} moved {phases:?}: {err}", machine.kind)
                    });
            }
        }
    }
}

/// A copy of the kubeconfig at `path` whose users act as `user` (impersonated, in
/// `system:masters`), so that the audit log tells the processes using it apart.
fn kubeconfig_as(path: &std::path::Path, user: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(path).expect("read the kubeconfig");
    let mut config: serde_json::Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    for entry in config["users"].as_array_mut().expect("kubeconfig users") {
        entry["user"]["as"] = json!(user);
        entry["user"]["as-groups"] = json!(["system:masters"]);
    }
    let copy = std::env::temp_dir().join(cluster::fresh_name(&format!("kubeconfig-{user}")));
    std::fs::write(&copy, config.to_string()).expect("write the kubeconfig");
    copy
}

/// Sends `signal` (`STOP`, `CONT`) to `child`.
fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// A leader frozen (SIGSTOP) past its Lease while objects of both kinds keep arriving, thawed
/// once the standby leads, with that work queued: from the takeover on, the API server
/// receives no write of any kind from it — status, finalizers, children, Events, its Lease;
/// the audit log says so — and it exits, to be restarted, while the new leader converges
/// everything. `KUBE_FSM_DEPOSED_RUNS=N` repeats it N times (the benchmark variant, see
/// BENCHMARKS.md).
#[tokio::test]
async fn a_frozen_leader_thawed_after_the_takeover_writes_nothing() {
    let test = "a_frozen_leader_writes_nothing";
    let Some((client, kubeconfig)) = on_control_plane(test).await else {
        return;
    };
    // scripts/envtest keeps a cluster's audit log beside its kubeconfig.
    let log = kubeconfig.with_file_name("audit.log");
    install_operator_crds(&client).await;
    let runs: u32 = std::env::var("KUBE_FSM_DEPOSED_RUNS")
        .ok()
        .and_then(|runs| runs.parse().ok())
        .unwrap_or(1);
    for run in 1..=runs {
        let (before, after) = freeze_the_leader(&client, &kubeconfig, &log).await;
        eprintln!(
            "run {run}/{runs}: the deposed leader wrote {before} times before the takeover and 0 \
             times after; the new leader {after} times after"
        );
    }
}

/// One run of [`a_frozen_leader_thawed_after_the_takeover_writes_nothing`]: the writes the
/// old leader made before the takeover, and those of the new one after it.
async fn freeze_the_leader(
    client: &Client,
    kubeconfig: &std::path::Path,
    log: &std::path::Path,
) -> (usize, usize) {
    use kube_fsm_examples::riskengine;
    let ns = cluster::namespace(client, "fsm-frozen").await;
    riskengine::apply_allow_list(client, &ns, "2.0")
        .await
        .expect("the allow-list");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease = || async { leases.get("kube-fsm-examples").await.ok()?.spec };
    let replica = |identity: &str| {
        let addr = free_port().to_string();
        let mut command = command(
            "operator",
            &[
                "--namespace",
                &ns,
                "--metrics-addr",
                &addr,
                "--leader-elect",
                "--identity",
                identity,
                "--lease-duration",
                "4",
            ],
        );
        command.env(
            "KUBECONFIG",
            kubeconfig_as(kubeconfig, &format!("fsm-replica-{identity}")),
        );
        command.env("RISKENGINE_PLATFORM_NAMESPACE", &ns);
        command.spawn().expect("operator starts")
    };
    let databases: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    let engine_resource = kube::core::ApiResource::erase::<riskengine::RiskEngine>(&());
    let engines: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &engine_resource);
    let mut a = replica("a");
    eventually(Duration::from_secs(15), || async {
        (lease().await?.holder_identity? == "a").then_some(())
    })
    .await
    .expect("a leads");
    let _b = replica("b");
    create(&databases, "before").await;
    wait_running(&databases, "before").await;
    // Work keeps arriving, one object of each kind every 100 ms, from before the freeze until
    // after the thaw.
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let arriving = {
        let (databases, engines) = (databases.clone(), engines.clone());
        tokio::spawn(async move {
            let mut made = 0;
            loop {
                tokio::select! {
                    _ = &mut stopped => return made,
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                create(&databases, &format!("db-{made}")).await;
                let mut engine = DynamicObject::new(&format!("risk-{made}"), &engine_resource);
                engine.data = json!({ "spec": { "version": "2.0", "timeoutSeconds": 60 } });
                engines
                    .create(&PostParams::default(), &engine)
                    .await
                    .expect("create a RiskEngine");
                made += 1;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&a, "STOP");
    let takeover = eventually(Duration::from_secs(20), || async {
        let spec = lease().await?;
        (spec.holder_identity? == "b").then_some(spec.acquire_time?.0)
    })
    .await
    .expect("b takes over from the frozen leader");
    // The frozen one's watches have queued the objects that arrived meanwhile.
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&a, "CONT");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop.send(());
    let made = arriving.await.expect("the objects were created");
    let exited = tokio::time::timeout(Duration::from_secs(20), a.wait())
        .await
        .expect("the deposed leader exits")
        .expect("reaped");
    assert!(!exited.success(), "it exits to be restarted: {exited}");
    for i in 0..made {
        wait_running(&databases, &format!("db-{i}")).await;
        wait_phase(&engines, &format!("risk-{i}"), "Active").await;
    }
    // The API server logs a request once it answered it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = kube_fsm_testkit::audit::writes(log, &ns);
    let by = |user: &'static str| writes.iter().filter(move |w| w.user == user);
    let deposed: Vec<_> = by("fsm-replica-a").filter(|w| w.at > takeover).collect();
    assert!(
        deposed.is_empty(),
        "the deposed leader wrote after the takeover at {takeover}: {deposed:#?}"
    );
    let before = by("fsm-replica-a").count();
    let after = by("fsm-replica-b").filter(|w| w.at > takeover).count();
    assert!(
        before > 0 && after > 0 && made > 0,
        "a wrote {before} times while leading, b {after} times after the takeover, {made} objects \
         of each kind arrived: the run shows nothing"
    );
    (before, after)
}

/// The webhook policy both webhook tests serve (only the operator enters Failed), written to a
/// file of `ns`'s name.
fn webhook_policy(ns: &str) -> std::path::PathBuf {
    let policy = std::env::temp_dir().join(format!("{ns}-policy.yaml"));
    std::fs::write(
        &policy,
        "operator:\n  fieldManagers: [kube-fsm]\n  trustFieldManagers: true\nplatform:\n  - onlyOperatorEnters: [Failed]\n",
    )
    .expect("policy file");
    policy
}

/// The `database` example in `ns`, metrics at `addr`, serving and registering its webhook
/// (`policy`) for `ns` alone.
fn webhook_operator(ns: &str, addr: SocketAddr, policy: &std::path::Path) -> Command {
    let label = format!("{}={ns}", kube_fsm_testkit::admission::SCOPE_LABEL);
    let policy_flag = format!("Database={}", policy.to_string_lossy());
    command(
        "stand_in",
        &[
            "--namespace",
            ns,
            "--metrics-addr",
            &addr.to_string(),
            "--webhook-addr",
            "127.0.0.1:0",
            "--webhook-register",
            "bound",
            "--webhook-namespace-label",
            &label,
            "--webhook-policy",
            &policy_flag,
        ],
    )
}

/// Held by each test that registers the example's webhook: the registration has one name.
static WEBHOOK_REGISTRATION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_operator_serves_its_admission_webhook_and_reports_it_in_healthz() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{DeleteParams, Patch, PatchParams};
    let Some(client) = cluster::client("the_operator_serves_its_admission_webhook").await else {
        return;
    };
    let _registration = WEBHOOK_REGISTRATION.lock().await;
    install_crd(&client).await;
    let ns = kube_fsm_testkit::admission::namespace(&client, "fsm-webhook", &[]).await;
    let policy = webhook_policy(&ns);
    let addr = free_port();
    let _operator = webhook_operator(&ns, addr, &policy)
        .spawn()
        .expect("operator starts");
    eventually(Duration::from_secs(30), || http_get(addr, "/healthz"))
        .await
        .expect("/healthz answers ok once the webhook serves");

    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    create(&api, "a").await;
    wait_running(&api, "a").await;
    let patch = |phase: &str| Patch::Merge(json!({ "status": { "phase": phase } }));
    let by_hand = PatchParams {
        dry_run: true,
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let refused = |result: Result<DynamicObject, kube::Error>| match result {
        Err(kube::Error::Api(status)) if status.code == 422 => Some(status.message),
        _ => None,
    };
    // A move the machine allows that only the webhook's policy refuses: once the API server
    // calls the operator's webhook.
    let message = eventually(Duration::from_secs(30), || async {
        refused(api.patch_status("a", &by_hand, &patch("Failed")).await)
    })
    .await
    .expect("the API server calls the operator's webhook");
    assert!(
        message.contains("only the operator (field manager kube-fsm) may move an object to Failed"),
        "{message}"
    );
    // A move that is no edge: refused by the CRD's CEL rule first where the server runs it
    // (1.25 on), else by the webhook, in the same words.
    let message = refused(api.patch_status("a", &by_hand, &patch("Pending")).await)
        .expect("no such transition");
    let refuser = if cluster::enforces_cel(&client).await {
        "Database.example.kube-fsm.dev \"a\" is invalid: status.phase: Forbidden: "
    } else {
        "admission webhook \"phase.databases.example.kube-fsm.dev\" denied the request: "
    };
    assert_eq!(
        message,
        format!(
            "{refuser}cannot move from Running to Pending: the Database state machine has no such transition"
        )
    );
    let webhook_refusals = if cluster::enforces_cel(&client).await {
        1.0
    } else {
        2.0
    };
    let metrics = http_get(addr, "/metrics").await.expect("/metrics");
    let denied = "kube_fsm_admission_denied_total{webhook=\"/validate\"}";
    assert!(
        sample(&metrics, denied).is_some_and(|v| v >= webhook_refusals),
        "{denied}\n{metrics}"
    );

    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("databases.example.kube-fsm.dev", &DeleteParams::default())
        .await
        .expect("unregister");
    let _ = std::fs::remove_file(policy);
}

/// A copy of the tests' kubeconfig whose server is `server` (a proxy in front of the API
/// server, on the loopback address its certificate names).
fn kubeconfig_through(server: SocketAddr) -> std::path::PathBuf {
    let path = std::env::var_os("KUBECONFIG").expect("KUBECONFIG names the test cluster");
    let text = std::fs::read_to_string(&path).expect("read the kubeconfig");
    let mut config: serde_json::Value = serde_saphyr::from_str(&text).expect("kubeconfig YAML");
    for entry in config["clusters"]
        .as_array_mut()
        .expect("kubeconfig clusters")
    {
        entry["cluster"]["server"] = json!(format!("https://{server}"));
    }
    let copy = std::env::temp_dir().join(cluster::fresh_name("kubeconfig-proxied"));
    std::fs::write(&copy, config.to_string()).expect("write the kubeconfig");
    copy
}

/// The operator's Pod serving the admission webhook (`failurePolicy: Fail`) is cut off from
/// the API server for 60 s: its readiness probe (`/readyz`, which the webhook's Service
/// follows) stays ready all along — it is the webhook's readiness, not the watches' — while
/// `/readyz/watches` says the watches fail and why; the API server keeps calling the webhook,
/// which keeps reviewing other clients' writes (an admitted create, a refused move); and once
/// the connection is back, the operator converges what was created meanwhile.
#[tokio::test]
async fn a_webhook_cut_off_from_the_api_server_stays_ready_and_keeps_reviewing() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{DeleteParams, Patch, PatchParams};
    let test = "a_webhook_cut_off_from_the_api_server_stays_ready";
    let Some(client) = cluster::client(test).await else {
        return;
    };
    let _registration = WEBHOOK_REGISTRATION.lock().await;
    install_crd(&client).await;
    let ns = kube_fsm_testkit::admission::namespace(&client, "fsm-webhook-cut", &[]).await;
    let policy = webhook_policy(&ns);
    let config = kube::Config::infer().await.expect("kubeconfig");
    let upstream: SocketAddr = config
        .cluster_url
        .authority()
        .expect("server address")
        .as_str()
        .parse()
        .expect("a loopback host:port");
    let proxy = kube_fsm_testkit::proxy::Proxy::start(upstream).await;
    let addr = free_port();
    let mut command = webhook_operator(&ns, addr, &policy);
    command.env("KUBECONFIG", kubeconfig_through(proxy.addr()));
    let _operator = command.spawn().expect("operator starts");
    eventually(Duration::from_secs(30), || http_get(addr, "/healthz"))
        .await
        .expect("/healthz answers ok once the webhook serves");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    create(&api, "a").await;
    wait_running(&api, "a").await;
    let by_hand = PatchParams {
        dry_run: true,
        field_manager: Some("kubectl-edit".into()),
        ..PatchParams::default()
    };
    let failed = Patch::Merge(json!({ "status": { "phase": "Failed" } }));
    let reviewed = || async {
        match api.patch_status("a", &by_hand, &failed).await {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(status.message),
            _ => None,
        }
    };
    let message = eventually(Duration::from_secs(30), reviewed)
        .await
        .expect("the API server calls the operator's webhook");
    assert!(message.contains("only the operator"), "{message}");
    eventually(Duration::from_secs(10), || {
        http_get(addr, "/readyz/watches")
    })
    .await
    .expect("the watches deliver before the cut");

    proxy.cut();
    let cut = std::time::Instant::now();
    let mut created = 0;
    let mut watches_down = None;
    while cut.elapsed() < Duration::from_secs(60) {
        let ready = http_answer(addr, "/readyz").await;
        assert_eq!(
            ready,
            Some((200, "ok\n".to_owned())),
            "{:?} into the cut, the webhook's Pod is no longer ready",
            cut.elapsed()
        );
        if let Some((503, why)) = http_answer(addr, "/readyz/watches").await {
            watches_down.get_or_insert(why);
        }
        // Others' writes are still reviewed: a create admitted, a move refused.
        let name = format!("during-{created}");
        create(&api, &name).await;
        created += 1;
        let message = reviewed().await.unwrap_or_else(|| {
            panic!(
                "{:?} into the cut, the webhook no longer reviews the move",
                cut.elapsed()
            )
        });
        assert!(message.contains("only the operator"), "{message}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let why = watches_down.expect("/readyz/watches says the watches fail during the cut");
    assert!(why.contains("Database"), "{why}");
    eprintln!(
        "during the 60 s cut: /readyz ok throughout, {created} creates admitted, /readyz/watches: {why}"
    );

    proxy.heal();
    for i in 0..created {
        wait_running(&api, &format!("during-{i}")).await;
    }
    eventually(Duration::from_secs(30), || {
        http_get(addr, "/readyz/watches")
    })
    .await
    .expect("the watches deliver again");
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete("databases.example.kube-fsm.dev", &DeleteParams::default())
        .await
        .expect("unregister");
    let _ = std::fs::remove_file(policy);
}

/// SIGTERM to the operator as a Pod runs it — leader election, the webhook registered by
/// `--webhook-register` — while objects are on their way: it exits at once with 0, its Lease is
/// released (no holder) and its registration is gone, so neither a successor nor the API
/// server waits on what it leaves behind.
#[tokio::test]
async fn a_sigterm_releases_the_lease_and_removes_the_webhook_registration() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let test = "a_sigterm_releases_the_lease_and_removes_the_webhook_registration";
    let Some(client) = cluster::client(test).await else {
        return;
    };
    let _registration = WEBHOOK_REGISTRATION.lock().await;
    install_crd(&client).await;
    let ns = kube_fsm_testkit::admission::namespace(&client, "fsm-sigterm", &[]).await;
    let addr = free_port();
    let label = format!("{}={ns}", kube_fsm_testkit::admission::SCOPE_LABEL);
    let mut operator = operator(
        "stand_in",
        &[
            "--namespace",
            &ns,
            "--metrics-addr",
            &addr.to_string(),
            "--leader-elect",
            "--identity",
            "stopping",
            "--lease-namespace",
            &ns,
            "--lease-duration",
            "15",
            "--webhook-addr",
            "127.0.0.1:0",
            "--webhook-register",
            "bound",
            "--webhook-namespace-label",
            &label,
            "--drain-timeout",
            "2",
        ],
    );
    let registrations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let registration = "databases.example.kube-fsm.dev";
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = || async {
        leases
            .get_opt("kube-fsm-examples")
            .await
            .expect("get lease")
            .and_then(|lease| lease.spec?.holder_identity)
    };
    eventually(Duration::from_secs(30), || async {
        (holder().await.as_deref() == Some("stopping")).then_some(())
    })
    .await
    .expect("the operator leads");
    eventually(Duration::from_secs(30), || async {
        registrations.get_opt(registration).await.ok().flatten()
    })
    .await
    .expect("the webhook is registered");
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &cluster::example_databases());
    create(&api, "first").await;
    wait_running(&api, "first").await;
    for i in 0..20 {
        create(&api, &format!("queued-{i}")).await;
    }

    signal(&operator, "TERM");
    let signalled = std::time::Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(15), operator.wait())
        .await
        .expect("the operator exits within the drain and the release bounds")
        .expect("wait");
    let took = signalled.elapsed();
    assert!(exit.success(), "exit status {exit}");
    assert_eq!(holder().await, None, "the Lease is released");
    assert!(
        registrations
            .get_opt(registration)
            .await
            .expect("get registration")
            .is_none(),
        "the webhook registration is removed"
    );
    eprintln!("SIGTERM: exited with 0 after {took:?}, Lease released, registration removed");
}

/// `check` against the cluster: each kind's CRD is installed and every stored object is in a
/// phase its machine knows — one sentence per kind, exit 0.
#[tokio::test]
async fn check_reports_each_kind_of_the_operator() {
    let Some(client) = cluster::client("check_reports_each_kind").await else {
        return;
    };
    install_operator_crds(&client).await;
    let out = Command::new(example("operator"))
        .arg("check")
        .output()
        .await
        .expect("check runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for kind in ["Database", "RiskEngine", "Migration"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&format!("{kind}: the CRD "))
                    && l.contains("every one in a phase this machine knows")),
            "{stdout}"
        );
    }
}
