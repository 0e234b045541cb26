//! The example Database on real workloads, on a control plane of its own (kube-fsm-envtest:
//! the API server, the controllers, the scheduler and kwok's simulated nodes): every Database
//! runs a StatefulSet whose pods the nodes run.
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin workload -- [--objects 1000] [--replicas 1]
//!     [--nodes 10] [--faults 0] [--converge-limit 600]
//! ```
//!
//! Without faults it is a benchmark: the time from creating the Databases (all at once) to
//! every one Running, the operator's requests per object (counted under its client), and the
//! process's CPU time and peak RSS (the operator runs in this process, beside a watch of the
//! Databases; the control plane's processes are not counted).
//!
//! With `--faults SECS` it is a chaos run: for that long, every 2–5 s, a node is drained and
//! taken away and a new one joins, or a replica's pod fails (kwok's failing stage, by its
//! label), or a replica's pod is deleted. An independent watch judges every phase the operator
//! writes. Then it waits until every Database is Running, and checks what their conditions
//! claim against their StatefulSets. It exits non-zero when an operator move was not an edge,
//! when a Database did not run again, when a Running Database's StatefulSet does not have every
//! replica ready, or when no Database was ever Degraded (the faults did not bite).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kube_fsm_benches::chaos::checker::Observer;
use kube_fsm_benches::chaos::faults::{FaultLayer, FaultPlan};
use kube_fsm_envtest::{TestCluster, nodes};
use kube_fsm_examples::database::{self, Database, DatabaseSpec, workload::DATABASE_LABEL};
use kube_fsm_testkit::observer::Phases;
use kube_fsm_testkit::operator::Running;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Parser)]
#[command(name = "workload")]
struct Args {
    /// How many Databases.
    #[arg(long, default_value_t = 30)]
    objects: usize,
    /// Replicas of each (one per node).
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// Simulated nodes.
    #[arg(long, default_value_t = 4)]
    nodes: u32,
    /// Seconds of node and pod failures (0: the benchmark).
    #[arg(long, default_value_t = 0)]
    faults: u64,
    /// Seconds every Database has to reach Running (after the faults).
    #[arg(long, default_value_t = 600)]
    converge_limit: u64,
}

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the command).
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn phase(db: &Database) -> Option<String> {
    db.status
        .as_ref()?
        .machine
        .phase
        .as_ref()
        .map(ToString::to_string)
}

/// Waits until every Database of `api` is Running, or an error naming where they stand.
async fn all_running(api: &Api<Database>, objects: usize, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut phases: BTreeMap<String, usize> = BTreeMap::new();
        for db in &list.items {
            *phases
                .entry(phase(db).unwrap_or_else(|| "(none)".into()))
                .or_default() += 1;
        }
        if phases.get("Running").copied() == Some(objects) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!(
                "not every Database Running after {limit:?}: {phases:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One fault: a node drained and replaced, a pod failed through kwok, or a pod deleted.
async fn fault(client: &Client, ns: &str, round: u64) -> Result<String, BoxError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running: Vec<Pod> = pods
        .list(&ListParams::default().labels(DATABASE_LABEL))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .collect();
    if running.is_empty() {
        return Ok("no pod to fail yet".into());
    }
    let pod = &running[fastrand::usize(..running.len())];
    match fastrand::u8(..3) {
        0 => {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            nodes::drain(client, &node).await?;
            let joining = format!("kwok-node-r{round}");
            nodes::add(client, &joining).await?;
            Ok(format!(
                "node {node} drained and taken away; {joining} joined"
            ))
        }
        1 => {
            kube_fsm_envtest::pods::fail(client, ns, &pod.name_any()).await?;
            Ok(format!("pod {} fails (kwok's stage)", pod.name_any()))
        }
        _ => {
            pods.delete(&pod.name_any(), &DeleteParams::default())
                .await?;
            Ok(format!("pod {} deleted", pod.name_any()))
        }
    }
}

async fn run(args: Args) -> Result<bool, BoxError> {
    // The control plane's programs from where `scripts/test` names them (its
    // KUBEBUILDER_ASSETS is the 1.20 server's, which has none), else as kube-fsm-envtest finds them.
    let mut builder = TestCluster::builder().nodes(args.nodes);
    if let Some(assets) = std::env::var_os("KUBE_FSM_CONTROL_PLANE_ASSETS") {
        builder = builder.assets(assets);
    }
    let cluster = builder.try_start().await?;
    let client = cluster.client();
    cluster.install_crd(database::crd()).await?;
    let ns = cluster.namespace("workload").await?;
    let plan = Arc::new(FaultPlan::chaos());
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let counted = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&FaultLayer(plan.clone()))
        .build();
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let observer = Arc::new(Observer::default());
    let phases = Phases::watch(api.clone());
    let watching = tokio::spawn(observer.clone().run(
        api.clone(),
        watcher::Config::default(),
        "kube-fsm".to_owned(),
    ));
    let (cpu0, started) = (cpu_seconds(), Instant::now());
    let operator = Running::spawn(database::operator(counted, Some(&ns)));
    futures::stream::iter(0..args.objects)
        .map(|i| {
            let api = api.clone();
            let db = Database::new(
                &format!("db-{i:04}"),
                DatabaseSpec {
                    version: "16".into(),
                    replicas: args.replicas,
                },
            );
            async move { api.create(&PostParams::default(), &db).await.map(drop) }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<(), _>>()?;
    let limit = Duration::from_secs(args.converge_limit);
    let mut ok = true;
    if args.faults == 0 {
        all_running(&api, args.objects, limit).await?;
        let took = started.elapsed().as_secs_f64();
        let requests = plan.requests.load(Ordering::Relaxed);
        println!(
            "{} Databases of {} replica(s) on {} nodes: all Running {took:.1} s after their creation; \
             the operator sent {requests} requests ({:.2} per object); this process: {:.1} s CPU, \
             peak RSS {:.0} MiB",
            args.objects,
            args.replicas,
            args.nodes,
            requests as f64 / args.objects as f64,
            cpu_seconds() - cpu0,
            peak_rss_mib()
        );
    } else {
        all_running(&api, args.objects, limit).await?;
        let until = Instant::now() + Duration::from_secs(args.faults);
        let mut round = 0;
        while Instant::now() < until {
            round += 1;
            match fault(&client, &ns, round).await {
                Ok(what) => eprintln!("fault {round}: {what}"),
                Err(err) => eprintln!("fault {round} failed: {err}"),
            }
            tokio::time::sleep(Duration::from_millis(2_000 + fastrand::u64(..3_000))).await;
        }
        let converged = all_running(&api, args.objects, limit).await;
        let findings = observer.findings();
        let degraded = phases
            .seen()
            .values()
            .filter(|seen| seen.iter().any(|p| p == "Degraded"))
            .count();
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
        let mut lying = 0;
        for db in api.list(&ListParams::default()).await?.items {
            let set = sets.get(&db.name_any()).await?;
            let ready = set.status.and_then(|s| s.ready_replicas).unwrap_or(0);
            if phase(&db).as_deref() == Some("Running") && ready != args.replicas as i32 {
                lying += 1;
            }
        }
        let nodes_now = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .len();
        println!(
            "workload chaos: {round} faults over {} s; {} operator moves, {} not an edge; \
             {degraded} Database(s) were Degraded and back; converged: {}; Running with a \
             replica not ready: {lying}; {} nodes at the end",
            args.faults,
            findings.operator_moves,
            findings.illegal_operator_moves,
            converged
                .as_ref()
                .map_or_else(Clone::clone, |()| "yes".into()),
            nodes_now,
        );
        ok = findings.illegal_operator_moves == 0 && converged.is_ok() && lying == 0;
        if degraded == 0 {
            println!("no Database was ever Degraded: the faults did not bite");
            ok = false;
        }
        for example in findings.examples {
            println!("  {example}");
        }
    }
    operator.stop().await;
    watching.abort();
    Ok(ok)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}
