//! The wiring of one machine's kube `Controller` (watch, caches, engine, recovery) and its
//! running until a stop signal; the [`crate::manager::Manager`] runs it, around it leader
//! election or sharding.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::runtime::{Controller, controller, reflector, watcher};

use super::Operator;
use crate::engine::stop::Stop;
use crate::engine::{Engine, Reconcilable, arrival_key};
use crate::handler::context::Context;
use crate::operator::sources::Wire;
use crate::replicas::Held;
use crate::replicas::shard_label::Labeller;
use crate::replicas::turn::Turns;
use crate::watch::health::ReconnectBackoff;
use crate::watch::pace::{self, Pace};
use crate::watch::shared::SharedWatches;
use crate::watch::{self, Lenient};

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
    /// Wires the controller (its watches subscribed to `shared` ones in a Manager) and
    /// returns it running until `stop`: the controller, and with sharding the labeller beside
    /// it (stopped with the controller, also when the future is dropped: a caller's
    /// `select!`, an aborted task; a labeller left running would label objects for a replica
    /// that no longer serves anything).
    pub(crate) fn wired(
        self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
        held: Held,
        shared: Option<&SharedWatches>,
    ) -> BoxFuture<'static, ()> {
        let health = self.health.clone();
        let selector = self.watcher.label_selector.clone();
        let namespace = self.namespace.clone();
        let (controller, engine, labeller) = self.build(stop, held, shared);
        async move {
            // With sharding: labels new objects while this replica serves shard 0.
            let beside = Beside(
                labeller
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
                        // Reconcile failures are reported by the error policy; objects gone
                        // before their scheduled reconcile are expected.
                        Err(err) => tracing::debug!(%err, "controller event"),
                        Ok(_) => {}
                    }
                    std::future::ready(())
                })
                .await;
            drop(beside);
        }
        .boxed()
    }

    fn build(
        self,
        stop: impl Future<Output = ()> + Send + Sync + 'static,
        held: Held,
        shared: Option<&SharedWatches>,
    ) -> (Controller<K>, Arc<Engine<K, H>>, Option<Labeller>) {
        let shards = held.shards().cloned();
        let namespace = self.namespace.as_deref();
        let api = K::api_in::<Lenient<K>>(self.client.clone(), namespace);
        let (reader, writer) = reflector::store::<K>();
        self.health.record_into(self.metrics.clone());
        self.health.refusals_last_for(self.config.reconnect_max);
        let config = watch::bounded(self.watcher, self.config.watch_stall);
        let watched = watch::Watch::of::<K>(&config, None);
        let events = match &shards {
            // The controller's own store needs no gate: objects are triggered once listed.
            Some(shards) => watch::selected(api, config, shards.selector(), || {}).boxed(),
            None => watcher::watcher(api, config).boxed(),
        };
        let reconnect_max = self.config.reconnect_max;
        let events = watch::paced(events, watched, self.health.clone(), reconnect_max);
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
        // so its trigger backoff never pauses the other watches. The bound on reconciles in
        // flight is the engine's `Pace`, whose waiters are served in the order they came;
        // kube's controller admits a window of reconciles several times that bound (see
        // `pace::window`), waiting in that line.
        let mut controller = Controller::for_stream(objects, reader)
            .with_config(controller::Config::default().concurrency(pace::window(self.concurrency)))
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
                stall: self.config.watch_stall,
                labeller: labeller.as_ref(),
                caches: &self.caches,
                // Sharded, each machine watches its children by the served shards' label.
                shared: shared.filter(|_| labeller.is_none()),
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
            .with_turns(match (held, &labeller) {
                (_, Some(labeller)) => Turns::sharded(labeller.clone()),
                (Held::Lease(leading), None) => Turns::leading(leading),
                _ => Turns::every(),
            }),
        );
        let stop = Stop::new(stop, self.config.drain);
        let requested = stop.requested();
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
            .stopping_on(stop),
        );
        let controller = controller
            .reconcile_on(engine.clone().recovery())
            .graceful_shutdown_on(requested);
        (controller, engine, labeller)
    }
}
