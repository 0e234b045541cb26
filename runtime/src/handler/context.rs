//! What a handler reaches the cluster through: the client, the Event recorder the engine uses,
//! the caches of the operator's watches, and the field manager of its writes. One per
//! operator, shared by every step (see [`crate::Step::client`] and its neighbours).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

use crate::replicas::turn::Turns;
use crate::watch::cache::{Cache, Cached};
use crate::watch::pace::Pace;

/// The reporter and field manager a [`Context`] made by [`Context::new`] uses.
pub const DEFAULT_MANAGER: &str = "kube-fsm";

/// Errors of a handler's requests through its step: the API server's answer, or a request
/// the operator was not set up for.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// The API server refused the request or could not be reached.
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),
    /// The operator does not watch this kind, so it has no cache of it.
    #[error(
        "no cache of {kind}: wire it with `Operator::owns::<{kind}>` or `Operator::watches::<{kind}>`"
    )]
    NotCached {
        /// The kind asked for.
        kind: String,
    },
    /// The cache of this kind has not received its first list in time (the watch fails:
    /// look for RBAC or connection errors in the log).
    #[error("the cache of {kind} has not been filled yet; its watch has not listed")]
    NotSynced {
        /// The kind whose cache waits.
        kind: String,
    },
    /// The object has no UID yet (it was never stored), so nothing can name it as owner.
    #[error("the object has no uid, so it cannot own a child")]
    NoOwner,
    /// A child of a namespaced object must live in its owner's namespace (the garbage
    /// collector deletes one whose owner it cannot find there).
    #[error(
        "a child in namespace {child:?} cannot be owned by an object in namespace {owner:?}: leave the child's namespace unset or set it to the owner's"
    )]
    ForeignNamespace {
        /// The child's namespace (empty: cluster-scoped).
        child: String,
        /// The owner's namespace.
        owner: String,
    },
    /// Not sent: this replica no longer holds the object — it lost the Lease or its renewal
    /// is past the renew deadline (leader election), or the object's shard was given up or
    /// its renewal is late (sharding); see [`crate::Operator::replicas`]. The reconcile's
    /// outcome is dropped and the next leader, or the shard's holder, reconciles the object.
    #[error("not sent: this replica no longer holds the object's Lease or shard")]
    Fenced,
    /// An object could not be encoded as JSON.
    #[error("cannot encode the object: {0}")]
    Encode(#[from] serde_json::Error),
}

/// How many recorders the Events are spread over. kube's `Recorder` prunes its whole cache of
/// event series on every publish, and the cache holds a series per object and reason: one
/// recorder for every object made each Event a pass over every object's series (at 1 000
/// objects, 11 % of the operator's CPU in `HashMap::retain`; quadratic in the objects). Each
/// object's Events always go through the same recorder, so its series are counted as before.
const RECORDERS: usize = 64;

/// The operator's handle on the cluster, shared by every step.
#[derive(Clone)]
pub struct Context {
    client: Client,
    recorders: Arc<[Recorder]>,
    field_manager: String,
    caches: Caches,
    pace: Arc<Pace>,
    /// Whose objects this replica reconciles; with sharding, children applied through a step
    /// carry their owner's shard label.
    turns: Turns,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("field_manager", &self.field_manager)
            .field("caches", &self.caches)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context over `client` with no caches, reporting and writing as `kube-fsm` (for unit
    /// tests of handlers; the operator builds its own from its settings and watches).
    ///
    /// ```no_run
    /// # fn demo(client: kube::Client, children: Vec<k8s_openapi::api::core::v1::ConfigMap>) {
    /// use kube_fsm::watch::Cache;
    /// let context = kube_fsm::Context::new(client).with_cache(Cache::from_objects(children));
    /// # }
    /// ```
    pub fn new(client: Client) -> Self {
        Context::with_manager(
            client,
            DEFAULT_MANAGER,
            DEFAULT_MANAGER,
            Caches::default(),
            Arc::new(Pace::default()),
        )
    }

    pub(crate) fn with_manager(
        client: Client,
        reporter: &str,
        field_manager: &str,
        caches: Caches,
        pace: Arc<Pace>,
    ) -> Self {
        let reporter = Reporter::from(reporter.to_owned());
        let recorders = (0..RECORDERS)
            .map(|_| Recorder::new(client.clone(), reporter.clone()))
            .collect();
        Context {
            recorders,
            client,
            field_manager: field_manager.to_owned(),
            caches,
            pace,
            turns: Turns::every(),
        }
    }

    /// Children applied through a step get their owner's shard label (see
    /// [`crate::replicas::Sharding`]).
    pub(crate) fn with_turns(mut self, turns: Turns) -> Self {
        self.turns = turns;
        self
    }

    /// Whose objects this replica reconciles (with sharding, the shards it serves).
    pub(crate) fn turns(&self) -> &Turns {
        &self.turns
    }

    /// Adds (or replaces) the cache of `R`.
    #[must_use]
    pub fn with_cache<R: Cached>(self, cache: Cache<R>) -> Self {
        self.caches.insert(Arc::new(cache));
        self
    }

    /// The operator's client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A recorder with the engine's reporter (the engine spreads its own Events over several,
    /// each object's always through the same one: see [`Context::recorder_for`]).
    pub fn recorder(&self) -> &Recorder {
        &self.recorders[0]
    }

    /// The recorder of `object`'s Events: always the same one for an object, so that kube
    /// counts its repeats as one series.
    pub fn recorder_for(&self, object: &ObjectReference) -> &Recorder {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&object.namespace, &object.name, &object.uid).hash(&mut hasher);
        let at = usize::try_from(hasher.finish() % RECORDERS as u64).unwrap_or(0);
        &self.recorders[at]
    }

    /// The pacing of the operator's reconciles and writes.
    pub(crate) fn pace(&self) -> &Arc<Pace> {
        &self.pace
    }

    pub(crate) fn caches(&self) -> &Caches {
        &self.caches
    }

    /// The field manager of the operator's writes.
    pub fn field_manager(&self) -> &str {
        &self.field_manager
    }

    /// The cache of `R`, if the operator watches it.
    pub fn cache<R: Cached>(&self) -> Result<Arc<Cache<R>>, ContextError> {
        self.caches
            .get::<R>()
            .ok_or_else(|| ContextError::NotCached {
                kind: R::kind(&()).into_owned(),
            })
    }
}

/// A cache with its type erased.
trait Erased: Send + Sync {
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    fn is_ready(&self) -> bool;
    fn ready(&self) -> BoxFuture<'_, ()>;
}

impl<R: Cached> Erased for Cache<R> {
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
    fn is_ready(&self) -> bool {
        Cache::is_ready(self)
    }
    fn ready(&self) -> BoxFuture<'_, ()> {
        Box::pin(Cache::ready(self))
    }
}

/// A cache and the kind it holds.
type Entry = (String, Arc<dyn Erased>);

/// The caches by resource type.
#[derive(Clone, Default)]
pub(crate) struct Caches {
    by_type: Arc<RwLock<HashMap<TypeId, Entry>>>,
}

impl fmt::Debug for Caches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds: Vec<String> = self.entries().into_iter().map(|(kind, _)| kind).collect();
        f.debug_list().entries(kinds).finish()
    }
}

impl Caches {
    fn entries(&self) -> Vec<Entry> {
        self.by_type
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn insert<R: Cached>(&self, cache: Arc<Cache<R>>) {
        self.by_type
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(TypeId::of::<R>(), (R::kind(&()).into_owned(), cache));
    }

    pub(crate) fn get<R: Cached>(&self) -> Option<Arc<Cache<R>>> {
        let (_, erased) = self
            .by_type
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&TypeId::of::<R>())?
            .clone();
        erased.as_any().downcast::<Cache<R>>().ok()
    }

    /// The cache of `R`, created empty if there is none yet.
    pub(crate) fn get_or_create<R: Cached>(&self) -> Arc<Cache<R>> {
        if let Some(cache) = self.get::<R>() {
            return cache;
        }
        let cache = Arc::new(Cache::new());
        self.insert(cache.clone());
        cache
    }

    /// Waits until every cache has listed what it watches, at most `patience`; otherwise
    /// names the kinds still waiting. Checked on every reconcile: a cache is listed again when
    /// its selection changes (sharding), so readiness is not once and for all.
    pub(crate) async fn ready(&self, patience: Duration) -> Result<(), ContextError> {
        let all_ready = self
            .by_type
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .all(|(_, cache)| cache.is_ready());
        if all_ready {
            // The usual case: no allocation, no wait.
            return Ok(());
        }
        for (kind, cache) in self.entries() {
            if !cache.is_ready() && tokio::time::timeout(patience, cache.ready()).await.is_err() {
                return Err(ContextError::NotSynced { kind });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::RECORDERS;

    fn object(name: &str) -> ObjectReference {
        ObjectReference {
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[tokio::test]
    async fn an_objects_events_always_go_through_one_recorder_and_objects_spread_over_all() {
        let context = crate::testing::no_cluster();
        let at = |name: &str| {
            let recorder = context.recorder_for(&object(name));
            (context.recorders.iter()).position(|r| std::ptr::eq(r, recorder))
        };
        assert_eq!(at("a"), at("a"), "the same object, the same recorder");
        let used: std::collections::BTreeSet<_> =
            (0..1000).filter_map(|i| at(&format!("db-{i}"))).collect();
        assert!(
            used.len() > RECORDERS * 9 / 10,
            "{} of {RECORDERS} used",
            used.len()
        );
    }
}
