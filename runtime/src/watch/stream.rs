//! The controller's watch of its own resource. Objects are decoded one by one, so one whose
//! body does not decode as `K` (a status written by an older version, a field the schema let
//! through) is reported and skipped instead of failing the list page, and with it every other
//! object of the watch. Its events tell [`Health`] that the API server answers; its errors go
//! to the controller, which backs off and reports them (see [`crate::watch::health`]). Every watched
//! object, the controller's own kind and the kinds handlers read, is cached without
//! kubectl's last-applied annotation and without `managedFields`, except, for the kinds
//! handlers read, the entries of server-side applies (see [`slim`], [`slim_keeping_applies`]).

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::ObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::metrics::MachineMetrics;
use crate::pure::selection::both;
use crate::pure::slim::{slim, slim_keeping_applies};
use crate::watch::cache::{Cache, Cached, Watched};
use crate::watch::health::{HEALTHY_RESET, Health, ReconnectBackoff, Watch, relists};
use kube::runtime::utils::Backoff as _;

/// An object as the watch delivered it: decoded, or not (with its metadata, if readable).
#[derive(Clone, Debug)]
pub(crate) enum Lenient<K> {
    /// A well-formed object.
    Decoded(K),
    /// An object whose body does not decode as `K`.
    Undecodable {
        /// Its metadata, when that part decodes.
        meta: Box<ObjectMeta>,
        /// Why the rest does not.
        error: String,
    },
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(match K::deserialize(&value) {
            Ok(object) => Lenient::Decoded(object),
            Err(error) => Lenient::Undecodable {
                meta: Box::new(
                    value
                        .get("metadata")
                        .and_then(|m| ObjectMeta::deserialize(m).ok())
                        .unwrap_or_default(),
                ),
                error: error.to_string(),
            },
        })
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Lenient::Decoded(object) => object.meta(),
            Lenient::Undecodable { meta, .. } => meta,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Lenient::Decoded(object) => object.meta_mut(),
            Lenient::Undecodable { meta, .. } => meta,
        }
    }
}

/// Reports each undecodable object version once (a warn line and
/// `kube_fsm_undecodable_objects_total`).
struct Reporter {
    metrics: Arc<MachineMetrics>,
    seen: Mutex<HashSet<(String, String)>>,
}

impl Reporter {
    fn report(&self, meta: &ObjectMeta, error: &str) {
        let key = (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        );
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() > 10_000 {
            seen.clear();
        }
        if seen.insert(key) {
            self.metrics.undecodable();
            tracing::warn!(
                name = meta.name.as_deref().unwrap_or_default(),
                namespace = meta.namespace.as_deref().unwrap_or_default(),
                %error,
                "skipping an object that does not decode; fix or delete it"
            );
        }
    }
}

/// Maps one watch event of lenient objects to an event of `K`, slimmed (see [`slim`]),
/// reporting (and leaving out) undecodable ones. A deletion of an undecodable object is dropped: the next relist forgets it.
fn decoded<K: Resource>(
    event: watcher::Event<Lenient<K>>,
    reporter: &Reporter,
) -> Option<watcher::Event<K>> {
    let decode = |object: Lenient<K>| match object {
        Lenient::Decoded(mut object) => {
            slim(object.meta_mut());
            Some(object)
        }
        Lenient::Undecodable { meta, error } => {
            reporter.report(&meta, &error);
            None
        }
    };
    Some(match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(decode(o)?),
        watcher::Event::Delete(o) => watcher::Event::Delete(decode(o)?),
        watcher::Event::InitApply(o) => watcher::Event::InitApply(decode(o)?),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

/// The watch events of `api`'s objects that match `config` and the label selector `selector`
/// holds: the watch starts over (a new list) whenever the selector changes; while it is
/// `None`, the objects are none (an empty list). `restarted` runs when a change starts the new
/// list, before any of its events is yielded: a cache fed by this stream no longer holds the
/// whole selection until that list is done (see [`crate::watch::cache::Cache::unlisted`]).
pub(crate) fn selected<K>(
    api: Api<K>,
    config: watcher::Config,
    selector: tokio::sync::watch::Receiver<Option<String>>,
    restarted: impl Fn() + Clone + Send + Sync + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    type Events<K> = futures::stream::BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;
    let start = move |selector: &Option<String>| -> Events<K> {
        match selector {
            None => futures::stream::iter([Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)])
                .chain(futures::stream::pending())
                .boxed(),
            Some(ours) => {
                let labels = both(config.label_selector.as_deref(), ours);
                watcher(api.clone(), config.clone().labels(&labels)).boxed()
            }
        }
    };
    futures::stream::unfold(
        (selector, None::<Events<K>>),
        move |(mut selector, current)| {
            let start = start.clone();
            let restarted = restarted.clone();
            async move {
                let mut current = match current {
                    Some(current) => current,
                    None => start(&selector.borrow_and_update()),
                };
                loop {
                    tokio::select! {
                        event = current.next() => {
                            return event.map(|event| (event, (selector, Some(current))));
                        }
                        changed = selector.changed() => {
                            if changed.is_ok() {
                                restarted();
                                current = start(&selector.borrow_and_update());
                            } else {
                                // Nobody changes the selection any more: keep this watch.
                                let event = current.next().await?;
                                return Some((event, (selector, Some(current))));
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The objects of `events` (a watch) as a trigger stream for kube's `Controller`, cached in
/// `writer`.
pub(crate) fn objects<K>(
    events: impl Stream<Item = Result<watcher::Event<Lenient<K>>, watcher::Error>> + Send + 'static,
    writer: Writer<K>,
    metrics: Arc<MachineMetrics>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Watched,
{
    let reporter = Reporter {
        metrics,
        seen: Mutex::new(HashSet::new()),
    };
    let events = events.filter_map(move |event| {
        let event = match event {
            Ok(event) => decoded(event, &reporter).map(Ok),
            Err(err) => Some(Err(err)),
        };
        std::future::ready(event)
    });
    listed_after_swap(reflector(writer, events))
}

/// The events of one watch, its failures handled here rather than by the controller (so one
/// failing watch never pauses the others): each is reported to `health` as `watch`'s — a
/// refusal (401, 403: RBAC) as a configuration problem, a 404 as a kind not served, anything
/// else as a failing watch — and waited out before the watch is polled again: the reconnect
/// backoff (reset only once the watch has gone [`HEALTHY_RESET`] without a failure, not by the
/// list that precedes each failing watch), or its cap at once for a refusal. A `410 Gone`
/// (see [`relists`]) is no failure: kube lists again at once, unless another came less than
/// [`HEALTHY_RESET`] before (then it is a failure like any other, so a watch that cannot keep
/// up never lists in a loop). Each event tells `health` the watch delivers. The stream yields
/// no errors. (A list's `Init` is yielded before the list is asked for: it tells nothing.)
pub(crate) fn paced<E>(
    events: impl Stream<Item = Result<watcher::Event<E>, watcher::Error>> + Send + 'static,
    watch: Watch,
    health: Health,
    max: Duration,
) -> impl Stream<Item = Result<watcher::Event<E>, watcher::Error>> + Send + 'static
where
    E: Send + 'static,
{
    let state = (
        events.boxed(),
        ReconnectBackoff::new(max),
        None::<Instant>,
        None::<Instant>,
    );
    futures::stream::unfold(
        state,
        move |(mut events, mut backoff, mut failed, mut gone)| {
            let (watch, health) = (watch.clone(), health.clone());
            async move {
                loop {
                    match events.next().await? {
                        Ok(event) => {
                            if !matches!(event, watcher::Event::Init) {
                                health.delivered(&watch);
                            }
                            if failed.is_some_and(|at| at.elapsed() > HEALTHY_RESET) {
                                backoff.reset();
                                failed = None;
                            }
                            return Some((Ok(event), (events, backoff, failed, gone)));
                        }
                        Err(err)
                            if relists(&err)
                                && gone.is_none_or(|at| at.elapsed() > HEALTHY_RESET) =>
                        {
                            tracing::debug!(watch = %watch.name, %err, "the watch's resource version is gone; listing again");
                            gone = Some(Instant::now());
                        }
                        Err(err) => {
                            let delay = if health.watch_failed(&watch, &err) {
                                max
                            } else {
                                backoff.next().unwrap_or(max)
                            };
                            failed = Some(Instant::now());
                            tracing::debug!(watch = %watch.name, %err, ?delay, "watch failed; starting again after a backoff");
                            tokio::time::sleep(delay).await;
                        }
                    }
                }
            }
        },
    )
}

/// `config` with the API server asked to end each watch 5 s (kube's margin) before `stall`, so
/// that kube's watcher, which gives up on a watch silent for that long and resumes it from its
/// resource version, restarts a stalled one (an open connection that delivers nothing) within
/// `stall` while a healthy quiet one is never cut. A timeout set in `config` is kept.
pub(crate) fn bounded(config: watcher::Config, stall: Duration) -> watcher::Config {
    if config.timeout.is_some() {
        return config;
    }
    let secs = stall.as_secs().saturating_sub(STALL_MARGIN).max(1);
    config.timeout(u32::try_from(secs).unwrap_or(u32::MAX))
}

/// The seconds kube's watcher waits past a watch's server-side timeout before it gives up on it.
const STALL_MARGIN: u64 = 5;

/// The objects to reconcile from the events of a reflector: each applied object, and the
/// objects of a (re)list only once it is complete. The reflector's store takes a list's objects
/// in at `InitDone`, so a trigger sent at `InitApply` would reach an object the store does not
/// hold yet (kube's controller then skips it): that happens to every object of a shard this
/// replica just took over, whose watch starts over with a new selector.
fn listed_after_swap<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
{
    events
        .scan(Vec::new(), |listed, event| {
            let ready: Vec<Result<K, watcher::Error>> = match event {
                Ok(watcher::Event::Apply(object)) => vec![Ok(object)],
                Ok(watcher::Event::Delete(_)) => Vec::new(),
                Ok(watcher::Event::Init) => {
                    listed.clear();
                    Vec::new()
                }
                Ok(watcher::Event::InitApply(object)) => {
                    listed.push(object);
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    std::mem::take(listed).into_iter().map(Ok).collect()
                }
                Err(err) => vec![Err(err)],
            };
            std::future::ready(Some(futures::stream::iter(ready)))
        })
        .flatten()
}

/// The objects of `events` (a watch) as a trigger stream for kube's `Controller` (applied and
/// deleted ones), kept in `cache` for handlers, slimmed (see [`slim_keeping_applies`]).
pub(crate) fn cached<R>(
    events: impl Stream<Item = Result<watcher::Event<R>, watcher::Error>> + Send + 'static,
    cache: Arc<Cache<R>>,
) -> impl Stream<Item = Result<R, watcher::Error>> + Send + 'static
where
    R: Cached,
{
    events
        .modify(|object| slim_keeping_applies(object.meta_mut()))
        .map_ok(move |event| {
            cache.apply(&event);
            event
        })
        .touched_objects()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn an_object_that_does_not_decode_keeps_its_metadata_and_the_reason() {
        let bad = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "cm", "namespace": "ns", "uid": "u1", "resourceVersion": "7" },
            "data": { "key": 42 },
        });
        let Lenient::<ConfigMap>::Undecodable { meta, error } =
            serde_json::from_value(bad).expect("never fails")
        else {
            panic!("decoded a number as a string");
        };
        assert_eq!(meta.name.as_deref(), Some("cm"));
        assert!(error.contains("invalid type"), "{error}");
        let good = serde_json::json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "ok" } });
        assert!(matches!(
            serde_json::from_value::<Lenient<ConfigMap>>(good),
            Ok(Lenient::Decoded(_))
        ));
    }

    fn gone() -> watcher::Error {
        let mut status = kube::core::Status::failure("too old resource version: 1 (20)", "Expired");
        status.code = 410;
        watcher::Error::WatchError(Box::new(status))
    }

    #[tokio::test]
    async fn a_410_is_listed_again_at_once_without_an_outage_unless_it_repeats() {
        let health = Health::default();
        let watched = Watch {
            name: "Database".to_owned(),
            api_version: "example.com/v1".to_owned(),
        };
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let mut events = Box::pin(paced(
            receiver,
            watched,
            health.clone(),
            Duration::from_secs(30),
        ));
        let started = Instant::now();
        let apply = |n: u32| Ok(watcher::Event::Apply(n));
        let applied = |event: Option<Result<watcher::Event<u32>, _>>| match event {
            Some(Ok(watcher::Event::Apply(n))) => Some(n),
            _ => None,
        };
        sender.unbounded_send(apply(1)).expect("send");
        sender.unbounded_send(Err(gone())).expect("send");
        sender.unbounded_send(apply(2)).expect("send");
        assert_eq!(applied(events.next().await), Some(1));
        assert_eq!(applied(events.next().await), Some(2));
        assert!(started.elapsed() < Duration::from_millis(200), "no backoff");
        assert!(health.is_up(), "no outage: {:?}", health.status());
        // Another right after: the watch cannot keep up, a failure with backoff.
        sender.unbounded_send(Err(gone())).expect("send");
        let next = events.next();
        tokio::pin!(next);
        assert!(futures::poll!(&mut next).is_pending());
        assert!(!health.is_up(), "a repeated 410 is a failure");
        sender
            .unbounded_send(Ok(watcher::Event::Init))
            .expect("send");
        sender.unbounded_send(apply(3)).expect("send");
        assert_eq!(applied(next.await), None, "the list's start is yielded");
        assert!(!health.is_up(), "but tells nothing");
        assert_eq!(applied(events.next().await), Some(3));
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "after a backoff"
        );
        assert!(health.is_up());
    }
}
