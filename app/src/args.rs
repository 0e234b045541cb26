//! The command line, typed: what each command takes, every flag also from an environment
//! variable (`KUBE_FSM_…`), and the `run` flags rendered back into arguments for the generated
//! Deployment ([`RunArgs::to_args`]), so that the manifests never carry a flag by hand.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::CliError;
use kube_fsm::admission::Policy;

/// The operator's command line.
#[derive(Debug, Parser)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What the binary does.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run every machine until SIGTERM or Ctrl-C.
    Run(RunArgs),
    /// Print every kind's CRD as YAML (with the machine's CEL rules and printer columns).
    Crd,
    /// Write the kustomize base that deploys this operator with least privilege.
    Manifests(ManifestsArgs),
    /// Write the Prometheus rules, the PrometheusRule and the Grafana dashboard of every machine.
    Monitoring(MonitoringArgs),
    /// Print a machine as Mermaid, Graphviz DOT or SVG.
    Diagram(DiagramArgs),
    /// Check the cluster against this binary: its CRDs installed, and no stored object in a
    /// phase or version this binary does not know.
    Check,
    /// Print the shell completion script for SHELL.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// How `run` logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line per event, for people.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `run`: where the operator watches, how its replicas share the work, where it serves.
#[derive(Clone, Debug, PartialEq, Args)]
pub struct RunArgs {
    /// Watch this namespace only (default: all).
    #[arg(long, env = "KUBE_FSM_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only the replica holding the Lease reconciles; a replica that loses it exits 1, to be
    /// restarted.
    #[arg(long, env = "KUBE_FSM_LEADER_ELECT", conflicts_with = "shards")]
    pub leader_elect: bool,
    /// Split the objects of every kind into N shards over the replicas.
    #[arg(long, env = "KUBE_FSM_SHARDS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub shards: Option<u32>,
    /// This replica's identity in the Leases (default: host name and a random suffix).
    #[arg(long, env = "KUBE_FSM_IDENTITY")]
    pub identity: Option<String>,
    /// Where the Leases are (default: the watched namespace, or default).
    #[arg(long, env = "KUBE_FSM_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// The Leases' duration.
    #[arg(
        long,
        env = "KUBE_FSM_LEASE_DURATION",
        value_name = "SECS",
        default_value_t = 15
    )]
    pub lease_duration: u64,
    /// Where to serve /metrics, /healthz, /readyz and /machine.
    #[arg(long, env = "KUBE_FSM_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Serve /metrics and /machine only to subjects the API server authenticates (TokenReview)
    /// and authorizes to get the path (SubjectAccessReview); /healthz and /readyz stay open.
    /// Implies HTTPS (scrapers' tokens never travel in clear text).
    #[arg(long, env = "KUBE_FSM_METRICS_AUTH")]
    pub metrics_auth: bool,
    /// Serve the endpoint over HTTPS with this certificate and key (PEM files, re-read every
    /// minute). With `--metrics-auth` and without them, a self-signed certificate is made at
    /// start.
    #[arg(long, env = "KUBE_FSM_METRICS_TLS", num_args = 2, value_names = ["CERT", "KEY"], value_delimiter = ',')]
    pub metrics_tls: Option<Vec<PathBuf>>,
    /// Serve the admission webhook (and the conversions) of every kind here, over HTTPS.
    #[arg(long, env = "KUBE_FSM_WEBHOOK_ADDR", value_name = "ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// The webhook's serving certificate and key (PEM files, re-read when they change).
    /// Without them, a development CA signs one for the registered host (`--webhook-register`)
    /// or the bound address.
    #[arg(long, env = "KUBE_FSM_WEBHOOK_TLS", num_args = 2, value_names = ["CERT", "KEY"], value_delimiter = ',', requires = "webhook_addr")]
    pub webhook_tls: Option<Vec<PathBuf>>,
    /// Register the webhook with the API server at start (and remove it at exit), for it to
    /// call `bound` (the bound address: an API server on this machine) or this https URL; the
    /// installed CRDs of the kinds it converts send their conversions to it (and keep doing so
    /// at exit). Deployed operators are registered by their manifests instead.
    #[arg(long, env = "KUBE_FSM_WEBHOOK_REGISTER", value_name = "bound|URL", value_parser = register, requires = "webhook_addr")]
    pub webhook_register: Option<Register>,
    /// Register the webhook for the namespaces with this label only.
    #[arg(long, env = "KUBE_FSM_WEBHOOK_NAMESPACE_LABEL", value_name = "KEY=VALUE", value_parser = key_value, requires = "webhook_register")]
    pub webhook_namespace_label: Option<(String, String)>,
    /// Register with failurePolicy Ignore (writes pass while the webhook is unreachable;
    /// default Fail: refused).
    #[arg(
        long,
        env = "KUBE_FSM_WEBHOOK_FAIL_OPEN",
        requires = "webhook_register"
    )]
    pub webhook_fail_open: bool,
    /// The webhook's policy for KIND (YAML; the default policy for a kind not named).
    #[arg(long, env = "KUBE_FSM_WEBHOOK_POLICY", value_name = "KIND=FILE", value_parser = kind_file, value_delimiter = ',')]
    pub webhook_policy: Vec<(String, PathBuf)>,
    /// Let a panic in a reconcile end the process instead of stalling its object (by default a
    /// panic is caught: the object gets `Stalled` with reason `HandlerPanicked` and is retried
    /// with backoff, while the others go on).
    #[arg(long, env = "KUBE_FSM_CRASH_ON_PANIC")]
    pub crash_on_panic: bool,
    /// How long one handler call may run before it is dropped and its object gets `Stalled`
    /// (reason `HandlerTimedOut`); a phase's `handlerTimeout` in the spec wins (default: what
    /// the operator's code sets, else 5 minutes).
    #[arg(long, env = "KUBE_FSM_HANDLER_TIMEOUT", value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub handler_timeout: Option<u64>,
    /// How long a watch may deliver nothing (no event, no bookmark) before it is restarted:
    /// the API server is asked to end each watch 5 s before, so only a watch whose connection
    /// hangs open without delivering trips it.
    #[arg(long, env = "KUBE_FSM_WATCH_STALL_TIMEOUT", value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(6..))]
    pub watch_stall_timeout: u64,
    /// On SIGTERM, how long reconciles under way may go on before they are cancelled (those
    /// waiting for a slot end at once); keep it below the Pod's grace period less about 10 s
    /// for the Lease release and the webhook's deregistration. A second signal ends the
    /// process at once.
    #[arg(
        long,
        env = "KUBE_FSM_DRAIN_TIMEOUT",
        value_name = "SECS",
        default_value_t = 20
    )]
    pub drain_timeout: u64,
    /// The log filter: a level (error, warn, info, debug, trace) or `RUST_LOG` directives.
    #[arg(long, env = "KUBE_FSM_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// How log lines are written.
    #[arg(long, env = "KUBE_FSM_LOG_FORMAT", value_enum, default_value_t)]
    pub log_format: LogFormat,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            namespace: None,
            leader_elect: false,
            shards: None,
            identity: None,
            lease_namespace: None,
            lease_duration: 15,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            metrics_auth: false,
            metrics_tls: None,
            webhook_addr: None,
            webhook_tls: None,
            webhook_register: None,
            webhook_namespace_label: None,
            webhook_fail_open: false,
            webhook_policy: Vec::new(),
            crash_on_panic: false,
            handler_timeout: None,
            watch_stall_timeout: 60,
            drain_timeout: 20,
            log_level: "info".to_owned(),
            log_format: LogFormat::Text,
        }
    }
}

impl RunArgs {
    /// How the replicas of the operator `name` share the work, as these flags say: one Lease,
    /// one shard set (both named `name`, in the Lease namespace: `--lease-namespace`, else the
    /// watched namespace, else `default`), or one replica.
    pub(crate) fn replicas(&self, name: &str) -> kube_fsm::replicas::Replicas {
        use kube_fsm::replicas::LeaderElection;
        use kube_fsm::replicas::Sharding;
        use std::time::Duration;
        let namespace = (self.lease_namespace.as_deref())
            .or(self.namespace.as_deref())
            .unwrap_or("default");
        let duration = Duration::from_secs(self.lease_duration);
        match (self.leader_elect, self.shards) {
            (true, _) => {
                let election = LeaderElection::new(name, namespace).duration(duration);
                match &self.identity {
                    Some(identity) => election.identity(identity).into(),
                    None => election.into(),
                }
            }
            (false, Some(shards)) => {
                let sharding = Sharding::new(name, namespace, shards).duration(duration);
                match &self.identity {
                    Some(identity) => sharding.identity(identity).into(),
                    None => sharding.into(),
                }
            }
            (false, None) => kube_fsm::replicas::Replicas::One,
        }
    }

    /// These flags as the arguments of `run` (`run` first): what the generated Deployment
    /// passes, parsed back into the same value by the binary.
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        let mut args = vec!["run".to_owned()];
        let flag = |args: &mut Vec<String>, name: &str, value: Option<String>| {
            args.push(format!("--{name}"));
            args.extend(value);
        };
        if let Some(namespace) = &self.namespace {
            flag(&mut args, "namespace", Some(namespace.clone()));
        }
        if self.leader_elect {
            flag(&mut args, "leader-elect", None);
        }
        if let Some(shards) = self.shards {
            flag(&mut args, "shards", Some(shards.to_string()));
        }
        if let Some(identity) = &self.identity {
            flag(&mut args, "identity", Some(identity.clone()));
        }
        if let Some(namespace) = &self.lease_namespace {
            flag(&mut args, "lease-namespace", Some(namespace.clone()));
        }
        flag(
            &mut args,
            "lease-duration",
            Some(self.lease_duration.to_string()),
        );
        flag(
            &mut args,
            "metrics-addr",
            Some(self.metrics_addr.to_string()),
        );
        if self.metrics_auth {
            flag(&mut args, "metrics-auth", None);
        }
        if let Some(files) = &self.metrics_tls {
            flag(&mut args, "metrics-tls", None);
            args.extend(files.iter().map(|f| f.display().to_string()));
        }
        if let Some(addr) = self.webhook_addr {
            flag(&mut args, "webhook-addr", Some(addr.to_string()));
        }
        if let Some(files) = &self.webhook_tls {
            flag(&mut args, "webhook-tls", None);
            args.extend(files.iter().map(|f| f.display().to_string()));
        }
        if let Some(register) = &self.webhook_register {
            let value = match register {
                Register::Bound => "bound".to_owned(),
                Register::At(url) => url.clone(),
            };
            flag(&mut args, "webhook-register", Some(value));
        }
        if let Some((key, value)) = &self.webhook_namespace_label {
            flag(
                &mut args,
                "webhook-namespace-label",
                Some(format!("{key}={value}")),
            );
        }
        if self.webhook_fail_open {
            flag(&mut args, "webhook-fail-open", None);
        }
        for (kind, file) in &self.webhook_policy {
            args.push("--webhook-policy".to_owned());
            args.push(format!("{kind}={}", file.display()));
        }
        if self.crash_on_panic {
            flag(&mut args, "crash-on-panic", None);
        }
        if let Some(secs) = self.handler_timeout {
            flag(&mut args, "handler-timeout", Some(secs.to_string()));
        }
        flag(
            &mut args,
            "watch-stall-timeout",
            Some(self.watch_stall_timeout.to_string()),
        );
        flag(
            &mut args,
            "drain-timeout",
            Some(self.drain_timeout.to_string()),
        );
        args.push("--log-level".to_owned());
        args.push(self.log_level.clone());
        args.push("--log-format".to_owned());
        args.push(
            match self.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            }
            .to_owned(),
        );
        args
    }
}

/// Where the API server calls a webhook `run` registers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Register {
    /// At the bound address (an API server on this machine: envtest, a demo).
    Bound,
    /// At this `https://` base URL.
    At(String),
}

/// `bound` or an https URL.
fn register(value: &str) -> Result<Register, String> {
    match value {
        "bound" => Ok(Register::Bound),
        url if url.starts_with("https://") => {
            Ok(Register::At(url.trim_end_matches('/').to_owned()))
        }
        other => Err(format!("takes `bound` or an https:// URL, not {other:?}")),
    }
}

/// The failure policy and namespace selector of a webhook registration, from the flags that
/// say them (`--webhook-fail-open`, `--webhook-namespace-label`) for `run` and `manifests`.
pub(crate) fn registration(
    fail_open: bool,
    namespace_label: Option<&(String, String)>,
) -> (
    kube_fsm::admission::FailurePolicy,
    Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kube_fsm::admission::FailurePolicy;
    let failure = if fail_open {
        FailurePolicy::Ignore
    } else {
        FailurePolicy::Fail
    };
    let namespaces = namespace_label.map(|(key, value)| LabelSelector {
        match_labels: Some([(key.clone(), value.clone())].into()),
        ..LabelSelector::default()
    });
    (failure, namespaces)
}

/// `manifests`: how the operator is deployed.
#[derive(Clone, Debug, Args)]
pub(crate) struct ManifestsArgs {
    /// The operator's image (its entrypoint this binary).
    #[arg(long, env = "KUBE_FSM_IMAGE")]
    pub image: String,
    /// The operator's namespace (created by the base).
    #[arg(long, env = "KUBE_FSM_DEPLOY_NAMESPACE")]
    pub namespace: Option<String>,
    /// Watch this namespace only (default: all; the RBAC then is a Role there).
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Replicas (more than one: leader election, unless --shards, and a PodDisruptionBudget).
    /// Default 1, or 2 with --webhook: the API server calls the webhook for every write of the
    /// kinds, so one Pod's restart, eviction or node drain must not refuse them all.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub replicas: Option<u32>,
    /// Split the objects into N shards over the replicas.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub shards: Option<u32>,
    /// Also serve and register the admission webhook of every kind (one Service, one
    /// certificate from cert-manager, one registration).
    #[arg(long)]
    pub webhook: bool,
    /// Register the webhook for the namespaces with this label only.
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value, requires = "webhook")]
    pub webhook_namespace_label: Option<(String, String)>,
    /// Let writes through when the webhook cannot be reached (failurePolicy Ignore; default
    /// Fail: refuse them).
    #[arg(long, requires = "webhook")]
    pub webhook_fail_open: bool,
    /// Enforce KIND's policy (YAML, as `run --webhook-policy` reads it) inside the API server:
    /// adds its ValidatingAdmissionPolicies and bindings (Kubernetes 1.30+). Repeat per kind.
    #[arg(long, value_name = "KIND=FILE", value_parser = kind_file)]
    pub admission_policy: Vec<(String, PathBuf)>,
    /// Serve /metrics to authorized scrapers only: adds the TokenReview and
    /// SubjectAccessReview grants and a metrics-reader ClusterRole; the ServiceMonitor then
    /// scrapes over HTTPS with its token.
    #[arg(long)]
    pub metrics_auth: bool,
    /// Write one file per object here, the ServiceMonitor in prometheus/ (default: print them
    /// as one YAML stream).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

impl ManifestsArgs {
    /// The replicas deployed: as asked, else 2 with the webhook and 1 without.
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas.unwrap_or(if self.webhook { 2 } else { 1 })
    }
}

/// `monitoring`: what the rules watch.
#[derive(Clone, Debug, Args)]
pub(crate) struct MonitoringArgs {
    /// The PrometheusRule's namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Seconds an object may be in a phase without a timeout before it counts as stuck.
    #[arg(long, default_value_t = 3600)]
    pub stuck_after: u64,
    /// Label matchers for every selector, e.g. `job="my-operator"`.
    #[arg(long, default_value = "")]
    pub matchers: String,
    /// The operator serves the admission webhook (adds its alert).
    #[arg(long)]
    pub webhook: bool,
    /// Write the files here (default: print the rules file).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// A diagram's format.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub(crate) enum Format {
    /// A Mermaid `stateDiagram-v2`.
    #[default]
    Mermaid,
    /// Graphviz DOT.
    Dot,
    /// An SVG picture (laid out in pure Rust, no Graphviz needed).
    Svg,
}

/// `diagram`: which machine, drawn how.
#[derive(Clone, Debug, Args)]
pub(crate) struct DiagramArgs {
    /// The kind to draw (default: every kind; SVG draws one, so it needs the kind when there
    /// are several).
    #[arg(long)]
    pub kind: Option<String>,
    /// The format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// `KEY=VALUE`.
pub(crate) fn key_value(value: &str) -> Result<(String, String), String> {
    let (key, value) = value
        .split_once('=')
        .ok_or(format!("takes KEY=VALUE, not {value:?}"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// `KIND=FILE`.
/// A policy file (YAML).
pub(super) fn read_policy(path: &PathBuf) -> Result<Policy, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::File {
        path: path.clone(),
        source,
    })?;
    serde_saphyr::from_str(&text)
        .map_err(|err| CliError::Invalid(format!("{}: {err}", path.display())))
}

fn kind_file(value: &str) -> Result<(String, PathBuf), String> {
    let (kind, file) = value
        .split_once('=')
        .ok_or(format!("takes KIND=FILE, not {value:?}"))?;
    Ok((kind.to_owned(), PathBuf::from(file)))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parsed(args: &[String]) -> RunArgs {
        let cli = Cli::try_parse_from(std::iter::once("op".to_owned()).chain(args.iter().cloned()))
            .unwrap_or_else(|err| panic!("{args:?}: {err}"));
        match cli.command {
            Command::Run(run) => run,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_run_flags_rendered_for_the_deployment_parse_back_to_the_same_flags() {
        let every = RunArgs {
            namespace: Some("apps".into()),
            leader_elect: true,
            identity: Some("$(POD_NAME)".into()),
            lease_namespace: Some("ops".into()),
            lease_duration: 20,
            metrics_addr: "0.0.0.0:9090".parse().unwrap(),
            metrics_auth: true,
            metrics_tls: Some(vec![
                "/metrics-tls/tls.crt".into(),
                "/metrics-tls/tls.key".into(),
            ]),
            webhook_addr: Some("0.0.0.0:9443".parse().unwrap()),
            webhook_tls: Some(vec!["/tls/tls.crt".into(), "/tls/tls.key".into()]),
            webhook_register: Some(Register::At("https://10.0.0.1:9443".into())),
            webhook_namespace_label: Some(("team".into(), "a".into())),
            webhook_fail_open: true,
            webhook_policy: vec![("Database".into(), "/policy/db.yaml".into())],
            log_level: "debug".into(),
            log_format: LogFormat::Json,
            ..RunArgs::default()
        };
        let sharded = RunArgs {
            shards: Some(3),
            ..RunArgs::default()
        };
        for args in [RunArgs::default(), every, sharded] {
            assert_eq!(parsed(&args.to_args()), args);
        }
    }

    #[test]
    fn a_webhook_deploys_two_replicas_unless_told_otherwise() {
        let replicas = |args: &[&str]| {
            let cli = Cli::try_parse_from(["op", "manifests", "--image", "i"].iter().chain(args))
                .unwrap_or_else(|err| panic!("{args:?}: {err}"));
            match cli.command {
                Command::Manifests(manifests) => manifests.replicas(),
                other => panic!("not manifests: {other:?}"),
            }
        };
        assert_eq!(replicas(&[]), 1);
        assert_eq!(replicas(&["--webhook"]), 2);
        assert_eq!(replicas(&["--webhook", "--replicas", "1"]), 1);
        assert_eq!(replicas(&["--replicas", "3"]), 3);
    }

    #[test]
    fn leader_election_and_shards_exclude_each_other_and_zero_shards_is_refused() {
        let refused = |args: &[&str]| Cli::try_parse_from(args).unwrap_err().to_string();
        let both = refused(&["op", "run", "--leader-elect", "--shards", "2"]);
        assert!(both.contains("cannot be used with"), "{both}");
        let zero = refused(&["op", "run", "--shards", "0"]);
        assert!(zero.contains("0 is not in 1.."), "{zero}");
    }
}
