//! Per-object memory under churn: objects are created, fail their handler (so the engine
//! remembers failure counts, versions and the stale-cache guard for them), and are deleted
//! without a finalizer (so kube's `Controller` never reconciles their deletion), in batches,
//! for `--cycles` objects in all. Prints, after each tenth of the cycles, how many objects the
//! engine remembers (`kube_fsm_remembered_objects`: keyed by UID and pruned against the cache,
//! it stays bounded) and the process's RSS (which also holds kube's Event recorder cache: one
//! entry per object and reason, kept 6 minutes).
//!
//! ```text
//! cargo run --release -p kube-fsm-benches --bin memory-churn -- [--cycles 10000] [--batch 100]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use kube_fsm::{Next, Operator, Step};
use kube_fsm_testkit::resources::*;

#[derive(Clone, Default)]
struct Failing {
    failures: Arc<AtomicU64>,
}

#[derive(Debug, thiserror::Error)]
#[error("always fails")]
struct Fails;

impl GuardedHandler for Failing {
    type Error = Fails;

    async fn on_pending(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedPendingNext, Fails> {
        self.failures.fetch_add(1, Ordering::Relaxed);
        Err(Fails)
    }

    async fn on_active(
        &self,
        _: &Guarded,
        _: &mut Step<Guarded>,
    ) -> Result<GuardedActiveNext, Fails> {
        Ok(Next::Stay)
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn number(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cycles = number(&args, "--cycles", 10_000);
    let batch = number(&args, "--batch", 100).max(1);
    let client = Client::try_default()
        .await
        .expect("a kubeconfig (scripts/envtest env)");
    kube_fsm_testkit::cluster::install_crds(&client).await;
    let ns = kube_fsm_testkit::cluster::namespace(&client, "churn").await;
    let api: Api<Guarded> = Api::namespaced(client.clone(), &ns);
    let handler = Failing::default();
    let recorded = kube_fsm_testkit::metrics::Recorded::default();
    let remembered = || recorded.sum("kube_fsm_remembered_objects", &[("machine", "Guarded")]);
    let operator = Operator::<Guarded, _>::new(client.clone(), handler.clone())
        .namespace(&ns)
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .metrics(recorded.metrics())
        .shutdown_on(std::future::pending());
    let running = tokio::spawn(operator.run());
    let started = Instant::now();
    println!("| cycles | objects remembered | RSS MiB | handler failures |\n|---|---|---|---|");
    println!("| 0 | 0 | {:.1} | 0 |", rss_kib() as f64 / 1024.0);
    let mut done = 0;
    while done < cycles {
        let names: Vec<String> = (done..(done + batch).min(cycles))
            .map(|i| format!("g-{i}"))
            .collect();
        let before = handler.failures.load(Ordering::Relaxed);
        futures::future::join_all(names.iter().map(|name| {
            let api = api.clone();
            let object = Guarded::new(name, GuardedSpec {});
            async move { api.create(&PostParams::default(), &object).await.map(drop) }
        }))
        .await;
        // Each object fails at least twice before it goes.
        let want = before + 2 * names.len() as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while handler.failures.load(Ordering::Relaxed) < want && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        futures::future::join_all(names.iter().map(|name| {
            let api = api.clone();
            async move { api.delete(name, &DeleteParams::default()).await.map(drop) }
        }))
        .await;
        done += names.len();
        if done % (cycles / 10).max(batch) < batch || done == cycles {
            println!(
                "| {done} | {} | {:.1} | {} |",
                remembered(),
                rss_kib() as f64 / 1024.0,
                handler.failures.load(Ordering::Relaxed)
            );
        }
    }
    println!(
        "\n{cycles} create/fail/delete cycles in {:.0?}",
        started.elapsed()
    );
    running.abort();
}
