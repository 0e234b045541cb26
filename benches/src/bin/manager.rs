//! One process running both example machines (`operator`: the Database and the RiskEngine in
//! one Manager) against the same two machines as two processes (`database` and `riskengine`),
//! doing the same work side by side on one API server: N Databases and N RiskEngines created
//! in a burst, until every one has converged (Running, Active), then idle for a moment.
//! Measured per round and mode: converge time, the operators' CPU seconds and peak RSS (summed
//! over their processes, from `/proc`), and what the API server answered them, from its audit
//! log: the operators' lists (each watch starts with one; the harness's own polls taken off),
//! writes (Events included; the harness's creates not), and the API server's own CPU seconds
//! (`KUBE_FSM_ENVTEST_DIR` locates its pid).
//!
//! ```text
//! cargo build --release -p kube-fsm-examples --examples
//! cargo build --release -p kube-fsm-benches --bin manager
//! target/release/manager --objects 200 --rounds 2
//! ```

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use kube_fsm_benches::example::{
    BoxError, apiserver_pid, free_port, http_get, process_stats, sibling,
};
use kube_fsm_examples::riskengine::{self, RiskEngine, RiskEnginePhase, RiskEngineSpec};
use kube_fsm_examples::stand_in::{Database, DatabasePhase, DatabaseSpec};
use kube_fsm_testkit::{audit, cluster};
use tokio::process::{Child, Command};

/// One process of both kinds against two of one kind each.
#[derive(Debug, Parser)]
#[command(name = "manager")]
struct Args {
    /// Objects of each kind.
    #[arg(long, default_value_t = 200)]
    objects: usize,
    /// Rounds of both modes, alternating.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

/// How the machines run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `operator`: both machines in one process.
    One,
    /// `database` and `riskengine`: one process each.
    Two,
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    mode: Mode,
    converge: f64,
    cpu: f64,
    rss: u64,
    lists: usize,
    writes: usize,
    apiserver_cpu: Option<f64>,
}

/// A release example beside this binary (`target/release/examples/NAME`).
fn example(name: &str) -> Result<PathBuf, BoxError> {
    sibling(&format!("examples/{name}"))
}

fn apiserver_cpu() -> Option<f64> {
    apiserver_pid().and_then(process_stats).map(|(cpu, _)| cpu)
}

/// `NAME run --namespace NS`, its endpoint on a free port, ready; killed when dropped.
async fn start(name: &str, ns: &str) -> Result<Child, BoxError> {
    let addr = free_port()?;
    let mut child = Command::new(example(name)?)
        .args([
            "run",
            "--namespace",
            ns,
            "--metrics-addr",
            &addr.to_string(),
        ])
        .env("RISKENGINE_PLATFORM_NAMESPACE", ns)
        .env("KUBE_FSM_LOG_LEVEL", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(addr, "/readyz").await.is_err() {
        if let Some(status) = child.try_wait()? {
            return Err(format!("{name} exited at once ({status})").into());
        }
        if Instant::now() > deadline {
            return Err(format!("{name} is not ready after 30 s").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(child)
}

async fn converged(client: &Client, ns: &str) -> Result<usize, BoxError> {
    let databases: Api<Database> = Api::namespaced(client.clone(), ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), ns);
    let running = (databases.list(&ListParams::default()).await?.items.iter())
        .filter(|d| {
            d.status.as_ref().and_then(|s| s.machine.phase()) == Some(DatabasePhase::Running)
        })
        .count();
    let active = (engines.list(&ListParams::default()).await?.items.iter())
        .filter(|e| {
            e.status.as_ref().and_then(|s| s.machine.phase()) == Some(RiskEnginePhase::Active)
        })
        .count();
    Ok(running + active)
}

async fn run(
    client: &Client,
    log: &std::path::Path,
    mode: Mode,
    n: usize,
) -> Result<Run, BoxError> {
    let ns = cluster::namespace(client, "fsm-bench-manager").await;
    riskengine::apply_allow_list(client, &ns, "2.0").await?;
    let names: &[&str] = match mode {
        Mode::One => &["operator"],
        Mode::Two => &["database", "riskengine"],
    };
    let mut children = Vec::new();
    for name in names {
        children.push(start(name, &ns).await?);
    }
    let before = apiserver_cpu();
    let started = Instant::now();
    let databases: Api<Database> = Api::namespaced(client.clone(), &ns);
    let engines: Api<RiskEngine> = Api::namespaced(client.clone(), &ns);
    for i in 0..n {
        let spec = DatabaseSpec {
            version: "16".into(),
            replicas: 1,
        };
        databases
            .create(
                &PostParams::default(),
                &Database::new(&format!("db-{i}"), spec),
            )
            .await?;
        let spec = RiskEngineSpec {
            version: "2.0".into(),
            timeout_seconds: 60,
            parameters: Default::default(),
        };
        engines
            .create(
                &PostParams::default(),
                &RiskEngine::new(&format!("risk-{i}"), spec),
            )
            .await?;
    }
    // Each poll lists both kinds once: taken off the lists counted below.
    let mut polls = 1;
    while converged(client, &ns).await? < 2 * n {
        polls += 1;
        if started.elapsed() > Duration::from_secs(600) {
            return Err(format!("{mode:?}: not converged after 600 s").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let converge = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (mut cpu, mut rss) = (0.0, 0);
    for child in &children {
        let (c, r) = child.id().and_then(process_stats).ok_or("no /proc stats")?;
        cpu += c;
        rss += r;
    }
    let apiserver_cpu = apiserver_cpu()
        .zip(before)
        .map(|(after, before)| after - before);
    drop(children);
    let writes = audit::requests(log, &ns)
        .iter()
        .filter(|r| {
            !(r.resource == "databases" || r.resource == "riskengines") || r.verb != "create"
        })
        .filter(|r| r.resource != "configmaps" || r.name != riskengine::ALLOW_LIST)
        .count();
    let lists = audit::lists(log, &ns)
        .iter()
        .filter(|r| r.user != "system:apiserver")
        .count()
        .saturating_sub(2 * polls);
    Ok(Run {
        mode,
        converge,
        cpu,
        rss,
        lists,
        writes,
        apiserver_cpu,
    })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let client = Client::try_default().await?;
    let log = audit::log("manager bench").ok_or("KUBE_FSM_AUDIT_LOG is unset")?;
    cluster::install_crd(&client, kube_fsm_examples::stand_in::crd()).await;
    cluster::install_crd(&client, riskengine::crd()).await;
    let mut runs = Vec::new();
    for _ in 0..args.rounds {
        for mode in [Mode::One, Mode::Two] {
            let run = run(&client, &log, mode, args.objects).await?;
            eprintln!("{run:?}");
            runs.push(run);
        }
    }
    println!(
        "| mode | objects | converge s | CPU s | peak RSS MiB | lists | writes | API-server CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &runs {
        println!(
            "| {} | {}+{} | {:.2} | {:.2} | {:.1} | {} | {} | {} |",
            match r.mode {
                Mode::One => "one process (operator)",
                Mode::Two => "two processes (database, riskengine)",
            },
            args.objects,
            args.objects,
            r.converge,
            r.cpu,
            r.rss as f64 / (1024.0 * 1024.0),
            r.lists,
            r.writes,
            r.apiserver_cpu.map_or("–".into(), |c| format!("{c:.1}")),
        );
    }
    for pair in runs.chunks(2) {
        if let [one, two] = pair {
            println!(
                "one/two: converge {:.2}×, CPU {:.2}×, RSS {:.2}×, lists {:.2}×, writes {:.2}×{}",
                one.converge / two.converge,
                one.cpu / two.cpu,
                one.rss as f64 / two.rss as f64,
                one.lists as f64 / two.lists as f64,
                one.writes as f64 / two.writes as f64,
                match (one.apiserver_cpu, two.apiserver_cpu) {
                    (Some(a), Some(b)) => format!(", API-server CPU {:.2}×", a / b),
                    _ => String::new(),
                },
            );
        }
    }
    Ok(())
}
