//! # kube-fsm-app
//!
//! An operator's command line (on clap): a user's `main` is the [`App`] over
//! its machines, and the one binary runs them (`run`), installs their CRDs (`crd`), deploys
//! itself with least privilege (`manifests`), watches itself (`monitoring`), draws its machines
//! (`diagram`), checks a cluster before an upgrade (`check`) and completes in a shell
//! (`completions`).
//!
//! ```no_run
//! # fn demo<A, HA, B, HB>(a: fn() -> HA, b: fn() -> HB) -> std::process::ExitCode
//! # where A: kube_fsm::Reconcilable<HA> + kube::CustomResourceExt, HA: Send + Sync + 'static,
//! #       B: kube_fsm::Reconcilable<HB> + kube::CustomResourceExt, HB: Send + Sync + 'static {
//! use kube_fsm::Operator;
//! use kube_fsm_app::App;
//!
//! App::new("db-operator")
//!     .machine(move |client| Operator::<A, HA>::new(client, a()))
//!     .machine(move |client| Operator::<B, HB>::new(client, b()))
//!     .run()
//! # }
//! ```
//!
//! Every flag can also come from an environment variable (`--namespace` from
//! `KUBE_FSM_NAMESPACE`, and so on: `--help` names each). The Deployment that `manifests`
//! writes passes `run` the arguments [`RunArgs::to_args`] renders from the same typed flags.

#![deny(missing_docs)]

mod args;
mod check;
mod commands;
mod logging;
mod machine;
mod run;
mod webhook;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use args::{Cli, Command};
pub use args::{LogFormat, Register, RunArgs};
use machine::Entry;
pub use machine::{AnyMachine, Machine};

use kube_fsm::Operator;
use kube_fsm::Reconcilable;

/// Why a command failed: a sentence for the person who ran it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The cluster's configuration (kubeconfig or in-cluster) is missing or unusable.
    #[error("cannot reach a cluster: {0}")]
    Cluster(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The command's input does not fit the machines.
    #[error("{0}")]
    Invalid(String),
    /// `check` found what would break.
    #[error("{0} problem(s) found")]
    Problems(usize),
}

/// An operator's command line over its machines.
pub struct App {
    name: String,
    machines: Vec<Box<dyn Entry>>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.machines.iter().map(|m| m.kind()).collect();
        f.debug_struct("App")
            .field("name", &self.name)
            .field("machines", &kinds)
            .finish()
    }
}

impl App {
    /// The operator `name`: it names the binary in `--help`, the Leases, the ServiceAccount,
    /// the roles and the Deployment.
    pub fn new(name: impl Into<String>) -> Self {
        App {
            name: name.into(),
            machines: Vec::new(),
        }
    }

    /// Adds the machine whose operator `build` makes from the client. The engine for it is
    /// compiled where this is called; a library that defines the machine can return an
    /// [`AnyMachine`] for [`App::machine_with`] instead, so the binary does not compile it again.
    #[must_use]
    pub fn machine<K, H>(self, build: impl Fn(kube::Client) -> Operator<K, H> + 'static) -> Self
    where
        K: Reconcilable<H> + kube::CustomResourceExt,
        H: Send + Sync + 'static,
    {
        self.machine_with(Machine::new(build))
    }

    /// Adds `machine`: a [`Machine`] (with a CRD of several versions, or conversions), or an
    /// [`AnyMachine`] a library built (so that the binary does not compile the engine again).
    #[must_use]
    pub fn machine_with(mut self, machine: impl Into<AnyMachine>) -> Self {
        self.machines.push(machine.into().0);
        self
    }

    /// Parses the process's arguments and runs the command; the exit code says how it went
    /// (an error is printed as a sentence first). It starts its own async runtime: call it from
    /// a plain `fn main`, not from inside one (`#[tokio::main]`).
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// [`App::run`] on `args` (the first is the binary's name).
    pub fn run_from(self, args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
        let command = match self.parse(args) {
            Ok(command) => command,
            Err(err) => {
                let _ = err.print();
                return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
            }
        };
        match self.execute(command) {
            Ok(code) => code,
            Err(err) => {
                eprintln!("error: {err}");
                ExitCode::FAILURE
            }
        }
    }

    fn command(&self) -> clap::Command {
        Cli::command()
            .name(self.name.clone())
            .bin_name(self.name.clone())
            .about(format!(
                "The {} operator: {}.",
                self.name,
                self.machines
                    .iter()
                    .map(|m| m.kind())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
    }

    fn parse(
        &self,
        args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    ) -> Result<Command, clap::Error> {
        let matches = self.command().try_get_matches_from(args)?;
        Cli::from_arg_matches(&matches).map(|cli| cli.command)
    }

    fn execute(&self, command: Command) -> Result<ExitCode, CliError> {
        if self.machines.is_empty() {
            return Err(CliError::Invalid(format!(
                "the {} operator has no machine: add them with App::machine",
                self.name
            )));
        }
        match command {
            Command::Run(args) => run::run(self, &args),
            Command::Crd => commands::crd(self).map(|()| ExitCode::SUCCESS),
            Command::Manifests(args) => {
                commands::manifests(self, &args).map(|()| ExitCode::SUCCESS)
            }
            Command::Monitoring(args) => {
                commands::monitoring(self, &args).map(|()| ExitCode::SUCCESS)
            }
            Command::Diagram(args) => commands::diagram(self, &args).map(|()| ExitCode::SUCCESS),
            Command::Check => check::check(self).map(|()| ExitCode::SUCCESS),
            Command::Completions { shell } => {
                let mut command = self.command();
                clap_complete::generate(shell, &mut command, &self.name, &mut std::io::stdout());
                Ok(ExitCode::SUCCESS)
            }
        }
    }

    /// A runtime for the commands that talk to a cluster (or make a client that never does).
    fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|err| CliError::Invalid(format!("cannot start the async runtime: {err}")))
    }
}
