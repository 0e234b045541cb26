//! Recovery after an outage: the operator is cut off from the API server by a loopback proxy
//! that stops answering (connections accepted, never answered) for `--cut` seconds while
//! `--objects` new objects arrive; then the proxy heals and the run measures the time until
//! every object is Running. Repeated `--runs` times per cut-off.
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin outage -- [--cuts 10,60,100] [--runs 5] [--objects 300]
//! ```

use std::time::{Duration, Instant};

use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use kube_fsm::Operator;
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::proxy::Proxy;
use kube_fsm_testkit::resources::{Database, sample};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

async fn running(api: &Api<Database>) -> usize {
    api.list(&ListParams::default())
        .await
        .map(|list| {
            list.items
                .iter()
                .filter(|db| {
                    db.status
                        .as_ref()
                        .and_then(|s| s.machine.phase.as_ref())
                        .is_some_and(|p| p.as_str() == "Running")
                })
                .count()
        })
        .unwrap_or(0)
}

/// One run: returns the time from healing to all Running.
async fn run(client: &Client, cut: Duration, objects: usize) -> Duration {
    let ns = kube_fsm_testkit::cluster::namespace(client, "outage").await;
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (proxy, cut_off) = Proxy::in_front_of(config).await;
    let operator = Operator::<Database, _>::new(cut_off, Databases)
        .namespace(&ns)
        .shutdown_on(std::future::pending());
    let task = tokio::spawn(operator.run());
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    // A first object shows the operator is up before the cut.
    api.create(&PostParams::default(), &sample("first"))
        .await
        .expect("create");
    while running(&api).await < 1 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.cut();
    let cut_at = Instant::now();
    for i in 0..objects {
        // Arriving across the outage.
        let due = cut.mul_f64(i as f64 / objects as f64);
        tokio::time::sleep(due.saturating_sub(cut_at.elapsed())).await;
        api.create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create");
    }
    tokio::time::sleep(cut.saturating_sub(cut_at.elapsed())).await;
    proxy.heal();
    let healed = Instant::now();
    while running(&api).await < objects + 1 {
        if healed.elapsed() > Duration::from_secs(300) {
            eprintln!("outage: not converged 300 s after healing");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = healed.elapsed();
    task.abort();
    took
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cuts: Vec<u64> = arg(&args, "--cuts")
        .unwrap_or_else(|| "10,60,100".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let runs: usize = arg(&args, "--runs")
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let objects: usize = arg(&args, "--objects")
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let client = Client::try_default()
        .await
        .expect("a kubeconfig (scripts/envtest env)");
    kube_fsm_testkit::cluster::install_crds(&client).await;
    println!("| cut-off s | runs: time from healing to all {objects} Running, s | worst s |");
    println!("|---|---|---|");
    for cut in cuts {
        let mut times = Vec::new();
        for _ in 0..runs {
            times.push(
                run(&client, Duration::from_secs(cut), objects)
                    .await
                    .as_secs_f64(),
            );
        }
        let worst = times.iter().copied().fold(0.0, f64::max);
        let list: Vec<String> = times.iter().map(|t| format!("{t:.1}")).collect();
        println!("| {cut} | {} | {worst:.1} |", list.join(", "));
    }
}
