//! `kube-fsm`: tools for kube-fsm's state-machine specs.
//!
//! `kube-fsm check SPEC...` reads each spec file and prints every mistake exactly as
//! `#[state_machine]` reports it at compile time (the same compiler, `kube-fsm-codegen`),
//! without building anything: for a pre-commit hook or a CI step. Like the macro, it holds a
//! spec to its lock (`NAME.lock.yaml` beside it), which `kube-fsm lock SPEC...` writes.
//! `kube-fsm new NAME --group GROUP --kind KIND` writes a new operator crate.

mod new;

use std::path::{Path, PathBuf};
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
    /// Writes a new operator crate that builds and passes its tests as written: a machine
    /// (`specs/KIND.yaml` and its lock), the resource and its handlers, their unit tests, a
    /// cluster test, the binary (run, crd, manifests, ...), a Dockerfile, a CI workflow and a
    /// README with the next commands. Overwrites nothing.
    New {
        /// The crate's, the binary's and the Deployment's name (lowercase, digits, `-`).
        name: String,
        /// The custom resource's API group, a domain (e.g. `example.com`).
        #[arg(long)]
        group: String,
        /// The custom resource's kind, UpperCamelCase (e.g. `Website`).
        #[arg(long)]
        kind: String,
        /// Objects of the kind live in namespaces (default: cluster-scoped).
        #[arg(long)]
        namespaced: bool,
        /// Also write the admission policy the webhook (or the API server) enforces.
        #[arg(long)]
        webhook: bool,
        /// The machine runs a Deployment (image, replicas) and is Ready while its pods are
        /// available, instead of writing a ConfigMap; its cluster test runs on a control plane
        /// with simulated nodes.
        #[arg(long)]
        workload: bool,
        /// Where to write it (default: ./NAME); must be new or empty.
        #[arg(long)]
        path: Option<PathBuf>,
    },
    /// Checks spec files as `#[state_machine]` does, without a build: each mistake with its
    /// `file:line:col`, the offending line and a fix. Exits with 1 if any spec has an error.
    Check {
        /// The spec files (YAML), as paths the messages should show.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
    },
    /// Writes each spec's lock (`NAME.lock.yaml` beside `NAME.yaml`): the phases, retired names
    /// and condition types objects stored under this release may carry. `#[state_machine]`
    /// and `check` then refuse a later spec that would strand them. Rewrite it when you
    /// release such a change on purpose. Refuses a spec with errors.
    Lock {
        /// The spec files (YAML).
        #[arg(required = true)]
        specs: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::New {
            name,
            group,
            kind,
            namespaced,
            webhook,
            workload,
            path,
        } => {
            let dir = path.unwrap_or_else(|| PathBuf::from(&name));
            let names = new::Names {
                name,
                group,
                kind,
                namespaced,
                webhook,
                workload,
            };
            new::new(&names, &dir)
        }
        Command::Check { specs } => check(&specs),
        Command::Lock { specs } => lock(&specs),
    }
}

/// The text of the spec file at `path`, or the error the macro would give (printed).
fn read(path: &Path) -> Option<String> {
    let display = path.display();
    match std::fs::read(path).map(String::from_utf8) {
        Ok(Ok(text)) => Some(text),
        Ok(Err(_)) => {
            // The macro's words for the same file.
            eprintln!(
                "error: the spec file `{display}` is not UTF-8 text\n = help: save the spec as UTF-8"
            );
            None
        }
        Err(err) => {
            eprintln!("error: cannot read the spec file `{display}`: {err}");
            None
        }
    }
}

/// Prints `errors` of the spec `display`.
fn report(display: &str, errors: &[String]) {
    for error in errors {
        eprintln!("error: {error}\n");
    }
    let plural = if errors.len() == 1 { "" } else { "s" };
    eprintln!("{display}: {} error{plural}", errors.len());
}

fn check(specs: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in specs {
        let display = path.display().to_string();
        // `specs/*.yaml` names the locks too: each is checked with its spec.
        if display.ends_with(".lock.yaml") {
            println!("{display}: a lock, checked with its spec");
            continue;
        }
        let Some(text) = read(path) else {
            failed = true;
            continue;
        };
        let lock_path = kube_fsm_codegen::lock_path(path);
        let lock_text = match std::fs::read_to_string(&lock_path) {
            Ok(text) => Some(text),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => {
                eprintln!(
                    "error: cannot read the spec's lock `{}`: {err}",
                    lock_path.display()
                );
                failed = true;
                continue;
            }
        };
        let lock_display = lock_path.display().to_string();
        let lock = lock_text
            .as_deref()
            .map(|text| (lock_display.as_str(), text));
        match kube_fsm_codegen::check(&display, &text, lock) {
            Ok(checked) => println!(
                "{display}: ok ({} phases, {} transitions)",
                checked.phases.len(),
                checked.transitions
            ),
            Err(errors) => {
                report(&display, &errors);
                failed = true;
            }
        }
    }
    exit(failed)
}

fn lock(specs: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in specs {
        let display = path.display().to_string();
        let Some(text) = read(path) else {
            failed = true;
            continue;
        };
        let lock = match kube_fsm_codegen::lock(&display, &text) {
            Ok(lock) => lock,
            Err(errors) => {
                report(&display, &errors);
                failed = true;
                continue;
            }
        };
        let lock_path = kube_fsm_codegen::lock_path(path);
        // The spec's crate includes the spec's bytes, so cargo rebuilds it when the spec is
        // newer: touching the spec makes the first lock (a new file) count at the next build.
        let written = std::fs::write(&lock_path, lock).and_then(|()| {
            std::fs::File::options()
                .write(true)
                .open(path)?
                .set_modified(std::time::SystemTime::now())
        });
        match written {
            Ok(()) => println!("{}: written", lock_path.display()),
            Err(err) => {
                eprintln!("error: cannot write `{}`: {err}", lock_path.display());
                failed = true;
            }
        }
    }
    exit(failed)
}

fn exit(failed: bool) -> ExitCode {
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
