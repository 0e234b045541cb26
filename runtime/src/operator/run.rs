//! Running an [`Operator`]: the shutdown signal, leader election or sharding around the
//! controller, and the wiring of kube's `Controller` (watch, caches, engine, recovery).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::Shared;
use futures::{FutureExt, StreamExt};
use kube::runtime::{Controller, controller, reflector, watcher};

use super::{Operator, Replicas, Stopped};
use crate::engine::{Engine, Reconcilable, arrival_key};
use crate::ha::shard_label::Labeller;
use crate::ha::shards::Shards;
use crate::handling::context::Context;
use crate::operator::sources::Wire;
use crate::watch::health::ReconnectBackoff;
use crate::watch::pace::Pace;
use crate::watch::{self, Lenient};

type Signal = Shared<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>;

/// The tasks that run beside the controller (the labeller), aborted when dropped.
struct Beside(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Beside {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl<K, H> Operator<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Runs until the shutdown signal, or, with leader election, until the Lease is lost
    /// (then exit the process and let it be restarted).
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
    /// reconciles under way finish before `run` returns.
    pub async fn run(mut self) -> Stopped {
        let signal: Signal = self
            .shutdown
            .take()
            .unwrap_or_else(|| Box::pin(termination()))
            .shared();
        match std::mem::take(&mut self.replicas) {
            Replicas::One => {
                let metrics = self.metrics.clone();
                metrics.leader(true);
                self.run_controller(signal, None).await;
                metrics.leader(false);
                Stopped::Signal
            }
            Replicas::Sharded(sharding) => {
                let shards = Shards::new(sharding, self.metrics.clone());
                let leases =
                    shards
                        .clone()
                        .run(self.client.clone(), self.health.clone(), signal.clone());
                let controller = self.run_controller(signal, Some(shards));
                futures::future::join(leases, controller).await;
                Stopped::Signal
            }
            Replicas::LeaderElection(election) => {
                let (client, health) = (self.client.clone(), self.health.clone());
                let metrics = self.metrics.clone();
                let stopped = election
                    .lead(client, &health, signal.clone(), |lost| async move {
                        let stop = futures::future::select(signal, lost).map(|_| ());
                        self.metrics.leader(true);
                        let metrics = self.metrics.clone();
                        self.run_controller(stop, None).await;
                        metrics.leader(false);
                    })
                    .await
                    .map_or(Stopped::LeaseLost, |()| Stopped::Signal);
                metrics.leader(false);
                stopped
            }
        }
    }

    async fn run_controller(
        self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
        shards: Option<Arc<Shards>>,
    ) {
        let health = self.health.clone();
        let selector = self.watcher.label_selector.clone();
        let namespace = self.namespace.clone();
        let (controller, engine) = self.build(stop, shards);
        // With sharding: labels new objects while this replica serves shard 0.
        // Stopped with the controller, also when this future is dropped (a caller's `select!`,
        // an aborted task): a labeller left running would label objects for a replica that
        // no longer serves anything.
        let beside = Beside(
            engine
                .labeller
                .clone()
                .map(|labeller| {
                    let api = K::api_in::<kube::core::PartialObjectMeta<K>>(
                        labeller.client.clone(),
                        namespace.as_deref(),
                    );
                    tokio::spawn(labeller.assign(api, selector))
                })
                .into_iter()
                .collect(),
        );
        controller
            .run(Engine::reconcile, Engine::error_policy, engine)
            .for_each(|result| {
                match result {
                    // Watch and list failures: the controller backs off and retries.
                    Err(controller::Error::QueueError(err)) => health.lost(&err),
                    Err(controller::Error::RunnerError(err)) => {
                        tracing::warn!(%err, "controller runner failed");
                    }
                    // Reconcile failures are reported by the error policy; objects gone before
                    // their scheduled reconcile are expected.
                    Err(err) => tracing::debug!(%err, "controller event"),
                    Ok(_) => {}
                }
                std::future::ready(())
            })
            .await;
        drop(beside);
    }

    fn build(
        self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
        shards: Option<Arc<Shards>>,
    ) -> (Controller<K>, Arc<Engine<K, H>>) {
        let namespace = self.namespace.as_deref();
        let api = K::api_in::<Lenient<K>>(self.client.clone(), namespace);
        let (reader, writer) = reflector::store::<K>();
        self.health.record_into(self.metrics.clone());
        self.health.refusals_last_for(self.config.reconnect_max);
        let events = match &shards {
            // The controller's own store needs no gate: objects are triggered once listed.
            Some(shards) => watch::selected(api, self.watcher, shards.selector(), || {}).boxed(),
            None => watcher::watcher(api, self.watcher).boxed(),
        };
        let reconnect_max = self.config.reconnect_max;
        let events = watch::paced(
            events,
            K::kind(&()).into_owned(),
            self.health.clone(),
            reconnect_max,
        );
        let pace = Arc::new(
            Pace::new(
                (self.concurrency > 0).then_some(usize::from(self.concurrency)),
                self.write_rate,
            )
            .with_metrics(self.metrics.clone()),
        );
        // Each change takes its object's place in line for a slot as it arrives.
        let arrivals = pace.clone();
        let objects = watch::objects(events, writer, self.metrics.clone()).inspect(move |object| {
            if let Ok(object) = object {
                arrivals.arrived(arrival_key(object));
            }
        });
        // Each watch waits out its own failures (`watch::paced`): none reaches the controller,
        // so its trigger backoff never pauses the other watches. Kube's controller runs every
        // trigger at once: the bound on reconciles in flight is the engine's `Pace`, whose
        // waiters are served in the order they came. (Kube's own bound keeps the triggers it
        // holds back in a set and takes them in no order: at 1 000 objects and a bound of 32,
        // the unluckiest waited seconds behind objects that came after them.)
        let mut controller = Controller::for_stream(objects, reader)
            .with_config(controller::Config::default())
            .trigger_backoff(ReconnectBackoff::new(reconnect_max));
        let labeller = shards.map(|shards| Labeller {
            client: self.client.clone(),
            shards,
            field_manager: self.config.field_manager.clone(),
            metrics: self.metrics.clone(),
            children: Arc::default(),
        });
        controller = self.sources.wire(
            controller,
            &Wire {
                client: &self.client,
                namespace,
                shards: &labeller.as_ref().map(|l| l.shards.selector()),
                health: &self.health,
                reconnect_max,
                labeller: labeller.as_ref(),
                caches: &self.caches,
            },
        );
        let _ = self.store.set(controller.store());
        let context = Arc::new(
            Context::with_manager(
                self.client,
                &self.config.reporter,
                &self.config.field_manager,
                self.caches,
                pace,
            )
            .with_sharding(labeller.as_ref().map(|l| l.shards.sharding.clone())),
        );
        let engine = Arc::new(
            Engine::new(
                self.namespace,
                self.handler,
                self.config,
                self.metrics,
                self.store,
                self.health,
                context,
            )
            .sharded(labeller),
        );
        let controller = controller
            .reconcile_on(engine.clone().recovery())
            .graceful_shutdown_on(stop);
        (controller, engine)
    }
}

/// SIGTERM or Ctrl-C.
async fn termination() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}
