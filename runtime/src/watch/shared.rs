//! One watch per kind, namespace and selection for every machine of a process: the first
//! machine that watches a kind (owned children, or related objects through mappers) starts
//! the watch and its cache; every later machine with the same namespace and label and field
//! selectors subscribes to it (its own indexes added to the shared cache), as
//! controller-runtime's manager shares one informer per kind among its controllers.
//!
//! The watch is polled by one task once every machine has subscribed ([`SharedWatches::start`]),
//! and each of its objects is handed to every subscriber's controller as a trigger. Failures
//! and refusals of the watch are reported to every subscriber's health.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Client;
use kube::runtime::watcher;
use tokio::sync::mpsc;

use crate::watch::cache::{Cache, Watched};
use crate::watch::health::{self, Health};
use crate::watch::{cached, paced};

/// What identifies a watch that can be shared.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    kind: TypeId,
    namespace: Option<String>,
    labels: Option<String>,
    fields: Option<String>,
}

/// One shared watch of `R`: its cache, the watch (until started) and its subscribers.
struct Watch<R: Watched> {
    cache: Arc<Cache<R>>,
    /// The health the watch reports to (the first subscriber's; later ones follow it).
    health: Health,
    events: Option<BoxStream<'static, Result<R, watcher::Error>>>,
    subscribers: Vec<mpsc::UnboundedSender<R>>,
}

/// A watch not yet started, type-erased.
trait Startable: Send {
    /// Starts polling the watch (once); the task ends when every subscriber is gone.
    fn start(&mut self) -> Option<tokio::task::JoinHandle<()>>;
    fn as_any(&mut self) -> &mut dyn Any;
}

impl<R: Watched> Startable for Watch<R> {
    fn start(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let mut events = self.events.take()?;
        let subscribers = std::mem::take(&mut self.subscribers);
        Some(tokio::spawn(async move {
            let mut subscribers = subscribers;
            while let Some(event) = events.next().await {
                // The watch yields no errors (`paced` waits them out).
                let Ok(object) = event else { continue };
                subscribers.retain(|subscriber| subscriber.send(object.clone()).is_ok());
                if subscribers.is_empty() {
                    return;
                }
            }
        }))
    }

    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The watches the machines of one process share (see the module's documentation).
#[derive(Clone, Default)]
pub(crate) struct SharedWatches(Arc<Mutex<HashMap<Key, Box<dyn Startable>>>>);

impl std::fmt::Debug for SharedWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let watches = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("SharedWatches")
            .field("watches", &watches)
            .finish()
    }
}

/// Where a shared watch's subscriber reads from: the shared cache and its trigger stream.
pub(crate) struct Subscription<R: Watched> {
    /// The cache the watch fills (the subscriber's own indexes added).
    pub cache: Arc<Cache<R>>,
    /// Every object the watch delivers, as a trigger.
    pub objects: BoxStream<'static, Result<R, watcher::Error>>,
}

/// How a watch is started if this subscriber is the first.
pub(crate) struct Start<'a> {
    pub client: &'a Client,
    pub namespace: Option<&'a str>,
    pub health: &'a Health,
    pub reconnect_max: Duration,
}

impl SharedWatches {
    /// Subscribes to the watch of `R` in `namespace` with `config`'s selectors, starting it
    /// (with `own`, the subscriber's cache, as the shared one) if it is the first. A later
    /// subscriber's indexes are added to the shared cache.
    pub(crate) fn subscribe<R: Watched>(
        &self,
        own: &Arc<Cache<R>>,
        config: &watcher::Config,
        start: &Start<'_>,
    ) -> Subscription<R> {
        let key = Key {
            kind: TypeId::of::<R>(),
            namespace: start.namespace.map(str::to_owned),
            labels: config.label_selector.clone(),
            fields: config.field_selector.clone(),
        };
        let mut watches = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = watches.entry(key).or_insert_with(|| {
            let api = R::api_in::<R>(start.client.clone(), start.namespace);
            let events = paced(
                watcher::watcher(api, config.clone()),
                health::Watch::of::<R>(config, None),
                start.health.clone(),
                start.reconnect_max,
            );
            Box::new(Watch {
                cache: own.clone(),
                health: start.health.clone(),
                events: Some(cached(events, own.clone()).boxed()),
                subscribers: Vec::new(),
            })
        });
        let Some(watch) = entry.as_any().downcast_mut::<Watch<R>>() else {
            unreachable!("one watch per key, keyed by the kind's type");
        };
        if !Arc::ptr_eq(&watch.cache, own) {
            own.indexes_into(&watch.cache);
        }
        watch.health.also_report_to(start.health);
        let (sender, receiver) = mpsc::unbounded_channel();
        watch.subscribers.push(sender);
        Subscription {
            cache: watch.cache.clone(),
            objects: received(receiver).boxed(),
        }
    }

    /// Starts every watch subscribed to; the tasks are aborted when the returned guard drops.
    pub(crate) fn start(&self) -> Started {
        let mut watches = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Started(watches.values_mut().filter_map(|w| w.start()).collect())
    }
}

/// The tasks of started shared watches, aborted when dropped.
#[derive(Debug)]
pub(crate) struct Started(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Started {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

fn received<R: Send + 'static>(
    receiver: mpsc::UnboundedReceiver<R>,
) -> impl Stream<Item = Result<R, watcher::Error>> + Send + 'static {
    futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|object| (Ok(object), receiver))
    })
}
