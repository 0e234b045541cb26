//! kube-fsm example operators: a `Database` custom resource driven by `specs/database.yaml`,
//! and the `RiskEngine` of a multi-tenant platform driven by `specs/riskengine.yaml`.
//!
//! ```text
//! kube-fsm-examples crd                      print the CRD as YAML (with the CEL rules and columns)
//! kube-fsm-examples diagram [--dot]          print the machine as Mermaid (or Graphviz DOT)
//! kube-fsm-examples run [--namespace NS] [--events all|warnings|off] [--concurrency N]
//!                        [--handler-latency MS] [--shards N [--shard-key uid|namespace]]
//!                        [--webhook ADDR [--webhook-cert FILE --webhook-key FILE]
//!                         [--webhook-policy FILE] [--webhook-register URL|bound]
//!                         [--webhook-ca FILE] [--webhook-failure-policy fail|ignore]
//!                         [--webhook-namespace-label KEY=VALUE]]
//!                                            run the operator until Ctrl-C / SIGTERM
//! kube-fsm-examples webhook-config (--url URL | --service NS/NAME[:PORT]) [--ca FILE]
//!                        [--policy FILE] [--failure-policy fail|ignore]
//!                                            print the admission webhook's registration
//! kube-fsm-examples demo [--example database|riskengine|all] [--objects N] [--namespace NS]
//!                        [--platform-namespace NS] [--timeout SECS] [--keep] [--webhook]
//! ```

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
use std::time::Duration;

/// The error type of the subcommands.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "\
kube-fsm example operator: a Database custom resource driven by specs/database.yaml

usage:
  kube-fsm-examples crd
      print the CustomResourceDefinition as YAML: the derived CRD plus the machine's CEL
      rules on status.phase and the Phase, Ready and Age columns (kubectl apply -f -)
  kube-fsm-examples diagram [--dot]
      print the Database state machine as a Mermaid state diagram (or Graphviz DOT)
  kube-fsm-examples run [--namespace NS] [--metrics-addr ADDR] [--events all|warnings|off]
                        [--concurrency N] [--handler-latency MS]
                        [--leader-elect | --shards N [--shard-key uid|namespace]]
                        [--identity ID] [--lease-namespace NS] [--lease-duration SECS]
                        [--field-manager NAME]
                        [--webhook ADDR [--webhook-cert FILE --webhook-key FILE]
                         [--webhook-policy FILE] [--webhook-register URL|bound]
                         [--webhook-ca FILE] [--webhook-failure-policy fail|ignore]
                         [--webhook-namespace-label KEY=VALUE]]
      run the operator (all namespaces by default) until Ctrl-C or SIGTERM, serving
      /metrics, /healthz and /readyz on ADDR (default 0.0.0.0:8080); with --leader-elect, only the
      replica holding the Lease kube-fsm-examples (in --lease-namespace, default the watched
      namespace or default; duration default 15 s) reconciles; --events: which of the engine's
      Events to record (default all); --concurrency: reconciles at once (default 32, 0 =
      unbounded); --handler-latency: the Pending and Provisioning handlers first wait MS
      milliseconds, as on an external system (default 0); with --shards N, replicas split
      the objects into N shards (Leases kube-fsm-examples-shard-I in --lease-namespace; by
      the object's UID or, with --shard-key namespace, its namespace) and each reconciles
      and watches only the shards it holds; --field-manager: the name every write carries in
      managedFields (default kube-fsm; the scale bench gives each replica its own to check,
      from outside, that no two replicas wrote one object);
      --webhook ADDR: also serve the admission webhook that refuses status.phase moves the
      machine does not allow, on ADDR over HTTPS (POST /validate; its health is in /healthz),
      with the certificate and key of --webhook-cert/--webhook-key (PEM, re-read when they
      change) or else a development CA made at start; --webhook-policy: policy layers (YAML,
      see `kube_fsm::admission::Policy`); --webhook-register: apply the
      ValidatingWebhookConfiguration for the API server to call URL (https://HOST:PORT; bound:
      this process's address), with --webhook-ca (PEM) or the development CA as caBundle,
      --webhook-failure-policy (default fail) and, for the namespaces labelled so only,
      --webhook-namespace-label
  kube-fsm-examples webhook-config (--url URL | --service NS/NAME[:PORT]) [--ca FILE]
                                   [--policy FILE] [--failure-policy fail|ignore]
      print the admission webhook's ValidatingWebhookConfiguration as YAML (kubectl apply -f -)
  kube-fsm-examples demo [--example database|riskengine|all] [--objects N] [--namespace NS]
                         [--platform-namespace NS] [--timeout SECS] [--keep] [--webhook]
      database: install the CRD, create N Databases (default 5) in NS (default kube-fsm-demo),
      run the operator in-process and print each phase transition; exit 0 once all are Running
      (default timeout 60 s), after deleting them again (unless --keep); with --webhook, the
      operator also serves the admission webhook, registered for the demo, and the demo shows
      the API server refusing an illegal status patch.
      riskengine: the multi-tenant RiskEngine operator in namespaces NS-tenant-a/b/c, its
      version allow-list in --platform-namespace (default kube-fsm-platform): the API server
      refuses an out-of-range timeoutSeconds, six engines reach Active, one off the allow-list
      waits in Validating until the list admits it, and deletion cleans up every child.
      all (the default): both, one after the other

The cluster comes from KUBECONFIG or ~/.kube/config (scripts/envtest provides one).
RUST_LOG sets the log filter (default: warn for demo, info for run).";

enum Command {
    Crd,
    WebhookConfig(
        Box<kube_fsm::admission::WebhookOptions>,
        Option<std::path::PathBuf>,
    ),
    Diagram {
        dot: bool,
    },
    Run(Box<operator::RunOptions>),
    Demo(Vec<Demo>),
}

/// A minimal `--flag value` parser: the subcommands have few, simple options.
struct Args {
    rest: Vec<String>,
}

impl Args {
    fn value(&mut self, flag: &str) -> Result<Option<String>, String> {
        let Some(i) = self.rest.iter().position(|a| a == flag) else {
            return Ok(None);
        };
        self.rest.remove(i);
        if i < self.rest.len() {
            Ok(Some(self.rest.remove(i)))
        } else {
            Err(format!("{flag} needs a value"))
        }
    }

    fn number(&mut self, flag: &str, default: u64) -> Result<u64, String> {
        match self.value(flag)? {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{flag} takes a whole number, not {v:?}")),
        }
    }

    fn switch(&mut self, flag: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|a| a != flag);
        self.rest.len() != before
    }

    fn done(self) -> Result<(), String> {
        match self.rest.first() {
            None => Ok(()),
            Some(extra) => Err(format!("unexpected argument {extra:?}")),
        }
    }
}

fn parse(argv: Vec<String>) -> Result<Command, String> {
    let mut argv = argv.into_iter();
    let sub = argv.next().ok_or("missing subcommand")?;
    let mut args = Args {
        rest: argv.collect(),
    };
    if args.switch("--help") || args.switch("-h") {
        return Err(String::new());
    }
    let command = match sub.as_str() {
        "crd" => Command::Crd,
        "diagram" => Command::Diagram {
            dot: args.switch("--dot"),
        },
        "run" => {
            let namespace = args.value("--namespace")?;
            let metrics_addr = match args.value("--metrics-addr")? {
                None => std::net::SocketAddr::from(([0, 0, 0, 0], 8080)),
                Some(addr) => addr
                    .parse()
                    .map_err(|_| format!("--metrics-addr takes host:port, not {addr:?}"))?,
            };
            let leader_elect = args.switch("--leader-elect");
            let identity = args.value("--identity")?;
            let lease_namespace = args.value("--lease-namespace")?;
            let lease_duration = Duration::from_secs(args.number("--lease-duration", 15)?);
            let election = leader_elect.then(|| {
                let lease_ns = lease_namespace
                    .clone()
                    .or_else(|| namespace.clone())
                    .unwrap_or_else(|| "default".into());
                let election = kube_fsm::LeaderElection::new("kube-fsm-examples", lease_ns)
                    .duration(lease_duration);
                match identity.clone() {
                    Some(identity) => election.identity(identity),
                    None => election,
                }
            });
            let events = match args.value("--events")?.as_deref() {
                None | Some("all") => kube_fsm::Events::All,
                Some("warnings") => kube_fsm::Events::Warnings,
                Some("off") => kube_fsm::Events::Off,
                Some(other) => {
                    return Err(format!(
                        "--events takes all, warnings or off, not {other:?}"
                    ));
                }
            };
            let shards = args.number("--shards", 0)?;
            let shard_key = match args.value("--shard-key")?.as_deref() {
                None | Some("uid") => kube_fsm::ShardKey::Uid,
                Some("namespace") => kube_fsm::ShardKey::Namespace,
                Some(other) => {
                    return Err(format!("--shard-key takes uid or namespace, not {other:?}"));
                }
            };
            let sharding = (shards > 0).then(|| {
                let lease_ns = lease_namespace
                    .clone()
                    .or_else(|| namespace.clone())
                    .unwrap_or_else(|| "default".into());
                let shards = u32::try_from(shards).unwrap_or(u32::MAX);
                let sharding = kube_fsm::Sharding::new("kube-fsm-examples", lease_ns, shards)
                    .key(shard_key)
                    .duration(lease_duration);
                match identity.clone() {
                    Some(identity) => sharding.identity(identity),
                    None => sharding,
                }
            });
            let concurrency = args.number(
                "--concurrency",
                u64::from(kube_fsm::controller::DEFAULT_CONCURRENCY),
            )?;
            Command::Run(Box::new(operator::RunOptions {
                namespace,
                metrics_addr,
                election,
                events,
                concurrency: u16::try_from(concurrency).map_err(|e| e.to_string())?,
                handler_latency: Duration::from_millis(args.number("--handler-latency", 0)?),
                sharding,
                field_manager: args.value("--field-manager")?,
                webhook: webhook_options(&mut args)?,
            }))
        }
        "webhook-config" => {
            use kube_fsm::admission::{Endpoint, WebhookOptions};
            let endpoint = match (args.value("--url")?, args.value("--service")?) {
                (Some(url), None) => Endpoint::Url(url),
                (None, Some(service)) => parse_service(&service)?,
                _ => return Err("webhook-config takes one of --url and --service".into()),
            };
            let mut options = WebhookOptions::new(endpoint);
            if let Some(path) = args.value("--ca")? {
                options.ca_bundle =
                    Some(std::fs::read_to_string(&path).map_err(|e| format!("--ca {path}: {e}"))?);
            }
            options.failure_policy = failure_policy(args.value("--failure-policy")?)?;
            let policy = args.value("--policy")?.map(std::path::PathBuf::from);
            Command::WebhookConfig(Box::new(options), policy)
        }
        "demo" => {
            let example = args.value("--example")?.unwrap_or_else(|| "all".into());
            let namespace = args
                .value("--namespace")?
                .unwrap_or_else(|| "kube-fsm-demo".into());
            let timeout = Duration::from_secs(args.number("--timeout", 60)?);
            let keep = args.switch("--keep");
            let webhook = args.switch("--webhook");
            let database = Demo::Database(demo::DemoOptions {
                webhook,
                objects: usize::try_from(args.number("--objects", 5)?)
                    .map_err(|e| e.to_string())?,
                namespace: namespace.clone(),
                timeout,
                keep,
            });
            let riskengine = Demo::RiskEngine(riskdemo::RiskDemoOptions {
                prefix: namespace,
                platform_namespace: args
                    .value("--platform-namespace")?
                    .unwrap_or_else(|| "kube-fsm-platform".into()),
                timeout,
                keep,
            });
            Command::Demo(match example.as_str() {
                "database" => vec![database],
                "riskengine" => vec![riskengine],
                "all" => vec![database, riskengine],
                other => {
                    return Err(format!(
                        "--example takes database, riskengine or all, not {other:?}"
                    ));
                }
            })
        }
        "help" | "--help" | "-h" => return Err(String::new()),
        other => return Err(format!("unknown subcommand {other:?}")),
    };
    args.done()?;
    Ok(command)
}

/// The `--webhook*` options of `run`.
fn webhook_options(args: &mut Args) -> Result<Option<webhook::Options>, String> {
    let addr = args.value("--webhook")?;
    let cert = args.value("--webhook-cert")?;
    let key = args.value("--webhook-key")?;
    let policy = args.value("--webhook-policy")?;
    let register = args.value("--webhook-register")?;
    let ca_file = args.value("--webhook-ca")?;
    let failure = args.value("--webhook-failure-policy")?;
    let label = args.value("--webhook-namespace-label")?;
    let Some(addr) = addr else {
        return match [&cert, &key, &policy, &register, &ca_file, &failure, &label]
            .iter()
            .any(|v| v.is_some())
        {
            true => Err("the --webhook-* options need --webhook ADDR".into()),
            false => Ok(None),
        };
    };
    let tls = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert.into(), key.into())),
        (None, None) => None,
        _ => return Err("--webhook-cert and --webhook-key go together".into()),
    };
    Ok(Some(webhook::Options {
        addr: addr
            .parse()
            .map_err(|_| format!("--webhook takes host:port, not {addr:?}"))?,
        tls,
        policy: policy.map(Into::into),
        register: match register.as_deref() {
            None => webhook::Register::No,
            Some("bound") => webhook::Register::Bound,
            Some(url) => webhook::Register::At(url.to_owned()),
        },
        ca_file: ca_file.map(Into::into),
        failure_policy: failure_policy(failure)?,
        namespace_label: match label {
            None => None,
            Some(label) => Some(
                label
                    .split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| {
                        format!("--webhook-namespace-label takes KEY=VALUE, not {label:?}")
                    })?,
            ),
        },
    }))
}

fn failure_policy(value: Option<String>) -> Result<kube_fsm::admission::FailurePolicy, String> {
    use kube_fsm::admission::FailurePolicy;
    match value.as_deref() {
        None | Some("fail") => Ok(FailurePolicy::Fail),
        Some("ignore") => Ok(FailurePolicy::Ignore),
        Some(other) => Err(format!(
            "the failure policy is fail or ignore, not {other:?}"
        )),
    }
}

/// `NS/NAME[:PORT]` → a Service endpoint.
fn parse_service(value: &str) -> Result<kube_fsm::admission::Endpoint, String> {
    let (namespace, rest) = value
        .split_once('/')
        .ok_or_else(|| format!("--service takes NS/NAME[:PORT], not {value:?}"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => (
            name,
            Some(port.parse().map_err(|_| format!("not a port: {port:?}"))?),
        ),
        None => (rest, None),
    };
    Ok(kube_fsm::admission::Endpoint::Service {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
    })
}

/// One demo of `demo`.
enum Demo {
    Database(demo::DemoOptions),
    RiskEngine(riskdemo::RiskDemoOptions),
}

/// Runs the demos in turn; stops at the first that fails.
async fn run_demos(demos: Vec<Demo>) -> Result<ExitCode, BoxError> {
    for demo in demos {
        let code = match demo {
            Demo::Database(options) => demo::run(options).await?,
            Demo::RiskEngine(options) => riskdemo::run(options).await?,
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
    let command = match parse(std::env::args().skip(1).collect()) {
        Ok(command) => command,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Crd => match database::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                Ok(ExitCode::SUCCESS)
            }
            Err(err) => Err(err.into()),
        },
        Command::WebhookConfig(options, policy) => {
            let policy = match policy {
                Some(path) => webhook::read_policy(&path),
                None => Ok(kube_fsm::admission::Policy::default()),
            };
            policy.and_then(|policy| {
                let configuration = webhook::configuration(&options, &policy);
                print!("{}", serde_saphyr::to_string(&configuration)?);
                Ok(ExitCode::SUCCESS)
            })
        }
        Command::Diagram { dot } => {
            let machine = database::DatabasePhase::MACHINE;
            print!("{}", if dot { machine.dot } else { machine.mermaid });
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(options) => {
            init_logging("info");
            operator::run(*options).await
        }
        Command::Demo(demos) => {
            init_logging("warn");
            run_demos(demos).await
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_subcommands_and_defaults() {
        let Ok(Command::Demo(demos)) = parse(args("demo --objects 7 --keep")) else {
            panic!("demo parses")
        };
        let [Demo::Database(demo), Demo::RiskEngine(risk)] = demos.as_slice() else {
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
        let Ok(Command::Run(run)) = parse(args("run")) else {
            panic!("run parses")
        };
        assert_eq!(
            (
                run.namespace,
                run.metrics_addr.to_string(),
                run.election.is_none()
            ),
            (None, "0.0.0.0:8080".to_owned(), true)
        );
        let Ok(Command::Run(run)) = parse(args(
            "run --namespace ns --leader-elect --identity a --metrics-addr 127.0.0.1:9000",
        )) else {
            panic!("run parses")
        };
        assert_eq!(run.election.expect("leader election").identity_str(), "a");
        assert_eq!(run.metrics_addr.to_string(), "127.0.0.1:9000");
        assert!(matches!(parse(args("crd")), Ok(Command::Crd)));
        assert!(matches!(
            parse(args("diagram --dot")),
            Ok(Command::Diagram { dot: true })
        ));
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            parse(args("demo --objects many")).err().as_deref(),
            Some("--objects takes a whole number, not \"many\"")
        );
        assert_eq!(
            parse(args("demo --objects")).err().as_deref(),
            Some("--objects needs a value")
        );
        assert_eq!(
            parse(args("demo extra")).err().as_deref(),
            Some("unexpected argument \"extra\"")
        );
        assert!(parse(args("frobnicate")).is_err());
        assert_eq!(parse(args("demo --help")).err().as_deref(), Some(""));
    }

    #[test]
    fn parses_the_webhook_options() {
        let Ok(Command::Run(run)) = parse(args(
            "run --webhook 0.0.0.0:9443 --webhook-register https://op.example:9443 \
             --webhook-failure-policy ignore --webhook-namespace-label team=db",
        )) else {
            panic!("run parses")
        };
        let webhook = run.webhook.expect("webhook options");
        assert_eq!(webhook.addr.to_string(), "0.0.0.0:9443");
        assert_eq!(
            webhook.register,
            webhook::Register::At("https://op.example:9443".into())
        );
        assert_eq!(
            webhook.failure_policy,
            kube_fsm::admission::FailurePolicy::Ignore
        );
        assert_eq!(
            webhook.namespace_label,
            Some(("team".to_owned(), "db".to_owned()))
        );
        assert_eq!(
            parse(args("run --webhook-policy p.yaml")).err().as_deref(),
            Some("the --webhook-* options need --webhook ADDR")
        );
        assert_eq!(
            parse(args("run --webhook :1 --webhook-cert c.pem"))
                .err()
                .as_deref(),
            Some("--webhook-cert and --webhook-key go together")
        );
        let Ok(Command::WebhookConfig(options, None)) =
            parse(args("webhook-config --service ops/db-webhook:8443"))
        else {
            panic!("webhook-config parses")
        };
        assert_eq!(
            options.endpoint,
            kube_fsm::admission::Endpoint::Service {
                namespace: "ops".into(),
                name: "db-webhook".into(),
                port: Some(8443),
            }
        );
        assert!(parse(args("webhook-config")).is_err());
    }
}
