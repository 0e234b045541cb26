//! The RiskEngine operator of a multi-tenant platform (`specs/riskengine.yaml`, handlers in
//! `src/riskengine.rs`): each tenant's RiskEngine is validated against a version allow-list
//! the platform keeps in its own namespace (a shared ConfigMap: a change of it reconciles every
//! RiskEngine), then deployed as a rendered ConfigMap and a credentials Secret in the tenant's
//! namespace, never across tenants; lost credentials are repaired, and deletion removes both.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example riskengine -- crd | kubectl apply -f -
//! cargo run -p kube-fsm-examples --example riskengine -- run --platform-namespace platform
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kube_fsm_examples::BoxError;
use kube_fsm_examples::riskengine::{self, Handlers};
use prometheus_client::registry::Registry;

#[derive(Debug, Parser)]
#[command(name = "riskengine", about = "The RiskEngine example operator")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CRD as YAML (with the machine's CEL rules and printer columns).
    Crd,
    /// Run the operator until Ctrl-C or SIGTERM.
    Run {
        /// The namespace of the platform's allow-list ConfigMap.
        #[arg(long, default_value = "kube-fsm-platform")]
        platform_namespace: String,
        /// Where to serve /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: SocketAddr,
    },
}

async fn run(platform_namespace: String, metrics_addr: SocketAddr) -> Result<ExitCode, BoxError> {
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let operator =
        riskengine::operator(client, Handlers::new(platform_namespace)).metrics(&metrics);
    let (addr, _server) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .serve(metrics_addr)
        .await?;
    tracing::info!(metrics = %format!("http://{addr}/metrics"), "starting the RiskEngine operator");
    operator.run().await;
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Crd => serde_saphyr::to_string(&riskengine::crd())
            .map(|yaml| print!("{yaml}"))
            .map(|()| ExitCode::SUCCESS)
            .map_err(BoxError::from),
        Command::Run {
            platform_namespace,
            metrics_addr,
        } => {
            kube_fsm_examples::init_logging("info");
            run(platform_namespace, metrics_addr).await
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
