//! The Database operator sharded: run several replicas with the same `--shards N`; they split
//! the objects into N shards by Leases (`kube-fsm-examples-shard-0` …), and each reconciles and
//! watches only the shards it holds, rebalancing as replicas come and go. An object's shard
//! is a function of its UID (or, with `--by-namespace`, of its namespace: a tenant together);
//! its children carry the same shard label.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example sharded -- --shards 12 --identity replica-a
//! cargo run -p kube-fsm-examples --example sharded -- --shards 12 --identity replica-b
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use kube_fsm::replicas::{ShardKey, Sharding};
use kube_fsm_examples::BoxError;
use kube_fsm_examples::database;
use prometheus_client::registry::Registry;

/// One replica of the sharded Database operator.
#[derive(Debug, Parser)]
#[command(name = "sharded")]
struct Args {
    /// How many shards the objects are split into (the same on every replica).
    #[arg(long, default_value_t = 12)]
    shards: u32,
    /// An object's shard is a function of its namespace, not its UID.
    #[arg(long)]
    by_namespace: bool,
    /// This replica's identity in the Leases (default: host name and a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// Where the Leases are.
    #[arg(long, default_value = "default")]
    lease_namespace: String,
    /// Watch this namespace only (default: all).
    #[arg(long)]
    namespace: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz (the shards held are in /metrics).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
}

async fn run(args: Args) -> Result<ExitCode, BoxError> {
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let mut sharding = Sharding::new("kube-fsm-examples", &args.lease_namespace, args.shards).key(
        if args.by_namespace {
            ShardKey::Namespace
        } else {
            ShardKey::Uid
        },
    );
    if let Some(identity) = args.identity {
        sharding = sharding.identity(identity);
    }
    tracing::info!(
        identity = sharding.holder_identity(),
        shards = args.shards,
        "joining"
    );
    let operator = database::operator(client, args.namespace.as_deref())
        .metrics(&metrics)
        .replicas(sharding);
    let (_, _server) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .serve(args.metrics_addr)
        .await?;
    operator.run().await;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    kube_fsm_examples::init_logging("info");
    run(args).await.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
