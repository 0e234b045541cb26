//! Read-only caches of watched resources, for handlers: kube's reflector store plus indexes
//! (controller-runtime's field indexers), kept up to date by the same watch events. The owner
//! index of the children an operator owns is one of them, so "the children of this object" is
//! a lookup, not a scan of the store and not a request to the API server.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

use crate::pure::selection::Selection;
use crate::watch::scope::Scoped;

/// What a cached resource type needs.
pub trait Cached: Resource<DynamicType = ()> + Clone + Send + Sync + 'static {}

impl<R: Resource<DynamicType = ()> + Clone + Send + Sync + 'static> Cached for R {}

/// What a watched resource type needs: cached, and decoded from the API server's answers.
pub trait Watched: Cached + Scoped + serde::de::DeserializeOwned + fmt::Debug {}

impl<R: Cached + Scoped + serde::de::DeserializeOwned + fmt::Debug> Watched for R {}

/// The index of every cache by the UIDs of an object's ownerReferences.
pub const OWNER_INDEX: &str = "kube-fsm/owner-uid";

/// What an index derives from an object: the keys it is found under.
pub type IndexFn<R> = Arc<dyn Fn(&R) -> Vec<String> + Send + Sync>;

/// Deleted objects by place: their UID and last cached resourceVersion.
type Tombstones<R> = HashMap<ObjectRef<R>, (Option<String>, Option<String>)>;

/// A read-only cache of the objects of one watched resource type, with indexes. Handlers get it
/// from [`crate::Step::cache`]; the operator fills it from its watch (see
/// [`crate::Operator::owns`] and [`crate::Operator::watches`]).
pub struct Cache<R: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<R>,
    /// The store's writer; also held across each event's version check, so two writers (a
    /// step's own write and a watch event) cannot interleave between check and write.
    writer: Mutex<Writer<R>>,
    /// Objects this operator deleted, by place: their UID and last cached version, so that an
    /// older event of theirs still on its way does not bring them back.
    forgotten: Mutex<Tombstones<R>>,
    /// Whether the first list has been applied. (Not the store's own readiness: it wakes only
    /// the last of several concurrent waiters.)
    listed: tokio::sync::watch::Sender<bool>,
    indexes: RwLock<HashMap<&'static str, Index<R>>>,
    /// What the cache's watch selects: a write of this operator outside it is not kept (the
    /// watch would never update or remove the copy).
    selection: std::sync::OnceLock<Selection>,
}

impl<R: Resource<DynamicType = ()> + Clone + 'static> fmt::Debug for Cache<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("kind", &R::kind(&()))
            .field("objects", &self.store.len())
            .finish_non_exhaustive()
    }
}

struct Index<R: Resource<DynamicType = ()>> {
    keys: IndexFn<R>,
    entries: Entries<R>,
    /// Filled during a relist, swapped in when it is done (as the store does).
    relisting: Option<Entries<R>>,
}

struct Entries<R: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<R>>>,
    of: HashMap<ObjectRef<R>, Vec<String>>,
}

impl<R: Resource<DynamicType = ()>> Default for Entries<R> {
    fn default() -> Self {
        Entries {
            by_key: HashMap::new(),
            of: HashMap::new(),
        }
    }
}

impl<R: Resource<DynamicType = ()>> Entries<R> {
    fn insert(&mut self, object: &R, keys: Vec<String>) {
        let key = ObjectRef::from_obj(object);
        self.remove(&key);
        for k in &keys {
            self.by_key
                .entry(k.clone())
                .or_default()
                .insert(key.clone());
        }
        if !keys.is_empty() {
            self.of.insert(key, keys);
        }
    }

    fn remove(&mut self, key: &ObjectRef<R>) {
        for k in self.of.remove(key).unwrap_or_default() {
            if let Some(set) = self.by_key.get_mut(&k) {
                set.remove(key);
                if set.is_empty() {
                    self.by_key.remove(&k);
                }
            }
        }
    }
}

impl<R: Resource<DynamicType = ()>> Index<R> {
    fn new(keys: IndexFn<R>) -> Self {
        Index {
            keys,
            entries: Entries::default(),
            relisting: None,
        }
    }

    fn apply(&mut self, event: &watcher::Event<R>) {
        match event {
            watcher::Event::Apply(object) => self.entries.insert(object, (self.keys)(object)),
            watcher::Event::Delete(object) => self.entries.remove(&ObjectRef::from_obj(object)),
            watcher::Event::Init => self.relisting = Some(Entries::default()),
            watcher::Event::InitApply(object) => {
                let keys = (self.keys)(object);
                self.relisting
                    .get_or_insert_with(Entries::default)
                    .insert(object, keys);
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    self.entries = fresh;
                }
            }
        }
    }
}

/// The UIDs of an object's ownerReferences: the keys of [`OWNER_INDEX`].
fn owner_uids<R: Resource>(object: &R) -> Vec<String> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.uid.clone())
        .collect()
}

impl<R: Resource<DynamicType = ()> + Clone + 'static> Cache<R> {
    /// An empty cache, indexed by owner UID, not ready until a watch's first list is applied.
    pub(crate) fn new() -> Self {
        let (store, writer) = kube::runtime::reflector::store();
        let owner: IndexFn<R> = Arc::new(owner_uids::<R>);
        Cache {
            store,
            writer: Mutex::new(writer),
            forgotten: Mutex::new(HashMap::new()),
            listed: tokio::sync::watch::Sender::new(false),
            indexes: RwLock::new(HashMap::from([(OWNER_INDEX, Index::new(owner))])),
            selection: std::sync::OnceLock::new(),
        }
    }

    /// A cache holding `objects`, as a watch would have filled it: for unit tests of handlers
    /// (see [`crate::testing`]).
    pub fn from_objects(objects: impl IntoIterator<Item = R>) -> Self {
        let cache = Cache::new();
        cache.apply(&watcher::Event::Init);
        for object in objects {
            cache.apply(&watcher::Event::InitApply(object));
        }
        cache.apply(&watcher::Event::InitDone);
        cache
    }

    /// This cache with an index as `Operator::index` adds it: for unit tests of handlers that
    /// look objects up with [`Cache::indexed`].
    ///
    /// ```no_run
    /// use k8s_openapi::api::core::v1::Secret;
    /// use kube_fsm::watch::Cache;
    /// let secrets = Cache::from_objects(Vec::<Secret>::new())
    ///     .with_index("type", |secret: &Secret| secret.type_.clone().into_iter().collect());
    /// assert!(secrets.indexed("type", "kubernetes.io/tls").is_empty());
    /// ```
    #[must_use]
    pub fn with_index(
        self,
        name: &'static str,
        keys: impl Fn(&R) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.add_index(name, Arc::new(keys));
        self
    }

    /// Adds an index: `keys` says under which keys an object is found. Objects already cached
    /// are indexed at once.
    pub(crate) fn add_index(&self, name: &'static str, keys: IndexFn<R>) {
        let mut index = Index::new(keys);
        for object in self.store.state() {
            index.entries.insert(&object, (index.keys)(&object));
        }
        self.indexes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, index);
    }

    /// Adds this cache's indexes to `shared`, a cache of the same watch that another machine
    /// fills (see [`crate::watch::shared`]); an index of a name `shared` has already is kept
    /// as it is (with a warning unless it is the owner index every cache has).
    pub(crate) fn indexes_into(&self, shared: &Cache<R>) {
        let own = self.indexes.read().unwrap_or_else(PoisonError::into_inner);
        for (name, index) in own.iter() {
            let taken = shared
                .indexes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(name);
            if !taken {
                shared.add_index(name, index.keys.clone());
            } else if *name != OWNER_INDEX {
                tracing::warn!(kind = %R::kind(&()), index = name, "two machines index one shared cache under one name: the first machine's index is kept");
            }
        }
    }

    /// Applies one watch event to the store and every index. An applied object older than
    /// the cached one (by comparable resourceVersions) is ignored: the cache already holds a
    /// write of this operator that the watch has not delivered yet (see [`Cache::remember`]).
    pub(crate) fn apply(&self, event: &watcher::Event<R>) {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        if let watcher::Event::Apply(object) = event
            && (self.is_older(object) || self.was_forgotten(object))
        {
            return;
        }
        match event {
            // A relist, or the object's own deletion, says what is there: no tombstone needed.
            watcher::Event::Delete(object) => {
                self.tombstones().remove(&ObjectRef::from_obj(object));
            }
            watcher::Event::Init => self.tombstones().clear(),
            _ => {}
        }
        writer.apply_watcher_event(event);
        for index in self
            .indexes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .values_mut()
        {
            index.apply(event);
        }
        if matches!(event, watcher::Event::InitDone) {
            self.listed.send_replace(true);
        }
    }

    /// Says what the cache's watch selects (once, when the watch is wired).
    pub(crate) fn select(&self, selection: Selection) {
        let _ = self.selection.set(selection);
    }

    /// Puts an object this operator just wrote into the cache, before its watch event comes,
    /// so the next step reads its own write; unless the watch does not select it: then any
    /// copy is dropped (the watch would never update or remove it, and a step would take it
    /// for the object for good), and the next step writes it again.
    pub(crate) fn remember(&self, mut object: R) {
        if let Some(selection) = self.selection.get()
            && !selection.matches(object.meta())
        {
            tracing::warn!(
                kind = %R::kind(&()),
                name = %object.meta().name.as_deref().unwrap_or_default(),
                "this object does not match the selectors its kind is watched with, so the operator cannot see it and writes it on every reconcile; give it the labels the watch selects, or widen the selector"
            );
            self.apply(&watcher::Event::Delete(object));
            return;
        }
        crate::pure::slim::slim_keeping_applies(object.meta_mut());
        self.apply(&watcher::Event::Apply(object));
    }

    /// Drops an object this operator just deleted from the cache, before its watch event comes,
    /// and keeps it out until its deletion event or the next list: an event of its older
    /// versions still on its way is ignored (a newer one, of the object terminating, is not).
    pub(crate) fn forget(&self, name: &str, namespace: Option<&str>) {
        if let Some(object) = self.get(name, namespace) {
            let meta = object.meta();
            let tombstone = (meta.uid.clone(), meta.resource_version.clone());
            self.apply(&watcher::Event::Delete(object.as_ref().clone()));
            self.tombstones()
                .insert(ObjectRef::from_obj(object.as_ref()), tombstone);
        }
    }

    fn tombstones(&self) -> std::sync::MutexGuard<'_, Tombstones<R>> {
        self.forgotten
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `object` is older (by comparable resourceVersions) than the cached one.
    fn is_older(&self, object: &R) -> bool {
        let Some(cached) = self.store.get(&ObjectRef::from_obj(object)) else {
            return false;
        };
        matches!(
            (
                object.meta().resource_version.as_deref(),
                cached.meta().resource_version.as_deref(),
            ),
            (Some(incoming), Some(held))
                if crate::pure::version::compare(incoming, held) == Some(std::cmp::Ordering::Less)
        )
    }

    /// Whether `object` is a version, not newer than the one deleted, of an object this
    /// operator deleted.
    fn was_forgotten(&self, object: &R) -> bool {
        let tombstones = self.tombstones();
        let Some((uid, version)) = tombstones.get(&ObjectRef::from_obj(object)) else {
            return false;
        };
        let meta = object.meta();
        uid == &meta.uid
            && match (meta.resource_version.as_deref(), version.as_deref()) {
                (Some(incoming), Some(deleted)) => {
                    crate::pure::version::compare(incoming, deleted)
                        != Some(std::cmp::Ordering::Greater)
                }
                _ => true,
            }
    }

    /// The object `name` in `namespace` (`None` for cluster-scoped objects).
    pub fn get(&self, name: &str, namespace: Option<&str>) -> Option<Arc<R>> {
        let mut key = ObjectRef::new(name);
        if let Some(namespace) = namespace {
            key = key.within(namespace);
        }
        self.store.get(&key)
    }

    /// The objects an index holds under `key` (the owner index behind [`Cache::owned_by`] is
    /// one). Empty for an index that was never added.
    ///
    /// ```no_run
    /// # fn demo<K: kube_fsm::StateMachine>(step: &kube_fsm::Step<K>) -> Result<(), kube_fsm::handler::ContextError> {
    /// use k8s_openapi::api::core::v1::Secret;
    /// // declared with `Operator::index::<Secret>("type", |s| s.type_.clone().into_iter().collect())`
    /// let tls = step.cache::<Secret>()?.indexed("type", "kubernetes.io/tls");
    /// # Ok(()) }
    /// ```
    pub fn indexed(&self, index: &str, key: &str) -> Vec<Arc<R>> {
        let indexes = self.indexes.read().unwrap_or_else(PoisonError::into_inner);
        let Some(index) = indexes.get(index) else {
            return Vec::new();
        };
        let mut found: Vec<Arc<R>> = index
            .entries
            .by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|r| self.store.get(r))
            .collect();
        found.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
        found
    }

    /// The objects whose ownerReferences name `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<R>> {
        self.indexed(OWNER_INDEX, uid)
    }

    /// Every cached object.
    pub fn all(&self) -> Vec<Arc<R>> {
        self.store.state()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.store.len() == 0
    }

    /// Whether the first list of the watch has been received, and with sharding the list of
    /// the current selection (before that, an absent object may simply not be listed yet).
    /// The engine runs no step before every cache is ready.
    pub fn is_ready(&self) -> bool {
        *self.listed.borrow()
    }

    /// The watch starts a new list of another selection (sharding: the served shards
    /// changed): until that list is done the cache may lack objects of the selection, so it is
    /// not ready — a step of a newly served object must not read "absent" from it.
    pub(crate) fn unlisted(&self) {
        self.listed.send_replace(false);
    }

    /// Waits until the first list of the watch has been received.
    pub async fn ready(&self) {
        // Only fails if the sender is dropped, which the cache itself prevents.
        let _ = self.listed.subscribe().wait_for(|listed| *listed).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn child(name: &str, owner: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_owner_index_follows_applies_deletes_and_relists() {
        let cache = Cache::new();
        let feed = |event| cache.apply(&event);
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(child("a", Some("u1"))));
        feed(watcher::Event::InitApply(child("b", Some("u2"))));
        feed(watcher::Event::InitDone);
        feed(watcher::Event::Apply(child("c", Some("u1"))));
        let names = |uid: &str| -> Vec<String> {
            cache
                .owned_by(uid)
                .iter()
                .map(|o| o.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(names("u1"), ["a", "c"]);
        // A child adopted by another owner moves between keys.
        feed(watcher::Event::Apply(child("a", Some("u2"))));
        assert_eq!(names("u1"), ["c"]);
        assert_eq!(names("u2"), ["a", "b"]);
        feed(watcher::Event::Delete(child("b", Some("u2"))));
        assert_eq!(names("u2"), ["a"]);
        // A relist replaces everything once it is complete.
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(child("d", Some("u1"))));
        assert_eq!(
            names("u1"),
            ["c"],
            "the old view holds until the relist is done"
        );
        feed(watcher::Event::InitDone);
        assert_eq!(names("u1"), ["d"]);
        assert!(names("u2").is_empty());
        assert_eq!(
            cache.get("d", Some("ns")).map(|o| o.metadata.name.clone()),
            Some(Some("d".into()))
        );
    }

    #[test]
    fn own_writes_are_read_back_and_older_events_do_not_undo_them() {
        let versioned = |version: &str, owner: &str| {
            let mut object = child("a", Some(owner));
            object.metadata.resource_version = Some(version.into());
            object
        };
        let cache = Cache::from_objects([versioned("5", "u1")]);
        cache.remember(versioned("9", "u2"));
        assert_eq!(
            cache.owned_by("u2").len(),
            1,
            "our write is visible at once"
        );
        cache.apply(&watcher::Event::Apply(versioned("7", "u1")));
        assert_eq!(
            cache.owned_by("u2").len(),
            1,
            "an older event does not undo it"
        );
        cache.apply(&watcher::Event::Apply(versioned("11", "u1")));
        assert_eq!(cache.owned_by("u1").len(), 1, "a newer one does");
        cache.forget("a", Some("ns"));
        assert!(cache.get("a", Some("ns")).is_none());
        cache.apply(&watcher::Event::Apply(versioned("11", "u1")));
        assert!(
            cache.get("a", Some("ns")).is_none(),
            "an event still on its way does not bring a deleted object back"
        );
        cache.apply(&watcher::Event::Apply(versioned("12", "u1")));
        assert!(
            cache.get("a", Some("ns")).is_some(),
            "a newer version (the object terminating) is what is there"
        );
        cache.forget("a", Some("ns"));
        let mut again = versioned("13", "u1");
        again.metadata.uid = Some("another".into());
        cache.apply(&watcher::Event::Apply(again));
        assert!(
            cache.get("a", Some("ns")).is_some(),
            "a new object of the same name is not the deleted one"
        );
    }

    #[tokio::test]
    async fn every_waiter_wakes_when_the_first_list_is_in() {
        let cache = Arc::new(Cache::<ConfigMap>::new());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.ready().await })
            })
            .collect();
        tokio::task::yield_now().await;
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("every waiter wakes, not only the last one")
                .expect("joins");
        }
    }

    #[test]
    fn a_new_selection_is_not_ready_until_its_list_is_done() {
        let cache = Cache::from_objects([child("a", Some("u1"))]);
        assert!(cache.is_ready());
        // The served shards changed: the watch starts a list of the new selection.
        cache.unlisted();
        assert!(
            !cache.is_ready(),
            "an object of the new selection may not be listed yet"
        );
        cache.apply(&watcher::Event::Init);
        cache.apply(&watcher::Event::InitApply(child("b", Some("u2"))));
        assert!(!cache.is_ready());
        cache.apply(&watcher::Event::InitDone);
        assert!(cache.is_ready());
        assert_eq!(cache.owned_by("u2").len(), 1);
    }

    #[test]
    fn a_user_index_covers_objects_cached_before_it_was_added() {
        let cache = Cache::from_objects([child("a", None), child("b", None)]);
        cache.add_index(
            "first-letter",
            Arc::new(|o: &ConfigMap| {
                vec![o.metadata.name.clone().unwrap_or_default()[..1].to_owned()]
            }),
        );
        assert_eq!(cache.indexed("first-letter", "b").len(), 1);
        assert!(cache.indexed("no-such-index", "b").is_empty());
        assert!(cache.is_ready());
    }
}
