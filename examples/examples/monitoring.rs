//! What watches the Database operator, written from its spec: the Prometheus rules file
//! (alerts and recording rules), the same rules as prometheus-operator's `PrometheusRule`, a
//! Grafana dashboard, and the machine as an SVG picture. `examples/monitoring/` is this example's output, checked in; its
//! `tests/` are promtool unit tests of the rules (`scripts/prometheus check`).
//!
//! ```text
//! cargo run -p kube-fsm-examples --example monitoring -- --webhook --out monitoring/
//! kubectl apply -f monitoring/prometheus-rule.yaml      # with prometheus-operator
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kube_fsm::machine::{Description, DiagramFormat};
use kube_fsm::metrics::DEFAULT_NEAR_TIMEOUT;
use kube_fsm_examples::BoxError;
use kube_fsm_examples::database::{Database, DatabasePhase};
use kube_fsm_generate::alerts::Alerts;
use kube_fsm_generate::dashboard::Dashboard;

/// Writes the rules, the dashboard and the picture of the Database operator.
#[derive(Debug, Parser)]
#[command(name = "monitoring")]
struct Args {
    /// The PrometheusRule's namespace.
    #[arg(long, default_value = "kube-fsm-system")]
    namespace: String,
    /// The fraction of a phase's timeout past which an object is near it.
    #[arg(long, default_value_t = DEFAULT_NEAR_TIMEOUT)]
    near_timeout: f64,
    /// Seconds an object may be in a phase without a timeout before it counts as stuck.
    #[arg(long, default_value_t = 3600)]
    stuck_after: u64,
    /// Label matchers for every selector, e.g. `job="database-operator"`.
    #[arg(long, default_value = "")]
    matchers: String,
    /// The operator serves the admission webhook (adds its alert).
    #[arg(long)]
    webhook: bool,
    /// Write the files here (default: print the rules file).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn write(args: &Args) -> Result<(), BoxError> {
    let alerts = Alerts::new()
        .machine::<Database>()
        .near_timeout(args.near_timeout, Duration::from_secs(60))
        .stuck_after(Duration::from_secs(args.stuck_after))
        .matchers(&args.matchers)
        .webhook(args.webhook)
        .runbook_url("https://github.com/kube-fsm/kube-fsm#operating");
    let rules = serde_saphyr::to_string(&alerts.rules())?;
    let Some(dir) = &args.out else {
        print!("{rules}");
        return Ok(());
    };
    let object = alerts.prometheus_rule("database-operator", &args.namespace);
    let dashboard = Dashboard::new("Database operator")
        .machine::<Database>()
        .matchers(&args.matchers);
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("prometheus-rules.yaml"), rules)?;
    std::fs::write(
        dir.join("prometheus-rule.yaml"),
        serde_saphyr::to_string(&object)?,
    )?;
    let mut json = serde_json::to_string_pretty(&dashboard.json())?;
    json.push('\n');
    std::fs::write(dir.join("dashboard.json"), json)?;
    let picture = Description::of(DatabasePhase::MACHINE).diagram(DiagramFormat::Svg, None)?;
    std::fs::write(dir.join("machine.svg"), picture)?;
    Ok(())
}

fn main() -> ExitCode {
    match write(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
