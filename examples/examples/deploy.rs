//! The kustomize base that deploys the Database example with least privilege: its RBAC is
//! computed from the same wiring the Deployment runs (`Operator::rbac`), so the role never
//! drifts from the code. More than one replica elects a leader (or, with `--shards N`, splits
//! the objects); `--webhook` adds the admission webhook's Service, registration and a
//! cert-manager certificate. `examples/deploy/` is this example's output, checked in.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example deploy -- --image ghcr.io/me/database:1.0 \
//!     --replicas 2 --webhook --out deploy/
//! kubectl apply -k deploy/
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube_fsm::admission::{FailurePolicy, Policy};
use kube_fsm::controller::{LeaderElection, Sharding};
use kube_fsm::deploy::{Deploy, Manifest};
use kube_fsm_examples::database::{self, Database, Handlers};
use kube_fsm_examples::{BoxError, webhook};

/// Writes the manifests that deploy the Database operator.
#[derive(Debug, Parser)]
#[command(name = "deploy")]
struct Args {
    /// The operator's image (with the example binaries `database` and `sharded` on its PATH).
    #[arg(long)]
    image: String,
    /// The operator's namespace.
    #[arg(long, default_value = "kube-fsm-system")]
    namespace: String,
    /// Replicas (more than one: leader election, unless --shards).
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Split the objects into N shards over the replicas.
    #[arg(long, value_name = "N")]
    shards: Option<u32>,
    /// Also serve and register the admission webhook (its certificate from cert-manager).
    #[arg(long, conflicts_with = "shards")]
    webhook: bool,
    /// Register the webhook for the namespaces with this label only.
    #[arg(long, value_name = "KEY=VALUE", value_parser = webhook::key_value, requires = "webhook")]
    webhook_namespace_label: Option<(String, String)>,
    /// Let writes through when the webhook cannot be reached (failurePolicy Ignore; default
    /// Fail: refuse them).
    #[arg(long, requires = "webhook")]
    webhook_fail_open: bool,
    /// Write one file per object here (default: print them as one YAML stream).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn manifests(args: &Args) -> Result<Vec<Manifest>, BoxError> {
    // The operator as the Deployment runs it, for its RBAC; the client is never used.
    let offline = kube::Config::new("https://kubernetes.default.svc".parse()?);
    let mut operator = database::operator(kube::Client::try_from(offline)?, Handlers::new(), None);
    let ns = args.namespace.as_str();
    let mut command = vec!["database", "run"];
    match args.shards {
        Some(shards) => {
            operator = operator.replicas(Sharding::new("kube-fsm-examples", ns, shards));
            command = vec!["sharded", "--shards"];
        }
        None if args.replicas > 1 => {
            operator = operator.replicas(LeaderElection::new("kube-fsm-examples", ns));
            command.push("--leader-elect");
        }
        None => {}
    }
    let mut run: Vec<String> = command.iter().skip(1).map(|a| (*a).to_owned()).collect();
    run.extend(args.shards.map(|n| n.to_string()));
    let shared = [
        "--metrics-addr",
        "0.0.0.0:8080",
        "--identity",
        "$(POD_NAME)",
        "--lease-namespace",
        ns,
    ];
    run.extend(shared.map(str::to_owned));
    let mut deploy = Deploy::new("database-operator", ns, &args.image)
        .replicas(args.replicas)
        .command([command[0]]);
    if args.webhook {
        let dir = Deploy::webhook_cert_dir();
        run.extend([
            "--webhook-addr".into(),
            "0.0.0.0:9443".into(),
            "--webhook-tls".into(),
        ]);
        run.extend([format!("{dir}/tls.crt"), format!("{dir}/tls.key")]);
        let failure = if args.webhook_fail_open {
            FailurePolicy::Ignore
        } else {
            FailurePolicy::Fail
        };
        let namespaces = args
            .webhook_namespace_label
            .clone()
            .map(|(key, value)| LabelSelector {
                match_labels: Some([(key, value)].into()),
                ..LabelSelector::default()
            });
        deploy = deploy.webhook(9443, Policy::default(), failure, namespaces);
    }
    let rbac = operator.rbac();
    // What least privilege still reaches, because RBAC cannot narrow it: said, not hidden.
    for line in rbac.reach() {
        eprintln!("note: {line}");
    }
    Ok(deploy.args(run).manifests::<Database>(&rbac))
}

#[tokio::main] // a kube Client is made inside a runtime, even one never used
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = manifests(&args).and_then(|manifests| {
        for manifest in &manifests {
            let yaml = serde_saphyr::to_string(&manifest.object)?;
            match &args.out {
                Some(dir) => {
                    std::fs::create_dir_all(dir)?;
                    std::fs::write(dir.join(&manifest.file), yaml)?;
                }
                None => print!("---\n# {}\n{yaml}", manifest.file),
            }
        }
        Ok(ExitCode::SUCCESS)
    });
    result.unwrap_or_else(|err| {
        eprintln!("error: {err}");
        ExitCode::FAILURE
    })
}
