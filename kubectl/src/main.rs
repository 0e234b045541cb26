//! `kubectl fsm`: explains, moves, pauses and draws the objects of any resource built with
//! kube-fsm, from the machine its CRD carries (the `kube-fsm.dev/machine` annotation).

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use kube_fsm::machine::DiagramFormat;

mod act;
mod children;
mod explain;
mod held;
mod object;
mod table;
mod target;

use object::Stored;
use target::Target;

/// What a command fails with.
type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    name = "kubectl fsm",
    version,
    about = "Explain, move, pause and draw kube-fsm resources"
)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
    /// The kubeconfig file (default: $KUBECONFIG, else ~/.kube/config; in a Pod, its service
    /// account).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// Act as this user (impersonation, as kubectl's --as: the kubeconfig's user needs the
    /// right to impersonate).
    #[arg(long = "as", value_name = "USER", global = true)]
    as_user: Option<String>,
    /// Act in this group too (repeat for more; with --as).
    #[arg(
        long = "as-group",
        value_name = "GROUP",
        global = true,
        requires = "as_user"
    )]
    as_groups: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// A table of the objects: phase, for how long, Ready, what moves each next.
    Get {
        /// The resource (kind, plural, singular, short name or plural.group).
        kind: String,
        /// Objects of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Why one object is where it is.
    Explain {
        /// KIND/NAME.
        object: String,
        #[arg(short, long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Moves an object to PHASE along a manual or legal edge (checked against the machine).
    Move {
        /// KIND/NAME.
        object: String,
        /// The phase to move it to.
        phase: String,
        /// Why (recorded in the Event).
        #[arg(long)]
        reason: String,
    },
    /// Pauses an object: the operator takes no step until it is resumed.
    Pause {
        /// KIND/NAME.
        object: String,
        /// Why (shown in its Paused condition).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resumes a paused object.
    Resume {
        /// KIND/NAME.
        object: String,
    },
    /// Asks the operator to reconcile an object now.
    Reconcile {
        /// KIND/NAME.
        object: String,
    },
    /// Which stored objects a new spec would hold (their phase neither declared nor retired
    /// in it), before you release it: exits with 1 when any would be.
    Check {
        /// The resource.
        kind: String,
        /// The new spec (YAML), checked as `#[state_machine]` does.
        #[arg(long)]
        spec: std::path::PathBuf,
        /// Objects of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// The machine as Mermaid, DOT or an SVG picture.
    Diagram {
        /// The resource.
        kind: String,
        /// Label each phase with the number of objects in it.
        #[arg(long)]
        live: bool,
        /// With --live: count the objects of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        #[arg(long, value_parser = DiagramFormat::NAMES, default_value = "mermaid")]
        format: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `KIND/NAME` split.
fn kind_and_name(object: &str) -> Result<(&str, &str), Error> {
    object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .ok_or_else(|| format!("expected KIND/NAME, e.g. database/db, not {object:?}").into())
}

struct Session {
    client: Client,
    namespace: String,
}

impl Session {
    fn api(&self, target: &Target, all: bool) -> Api<DynamicObject> {
        if !target.namespaced || all {
            Api::all_with(self.client.clone(), &target.resource)
        } else {
            Api::namespaced_with(self.client.clone(), &self.namespace, &target.resource)
        }
    }

    async fn list(&self, target: &Target, all: bool) -> Result<Vec<serde_json::Value>, Error> {
        let objects = self.api(target, all).list(&ListParams::default()).await?;
        objects
            .items
            .iter()
            .map(|o| Ok(serde_json::to_value(o)?))
            .collect()
    }

    /// The object's Events, oldest first, as history lines (the last ten).
    async fn history(&self, object: &serde_json::Value) -> Vec<String> {
        let stored = Stored(object);
        let uid = stored.uid();
        let ns = stored.namespace();
        let api: Api<Event> = if ns.is_empty() {
            Api::all(self.client.clone())
        } else {
            Api::namespaced(self.client.clone(), ns)
        };
        let params =
            ListParams::default().fields(&format!("involvedObject.name={}", stored.name()));
        let Ok(events) = api.list(&params).await else {
            return Vec::new();
        };
        let mut lines: Vec<(String, String)> = events
            .items
            .into_iter()
            .filter(|e| e.involved_object.uid.as_deref() == Some(uid))
            .map(|e| {
                let at = e
                    .event_time
                    .map(|t| t.0)
                    .or(e.last_timestamp.map(|t| t.0))
                    .or(e.metadata.creation_timestamp.map(|t| t.0))
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                let line = format!(
                    "{at}  {:<20} {}",
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default()
                );
                (at, line)
            })
            .collect();
        lines.sort();
        let skip = lines.len().saturating_sub(10);
        lines.into_iter().skip(skip).map(|(_, l)| l).collect()
    }
}

async fn run(cli: Cli) -> Result<String, Error> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let mut config = match &cli.kubeconfig {
        Some(path) => {
            Config::from_custom_kubeconfig(Kubeconfig::read_from(path)?, &options).await?
        }
        None if cli.context.is_some() => Config::from_kubeconfig(&options).await?,
        None => Config::infer().await?,
    };
    if let Some(user) = &cli.as_user {
        config.auth_info.impersonate = Some(user.clone());
        config.auth_info.impersonate_groups =
            (!cli.as_groups.is_empty()).then(|| cli.as_groups.clone());
    }
    let client = Client::try_from(config)?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let session = Session { client, namespace };
    let now = Timestamp::now();
    match cli.command {
        Command::Get {
            kind,
            all_namespaces,
            output,
        } => {
            let target = Target::resolve(&session.client, &kind).await?;
            let objects = session.list(&target, all_namespaces).await?;
            let rows: Vec<table::Row> = objects
                .iter()
                .map(|o| table::row(&target.machine, &Stored(o), now))
                .collect();
            Ok(match output {
                Output::Json => serde_json::to_string_pretty(&rows)? + "\n",
                Output::Table => table::render(&rows, all_namespaces),
            })
        }
        Command::Explain { object, output } => {
            let (kind, name) = kind_and_name(&object)?;
            let target = Target::resolve(&session.client, kind).await?;
            let stored = serde_json::to_value(session.api(&target, false).get(name).await?)?;
            let history = session.history(&stored).await;
            let found = children::read(&session.client, &target.machine, &stored).await;
            let explanation =
                explain::explain(&target.machine, &Stored(&stored), history, &found, now);
            Ok(match output {
                Output::Json => serde_json::to_string_pretty(&explanation)? + "\n",
                Output::Table => explanation.to_string(),
            })
        }
        Command::Move {
            object,
            phase,
            reason,
        } => {
            let (kind, name) = kind_and_name(&object)?;
            let target = Target::resolve(&session.client, kind).await?;
            let api = session.api(&target, false);
            Ok(act::move_to(&session.client, &target, &api, name, &phase, &reason).await? + "\n")
        }
        Command::Pause { object, reason } => {
            let (kind, name) = kind_and_name(&object)?;
            let target = Target::resolve(&session.client, kind).await?;
            act::pause(&session.api(&target, false), name, reason.as_deref()).await?;
            Ok(format!("{}/{name} paused\n", target.machine.kind))
        }
        Command::Resume { object } => {
            let (kind, name) = kind_and_name(&object)?;
            let target = Target::resolve(&session.client, kind).await?;
            act::resume(&session.api(&target, false), name).await?;
            Ok(format!("{}/{name} resumed\n", target.machine.kind))
        }
        Command::Reconcile { object } => {
            let (kind, name) = kind_and_name(&object)?;
            let target = Target::resolve(&session.client, kind).await?;
            let at = act::reconcile(&session.api(&target, false), name).await?;
            Ok(format!(
                "{}/{name}: reconcile requested at {at}\n",
                target.machine.kind
            ))
        }
        Command::Check {
            kind,
            spec,
            all_namespaces,
        } => {
            let display = spec.display().to_string();
            let text = std::fs::read_to_string(&spec)
                .map_err(|e| format!("cannot read the spec file `{display}`: {e}"))?;
            let checked = kube_fsm_codegen::check(&display, &text, None)
                .map_err(|errors| errors.join("\n\n"))?;
            let target = Target::resolve(&session.client, &kind).await?;
            let objects = session.list(&target, all_namespaces).await?;
            Ok(held::report(
                &held::held(&objects, &checked),
                objects.len(),
                &display,
            )?)
        }
        Command::Diagram {
            kind,
            live,
            all_namespaces,
            format,
        } => {
            let target = Target::resolve(&session.client, &kind).await?;
            let counts = if live {
                let mut counts = BTreeMap::new();
                for o in session.list(&target, all_namespaces).await? {
                    if let Some(phase) = Stored(&o).phase() {
                        *counts.entry(phase.to_owned()).or_insert(0) += 1;
                    }
                }
                Some(counts)
            } else {
                None
            };
            // A description read from the cluster carries no picture: draw its DOT text here.
            Ok(match format.parse()? {
                DiagramFormat::Svg => kube_fsm_codegen::picture::svg(
                    &target
                        .machine
                        .diagram(DiagramFormat::Dot, counts.as_ref())?,
                )?,
                other => target.machine.diagram(other, counts.as_ref())?,
            })
        }
    }
}
