//! Wiring the Database handlers into a kube-fsm operator.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::runtime::watcher;
use kube_fsm::Stopped;
use kube_fsm::controller::LeaderElection;
use prometheus_client::registry::Registry;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::BoxError;
use crate::database::{self, Database, Handlers, child_selector};

/// The operator for `handlers`: Databases in `namespace` (or everywhere), reconciled again when
/// a child ConfigMap they control changes. Only the children (by label) are watched.
pub fn operator(
    client: Client,
    handlers: Handlers,
    namespace: Option<&str>,
) -> kube_fsm::Operator<Database, Handlers> {
    let operator = kube_fsm::Operator::<Database, Handlers>::new(client, handlers)
        .reporter("kube-fsm-examples")
        .owns::<ConfigMap>(watcher::Config::default().labels(&child_selector()));
    match namespace {
        Some(namespace) => operator.namespace(namespace),
        None => operator,
    }
}

/// An operator running in this process, in its own task.
#[derive(Debug)]
pub struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Stopped>,
}

impl Running {
    /// Starts the operator for `handlers` on `namespace`.
    pub fn start(client: Client, handlers: Handlers, namespace: &str) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let operator = operator(client, handlers, Some(namespace)).shutdown_on(async move {
            // A dropped sender stops the operator as well.
            let _ = stopped.await;
        });
        Running {
            stop,
            task: tokio::spawn(operator.run()),
        }
    }

    /// Stops gracefully: in-flight reconciles finish, nothing new starts. Gives up after
    /// `patience` (the task is then aborted). Returns whether it stopped in time.
    pub async fn stop(self, patience: Duration) -> bool {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(patience, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }
}

/// The options of `run`.
#[derive(Debug)]
pub struct RunOptions {
    /// Watch this namespace only (default: all).
    pub namespace: Option<String>,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: SocketAddr,
    /// Reconcile only while holding this Lease.
    pub election: Option<LeaderElection>,
    /// Which of the engine's Events to record.
    pub events: kube_fsm::controller::RecordedEvents,
    /// At most this many reconciles at once (0: unbounded).
    pub concurrency: u16,
    /// How long the Pending and Provisioning handlers wait, as on an external system.
    pub handler_latency: std::time::Duration,
    /// Spread the objects over the replicas running with the same sharding.
    pub sharding: Option<kube_fsm::controller::Sharding>,
    /// The field manager of every write, if not kube-fsm's default.
    pub field_manager: Option<String>,
    /// Serve (and maybe register) the admission webhook.
    pub webhook: Option<crate::webhook::Options>,
}

/// `run`: the operator as it would run in a cluster, until Ctrl-C or SIGTERM (or, with leader
/// election, until the Lease is lost: exit 1, to be restarted).
pub async fn run(options: RunOptions) -> Result<ExitCode, BoxError> {
    // Without kube's own retry of 429/503/504: the engine paces and retries on what it sees.
    let client = kube_fsm::client(kube::Config::infer().await?)?;
    let handlers = Handlers::new().with_latency(options.handler_latency);
    let mut registry = Registry::default();
    let metrics = kube_fsm::metrics::Metrics::default();
    metrics.register(&mut registry);
    let mut operator = operator(client.clone(), handlers, options.namespace.as_deref())
        .metrics(&metrics)
        .record_events(options.events)
        .concurrency(options.concurrency);
    if let Some(manager) = options.field_manager {
        operator = operator.field_manager(manager);
    }
    let webhook = match &options.webhook {
        Some(webhook) => {
            let started = crate::webhook::start(&client, webhook, &mut registry).await?;
            tracing::info!(
                addr = %started.addr,
                registered = started.registered.as_deref().unwrap_or("(no)"),
                "serving the admission webhook"
            );
            Some(started.health)
        }
        None => None,
    };
    let (addr, _server) =
        crate::serve::metrics(options.metrics_addr, registry, operator.health(), webhook).await?;
    tracing::info!(
        namespace = options.namespace.as_deref().unwrap_or("(all)"),
        metrics = %format!("http://{addr}/metrics"),
        "starting the {} operator",
        database::DatabasePhase::MACHINE.kind
    );
    if let Some(sharding) = options.sharding {
        tracing::info!(
            identity = sharding.holder_identity(),
            "holding a share of the shards"
        );
        operator = operator.replicas(sharding);
    }
    if let Some(election) = options.election {
        tracing::info!(
            identity = election.holder_identity(),
            "waiting for the Lease"
        );
        operator = operator.replicas(election);
    }
    if operator.run().await == Stopped::LeaseLost {
        tracing::error!("lost the Lease; exiting so that a restart waits for it again");
        return Ok(ExitCode::FAILURE);
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}
