//! The operator's watches of other kinds: one watch per kind, whether the kind is owned
//! (its changes reconcile the owners), watched through mappers (its changes reconcile the
//! objects a mapper names), or both. Each watch fills the kind's [`Cache`].

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource};

use crate::handler::context::Caches;
use crate::pure::selection::{self, Selection};
use crate::replicas::shard_children::Unlabelled;
use crate::replicas::shard_label::Labeller;
use crate::watch;
use crate::watch::cache::{Cache, Watched};
use crate::watch::health::Health;
use crate::watch::shared::{SharedWatches, Start};

/// Names the objects of `K` to reconcile when an object of another kind changes.
type Mapper<K, R> = Box<dyn Fn(&R) -> Vec<ObjectRef<K>> + Send + Sync>;

/// With sharding: the label selector of the served shards (see [`watch::selected`]).
type Selector = Option<tokio::sync::watch::Receiver<Option<String>>>;

/// Adds one kind's watch to a controller.
type Wiring<K> = Box<dyn FnOnce(Controller<K>, &Wire<'_>) -> Controller<K> + Send>;

/// What every watch is wired with.
pub(crate) struct Wire<'a> {
    pub client: &'a Client,
    pub namespace: Option<&'a str>,
    /// With sharding: the served shards' label selector.
    pub shards: &'a Selector,
    /// Where each watch reports its failures (see [`watch::paced`]).
    pub health: &'a Health,
    /// The longest wait before a failed watch starts again.
    pub reconnect_max: Duration,
    /// How long a watch may deliver nothing before it is restarted (see [`watch::bounded`]).
    pub stall: Duration,
    /// With sharding: the label writer, for the children of owned kinds that lack a label.
    pub labeller: Option<&'a Labeller>,
    /// Where the caches of unlabelled children go (each is waited for like any cache).
    pub caches: &'a Caches,
    /// In a [`crate::manager::Manager`] (unsharded): the watches its machines share.
    pub shared: Option<&'a SharedWatches>,
}

/// What the operator asked of one kind `R`.
struct Source<K: Resource, R> {
    config: watcher::Config,
    /// Set by the spec's `children:` only: the first explicit `owns`/`watches` gives the config.
    provisional: bool,
    owners: bool,
    mappers: Vec<Mapper<K, R>>,
}

/// A kind's watch both owned and mapped, or either.
type Shared<K, R> = Arc<Mutex<Option<Source<K, R>>>>;

/// The watches of the kinds related to `K`.
pub(crate) struct Sources<K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static> {
    by_kind: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    wiring: Vec<Wiring<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + 'static> Default for Sources<K> {
    fn default() -> Self {
        Sources {
            by_kind: HashMap::new(),
            wiring: Vec::new(),
        }
    }
}

impl<K> Sources<K>
where
    K: Watched,
{
    /// Reconcile the owners of `R`'s objects when they change.
    pub(crate) fn owns<R>(&mut self, caches: &Caches, config: watcher::Config)
    where
        R: Watched,
    {
        self.update::<R>(caches, config, false, |source| source.owners = true);
    }

    /// As [`Sources::owns`] for a child the spec declares, with the default config until an
    /// explicit `owns` or `watches` of `R` gives one (e.g. a label selector).
    pub(crate) fn owns_declared<R>(&mut self, caches: &Caches)
    where
        R: Watched,
    {
        self.update::<R>(caches, watcher::Config::default(), true, |source| {
            source.owners = true;
        });
    }

    /// Reconcile what `mapper` names when an object of `R` changes.
    pub(crate) fn watches<R>(
        &mut self,
        caches: &Caches,
        config: watcher::Config,
        mapper: Mapper<K, R>,
    ) where
        R: Watched,
    {
        self.update::<R>(caches, config, false, |source| source.mappers.push(mapper));
    }

    /// Adds every watch to `controller`. With sharding (`shards`, the served shards' label
    /// selector), a kind that is only owned is watched for the served shards' children only
    /// (they carry their owner's shard label); a kind watched through mappers is watched whole.
    pub(crate) fn wire(self, mut controller: Controller<K>, with: &Wire<'_>) -> Controller<K> {
        for wire in self.wiring {
            controller = wire(controller, with);
        }
        controller
    }

    /// The kind's source, created (with its watch) on first use; `config` of a later call for
    /// the same kind is ignored, with a warning if it differs.
    fn update<R>(
        &mut self,
        caches: &Caches,
        config: watcher::Config,
        provisional: bool,
        change: impl FnOnce(&mut Source<K, R>),
    ) where
        R: Watched,
    {
        let existing = self
            .by_kind
            .get(&TypeId::of::<R>())
            .and_then(|any| any.downcast_ref::<Shared<K, R>>())
            .cloned();
        let shared = existing.unwrap_or_else(|| {
            let shared: Shared<K, R> = Arc::new(Mutex::new(Some(Source {
                config: config.clone(),
                provisional,
                owners: false,
                mappers: Vec::new(),
            })));
            self.by_kind
                .insert(TypeId::of::<R>(), Box::new(shared.clone()));
            self.wiring
                .push(wiring(shared.clone(), caches.get_or_create::<R>()));
            shared
        });
        let mut guard = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(source) = guard.as_mut() {
            if source.provisional && !provisional {
                source.config = config;
                source.provisional = false;
            } else if source.config != config && !provisional {
                tracing::warn!(
                    kind = %R::kind(&()),
                    "one watch per kind: the watcher config of the first `owns`/`watches` of this kind is used"
                );
            }
            change(source);
        }
    }
}

/// The wiring of one kind's watch: its cache, and one trigger for owners and mappers together.
fn wiring<K, R>(shared: Shared<K, R>, cache: Arc<Cache<R>>) -> Wiring<K>
where
    K: Watched,
    R: Watched,
{
    Box::new(move |mut controller: Controller<K>, with: &Wire<'_>| {
        let taken = shared.lock().unwrap_or_else(PoisonError::into_inner).take();
        let Some(Source {
            config,
            owners,
            provisional: _,
            mappers,
        }) = taken
        else {
            return controller;
        };
        let config = watch::bounded(config, with.stall);
        cache.select(Selection::of(&config));
        let only_owned = owners && mappers.is_empty();
        let triggers = move |object: R| -> Vec<ObjectRef<K>> {
            let mut targets = if owners {
                owners_of::<K, R>(&object)
            } else {
                Vec::new()
            };
            for mapper in &mappers {
                targets.extend(mapper(&object));
            }
            targets
        };
        if let Some(shared) = with.shared {
            let start = Start {
                client: with.client,
                namespace: with.namespace,
                health: with.health,
                reconnect_max: with.reconnect_max,
            };
            let subscription = shared.subscribe(&cache, &config, &start);
            with.caches.insert(subscription.cache);
            return controller.watches_stream(subscription.objects, triggers);
        }
        let api = R::api_in::<R>(with.client.clone(), with.namespace);
        let watched = watch::Watch::of::<R>(&config, None);
        let events = match with.shards {
            Some(served) if only_owned => {
                // Its children are watched by shard label: those without one get it from
                // the replica that steps their owner.
                if let Some(labeller) = with.labeller {
                    controller = adopting::<K, R>(controller, with, labeller, &config, &cache);
                }
                let unlisted = cache.clone();
                watch::selected(api, config, served.clone(), move || unlisted.unlisted()).boxed()
            }
            _ => watcher::watcher(api, config).boxed(),
        };
        let events = watch::paced(events, watched, with.health.clone(), with.reconnect_max);
        controller.watches_stream(watch::cached(events, cache), triggers)
    })
}

/// Adds to `controller` the metadata-only watch of `R`'s objects without a valid shard label
/// (narrowed by `config`'s label selector), cached for [`Unlabelled`]: a change of one
/// reconciles its owner, whose replica labels it before the step (see
/// [`crate::replicas::shard_children`]).
fn adopting<K, R>(
    controller: Controller<K>,
    with: &Wire<'_>,
    labeller: &Labeller,
    config: &watcher::Config,
    children: &Arc<Cache<R>>,
) -> Controller<K>
where
    K: Watched,
    R: Watched,
{
    let unlabelled = selection::both(
        config.label_selector.as_deref(),
        &labeller.shards.sharding.unlabelled_selector(),
    );
    let found = Arc::new(Cache::<PartialObjectMeta<R>>::new());
    with.caches.insert(found.clone());
    labeller
        .children
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Arc::new(Unlabelled {
            found: found.clone(),
            children: children.clone(),
        }));
    let api = R::api_in::<PartialObjectMeta<R>>(with.client.clone(), with.namespace);
    let config = config.clone().labels(&unlabelled);
    let watched = watch::Watch::of::<R>(&config, Some("unlabelled"));
    let events = watch::paced(
        watcher(api, config),
        watched,
        with.health.clone(),
        with.reconnect_max,
    );
    controller.watches_stream(watch::cached(events, found), |child| {
        owners_of::<K, _>(&child)
    })
}

/// The objects of `K` among `object`'s ownerReferences.
fn owners_of<K: Resource<DynamicType = ()>, R: Resource>(object: &R) -> Vec<ObjectRef<K>> {
    let meta = object.meta();
    meta.owner_references
        .iter()
        .flatten()
        .filter_map(|owner| ObjectRef::from_owner_ref(meta.namespace.as_deref(), owner, ()))
        .collect()
}
