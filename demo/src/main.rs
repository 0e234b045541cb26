//! The demo `scripts/demo` runs: the Database and RiskEngine example machines in this
//! process against the cluster of the kubeconfig, a scripted scenario each, and every step
//! checked (exit 1 when a promise does not hold).
//!
//! ```text
//! kube-fsm-demo [--example database|riskengine|all] [--objects N] [--namespace NS]
//!               [--platform-namespace NS] [--timeout SECS] [--keep] [--webhook]
//! ```

mod cluster;
mod database;
mod migration;
mod node_loss;
mod riskengine;
mod tracker;
mod webhook;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The error type of the demos.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Example {
    Database,
    Riskengine,
    All,
}

/// Drives kube-fsm's example operators end to end.
#[derive(Debug, Parser)]
#[command(name = "kube-fsm-demo", version)]
struct Demo {
    /// Which demo: database (install the CRD, create the Databases, print each transition,
    /// exit 0 once all are Running, delete them), riskengine (tenants in NS-tenant-a/b/c with
    /// a version allow-list in the platform namespace; every step checks itself), or both.
    #[arg(long, value_enum, default_value = "all")]
    example: Example,
    /// How many Databases to create.
    #[arg(long, default_value_t = 5)]
    objects: usize,
    /// How many replicas each Database runs (one per node: at most the cluster's nodes).
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// Where the Databases go (and the RiskEngine tenants' namespace prefix).
    #[arg(long, default_value = "kube-fsm-demo")]
    namespace: String,
    /// Where the RiskEngine platform keeps its allow-list.
    #[arg(long, default_value = "kube-fsm-platform")]
    platform_namespace: String,
    /// How long each wait may take.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    timeout: u64,
    /// Leave the objects in place at the end.
    #[arg(long)]
    keep: bool,
    /// The operator also serves the admission webhook, registered for the demo, and the demo
    /// shows the API server refusing an illegal status patch.
    #[arg(long)]
    webhook: bool,
}

/// One demo.
#[derive(Debug)]
enum Run {
    Database(database::DemoOptions),
    RiskEngine(riskengine::RiskDemoOptions),
}

impl Demo {
    /// The demos to run, in turn.
    fn runs(self) -> Vec<Run> {
        let timeout = Duration::from_secs(self.timeout);
        let database = Run::Database(database::DemoOptions {
            webhook: self.webhook,
            objects: self.objects,
            replicas: self.replicas,
            namespace: self.namespace.clone(),
            timeout,
            keep: self.keep,
            shared: self.example == Example::All,
        });
        let riskengine = Run::RiskEngine(riskengine::RiskDemoOptions {
            prefix: self.namespace,
            platform_namespace: self.platform_namespace,
            timeout,
            keep: self.keep,
            shared: self.example == Example::All,
        });
        match self.example {
            Example::Database => vec![database],
            Example::Riskengine => vec![riskengine],
            Example::All => vec![database, riskengine],
        }
    }
}

/// Runs the demos: both at once in one operator process (one Manager running both machines),
/// or the one asked for.
async fn run(demos: Vec<Run>) -> Result<ExitCode, BoxError> {
    if let [Run::Database(database), Run::RiskEngine(risk)] = demos.as_slice() {
        return together(database.clone(), risk.clone()).await;
    }
    for demo in demos {
        let code = match demo {
            Run::Database(options) => database::run(options).await?,
            Run::RiskEngine(options) => riskengine::run(options).await?,
        };
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Both demos at the same time, against one Manager running both machines (one watch of the
/// children's ConfigMaps for both, one shutdown).
async fn together(
    database: database::DemoOptions,
    risk: riskengine::RiskDemoOptions,
) -> Result<ExitCode, BoxError> {
    use kube_fsm_examples::{database as db, migration as mig, riskengine as re};
    let client = cluster::client().await?;
    cluster::install_crd(&client, db::crd()).await?;
    cluster::install_crd(&client, mig::crd()).await?;
    cluster::install_crd(&client, re::crd()).await?;
    cluster::ensure_namespace(&client, &database.namespace).await?;
    let handlers = re::Handlers::new(risk.platform_namespace.clone());
    let manager = kube_fsm::Manager::new(client.clone())
        .machine(db::operator(client.clone(), Some(&database.namespace)))
        .machine(mig::operator(client.clone(), Some(&database.namespace)))
        .machine(re::operator(client.clone(), handlers));
    println!("one operator process runs the three machines (one Manager); both demos at once");
    let operator = kube_fsm_testkit::operator::Running::manager(manager);
    let (database, risk) = futures::join!(database::run(database), riskengine::run(risk));
    operator.stop().await;
    let failed = [database?, risk?]
        .into_iter()
        .find(|code| *code != ExitCode::SUCCESS);
    Ok(failed.unwrap_or(ExitCode::SUCCESS))
}

#[tokio::main]
async fn main() -> ExitCode {
    let demos = Demo::parse().runs();
    kube_fsm_examples::init_logging("warn");
    run(demos).await.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Demo, clap::Error> {
        Demo::try_parse_from(std::iter::once("kube-fsm-demo").chain(line.split_whitespace()))
    }

    #[test]
    fn parses_the_options_and_defaults() {
        let runs = parse("--objects 7 --keep").expect("parses").runs();
        let [Run::Database(demo), Run::RiskEngine(risk)] = runs.as_slice() else {
            panic!("both demos by default")
        };
        assert_eq!(
            (risk.prefix.as_str(), risk.platform_namespace.as_str()),
            ("kube-fsm-demo", "kube-fsm-platform")
        );
        assert_eq!(
            (demo.objects, demo.namespace.as_str(), demo.keep),
            (7, "kube-fsm-demo", true)
        );
        assert_eq!(demo.timeout, Duration::from_secs(60));
        assert!(
            demo.shared && risk.shared,
            "both at once share one operator"
        );
        let runs = parse("--example riskengine").expect("parses").runs();
        assert!(matches!(runs.as_slice(), [Run::RiskEngine(r)] if !r.shared));
    }

    #[test]
    fn rejects_bad_input() {
        let error = |line: &str| parse(line).expect_err(line).to_string();
        assert!(error("--objects many").contains("invalid value 'many'"));
        assert!(error("--objects").contains("a value is required"));
        assert!(error("extra").contains("unexpected argument 'extra'"));
        assert!(error("--example cats").contains("[possible values: database, riskengine, all]"));
    }
}
