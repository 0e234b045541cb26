//! An [`Operator`] as one machine among several in a [`crate::manager::Manager`]: its kind,
//! health and metrics, and its controller wired and run under the Manager's stop signal,
//! what the replica holds (the Lease, a shard set) and shared watches.

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::Client;

use super::{Operator, Replicas, Shutdown};
pub(crate) use crate::engine::stop::Signal;
use crate::engine::{EngineConfig, Reconcilable};
use crate::machine::description::Description;
use crate::metrics::{MachineMetrics, Metrics};
use crate::replicas::Held;
use crate::watch::health::Health;
use crate::watch::shared::SharedWatches;

/// A machine, its handler's type erased.
pub(crate) trait Machine: Send {
    /// The kind it reconciles.
    fn kind(&self) -> String;
    /// The client it was built with.
    fn client(&self) -> Client;
    /// Its machine, as data.
    fn description(&self) -> Description;
    /// Its controller's connection state.
    fn health(&self) -> Health;
    /// Its metrics.
    fn machine_metrics(&self) -> Arc<MachineMetrics>;
    /// Records into `metrics` (the Manager's), labelled by its kind.
    fn record_into(&mut self, metrics: &Metrics);
    /// What it was told about replicas and shutdown on its own (the Manager decides them).
    fn own_settings(&mut self) -> (Replicas, Option<Shutdown>);
    /// Its engine's settings, for the Manager's machine-wide options
    /// ([`Operator::recover_panics`], [`Operator::handler_timeout`]).
    fn config(&mut self) -> &mut EngineConfig;
    /// Its controller, wired, running until `stop`, for the objects `held` gives it.
    fn prepare(
        self: Box<Self>,
        stop: Signal,
        held: Held,
        shared: Option<&SharedWatches>,
    ) -> BoxFuture<'static, ()>;
}

impl<K, H> Machine for Operator<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    fn kind(&self) -> String {
        K::kind(&()).into_owned()
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn description(&self) -> Description {
        Description::of(K::machine())
    }

    fn health(&self) -> Health {
        self.health.clone()
    }

    fn machine_metrics(&self) -> Arc<MachineMetrics> {
        self.metrics.clone()
    }

    fn record_into(&mut self, metrics: &Metrics) {
        self.metrics = Arc::new(metrics.for_machine(self.store.clone()));
    }

    fn own_settings(&mut self) -> (Replicas, Option<Shutdown>) {
        (std::mem::take(&mut self.replicas), self.shutdown.take())
    }

    fn config(&mut self) -> &mut EngineConfig {
        &mut self.config
    }

    fn prepare(
        self: Box<Self>,
        stop: Signal,
        held: Held,
        shared: Option<&SharedWatches>,
    ) -> BoxFuture<'static, ()> {
        self.wired(stop, held, shared)
    }
}
