//! `run`: every machine in one [`Manager`], its endpoint (`/metrics`, `/healthz`, `/readyz`,
//! `/machine`) and, when asked, one admission webhook for every kind, until SIGTERM.

use std::process::ExitCode;

use futures::FutureExt;

use super::args::RunArgs;
use super::{App, CliError, logging, webhook};
use kube_fsm::Manager;
use kube_fsm::Stopped;
use kube_fsm::admission::ServingCertificate;
use kube_fsm::replicas::Replicas;
use kube_fsm::serve::Endpoints;

/// Runs the operator; exit code 1 when this replica lost its Lease (to be restarted).
pub(super) fn run(app: &App, args: &RunArgs) -> Result<ExitCode, CliError> {
    logging::init(&args.log_level, args.log_format)?;
    App::runtime()?.block_on(serve(app, args))
}

async fn serve(app: &App, args: &RunArgs) -> Result<ExitCode, CliError> {
    // First: a signal during start-up stops the operator as one later does (the webhook's
    // registration removed), not by the default action.
    let stop = kube_fsm::manager::termination().shared();
    let config = kube::Config::infer()
        .await
        .map_err(|err| CliError::Cluster(err.to_string()))?;
    // Without kube's own retry of 429/503/504: the engine paces and retries on what it sees.
    let client = kube_fsm::client(config).map_err(|err| CliError::Cluster(err.to_string()))?;
    let namespace = args.namespace.as_deref();
    let mut manager = Manager::new(client.clone());
    for machine in &app.machines {
        manager = machine.add_to(manager, client.clone(), namespace);
    }
    let replicas = args.replicas(&app.name);
    if let Replicas::LeaderElection(election) = &replicas {
        tracing::info!(
            identity = election.holder_identity(),
            "waiting for the Lease"
        );
    }
    manager = manager
        .replicas(replicas)
        .recover_panics(!args.crash_on_panic)
        .drain_timeout(std::time::Duration::from_secs(args.drain_timeout))
        .watch_stall_timeout(std::time::Duration::from_secs(args.watch_stall_timeout))
        .shutdown_on(stop);
    if let Some(secs) = args.handler_timeout {
        manager = manager.handler_timeout(std::time::Duration::from_secs(secs));
    }
    let mut endpoints = Endpoints::of(&manager);
    if args.metrics_auth {
        endpoints = endpoints.authorize(client.clone());
    }
    let scheme = if args.metrics_auth || args.metrics_tls.is_some() {
        endpoints = endpoints
            .tls(metrics_certificate(args)?)
            .map_err(|err| CliError::Invalid(format!("the metrics certificate: {err}")))?;
        "https"
    } else {
        "http"
    };
    let webhook = match args.webhook_addr {
        Some(addr) => Some(webhook::start(app, args, addr, &client, endpoints.registry()).await?),
        None => None,
    };
    let (addr, _server) = endpoints
        .webhook(webhook.as_ref().map(|w| w.health.clone()))
        .serve(args.metrics_addr)
        .await
        .map_err(|err| {
            CliError::Invalid(format!("cannot serve on {}: {err}", args.metrics_addr))
        })?;
    let kinds: Vec<String> = app.machines.iter().map(|m| m.kind()).collect();
    tracing::info!(
        kinds = %kinds.join(", "),
        metrics = %format!("{scheme}://{addr}/metrics"),
        machine = %format!("{scheme}://{addr}/machine"),
        "starting the {} operator", app.name
    );
    let stopped = manager.run().await;
    if let Some(name) = webhook.and_then(|w| w.registered) {
        webhook::unregister(&client, &name).await;
    }
    if stopped == Stopped::LeaseLost {
        tracing::error!("lost the Lease; exiting so that a restart waits for it again");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The endpoint's certificate: `--metrics-tls` files, or one signed for itself (scrapers then
/// skip verification, as the generated ServiceMonitor does, or pin it).
fn metrics_certificate(args: &RunArgs) -> Result<ServingCertificate, CliError> {
    let certificate = match args.metrics_tls.as_deref() {
        Some([cert, key]) => ServingCertificate::from_files(cert, key),
        Some(_) => {
            return Err(CliError::Invalid(
                "--metrics-tls takes two files: CERT KEY".to_owned(),
            ));
        }
        None => {
            let ip = args.metrics_addr.ip();
            let ip = (!ip.is_unspecified()).then(|| ip.to_string());
            let hosts: Vec<&str> = std::iter::once("localhost").chain(ip.as_deref()).collect();
            ServingCertificate::self_signed(&hosts)
        }
    };
    certificate.map_err(|err| CliError::Invalid(format!("the metrics certificate: {err}")))
}
