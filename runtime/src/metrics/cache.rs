//! The gauges read from the controllers' caches at scrape time ([`CacheCollector`]): each
//! controller adds a source that tallies its cache ([`super::tally::Tally`]); a scrape merges
//! the tallies of one machine and encodes them. Deletions need no bookkeeping, and a
//! controller that is gone (its source's handle dropped) stops counting.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::tally::Tally;
use super::{MachineLabels, PhaseLabels};

/// Tallies one controller's cache at a scrape; `None` once that controller is gone.
type Source = Box<dyn Fn(Timestamp) -> Option<Tally> + Send + Sync>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabels {
    machine: &'static str,
    object_namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespacePhaseLabels {
    machine: &'static str,
    object_namespace: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    machine: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChildLabels {
    machine: &'static str,
    child: &'static str,
    condition: &'static str,
    status: &'static str,
}

type Floats<L> = Family<L, Gauge<f64, AtomicU64>>;

/// Every source, with the machine (kind) it counts.
#[derive(Clone, Default)]
pub(super) struct CacheCollector(Arc<Mutex<Vec<(&'static str, Source)>>>);

impl CacheCollector {
    pub(super) fn add(
        &self,
        machine: &'static str,
        source: impl Fn(Timestamp) -> Option<Tally> + Send + Sync + 'static,
    ) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((machine, Box::new(source)));
    }

    /// Objects per phase label of `machine` now, as `kube_fsm_objects` reports them; empty
    /// when no controller of that machine runs here.
    pub(super) fn objects(&self, machine: &str) -> BTreeMap<&'static str, i64> {
        self.tallies(Timestamp::now(), Some(machine))
            .remove(machine)
            .map(|tally| tally.objects)
            .unwrap_or_default()
    }

    /// One tally per machine (only `only`'s, when given), from the sources still alive (the
    /// others are dropped).
    fn tallies(&self, now: Timestamp, only: Option<&str>) -> BTreeMap<&'static str, Tally> {
        let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(machine, source)| {
                if only.is_some_and(|only| only != *machine) {
                    return true;
                }
                match source(now) {
                    Some(tally) => {
                        match tallies.get_mut(machine) {
                            Some(merged) => merged.merge(tally),
                            None => {
                                tallies.insert(machine, tally);
                            }
                        }
                        true
                    }
                    None => false,
                }
            });
        tallies
    }
}

impl std::fmt::Debug for CacheCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheCollector").finish_non_exhaustive()
    }
}

/// The families of one scrape.
#[derive(Default)]
struct Scrape {
    objects: Family<PhaseLabels, Gauge>,
    namespace_objects: Family<NamespacePhaseLabels, Gauge>,
    oldest: Floats<PhaseLabels>,
    timeout_seconds: Floats<PhaseLabels>,
    timeout_progress: Floats<PhaseLabels>,
    near_timeout: Family<PhaseLabels, Gauge>,
    unconverged: Family<NamespaceLabels, Gauge>,
    lag: Floats<NamespaceLabels>,
    stalled: Family<ReasonLabels, Gauge>,
    paused: Family<MachineLabels, Gauge>,
    children: Family<ChildLabels, Gauge>,
}

impl Scrape {
    fn add(&self, machine: &'static str, tally: &Tally) {
        let phase = |p: &str| PhaseLabels::new(machine, p);
        let namespace = |ns: &str| NamespaceLabels {
            machine,
            object_namespace: ns.to_owned(),
        };
        for (p, n) in &tally.objects {
            self.objects.get_or_create(&phase(p)).set(*n);
        }
        for ((ns, p), n) in &tally.by_namespace {
            let labels = NamespacePhaseLabels {
                machine,
                object_namespace: ns.clone(),
                phase: p,
            };
            self.namespace_objects.get_or_create(&labels).set(*n);
        }
        for (p, v) in &tally.oldest {
            self.oldest.get_or_create(&phase(p)).set(*v);
        }
        for (p, v) in &tally.timeout_seconds {
            self.timeout_seconds.get_or_create(&phase(p)).set(*v);
        }
        for (p, v) in &tally.timeout_progress {
            self.timeout_progress.get_or_create(&phase(p)).set(*v);
        }
        for (p, n) in &tally.near_timeout {
            self.near_timeout.get_or_create(&phase(p)).set(*n);
        }
        for (ns, n) in &tally.unconverged {
            self.unconverged.get_or_create(&namespace(ns)).set(*n);
        }
        for (ns, v) in &tally.lag {
            self.lag.get_or_create(&namespace(ns)).set(*v);
        }
        for (reason, n) in &tally.stalled {
            let labels = ReasonLabels { machine, reason };
            self.stalled.get_or_create(&labels).set(*n);
        }
        self.paused
            .get_or_create(&MachineLabels { machine })
            .set(tally.paused);
        for ((child, condition, status), n) in &tally.children {
            let labels = ChildLabels {
                machine,
                child,
                condition,
                status,
            };
            self.children.get_or_create(&labels).set(*n);
        }
    }
}

fn encode_one(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    family: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let scrape = Scrape::default();
        for (machine, tally) in self.tallies(Timestamp::now(), None) {
            scrape.add(machine, &tally);
        }
        let e = &mut encoder;
        let s = &scrape;
        encode_one(
            e,
            "kube_fsm_objects",
            "Objects per phase, in the controllers' caches",
            &s.objects,
        )?;
        encode_one(
            e,
            "kube_fsm_namespace_objects",
            "Objects per namespace and phase (pairs with objects only)",
            &s.namespace_objects,
        )?;
        encode_one(
            e,
            "kube_fsm_phase_oldest_seconds",
            "Seconds since the phase's longest-resident object entered it (0 when empty)",
            &s.oldest,
        )?;
        encode_one(
            e,
            "kube_fsm_phase_timeout_seconds",
            "The phase's timeout, in seconds",
            &s.timeout_seconds,
        )?;
        encode_one(
            e,
            "kube_fsm_phase_timeout_progress",
            "The largest fraction of the phase's timeout an object has used, paused time excluded (1: due)",
            &s.timeout_progress,
        )?;
        encode_one(
            e,
            "kube_fsm_objects_near_timeout",
            "Objects that have used at least the near fraction of their phase's timeout",
            &s.near_timeout,
        )?;
        encode_one(
            e,
            "kube_fsm_unconverged_objects",
            "Objects whose status.observedGeneration is behind metadata.generation",
            &s.unconverged,
        )?;
        encode_one(
            e,
            "kube_fsm_convergence_lag_seconds",
            "The longest time an object of the namespace has been behind its generation",
            &s.lag,
        )?;
        encode_one(
            e,
            "kube_fsm_stalled_objects",
            "Objects whose Stalled condition is True, by reason",
            &s.stalled,
        )?;
        encode_one(
            e,
            "kube_fsm_paused_objects",
            "Objects paused by the kube-fsm.dev/paused annotation",
            &s.paused,
        )?;
        encode_one(
            e,
            "kube_fsm_child_conditions",
            "Objects per status of each condition derived from a declared child",
            &s.children,
        )
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;

    fn scrape(collector: &CacheCollector) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(collector.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn a_source_whose_controller_is_gone_no_longer_counts() {
        let collector = CacheCollector::default();
        let count_one = |alive: std::sync::Weak<()>| {
            move |_| {
                alive.upgrade()?;
                let mut tally = Tally::default();
                tally.objects.insert("A", 1);
                tally.lag.insert("t1".to_owned(), 3.0);
                Some(tally)
            }
        };
        let first = Arc::new(());
        let second = Arc::new(());
        collector.add("K", count_one(Arc::downgrade(&first)));
        collector.add("K", count_one(Arc::downgrade(&second)));
        let text = scrape(&collector);
        assert!(text.contains("kube_fsm_objects{machine=\"K\",phase=\"A\"} 2"));
        assert!(
            text.contains(
                "kube_fsm_convergence_lag_seconds{machine=\"K\",object_namespace=\"t1\"} 3.0"
            ),
            "{text}"
        );
        // The first controller is replaced (e.g. re-created after a lost Lease).
        drop(first);
        assert!(scrape(&collector).contains("kube_fsm_objects{machine=\"K\",phase=\"A\"} 1"));
        assert_eq!(collector.0.lock().unwrap().len(), 1, "its source is gone");
    }
}
