//! kube-fsm example operators: a `Database` custom resource driven by `specs/database.yaml`,
//! and the `RiskEngine` of a multi-tenant platform driven by `specs/riskengine.yaml`.
//!
//! ```text
//! kube-fsm-examples crd              print the CRD as YAML (with the CEL rules and columns)
//! kube-fsm-examples diagram [--dot]  print the machine as Mermaid (or Graphviz DOT)
//! kube-fsm-examples run ...          run the operator until Ctrl-C / SIGTERM
//! kube-fsm-examples webhook-config   print the admission webhook's registration
//! kube-fsm-examples demo ...         drive the examples end to end (scripts/demo)
//! kube-fsm-examples help [COMMAND]   every flag of a command
//! ```

mod cli;
mod cluster;
mod database;
mod demo;
mod operator;
mod riskdemo;
mod riskengine;
mod serve;
mod tracker;
mod webhook;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, DemoRun};

/// The error type of the subcommands.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs the demos in turn; stops at the first that fails.
async fn run_demos(demos: Vec<DemoRun>) -> Result<ExitCode, BoxError> {
    for demo in demos {
        let code = match demo {
            DemoRun::Database(options) => demo::run(options).await?,
            DemoRun::RiskEngine(options) => riskdemo::run(options).await?,
        };
        if code != ExitCode::SUCCESS {
            return Ok(code);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    let command = Cli::parse().command;
    let result = match command {
        Command::Crd => match database::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                Ok(ExitCode::SUCCESS)
            }
            Err(err) => Err(err.into()),
        },
        Command::WebhookConfig(config) => {
            let policy = match &config.policy {
                Some(path) => webhook::read_policy(path),
                None => Ok(kube_fsm::admission::Policy::default()),
            };
            let options = config.options().map_err(BoxError::from);
            options.and_then(|options| {
                let configuration = webhook::configuration(&options, &policy?);
                print!("{}", serde_saphyr::to_string(&configuration)?);
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Diagram { dot } => {
            let machine = database::DatabasePhase::MACHINE;
            print!("{}", if dot { machine.dot } else { machine.mermaid });
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(run) => {
            init_logging("info");
            operator::run(run.options()).await
        }
        Command::Demo(demo) => {
            init_logging("warn");
            run_demos(demo.runs()).await
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
