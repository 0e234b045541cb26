//! `kube-fsm`: tools for kube-fsm's state-machine specs.
//!
//! `kube-fsm check SPEC...` reads each spec file and prints every mistake exactly as
//! `#[state_machine]` reports it at compile time (the same compiler, `kube-fsm-codegen`),
//! without building anything: for a pre-commit hook or a CI step.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kube-fsm",
    version,
    about = "Tools for kube-fsm state-machine specs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Checks spec files as `#[state_machine]` does, without a build: each mistake with its
    /// `file:line:col`, the offending line and a fix. Exits with 1 if any spec has an error.
    Check {
        /// The spec files (YAML), as paths the messages should show.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check { specs } => check(&specs),
    }
}

fn check(specs: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in specs {
        let display = path.display().to_string();
        let text = match std::fs::read(path).map(String::from_utf8) {
            Ok(Ok(text)) => text,
            Ok(Err(_)) => {
                // The macro's words for the same file.
                eprintln!(
                    "error: the spec file `{display}` is not UTF-8 text\n = help: save the spec as UTF-8"
                );
                failed = true;
                continue;
            }
            Err(err) => {
                eprintln!("error: cannot read the spec file `{display}`: {err}");
                failed = true;
                continue;
            }
        };
        match kube_fsm_codegen::check(&display, &text) {
            Ok(checked) => println!(
                "{display}: ok ({} phases, {} transitions)",
                checked.phases, checked.transitions
            ),
            Err(errors) => {
                for error in &errors {
                    eprintln!("error: {error}\n");
                }
                let plural = if errors.len() == 1 { "" } else { "s" };
                eprintln!("{display}: {} error{plural}", errors.len());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
