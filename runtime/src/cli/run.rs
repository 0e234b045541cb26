//! `run`: every machine in one [`Manager`], its endpoint (`/metrics`, `/healthz`, `/readyz`,
//! `/machine`) and, when asked, one admission webhook for every kind, until SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use super::args::RunArgs;
use super::{App, CliError, logging};
use crate::admission::{Policy, ServingCertificate, Webhook, WebhookHealth, WebhookMetrics};
use crate::ha::leader::LeaderElection;
use crate::ha::shard::Sharding;
use crate::manager::Manager;
use crate::operator::Stopped;
use crate::serve::Endpoints;

/// Runs the operator; exit code 1 when this replica lost its Lease (to be restarted).
pub(super) fn run(app: &App, args: &RunArgs) -> Result<ExitCode, CliError> {
    logging::init(&args.log_level, args.log_format)?;
    App::runtime()?.block_on(serve(app, args))
}

async fn serve(app: &App, args: &RunArgs) -> Result<ExitCode, CliError> {
    let config = kube::Config::infer()
        .await
        .map_err(|err| CliError::Cluster(err.to_string()))?;
    // Without kube's own retry of 429/503/504: the engine paces and retries on what it sees.
    let client =
        crate::watch::client::client(config).map_err(|err| CliError::Cluster(err.to_string()))?;
    let namespace = args.namespace.as_deref();
    let mut manager = Manager::new(client.clone());
    for machine in &app.machines {
        manager = machine.add_to(manager, client.clone(), namespace);
    }
    let lease_namespace = (args.lease_namespace.as_deref())
        .or(namespace)
        .unwrap_or("default");
    let duration = Duration::from_secs(args.lease_duration);
    if args.leader_elect {
        let mut election = LeaderElection::new(&app.name, lease_namespace).duration(duration);
        if let Some(identity) = &args.identity {
            election = election.identity(identity);
        }
        tracing::info!(
            identity = election.holder_identity(),
            "waiting for the Lease"
        );
        manager = manager.replicas(election);
    } else if let Some(shards) = args.shards {
        let mut sharding = Sharding::new(&app.name, lease_namespace, shards).duration(duration);
        if let Some(identity) = &args.identity {
            sharding = sharding.identity(identity);
        }
        manager = manager.replicas(sharding);
    }
    let mut endpoints = Endpoints::of(&manager);
    if args.metrics_auth {
        endpoints = endpoints.authorize(client.clone());
    }
    let webhook = match args.webhook_addr {
        Some(addr) => Some(webhook(app, args, addr, &client, &mut endpoints).await?),
        None => None,
    };
    let (addr, _server) = endpoints
        .webhook(webhook)
        .serve(args.metrics_addr)
        .await
        .map_err(|err| {
            CliError::Invalid(format!("cannot serve on {}: {err}", args.metrics_addr))
        })?;
    let kinds: Vec<String> = app.machines.iter().map(|m| m.kind()).collect();
    tracing::info!(
        kinds = %kinds.join(", "),
        metrics = %format!("http://{addr}/metrics"),
        machine = %format!("http://{addr}/machine"),
        "starting the {} operator", app.name
    );
    if manager.run().await == Stopped::LeaseLost {
        tracing::error!("lost the Lease; exiting so that a restart waits for it again");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Serves every kind's admission reviews (and conversions) on `addr`, in its own task.
async fn webhook(
    app: &App,
    args: &RunArgs,
    addr: SocketAddr,
    client: &Client,
    endpoints: &mut Endpoints,
) -> Result<WebhookHealth, CliError> {
    let invalid = |err: &dyn std::fmt::Display| CliError::Invalid(err.to_string());
    let [cert, key] = args.webhook_tls.as_deref().unwrap_or_default() else {
        return Err(CliError::Invalid(
            "--webhook-addr needs --webhook-tls CERT KEY".to_owned(),
        ));
    };
    let certificate = ServingCertificate::from_files(cert, key).map_err(|e| invalid(&e))?;
    let kinds: Vec<String> = app.machines.iter().map(|m| m.kind()).collect();
    if let Some((kind, _)) = args.webhook_policy.iter().find(|(k, _)| !kinds.contains(k)) {
        return Err(CliError::Invalid(format!(
            "--webhook-policy names {kind:?}, which this operator does not run ({})",
            kinds.join(", ")
        )));
    }
    let mut validators = Vec::new();
    for machine in &app.machines {
        let kind = machine.kind();
        let policy = match args.webhook_policy.iter().find(|(k, _)| *k == kind) {
            Some((_, path)) => read_policy(path)?,
            None => Policy::default(),
        };
        let validator = machine
            .validator(policy)
            .map_err(|err| CliError::Invalid(format!("the {kind} policy: {err}")))?;
        validators.push(validator);
    }
    let mut validators = validators.into_iter();
    let first = validators.next().ok_or_else(|| invalid(&"no machine"))?;
    let mut webhook = Webhook::bind(addr, first, certificate)
        .await
        .map_err(|e| invalid(&e))?;
    for validator in validators {
        webhook = webhook.validator(validator);
    }
    for converter in app.machines.iter().filter_map(|m| m.converter()) {
        webhook = webhook.converter(converter);
    }
    let metrics = WebhookMetrics::default();
    metrics.register(endpoints.registry());
    webhook = webhook.metrics(&metrics);
    if let Some(pod) = this_pod() {
        let reporter = Reporter::from(format!("{}-webhook", app.name));
        webhook = webhook.events(Recorder::new(client.clone(), reporter), pod);
    }
    let health = webhook.health();
    tracing::info!(addr = %webhook.local_addr(), kinds = %kinds.join(", "), "serving the admission webhook");
    tokio::spawn(webhook.run());
    Ok(health)
}

/// A policy file (YAML).
fn read_policy(path: &PathBuf) -> Result<Policy, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| CliError::File {
        path: path.clone(),
        source,
    })?;
    serde_saphyr::from_str(&text)
        .map_err(|err| CliError::Invalid(format!("{}: {err}", path.display())))
}

/// This Pod (from `POD_NAME` and `POD_NAMESPACE`, which the generated Deployment sets), which
/// the webhook's certificate Events are about; `None` outside a Pod.
fn this_pod() -> Option<ObjectReference> {
    let (name, namespace) = (
        std::env::var("POD_NAME").ok()?,
        std::env::var("POD_NAMESPACE").ok()?,
    );
    Some(ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(name),
        namespace: Some(namespace),
        ..ObjectReference::default()
    })
}
