//! The Database example operator with the knobs the benchmarks turn (`scale`, `api-economy`
//! run it as a process of their own): `kube-fsm-examples`' machine and handlers, plus a
//! handler latency, a field manager per replica, the Events recorded, the concurrency,
//! leader election or shards. Users copy `examples/examples/*.rs`, not this.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use kube_fsm::Stopped;
use kube_fsm::engine::RecordedEvents;
use kube_fsm::replicas::{LeaderElection, ShardKey, Sharding};
use kube_fsm_examples::BoxError;
use kube_fsm_examples::stand_in::{self, Handlers};
use prometheus_client::registry::Registry;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum EventsArg {
    All,
    Warnings,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ShardKeyArg {
    Uid,
    Namespace,
}

/// The example operator, tuned for a benchmark.
#[derive(Debug, Parser)]
#[command(name = "example-operator")]
struct Args {
    /// Watch this namespace only.
    #[arg(long)]
    namespace: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Which of the engine's Events to record.
    #[arg(long, value_enum, default_value = "all")]
    events: EventsArg,
    /// Reconciles at once (0: unbounded).
    #[arg(long, default_value_t = kube_fsm::operator::DEFAULT_CONCURRENCY)]
    concurrency: u16,
    /// The Pending and Provisioning handlers first wait this many milliseconds, as on an
    /// external system.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    handler_latency: u64,
    /// Only the replica holding the Lease kube-fsm-examples reconciles.
    #[arg(long, conflicts_with = "shards")]
    leader_elect: bool,
    /// Replicas split the objects into N shards (Leases kube-fsm-examples-shard-I).
    #[arg(long, value_name = "N", default_value_t = 0)]
    shards: u32,
    /// What an object's shard is a function of.
    #[arg(long, value_enum, default_value = "uid")]
    shard_key: ShardKeyArg,
    /// This replica's identity in the Leases (default: host name and a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// Where the Leases are (default: the watched namespace, or default).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// The Leases' duration.
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    lease_duration: u64,
    /// The name every write carries in managedFields (default kube-fsm).
    #[arg(long)]
    field_manager: Option<String>,
}

async fn run(args: Args) -> Result<ExitCode, BoxError> {
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let handlers = Handlers::new().with_latency(Duration::from_millis(args.handler_latency));
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let mut operator = stand_in::operator(client, handlers, args.namespace.as_deref())
        .metrics(&metrics)
        .record_events(match args.events {
            EventsArg::All => RecordedEvents::All,
            EventsArg::Warnings => RecordedEvents::Warnings,
            EventsArg::Off => RecordedEvents::Off,
        })
        .concurrency(args.concurrency);
    if let Some(manager) = args.field_manager {
        operator = operator.field_manager(manager);
    }
    let (_, _server) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .serve(args.metrics_addr)
        .await?;
    let lease_namespace = args
        .lease_namespace
        .or(args.namespace)
        .unwrap_or_else(|| "default".into());
    let duration = Duration::from_secs(args.lease_duration);
    if args.shards > 0 {
        let mut sharding = Sharding::new("kube-fsm-examples", &lease_namespace, args.shards)
            .key(match args.shard_key {
                ShardKeyArg::Uid => ShardKey::Uid,
                ShardKeyArg::Namespace => ShardKey::Namespace,
            })
            .duration(duration);
        if let Some(identity) = &args.identity {
            sharding = sharding.identity(identity.clone());
        }
        operator = operator.replicas(sharding);
    } else if args.leader_elect {
        let mut election =
            LeaderElection::new("kube-fsm-examples", &lease_namespace).duration(duration);
        if let Some(identity) = &args.identity {
            election = election.identity(identity.clone());
        }
        operator = operator.replicas(election);
    }
    Ok(match operator.run().await {
        Stopped::LeaseLost => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
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
