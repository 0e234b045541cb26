//! The Database operator as it runs in a cluster: `specs/database.yaml`'s machine and the
//! handlers of `src/database.rs` (one child ConfigMap per Database, written for API economy),
//! with `/metrics`, `/healthz` and `/readyz`, optionally one leader among several replicas.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example database -- crd | kubectl apply -f -
//! cargo run -p kube-fsm-examples --example database -- run [--namespace NS] [--leader-elect]
//! cargo run -p kube-fsm-examples --example database -- diagram [--dot | --svg]
//! ```
//!
//! Deployed, it runs as `database run --leader-elect --identity $(POD_NAME)` (see the `deploy`
//! example), serving the webhook with `--webhook-addr 0.0.0.0:9443 --webhook-tls CERT KEY`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kube_fsm::Stopped;
use kube_fsm::admission::FailurePolicy;
use kube_fsm::controller::LeaderElection;
use kube_fsm::machine::{Description, DiagramFormat};
use kube_fsm_examples::BoxError;
use kube_fsm_examples::database::{self, DatabasePhase, Handlers};
use kube_fsm_examples::webhook::{self, Options, Register};
use prometheus_client::registry::Registry;

#[derive(Debug, Parser)]
#[command(name = "database", about = "The Database example operator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CRD as YAML (with the machine's CEL rules and printer columns).
    Crd,
    /// Print the machine as Mermaid (or Graphviz DOT).
    Diagram {
        /// Graphviz DOT instead of Mermaid.
        #[arg(long, conflicts_with = "svg")]
        dot: bool,
        /// An SVG picture instead of Mermaid (laid out in pure Rust, no Graphviz needed).
        #[arg(long)]
        svg: bool,
    },
    /// Run the operator until Ctrl-C or SIGTERM.
    Run {
        /// Watch this namespace only (default: all).
        #[arg(long)]
        namespace: Option<String>,
        /// Where to serve /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: SocketAddr,
        /// Only the replica holding the Lease kube-fsm-examples reconciles; a replica that
        /// loses it exits 1, to be restarted.
        #[arg(long)]
        leader_elect: bool,
        /// This replica's identity in the Lease (default: host name and a random suffix).
        #[arg(long)]
        identity: Option<String>,
        /// Where the Lease is (default: the watched namespace, or default).
        #[arg(long)]
        lease_namespace: Option<String>,
        /// The Lease's duration.
        #[arg(long, value_name = "SECS", default_value_t = 15)]
        lease_duration: u64,
        /// Also serve the admission webhook here (HTTPS; registered by whoever deploys the
        /// operator, e.g. the `deploy` example's manifests).
        #[arg(long, value_name = "ADDR", requires = "webhook_tls")]
        webhook_addr: Option<SocketAddr>,
        /// The webhook's serving certificate and key (PEM files, re-read when they change).
        #[arg(long, num_args = 2, value_names = ["CERT", "KEY"])]
        webhook_tls: Option<Vec<PathBuf>>,
    },
}

async fn run(
    namespace: Option<String>,
    metrics_addr: SocketAddr,
    election: Option<LeaderElection>,
    webhook: Option<Options>,
) -> Result<ExitCode, BoxError> {
    // Without kube's own retry of 429/503/504: the engine paces and retries on what it sees.
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let webhook = match webhook {
        Some(options) => Some(
            webhook::start(&client, &options, &mut registry)
                .await?
                .health,
        ),
        None => None,
    };
    let mut operator =
        database::operator(client, Handlers::new(), namespace.as_deref()).metrics(&metrics);
    let (addr, _server) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .webhook(webhook)
        .machine::<database::Database>(&metrics)
        .serve(metrics_addr)
        .await?;
    tracing::info!(
        metrics = %format!("http://{addr}/metrics"),
        machine = %format!("http://{addr}/machine"),
        "starting the Database operator"
    );
    if let Some(election) = election {
        tracing::info!(
            identity = election.holder_identity(),
            "waiting for the Lease"
        );
        operator = operator.replicas(election);
    }
    if operator.run().await == Stopped::LeaseLost {
        tracing::error!("lost the Lease; exiting so that a restart waits for it again");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Crd => serde_saphyr::to_string(&database::crd())
            .map(|yaml| print!("{yaml}"))
            .map(|()| ExitCode::SUCCESS)
            .map_err(BoxError::from),
        Command::Diagram { dot, svg } => {
            let format = match (dot, svg) {
                (true, _) => DiagramFormat::Dot,
                (_, true) => DiagramFormat::Svg,
                _ => DiagramFormat::Mermaid,
            };
            Description::of(DatabasePhase::MACHINE)
                .diagram(format, None)
                .map(|text| print!("{text}"))
                .map(|()| ExitCode::SUCCESS)
                .map_err(BoxError::from)
        }
        Command::Run {
            namespace,
            metrics_addr,
            leader_elect,
            identity,
            lease_namespace,
            lease_duration,
            webhook_addr,
            webhook_tls,
        } => {
            kube_fsm_examples::init_logging("info");
            let lease_namespace = lease_namespace
                .or_else(|| namespace.clone())
                .unwrap_or_else(|| "default".into());
            let election = leader_elect.then(|| {
                let election = LeaderElection::new("kube-fsm-examples", lease_namespace)
                    .duration(Duration::from_secs(lease_duration));
                match identity {
                    Some(identity) => election.identity(identity),
                    None => election,
                }
            });
            let webhook = webhook_addr.map(|addr| Options {
                addr,
                tls: webhook_tls.and_then(|f| Some((f.first()?.clone(), f.get(1)?.clone()))),
                policy: None,
                register: Register::No,
                ca_file: None,
                failure_policy: FailurePolicy::Fail,
                namespace_label: None,
            });
            run(namespace, metrics_addr, election, webhook).await
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
