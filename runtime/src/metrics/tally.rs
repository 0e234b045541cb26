//! What one controller's cache says at scrape time ([`Tally`]): objects per phase, the age of
//! each phase's oldest object, how far into its timeout a phase's most advanced object is,
//! objects not yet reconciled at their generation per namespace (and for how long), stalled and
//! paused objects. Pure: the objects and the time come in, numbers go out; no label holds an
//! object's name, so the series are bounded by the spec and the namespaces.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::recorder::phase_label;
use crate::machine::data::Phase;
use crate::machine::status::{MachineStatus, PhaseValue};
use crate::pure::decide::{self, Position};
use crate::pure::pause;
use crate::pure::readiness::{STALL_REASONS, STALLED};

/// The `reason` label of a `Stalled` condition whose reason is not the engine's (a hand edit).
pub(super) const OTHER_REASON: &str = "Other";

/// One machine's numbers at one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Tally {
    /// Objects per phase label (every declared phase, at 0 when empty; `""` for no phase yet,
    /// [`super::recorder::UNDECLARED`] for a value the spec does not declare).
    pub objects: BTreeMap<&'static str, i64>,
    /// Objects per namespace and phase label (only the pairs that have objects).
    pub by_namespace: BTreeMap<(String, &'static str), i64>,
    /// Per declared phase, seconds since its longest-resident object entered it (0 when empty).
    pub oldest: BTreeMap<&'static str, f64>,
    /// Per phase with a timeout, the largest fraction of it an object has used (paused time
    /// excluded; 1 or more: due).
    pub timeout_progress: BTreeMap<&'static str, f64>,
    /// Per phase with a timeout, the objects that have used at least the near fraction of it.
    pub near_timeout: BTreeMap<&'static str, i64>,
    /// Per phase with a timeout, its length in seconds.
    pub timeout_seconds: BTreeMap<&'static str, f64>,
    /// Per namespace, objects whose `status.observedGeneration` is behind `metadata.generation`.
    pub unconverged: BTreeMap<String, i64>,
    /// Per namespace, the longest time one of those has been behind, in seconds.
    pub lag: BTreeMap<String, f64>,
    /// Objects whose `Stalled` condition is True, per reason.
    pub stalled: BTreeMap<&'static str, i64>,
    /// Objects paused by their annotation.
    pub paused: i64,
    /// Per condition derived from a declared child, keyed `(child, condition, status)`:
    /// objects whose condition has that status (`True`, `False`, `Unknown`).
    pub children: BTreeMap<(&'static str, &'static str, &'static str), i64>,
}

/// The statuses a derived condition is counted under.
const STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// Since when each object has been behind its generation, kept between scrapes (the API server
/// does not record when a generation was set). Only objects behind now are kept.
#[derive(Debug, Default)]
pub(super) struct Lag(HashMap<String, Behind>);

#[derive(Clone, Copy, Debug)]
struct Behind {
    since: Timestamp,
}

impl Tally {
    /// Counts `objects` at `now`; `near` is the fraction of a timeout past which an object
    /// counts as near it. `lag` carries what earlier scrapes saw.
    pub(super) fn of<'a, P: Phase>(
        objects: impl IntoIterator<Item = (&'a ObjectMeta, Option<&'a MachineStatus<P>>)>,
        now: Timestamp,
        near: f64,
        lag: &mut Lag,
    ) -> Tally {
        let mut tally = Tally::empty::<P>();
        let mut seen = HashMap::with_capacity(lag.0.len());
        for (meta, status) in objects {
            tally.count(meta, status, now, near);
            let namespace = meta.namespace.clone().unwrap_or_default();
            let behind = tally.unconverged.entry(namespace.clone()).or_insert(0);
            if !is_behind(meta, status) {
                tally.lag.entry(namespace).or_insert(0.0);
                continue;
            }
            *behind += 1;
            let key = key(meta);
            let since = lag.0.get(&key).map_or_else(
                || {
                    // A new object has been behind since it was created; a later generation
                    // since this scrape first saw it.
                    match status.and_then(|s| s.observed_generation) {
                        None => meta.creation_timestamp.as_ref().map_or(now, |t| t.0),
                        Some(_) => now,
                    }
                },
                |b| b.since,
            );
            let longest = tally.lag.entry(namespace).or_insert(0.0);
            *longest = longest.max(seconds(since, now));
            seen.insert(key, Behind { since });
        }
        lag.0 = seen;
        tally
    }

    /// Every declared phase (and stall reason) at 0.
    fn empty<P: Phase>() -> Tally {
        let mut tally = Tally::default();
        for phase in P::MACHINE.phases {
            tally.objects.insert(phase.name, 0);
            tally.oldest.insert(phase.name, 0.0);
            if let Some(timeout) = &phase.timeout {
                tally.timeout_progress.insert(phase.name, 0.0);
                tally.near_timeout.insert(phase.name, 0);
                tally.timeout_seconds.insert(
                    phase.name,
                    Duration::from_millis(timeout.after_ms).as_secs_f64(),
                );
            }
        }
        for reason in STALL_REASONS.iter().chain([&OTHER_REASON]) {
            tally.stalled.insert(reason, 0);
        }
        for (child, condition) in derived::<P>() {
            for status in STATUSES {
                tally.children.insert((child, condition, status), 0);
            }
        }
        tally
    }

    fn count<P: Phase>(
        &mut self,
        meta: &ObjectMeta,
        status: Option<&MachineStatus<P>>,
        now: Timestamp,
        near: f64,
    ) {
        let stored = status.and_then(|s| s.phase.as_ref());
        let label = stored.map_or("", phase_label);
        *self.objects.entry(label).or_insert(0) += 1;
        let namespace = meta.namespace.clone().unwrap_or_default();
        *self.by_namespace.entry((namespace, label)).or_insert(0) += 1;
        if pause::requested(meta).is_some() {
            self.paused += 1;
        }
        if let Some(condition) = status
            .into_iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == STALLED && c.status == "True")
        {
            let reason = STALL_REASONS
                .iter()
                .find(|r| **r == condition.reason)
                .copied()
                .unwrap_or(OTHER_REASON);
            *self.stalled.entry(reason).or_insert(0) += 1;
        }
        let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
        for (child, condition) in derived::<P>() {
            if let Some(c) = conditions.iter().find(|c| c.type_ == condition) {
                let status = STATUSES
                    .iter()
                    .find(|s| **s == c.status)
                    .unwrap_or(&"Unknown");
                *self.children.entry((child, condition, status)).or_insert(0) += 1;
            }
        }
        let Some(PhaseValue::Known(phase)) = stored else {
            return;
        };
        let position = Position::of(status, now);
        if let Some(entered) = position.entered_at {
            let oldest = self.oldest.entry(phase.name()).or_insert(0.0);
            *oldest = oldest.max(seconds(entered, now));
        }
        if let Some(progress) = decide::timeout_progress(&position, now) {
            let most = self.timeout_progress.entry(phase.name()).or_insert(0.0);
            *most = most.max(progress);
            if progress >= near {
                *self.near_timeout.entry(phase.name()).or_insert(0) += 1;
            }
        }
    }

    /// Adds another controller's tally of the same machine (counts add, ages take the larger).
    pub(super) fn merge(&mut self, other: Tally) {
        fn add<K: Ord>(into: &mut BTreeMap<K, i64>, from: BTreeMap<K, i64>) {
            for (k, v) in from {
                *into.entry(k).or_insert(0) += v;
            }
        }
        fn max<K: Ord>(into: &mut BTreeMap<K, f64>, from: BTreeMap<K, f64>) {
            for (k, v) in from {
                let e = into.entry(k).or_insert(v);
                *e = e.max(v);
            }
        }
        add(&mut self.objects, other.objects);
        add(&mut self.by_namespace, other.by_namespace);
        max(&mut self.oldest, other.oldest);
        max(&mut self.timeout_progress, other.timeout_progress);
        add(&mut self.near_timeout, other.near_timeout);
        max(&mut self.timeout_seconds, other.timeout_seconds);
        add(&mut self.unconverged, other.unconverged);
        max(&mut self.lag, other.lag);
        add(&mut self.stalled, other.stalled);
        self.paused += other.paused;
        add(&mut self.children, other.children);
    }
}

/// The machine's conditions derived from a declared child: `(child, condition)`.
fn derived<P: Phase>() -> impl Iterator<Item = (&'static str, &'static str)> {
    let machine = P::MACHINE;
    (machine.conditions.iter()).filter_map(|c| Some((machine.children[c.from?.child].name, c.name)))
}

/// Whether the status was computed from an older generation than the object's (or not yet).
fn is_behind<P>(meta: &ObjectMeta, status: Option<&MachineStatus<P>>) -> bool {
    let observed = status.and_then(|s| s.observed_generation).unwrap_or(0);
    meta.generation
        .is_some_and(|generation| generation > observed)
}

fn key(meta: &ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_else(|| {
        format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        )
    })
}

fn seconds(since: Timestamp, now: Timestamp) -> f64 {
    now.duration_since(since).as_secs_f64().max(0.0)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;
    use crate::pure::pause::PAUSED_ANNOTATION;
    use crate::test_machines::DatabasePhase;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    struct Object {
        meta: ObjectMeta,
        status: Option<MachineStatus<DatabasePhase>>,
    }

    fn object(name: &str, namespace: &str, phase: Option<DatabasePhase>, entered: i64) -> Object {
        Object {
            meta: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                uid: Some(format!("uid-{name}")),
                generation: Some(1),
                creation_timestamp: Some(Time(at(0))),
                ..ObjectMeta::default()
            },
            status: phase.map(|phase| MachineStatus {
                phase: Some(PhaseValue::Known(phase)),
                observed_generation: Some(1),
                last_phase_transition_time: Some(Time(at(entered))),
                entered_phase: Some(PhaseValue::Known(phase)),
                ..MachineStatus::default()
            }),
        }
    }

    fn tally(objects: &[Object], now: i64, lag: &mut Lag) -> Tally {
        Tally::of(
            objects.iter().map(|o| (&o.meta, o.status.as_ref())),
            at(now),
            0.8,
            lag,
        )
    }

    #[test]
    fn counts_phases_and_ages_the_oldest_with_every_declared_phase_present() {
        let objects = [
            object("a", "t1", Some(DatabasePhase::Running), 100),
            object("b", "t1", Some(DatabasePhase::Running), 400),
            object("c", "t2", None, 0),
        ];
        let t = tally(&objects, 1_000, &mut Lag::default());
        assert_eq!(t.objects["Running"], 2);
        assert_eq!(t.objects[""], 1);
        assert_eq!(t.objects["Pending"], 0);
        assert_eq!(t.by_namespace[&("t1".to_owned(), "Running")], 2);
        assert_eq!(t.by_namespace.len(), 2, "only the pairs with objects");
        assert_eq!(t.oldest["Running"], 900.0);
        assert_eq!(t.oldest["Failed"], 0.0);
        assert_eq!(t.timeout_seconds["Provisioning"], 600.0);
        assert!(!t.timeout_seconds.contains_key("Running"));
    }

    #[test]
    fn timeout_progress_excludes_paused_time_and_counts_objects_near_the_timeout() {
        let mut paused = object("p", "t1", Some(DatabasePhase::Provisioning), 0);
        if let Some(status) = paused.status.as_mut() {
            status.paused_seconds = Some(300);
        }
        let objects = [
            object("a", "t1", Some(DatabasePhase::Provisioning), 0),
            object("b", "t1", Some(DatabasePhase::Provisioning), 400),
            paused,
        ];
        // At 540 s: a has used 90 % of 600 s, b 23 %, p (300 s paused) 40 %.
        let t = tally(&objects, 540, &mut Lag::default());
        assert!((t.timeout_progress["Provisioning"] - 0.9).abs() < 1e-9);
        assert_eq!(t.near_timeout["Provisioning"], 1);
        let later = tally(&objects, 900, &mut Lag::default());
        // At 900 s: a at 150 %, b at 83 %, p at 100 %.
        assert_eq!(later.near_timeout["Provisioning"], 3);
        assert!((later.timeout_progress["Provisioning"] - 1.5).abs() < 1e-9);
    }

    #[test]
    fn convergence_lag_runs_from_creation_or_first_sight_and_ends_when_observed() {
        let mut lag = Lag::default();
        let mut bumped = object("a", "t1", Some(DatabasePhase::Running), 0);
        bumped.meta.generation = Some(2);
        let new = object("n", "t2", None, 0);
        let settled = object("s", "t3", Some(DatabasePhase::Running), 0);
        let objects = [bumped, new, settled];
        let t = tally(&objects, 100, &mut lag);
        assert_eq!(t.unconverged["t1"], 1);
        assert_eq!(t.lag["t1"], 0.0, "first seen behind now");
        assert_eq!(t.unconverged["t2"], 1);
        assert_eq!(t.lag["t2"], 100.0, "behind since it was created");
        assert_eq!((t.unconverged["t3"], t.lag["t3"]), (0, 0.0));
        let t = tally(&objects, 160, &mut lag);
        assert_eq!(t.lag["t1"], 60.0);
        let [mut bumped, new, settled] = objects;
        if let Some(status) = bumped.status.as_mut() {
            status.observed_generation = Some(2);
        }
        let t = tally(&[bumped, new, settled], 200, &mut lag);
        assert_eq!((t.unconverged["t1"], t.lag["t1"]), (0, 0.0));
        assert_eq!(lag.0.len(), 1, "only the object still behind is remembered");
    }

    #[test]
    fn stalled_reasons_are_bounded_and_paused_objects_counted() {
        let condition = |reason: &str| Condition {
            type_: STALLED.to_owned(),
            status: "True".to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
            last_transition_time: Time(at(0)),
            observed_generation: None,
        };
        let mut a = object("a", "t1", Some(DatabasePhase::Failed), 0);
        let mut b = object("b", "t1", Some(DatabasePhase::Running), 0);
        if let (Some(sa), Some(sb)) = (a.status.as_mut(), b.status.as_mut()) {
            sa.conditions.push(condition("TerminalPhase"));
            sb.conditions.push(condition("SomebodyTypedThis"));
        }
        b.meta.annotations = Some(BTreeMap::from([(
            PAUSED_ANNOTATION.to_owned(),
            "true".to_owned(),
        )]));
        let t = tally(&[a, b], 10, &mut Lag::default());
        assert_eq!(t.stalled["TerminalPhase"], 1);
        assert_eq!(t.stalled[OTHER_REASON], 1);
        assert_eq!(t.stalled["ReconcileFailing"], 0);
        assert_eq!(t.paused, 1);
    }

    #[test]
    fn an_undeclared_phase_counts_under_one_label_and_merging_adds_counts() {
        let mut odd = object("x", "t1", Some(DatabasePhase::Running), 0);
        if let Some(status) = odd.status.as_mut() {
            status.phase = Some(PhaseValue::Unknown("Exploded".to_owned()));
        }
        let mut t = tally(&[odd], 10, &mut Lag::default());
        assert_eq!(t.objects[super::super::recorder::UNDECLARED], 1);
        let other = tally(
            &[object("r", "t1", Some(DatabasePhase::Running), 5)],
            10,
            &mut Lag::default(),
        );
        t.merge(other);
        assert_eq!(t.objects["Running"], 1);
        assert_eq!(t.oldest["Running"], 5.0);
    }

    #[test]
    fn conditions_derived_from_a_child_are_counted_per_status_from_zero() {
        use crate::test_machines::BatchPhase;
        let batch = |name: &str, complete: Option<&str>| {
            let mut status = MachineStatus::<BatchPhase>::default();
            status.phase = Some(PhaseValue::Known(BatchPhase::Running));
            status.conditions = complete
                .map(|s| Condition {
                    type_: "JobComplete".into(),
                    status: s.into(),
                    reason: "Test".into(),
                    message: String::new(),
                    last_transition_time: Time(at(0)),
                    observed_generation: None,
                })
                .into_iter()
                .collect();
            let meta = ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            };
            (meta, Some(status))
        };
        let objects = [
            batch("a", Some("True")),
            batch("b", Some("False")),
            batch("c", Some("False")),
            batch("d", None),
        ];
        let tally = Tally::of(
            objects.iter().map(|(m, s)| (m, s.as_ref())),
            at(0),
            0.8,
            &mut Lag::default(),
        );
        let count = |condition, status| tally.children[&("job", condition, status)];
        assert_eq!(count("JobComplete", "True"), 1);
        assert_eq!(count("JobComplete", "False"), 2);
        assert_eq!(count("JobComplete", "Unknown"), 0);
        assert_eq!(
            count("JobFailed", "Unknown"),
            0,
            "every status of every derived condition is there"
        );
        assert_eq!(tally.children.len(), 6);
    }
}
