//! The Database operator serving its admission webhook: the API server asks it about every
//! write of `status.phase` (by anyone: `kubectl edit`, a script, another controller) and it
//! refuses each move the machine has no edge for, plus what the policy layers (a YAML file,
//! see `kube_fsm::admission::Policy`) restrict to the operator or to named users. Over HTTPS
//! with a certificate from files (re-read when they change) or a development CA made at start;
//! its health is in `/healthz`, its counts in `/metrics`.
//!
//! ```text
//! # serve and register it for the API server on this machine (envtest, kind with host network)
//! cargo run -p kube-fsm-examples --example webhook -- run --addr 127.0.0.1:9443 --register bound
//! # print the registration for a Service in front of the operator, to apply with kubectl
//! cargo run -p kube-fsm-examples --example webhook -- config --service ops/db-webhook:443 --ca ca.pem
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube_fsm::admission::{Endpoint, FailurePolicy, Policy, WebhookOptions};
use kube_fsm::deploy::Verb;
use kube_fsm_examples::BoxError;
use kube_fsm_examples::database::{self, Handlers};
use kube_fsm_examples::webhook::{self, Options, Register};
use prometheus_client::registry::Registry;

#[derive(Debug, Parser)]
#[command(
    name = "webhook",
    about = "The Database operator with its admission webhook"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator and serve the webhook until Ctrl-C or SIGTERM.
    Run {
        /// Watch this namespace only (default: all).
        #[arg(long)]
        namespace: Option<String>,
        /// Where to serve /metrics, /healthz and /readyz.
        #[arg(long, default_value = "0.0.0.0:8080")]
        metrics_addr: SocketAddr,
        /// Where to serve the webhook (POST /validate over HTTPS).
        #[arg(long, default_value = "0.0.0.0:9443")]
        addr: SocketAddr,
        /// The serving certificate and key (PEM files; default: a development CA).
        #[arg(long, num_args = 2, value_names = ["CERT", "KEY"])]
        tls: Option<Vec<PathBuf>>,
        /// Policy layers (YAML).
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Register the webhook for the API server to call URL (https://HOST:PORT; `bound`:
        /// this process's address).
        #[arg(long, value_name = "URL|bound")]
        register: Option<String>,
        /// The caBundle to register (PEM; default: the development CA).
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        /// Let writes through when the webhook cannot be reached (default: refuse them).
        #[arg(long)]
        fail_open: bool,
        /// Register for the namespaces with this label only.
        #[arg(long, value_name = "KEY=VALUE", value_parser = webhook::key_value)]
        namespace_label: Option<(String, String)>,
    },
    /// Print the ValidatingWebhookConfiguration as YAML.
    Config {
        /// The API server calls this URL.
        #[arg(long, required_unless_present = "service", conflicts_with = "service")]
        url: Option<String>,
        /// The API server calls this Service.
        #[arg(long, value_name = "NS/NAME[:PORT]", value_parser = webhook::service_endpoint)]
        service: Option<Endpoint>,
        /// The caBundle (PEM file).
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        /// Policy layers (YAML) whose exemptions the registration reflects.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
    },
}

async fn run(
    namespace: Option<String>,
    metrics_addr: SocketAddr,
    options: Options,
) -> Result<ExitCode, BoxError> {
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let started = webhook::start(&client, &options, &mut registry).await?;
    let registered = started.registered.as_deref().unwrap_or("(no)");
    tracing::info!(addr = %started.addr, registered, "serving the admission webhook");
    // When it registers itself (opt-in, `--register`), its RBAC (`Operator::rbac`) includes
    // that, narrowed to its own registration: `get` and `patch` by name (RBAC cannot narrow
    // `create`). Deployed with manifests that register it, it needs none of this.
    let mut operator = database::operator(client, Handlers::new(), namespace.as_deref());
    if let Some(name) = &started.registered {
        operator = operator.needs_named::<ValidatingWebhookConfiguration>(
            &[Verb::Create, Verb::Get, Verb::Patch],
            &[name.as_str()],
            "registers its webhook",
        );
    }
    let operator = operator.metrics(&metrics);
    let health = Some(started.health);
    let (_, _server) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .webhook(health)
        .serve(metrics_addr)
        .await?;
    operator.run().await;
    Ok(ExitCode::SUCCESS)
}

fn config(
    endpoint: Endpoint,
    ca: Option<PathBuf>,
    policy: Option<PathBuf>,
) -> Result<ExitCode, BoxError> {
    let mut options = WebhookOptions::new(endpoint);
    if let Some(path) = ca {
        options.ca_bundle = Some(
            std::fs::read_to_string(&path).map_err(|e| format!("--ca {}: {e}", path.display()))?,
        );
    }
    let policy = match policy {
        Some(path) => webhook::read_policy(&path)?,
        None => Policy::default(),
    };
    print!(
        "{}",
        serde_saphyr::to_string(&webhook::configuration(&options, &policy))?
    );
    Ok(ExitCode::SUCCESS)
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Run {
            namespace,
            metrics_addr,
            addr,
            tls,
            policy,
            register,
            ca,
            fail_open,
            namespace_label,
        } => {
            kube_fsm_examples::init_logging("info");
            let options = Options {
                addr,
                tls: tls.and_then(|files| Some((files.first()?.clone(), files.get(1)?.clone()))),
                policy,
                register: match register.as_deref() {
                    None => Register::No,
                    Some("bound") => Register::Bound,
                    Some(url) => Register::At(url.to_owned()),
                },
                ca_file: ca,
                failure_policy: if fail_open {
                    FailurePolicy::Ignore
                } else {
                    FailurePolicy::Fail
                },
                namespace_label,
            };
            run(namespace, metrics_addr, options).await
        }
        Command::Config {
            url,
            service,
            ca,
            policy,
        } => {
            let endpoint = url
                .map(Endpoint::Url)
                .or(service)
                .expect("clap requires --url or --service");
            config(endpoint, ca, policy)
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
