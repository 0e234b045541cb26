//! The command line (clap): each subcommand's flags, turned into the options the subcommands
//! take.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use kube_fsm::admission::{Endpoint, FailurePolicy, WebhookOptions};

use crate::{demo, operator, riskdemo, webhook};

/// kube-fsm example operators: a Database custom resource driven by specs/database.yaml, and
/// the RiskEngine of a multi-tenant platform driven by specs/riskengine.yaml.
///
/// The cluster comes from KUBECONFIG or ~/.kube/config (scripts/envtest provides one).
/// RUST_LOG sets the log filter (default: warn for demo, info for run).
#[derive(Debug, Parser)]
#[command(name = "kube-fsm-examples", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the CustomResourceDefinition as YAML: the derived CRD plus the machine's CEL
    /// rules on status.phase and the Phase, Ready and Age columns (kubectl apply -f -).
    Crd,
    /// Print the Database state machine as a Mermaid state diagram.
    Diagram {
        /// Graphviz DOT instead of Mermaid.
        #[arg(long)]
        dot: bool,
    },
    /// Run the operator (all namespaces by default) until Ctrl-C or SIGTERM, serving /metrics,
    /// /healthz and /readyz.
    Run(Box<Run>),
    /// Print the admission webhook's ValidatingWebhookConfiguration as YAML (kubectl apply -f -).
    WebhookConfig(WebhookConfig),
    /// Drive the example operators end to end on the cluster and check every step.
    Demo(Demo),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum EventsArg {
    All,
    Warnings,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ShardKeyArg {
    Uid,
    Namespace,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FailurePolicyArg {
    Fail,
    Ignore,
}

impl From<FailurePolicyArg> for FailurePolicy {
    fn from(arg: FailurePolicyArg) -> Self {
        match arg {
            FailurePolicyArg::Fail => FailurePolicy::Fail,
            FailurePolicyArg::Ignore => FailurePolicy::Ignore,
        }
    }
}

#[derive(Debug, Args)]
pub struct Run {
    /// Watch this namespace only.
    #[arg(long)]
    namespace: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Which of the engine's Events to record.
    #[arg(long, value_enum, default_value = "all")]
    events: EventsArg,
    /// Reconciles at once (0: unbounded).
    #[arg(long, default_value_t = kube_fsm::controller::DEFAULT_CONCURRENCY)]
    concurrency: u16,
    /// The Pending and Provisioning handlers first wait this many milliseconds, as on an
    /// external system.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    handler_latency: u64,
    /// Only the replica holding the Lease kube-fsm-examples reconciles.
    #[arg(long, conflicts_with = "shards")]
    leader_elect: bool,
    /// Replicas split the objects into N shards (Leases kube-fsm-examples-shard-I) and each
    /// reconciles and watches only the shards it holds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    shards: u32,
    /// What an object's shard is a function of.
    #[arg(long, value_enum, default_value = "uid")]
    shard_key: ShardKeyArg,
    /// This replica's identity in the Leases (default: host name and a random suffix).
    #[arg(long)]
    identity: Option<String>,
    /// Where the Leases are (default: the watched namespace, or default).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// The Leases' duration.
    #[arg(long, value_name = "SECS", default_value_t = 15)]
    lease_duration: u64,
    /// The name every write carries in managedFields (default kube-fsm).
    #[arg(long)]
    field_manager: Option<String>,
    #[command(flatten)]
    webhook: WebhookArgs,
}

#[derive(Debug, Args)]
pub struct WebhookArgs {
    /// Also serve the admission webhook that refuses status.phase moves the machine does not
    /// allow, on ADDR over HTTPS (POST /validate; its health is in /healthz).
    #[arg(long = "webhook", value_name = "ADDR")]
    addr: Option<SocketAddr>,
    /// The serving certificate (PEM, re-read when it changes; default: a development CA made
    /// at start).
    #[arg(long = "webhook-cert", value_name = "FILE", requires_all = ["addr", "key"])]
    cert: Option<PathBuf>,
    /// The serving key (PEM).
    #[arg(long = "webhook-key", value_name = "FILE", requires_all = ["addr", "cert"])]
    key: Option<PathBuf>,
    /// Policy layers (YAML, see `kube_fsm::admission::Policy`).
    #[arg(long = "webhook-policy", value_name = "FILE", requires = "addr")]
    policy: Option<PathBuf>,
    /// Apply the ValidatingWebhookConfiguration for the API server to call URL
    /// (https://HOST:PORT; `bound`: this process's address).
    #[arg(long = "webhook-register", value_name = "URL|bound", requires = "addr")]
    register: Option<String>,
    /// The caBundle to register (PEM; default: the development CA).
    #[arg(long = "webhook-ca", value_name = "FILE", requires = "addr")]
    ca: Option<PathBuf>,
    /// The registration's failure policy.
    #[arg(long = "webhook-failure-policy", value_enum, requires = "addr")]
    failure_policy: Option<FailurePolicyArg>,
    /// Register for the namespaces labelled so only.
    #[arg(long = "webhook-namespace-label", value_name = "KEY=VALUE", value_parser = key_value, requires = "addr")]
    namespace_label: Option<(String, String)>,
}

#[derive(Debug, Args)]
pub struct WebhookConfig {
    /// The API server calls this URL.
    #[arg(long, required_unless_present = "service", conflicts_with = "service")]
    url: Option<String>,
    /// The API server calls this Service (NS/NAME[:PORT]).
    #[arg(long, value_name = "NS/NAME[:PORT]", value_parser = service)]
    service: Option<Endpoint>,
    /// The caBundle (PEM file).
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Policy layers (YAML) whose exemptions the registration reflects.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The registration's failure policy.
    #[arg(long, value_enum, default_value = "fail")]
    failure_policy: FailurePolicyArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Example {
    Database,
    Riskengine,
    All,
}

#[derive(Debug, Args)]
pub struct Demo {
    /// Which demo: database (install the CRD, create the Databases, print each transition,
    /// exit 0 once all are Running, delete them), riskengine (tenants in NS-tenant-a/b/c with
    /// a version allow-list in the platform namespace; every step checks itself), or both.
    #[arg(long, value_enum, default_value = "all")]
    example: Example,
    /// How many Databases to create.
    #[arg(long, default_value_t = 5)]
    objects: usize,
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

/// One demo of `demo`.
#[derive(Debug)]
pub enum DemoRun {
    Database(demo::DemoOptions),
    RiskEngine(riskdemo::RiskDemoOptions),
}

impl Demo {
    /// The demos to run, in turn.
    pub fn runs(self) -> Vec<DemoRun> {
        let timeout = Duration::from_secs(self.timeout);
        let database = DemoRun::Database(demo::DemoOptions {
            webhook: self.webhook,
            objects: self.objects,
            namespace: self.namespace.clone(),
            timeout,
            keep: self.keep,
        });
        let riskengine = DemoRun::RiskEngine(riskdemo::RiskDemoOptions {
            prefix: self.namespace,
            platform_namespace: self.platform_namespace,
            timeout,
            keep: self.keep,
        });
        match self.example {
            Example::Database => vec![database],
            Example::Riskengine => vec![riskengine],
            Example::All => vec![database, riskengine],
        }
    }
}

impl Run {
    /// The options of `operator::run`.
    pub fn options(self) -> operator::RunOptions {
        let lease_namespace = self
            .lease_namespace
            .clone()
            .or_else(|| self.namespace.clone())
            .unwrap_or_else(|| "default".into());
        let lease_duration = Duration::from_secs(self.lease_duration);
        let election = self.leader_elect.then(|| {
            let election =
                kube_fsm::controller::LeaderElection::new("kube-fsm-examples", &lease_namespace)
                    .duration(lease_duration);
            match &self.identity {
                Some(identity) => election.identity(identity.clone()),
                None => election,
            }
        });
        let sharding = (self.shards > 0).then(|| {
            let sharding = kube_fsm::controller::Sharding::new(
                "kube-fsm-examples",
                &lease_namespace,
                self.shards,
            )
            .key(match self.shard_key {
                ShardKeyArg::Uid => kube_fsm::controller::ShardKey::Uid,
                ShardKeyArg::Namespace => kube_fsm::controller::ShardKey::Namespace,
            })
            .duration(lease_duration);
            match &self.identity {
                Some(identity) => sharding.identity(identity.clone()),
                None => sharding,
            }
        });
        operator::RunOptions {
            namespace: self.namespace,
            metrics_addr: self.metrics_addr,
            election,
            events: match self.events {
                EventsArg::All => kube_fsm::controller::RecordedEvents::All,
                EventsArg::Warnings => kube_fsm::controller::RecordedEvents::Warnings,
                EventsArg::Off => kube_fsm::controller::RecordedEvents::Off,
            },
            concurrency: self.concurrency,
            handler_latency: Duration::from_millis(self.handler_latency),
            sharding,
            field_manager: self.field_manager,
            webhook: self.webhook.options(),
        }
    }
}

impl WebhookArgs {
    fn options(self) -> Option<webhook::Options> {
        Some(webhook::Options {
            addr: self.addr?,
            tls: self.cert.zip(self.key),
            policy: self.policy,
            register: match self.register.as_deref() {
                None => webhook::Register::No,
                Some("bound") => webhook::Register::Bound,
                Some(url) => webhook::Register::At(url.to_owned()),
            },
            ca_file: self.ca,
            failure_policy: self.failure_policy.map_or(FailurePolicy::Fail, Into::into),
            namespace_label: self.namespace_label,
        })
    }
}

impl WebhookConfig {
    /// The registration's options; reads the CA file.
    pub fn options(&self) -> Result<WebhookOptions, String> {
        let endpoint = match (&self.url, &self.service) {
            (Some(url), _) => Endpoint::Url(url.clone()),
            (None, Some(service)) => service.clone(),
            (None, None) => return Err("webhook-config takes --url or --service".into()),
        };
        let mut options = WebhookOptions::new(endpoint);
        if let Some(path) = &self.ca {
            options.ca_bundle = Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--ca {}: {e}", path.display()))?,
            );
        }
        options.failure_policy = self.failure_policy.into();
        Ok(options)
    }
}

/// `KEY=VALUE`.
fn key_value(value: &str) -> Result<(String, String), String> {
    value
        .split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("takes KEY=VALUE, not {value:?}"))
}

/// `NS/NAME[:PORT]` → a Service endpoint.
fn service(value: &str) -> Result<Endpoint, String> {
    let (namespace, rest) = value
        .split_once('/')
        .ok_or_else(|| format!("takes NS/NAME[:PORT], not {value:?}"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => (
            name,
            Some(port.parse().map_err(|_| format!("not a port: {port:?}"))?),
        ),
        None => (rest, None),
    };
    Ok(Endpoint::Service {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("kube-fsm-examples").chain(line.split_whitespace()))
            .map(|cli| cli.command)
    }

    #[test]
    fn parses_subcommands_and_defaults() {
        let Ok(Command::Demo(demo)) = parse("demo --objects 7 --keep") else {
            panic!("demo parses")
        };
        let runs = demo.runs();
        let [DemoRun::Database(demo), DemoRun::RiskEngine(risk)] = runs.as_slice() else {
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
        let Ok(Command::Run(run)) = parse("run") else {
            panic!("run parses")
        };
        let run = run.options();
        assert_eq!(
            (
                run.namespace,
                run.metrics_addr.to_string(),
                run.election.is_none(),
                run.concurrency
            ),
            (
                None,
                "0.0.0.0:8080".to_owned(),
                true,
                kube_fsm::controller::DEFAULT_CONCURRENCY
            )
        );
        let Ok(Command::Run(run)) =
            parse("run --namespace ns --leader-elect --identity a --metrics-addr 127.0.0.1:9000")
        else {
            panic!("run parses")
        };
        let run = run.options();
        assert_eq!(
            run.election.expect("leader election").holder_identity(),
            "a"
        );
        assert_eq!(run.metrics_addr.to_string(), "127.0.0.1:9000");
        assert!(matches!(parse("crd"), Ok(Command::Crd)));
        assert!(matches!(
            parse("diagram --dot"),
            Ok(Command::Diagram { dot: true })
        ));
    }

    #[test]
    fn rejects_bad_input() {
        let error = |line: &str| parse(line).expect_err(line).to_string();
        assert!(error("demo --objects many").contains("invalid value 'many'"));
        assert!(error("demo --objects").contains("a value is required"));
        assert!(error("demo extra").contains("unexpected argument 'extra'"));
        assert!(error("frobnicate").contains("unrecognized subcommand"));
        assert!(error("run --leader-elect --shards 3").contains("cannot be used with"));
        assert!(error("run --events loud").contains("[possible values: all, warnings, off]"));
    }

    #[test]
    fn parses_the_webhook_options() {
        let Ok(Command::Run(run)) = parse(
            "run --webhook 0.0.0.0:9443 --webhook-register https://op.example:9443 \
             --webhook-failure-policy ignore --webhook-namespace-label team=db",
        ) else {
            panic!("run parses")
        };
        let webhook = run.options().webhook.expect("webhook options");
        assert_eq!(webhook.addr.to_string(), "0.0.0.0:9443");
        assert_eq!(
            webhook.register,
            webhook::Register::At("https://op.example:9443".into())
        );
        assert_eq!(webhook.failure_policy, FailurePolicy::Ignore);
        assert_eq!(
            webhook.namespace_label,
            Some(("team".to_owned(), "db".to_owned()))
        );
        assert!(
            parse("run --webhook-policy p.yaml").is_err(),
            "needs --webhook"
        );
        assert!(
            parse("run --webhook 127.0.0.1:1 --webhook-cert c.pem").is_err(),
            "cert and key go together"
        );
        let Ok(Command::WebhookConfig(config)) =
            parse("webhook-config --service ops/db-webhook:8443")
        else {
            panic!("webhook-config parses")
        };
        assert_eq!(
            config.options().expect("options").endpoint,
            Endpoint::Service {
                namespace: "ops".into(),
                name: "db-webhook".into(),
                port: Some(8443),
            }
        );
        assert!(parse("webhook-config").is_err());
    }
}
