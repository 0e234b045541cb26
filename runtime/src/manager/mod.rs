//! Several machines in one process, as controller-runtime's manager runs several controllers:
//! one client, one shutdown signal, one leader election or one shard set for all of them, one
//! watch (and cache) per watched kind and selection shared by every machine that watches it,
//! one metrics registry (each series labelled by machine) and one readiness that says which
//! machine's watches are down.

mod readiness;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;

use crate::engine::{EngineConfig, Reconcilable};
use crate::metrics::{MachineMetrics, Metrics};
use crate::operator::machine::{Machine, Signal};
use crate::operator::{Operator, Shutdown, Stopped};
use crate::replicas::shards::Shards;
use crate::replicas::{Held, Replicas};
use crate::watch::health::Health;
use crate::watch::shared::SharedWatches;

pub use readiness::Readiness;

/// Runs several state machines in one process.
///
/// Each machine is an [`Operator`] (its handlers and its wiring: `owns`, `watches`, scope,
/// concurrency, pacing); the Manager decides what they share. A handover (leader election or
/// sharding) moves every machine at once, with the engine's fencing: no write by a replica
/// that does not hold the Lease, no release with reconciles in flight.
///
/// ```no_run
/// # async fn demo<A, HA, B, HB>(client: kube::Client, a: HA, b: HB) where A: kube_fsm::Reconcilable<HA>, HA: Send + Sync + 'static, B: kube_fsm::Reconcilable<HB>, HB: Send + Sync + 'static {
/// use kube_fsm::{Manager, Operator};
/// use kube_fsm::replicas::LeaderElection;
///
/// let stopped = Manager::new(client.clone())
///     .machine(Operator::<A, HA>::new(client.clone(), a))
///     .machine(Operator::<B, HB>::new(client, b))
///     .replicas(LeaderElection::new("my-operator", "operators"))
///     .run()
///     .await;
/// # }
/// ```
pub struct Manager {
    client: Client,
    machines: Vec<Box<dyn Machine>>,
    replicas: Replicas,
    shutdown: Option<Shutdown>,
    metrics: Metrics,
    /// The Manager's own requests (the Leases).
    health: Health,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.machines.iter().map(|m| m.kind()).collect();
        f.debug_struct("Manager")
            .field("machines", &kinds)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A Manager with no machine yet, one replica, stopping on SIGTERM or Ctrl-C.
    pub fn new(client: Client) -> Self {
        Manager {
            client,
            machines: Vec::new(),
            replicas: Replicas::One,
            shutdown: None,
            metrics: Metrics::default(),
            health: Health::default(),
        }
    }

    /// The one-machine Manager of `operator` ([`Operator::run`]): its own replicas and
    /// shutdown signal are the Manager's.
    fn of<K, H>(mut operator: Operator<K, H>) -> Self
    where
        K: Reconcilable<H>,
        H: Send + Sync + 'static,
    {
        let (replicas, shutdown) = Machine::own_settings(&mut operator);
        let mut manager = Manager::new(Machine::client(&operator));
        manager.replicas = replicas;
        manager.shutdown = shutdown;
        // Its Lease requests count in the operator's own health, as they always have.
        manager.health = Machine::health(&operator);
        manager.machines.push(Box::new(operator));
        manager
    }

    /// Adds a machine. It records into the Manager's [`Manager::metrics`]; its replicas and
    /// shutdown signal are the Manager's (what it was told on its own is ignored, with a
    /// warning).
    #[must_use]
    pub fn machine<K, H>(mut self, mut operator: Operator<K, H>) -> Self
    where
        K: Reconcilable<H>,
        H: Send + Sync + 'static,
    {
        let (replicas, shutdown) = Machine::own_settings(&mut operator);
        if !matches!(replicas, Replicas::One) || shutdown.is_some() {
            tracing::warn!(
                kind = %Machine::kind(&operator),
                "a machine's own replicas and shutdown signal are ignored in a Manager: set them on the Manager"
            );
        }
        Machine::record_into(&mut operator, &self.metrics);
        self.machines.push(Box::new(operator));
        self
    }

    /// How the process's replicas share the work, for every machine at once: one replica
    /// (the default), one Lease for all machines, or one shard set for all machines (see
    /// [`Operator::replicas`]).
    #[must_use]
    pub fn replicas(mut self, replicas: impl Into<Replicas>) -> Self {
        self.replicas = replicas.into();
        self
    }

    /// Whether every machine's reconcile panics are caught (default `true`; see
    /// [`Operator::recover_panics`]): `false` lets a panic end the process. Applies to the
    /// machines added so far; add the others first.
    #[must_use]
    pub fn recover_panics(self, recover: bool) -> Self {
        self.configure(|config| config.recover_panics = recover)
    }

    /// Every machine's drain at the stop signal (see [`Operator::drain_timeout`]). Applies to
    /// the machines added so far; add the others first.
    #[must_use]
    pub fn drain_timeout(self, drain: Duration) -> Self {
        self.configure(|config| config.drain = drain)
    }

    /// Every machine's handler deadline (see [`Operator::handler_timeout`]). Applies to the
    /// machines added so far; add the others first.
    #[must_use]
    pub fn handler_timeout(self, deadline: Duration) -> Self {
        self.configure(|config| config.handler_timeout = deadline)
    }

    /// Every machine's watch stall timeout (see [`Operator::watch_stall_timeout`]). Applies to
    /// the machines added so far; add the others first.
    #[must_use]
    pub fn watch_stall_timeout(self, stall: Duration) -> Self {
        self.configure(|config| config.watch_stall = stall)
    }

    /// Sets what `set` sets in the engine settings of every machine added so far.
    fn configure(mut self, set: impl Fn(&mut EngineConfig)) -> Self {
        for machine in &mut self.machines {
            set(machine.config());
        }
        self
    }

    /// Stop every machine gracefully when `signal` completes (default: SIGTERM or Ctrl-C).
    #[must_use]
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + Sync + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// Every machine records into `metrics` (e.g. registered in a registry of your own, or
    /// shared by the Managers of a test) instead of the Manager's own; the machines added
    /// before too.
    #[must_use]
    pub fn record_into(mut self, metrics: &Metrics) -> Self {
        self.metrics = metrics.clone();
        for machine in &mut self.machines {
            machine.record_into(&self.metrics);
        }
        self
    }

    /// The metrics every machine records into (register them in a registry once).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Each machine, as data (for `/machine`, diagrams, generated manifests).
    pub fn descriptions(&self) -> Vec<crate::machine::description::Description> {
        self.machines.iter().map(|m| m.description()).collect()
    }

    /// Whether every machine's watches (and the Manager's Leases) are up, saying which are
    /// not: for a readiness probe. Get it before [`Manager::run`].
    pub fn readiness(&self) -> Readiness {
        let mut parts: Vec<(String, Health)> = self
            .machines
            .iter()
            .map(|m| (m.kind(), m.health()))
            .collect();
        if !matches!(self.replicas, Replicas::One) {
            parts.push(("the Leases".to_owned(), self.health.clone()));
        }
        Readiness::new(parts)
    }

    /// Runs every machine until the shutdown signal, or, with leader election, until the
    /// Lease is lost (then exit the process and let it be restarted). Reconciles under way
    /// finish before it returns, within the drain ([`Manager::drain_timeout`]). See
    /// [`Operator::run`] for the guarantees.
    pub async fn run(mut self) -> Stopped {
        let signal: Signal = self.shutdown.take().unwrap_or_else(termination).shared();
        let machines = std::mem::take(&mut self.machines);
        let metrics: Vec<Arc<MachineMetrics>> =
            machines.iter().map(|m| m.machine_metrics()).collect();
        let leading = |on: bool| metrics.iter().for_each(|m| m.leader(on));
        match std::mem::take(&mut self.replicas) {
            Replicas::One => {
                leading(true);
                run_all(machines, signal, Held::Everything).await;
                leading(false);
                Stopped::Signal
            }
            Replicas::Sharded(sharding) => {
                let shards = Shards::new(sharding, metrics.clone());
                let leases =
                    shards
                        .clone()
                        .run(self.client.clone(), self.health.clone(), signal.clone());
                futures::future::join(leases, run_all(machines, signal, Held::Shards(shards)))
                    .await;
                Stopped::Signal
            }
            Replicas::LeaderElection(election) => {
                let stopped = election
                    .lead(
                        self.client.clone(),
                        &self.health,
                        signal.clone(),
                        |lease| async {
                            let stop: Shutdown = Box::pin(
                                futures::future::select(signal, Box::pin(lease.lost())).map(|_| ()),
                            );
                            leading(true);
                            run_all(machines, stop.shared(), Held::Lease(lease)).await;
                            leading(false);
                        },
                    )
                    .await
                    .map_or(Stopped::LeaseLost, |()| Stopped::Signal);
                leading(false);
                stopped
            }
        }
    }
}

/// Wires every machine for what `held` gives them (unsharded, their watches of other kinds
/// shared), then runs them all until `stop`.
async fn run_all(machines: Vec<Box<dyn Machine>>, stop: Signal, held: Held) {
    let shared = SharedWatches::default();
    let share = held.shards().is_none().then_some(&shared);
    let running: Vec<_> = machines
        .into_iter()
        .map(|machine| machine.prepare(stop.clone(), held.clone(), share))
        .collect();
    let _started = shared.start();
    futures::future::join_all(running).await;
}

impl<K, H> Operator<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Runs until the shutdown signal, or, with leader election, until the Lease is lost
    /// (then exit the process and let it be restarted): the one-machine [`Manager`].
    ///
    /// # Errors
    ///
    /// None reach the caller: a failed reconcile is retried with per-object backoff (and
    /// recorded as a `ReconcileFailed` Event, a metric and a log line), a failed watch
    /// reconnects with backoff. [`Stopped`] says why `run` returned: the signal, or
    /// [`Stopped::LeaseLost`] (exit the process then, so that a restart waits for the Lease).
    ///
    /// # Guarantees
    ///
    /// An object's status moves only along the spec's edges (every write is locked on the
    /// resourceVersion its step read); a transition is never lost to a conflict or an API
    /// error (the reconcile runs again on what the server holds); with
    /// [`Operator::replicas`], no two replicas reconcile one object at once. On the signal,
    /// reconciles waiting for a slot end at once, and those under way finish within the drain
    /// ([`Operator::drain_timeout`]; then they are cancelled) before `run` returns.
    pub async fn run(self) -> Stopped {
        Manager::of(self).run().await
    }
}

/// SIGTERM or Ctrl-C (SIGINT), as a future; the handlers are installed when this is called,
/// not when the future is first polled, so a signal during start-up is not the default
/// action's (the process killed uncleanly). A second signal after the first ends the process
/// at once (exit code 1), as controller-runtime's signal handler does: for a stop that
/// hangs. Call it first thing in `main` and give it to [`Manager::shutdown_on`]; the Manager
/// calls it itself when it is given nothing.
pub fn termination() -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = signal(SignalKind::terminate())
            .and_then(|term| signal(SignalKind::interrupt()).map(|int| (term, int)));
        if let Ok((mut term, mut int)) = streams {
            return Box::pin(async move {
                let mut either = async move || {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                };
                either().await;
                tracing::info!("stopping; a second signal ends the process at once");
                tokio::spawn(async move {
                    either().await;
                    tracing::warn!("a second signal: ending the process now");
                    std::process::exit(1);
                });
            });
        }
    }
    Box::pin(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
