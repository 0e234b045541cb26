//! What the engine remembers about each object between reconciles, keyed by the object's UID
//! (a new object of the same name starts with a clean slate) and pruned as one, so it stays
//! bounded by the controller's cache.
//!
//! Nothing here is needed for correctness after a restart: the status carries what must
//! survive (the phase, and the phase its entry time belongs to). The memory avoids redundant
//! work (stale-cache guard), tells drift from our own writes, backs off retries, and keeps
//! hooks at least once while the process lives.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;

use crate::handler::step_plan::Veto;
use crate::pure::decide::Transition;
use crate::pure::version::Versions;

/// Everything remembered about one object.
pub(crate) struct Entry<K: Resource, P> {
    /// Where the object lives, to check it against the cache when pruning.
    pub key: ObjectRef<K>,
    /// The stale-cache guard: what our writes returned and what they were based on.
    pub versions: Versions,
    /// The phase this controller last wrote or accepted, and when that phase was entered.
    pub accepted: Option<(P, Option<Timestamp>)>,
    /// Consecutive failed reconciles (for the per-object backoff).
    pub failures: u32,
    /// After a failed reconcile: when the backoff allows the next one.
    pub retry_at: Option<Instant>,
    /// The resourceVersion a failed reconcile's own last write returned.
    pub aside: Option<String>,
    /// Whether the last failure was for want of a connection (the recovery reschedules only
    /// those when the connection comes back; a handler's failure keeps its backoff).
    pub disconnected: bool,
    /// The last veto (remembered so its Warning Event is published once per distinct veto),
    /// and how many steps in a row were vetoed (for the timeout's retry backoff).
    pub veto: Option<(Veto<P>, u32)>,
    /// A stored value the engine holds (an undeclared phase), and how often it was seen.
    pub held: Option<(String, u32)>,
    /// An `after_transition` hook that has not succeeded yet: (from, to).
    pub owed_hook: Option<(P, P)>,
    /// A transition whose status write was sent but not answered as landed (an error, a lost
    /// response): settled from what the server holds on the next attempt.
    pub intent: Option<Intent<P>>,
    /// The last stored value this controller wrote over under `drift: revert`. Finding the
    /// same value again means another writer insists (a human, another controller, or a
    /// second replica during a split brain): it is adopted, not fought over in a loop.
    pub reverted: Option<String>,
    /// With sharding: the holding of the object's shard this was remembered under (0
    /// without sharding).
    holding: u64,
}

impl<K: Resource, P> Entry<K, P> {
    fn new(key: ObjectRef<K>) -> Self {
        Entry {
            key,
            versions: Versions::default(),
            accepted: None,
            failures: 0,
            retry_at: None,
            aside: None,
            disconnected: false,
            veto: None,
            held: None,
            owed_hook: None,
            intent: None,
            reverted: None,
            holding: 0,
        }
    }
}

impl<K: Resource, P> Entry<K, P> {
    /// How long a reconcile of the object at `version` must still wait: `Some` only for the
    /// echo of a failed reconcile's own write (its finalizer, or the status it keeps: see
    /// `engine::bookkeeping`) within the backoff. kube's controller reconciles that watch event
    /// at once, so a new object's finalizer, a reconcile request, a resume or a `Stalled` said
    /// would otherwise buy one more handler call each. Anything else (a change by someone, the
    /// backoff over) ends the wait.
    pub fn backing_off(&mut self, version: Option<&str>, now: Instant) -> Option<Duration> {
        let echo = self.aside.take();
        let left = self
            .retry_at
            .and_then(|at| at.checked_duration_since(now))
            .filter(|left| !left.is_zero())?;
        (echo.is_some() && echo.as_deref() == version).then(|| {
            self.aside = echo;
            left
        })
    }
}

/// A transition being written: what it is, and the entry time its write carries (which
/// tells this write from any other that took the object to the same phase).
#[derive(Clone, Debug)]
pub(crate) struct Intent<P> {
    pub transition: Transition<P>,
    pub entered: Option<Timestamp>,
    /// How long the object stayed in the phase it leaves.
    pub stayed: Option<std::time::Duration>,
}

/// An entry of [`Memory`], for the time of one [`Memory::with`].
enum Held<'a, K: Resource, P> {
    /// Remembered: the locked map, the entry's UID, and its key for a new entry.
    Kept(
        MutexGuard<'a, HashMap<String, Entry<K, P>>>,
        &'a str,
        ObjectRef<K>,
    ),
    /// Not remembered (an object without a UID).
    Throwaway(Box<Entry<K, P>>),
}

impl<K: Resource<DynamicType = ()>, P> Held<'_, K, P> {
    fn entry(&mut self) -> &mut Entry<K, P> {
        match self {
            Held::Kept(entries, uid, key) => entries
                .entry((*uid).to_owned())
                .or_insert_with(|| Entry::new(key.clone())),
            Held::Throwaway(entry) => entry,
        }
    }
}

/// The per-object memory of one controller.
pub(crate) struct Memory<K: Resource, P> {
    entries: Mutex<HashMap<String, Entry<K, P>>>,
}

impl<K: Resource, P> Default for Memory<K, P> {
    fn default() -> Self {
        Memory {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Resource<DynamicType = ()>, P> Memory<K, P> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry<K, P>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the entry of `object`, creating it if needed. Objects without a UID (never
    /// stored) are not remembered: `f` sees a throwaway entry.
    ///
    /// Only the call of `f` is compiled per closure; the lookup ([`Memory::hold`]) once per
    /// memory (this is called from about thirty places in the engine).
    pub fn with<R>(&self, object: &K, f: impl FnOnce(&mut Entry<K, P>) -> R) -> R {
        f(self.hold(object).entry())
    }

    /// The entry of `object`, held under the lock (or a throwaway one, without a UID).
    fn hold<'a>(&'a self, object: &'a K) -> Held<'a, K, P> {
        let key = ObjectRef::from_obj(object);
        match object.meta().uid.as_deref() {
            Some(uid) => Held::Kept(self.lock(), uid, key),
            None => Held::Throwaway(Box::new(Entry::new(key))),
        }
    }

    /// Reads the entry of `object`, if there is one, without creating it.
    pub fn read<R>(&self, object: &K, f: impl FnOnce(&Entry<K, P>) -> R) -> Option<R> {
        let uid = object.meta().uid.as_ref()?;
        self.lock().get(uid).map(f)
    }

    /// Starts a reconcile of `object` under holding number `holding` of its shard: what was
    /// remembered under another holding is forgotten, since another replica may have moved
    /// the object meanwhile (it would read as drift, and `drift: revert` would write an old
    /// phase back over that replica's progress).
    pub fn under(&self, object: &K, holding: u64) {
        self.with(object, |entry| {
            if entry.holding != holding {
                *entry = Entry::new(entry.key.clone());
                entry.holding = holding;
            }
        });
    }

    /// Forgets `object` (it is gone).
    pub fn forget(&self, object: &K) {
        if let Some(uid) = &object.meta().uid {
            self.lock().remove(uid);
        }
    }

    /// The objects whose last reconcile failed for want of a connection.
    pub fn disconnected(&self) -> Vec<ObjectRef<K>> {
        self.lock()
            .values()
            .filter(|e| e.failures > 0 && e.disconnected)
            .map(|e| e.key.clone())
            .collect()
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Once more than `limit` objects are remembered, keeps only those for which `live(key,
    /// uid)` holds (the cache still holds that object, with that UID). kube's `Controller`
    /// does not reconcile a deletion, so an object deleted without a finalizer would otherwise
    /// be remembered forever. Amortised: with the limit at twice the cache size, a prune
    /// happens at most once per cache-size insertions.
    pub fn prune(&self, limit: usize, live: impl Fn(&ObjectRef<K>, &str) -> bool) {
        let mut entries = self.lock();
        if entries.len() > limit {
            entries.retain(|uid, entry| live(&entry.key, uid));
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn object(name: &str, uid: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    #[test]
    fn a_new_object_of_the_same_name_starts_with_a_clean_slate() {
        let memory = Memory::<ConfigMap, u8>::default();
        memory.with(&object("a", "uid-1"), |e| e.failures = 7);
        assert_eq!(memory.read(&object("a", "uid-1"), |e| e.failures), Some(7));
        assert_eq!(memory.read(&object("a", "uid-2"), |e| e.failures), None);
        assert_eq!(memory.with(&object("a", "uid-2"), |e| e.failures), 0);
    }

    #[test]
    fn a_new_holding_of_the_shard_starts_with_a_clean_slate() {
        let memory = Memory::<ConfigMap, u8>::default();
        let db = object("a", "uid-1");
        memory.under(&db, 3);
        memory.with(&db, |e| {
            e.failures = 2;
            e.accepted = Some((1, None));
        });
        memory.under(&db, 3);
        assert_eq!(
            memory.read(&db, |e| e.failures),
            Some(2),
            "same holding: kept"
        );
        memory.under(&db, 5);
        assert_eq!(
            memory.read(&db, |e| (e.failures, e.accepted)),
            Some((0, None))
        );
    }

    #[test]
    fn objects_without_a_uid_are_not_remembered() {
        let memory = Memory::<ConfigMap, u8>::default();
        let mut unsaved = object("a", "x");
        unsaved.metadata.uid = None;
        memory.with(&unsaved, |e| e.failures = 1);
        assert_eq!(memory.len(), 0);
    }

    #[test]
    fn pruning_keeps_live_objects_only_and_only_past_the_limit() {
        let memory = Memory::<ConfigMap, u8>::default();
        for i in 0..10 {
            memory.with(&object(&format!("cm-{i}"), &format!("uid-{i}")), |e| {
                e.failures = 1;
            });
        }
        let live = |key: &ObjectRef<ConfigMap>, uid: &str| {
            key.name.ends_with(['0', '1']) && uid != "uid-1"
        };
        memory.prune(10, live);
        assert_eq!(memory.len(), 10, "at the limit: untouched");
        memory.prune(9, live);
        assert_eq!(
            memory.len(),
            1,
            "cm-1 is back under another UID: forgotten too"
        );
        assert!(memory.read(&object("cm-0", "uid-0"), |_| ()).is_some());
    }
}
