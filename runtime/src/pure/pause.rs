//! Pausing an object and asking for a reconcile now, by annotation: what the annotations say,
//! the `Paused` condition the engine keeps, and how long the object has been paused in its
//! phase (time that does not count toward the phase's timeout).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

pub(crate) use crate::machine::annotations::{
    PAUSED, PAUSED_ANNOTATION, RECONCILE_ANNOTATION, SKIP_CLEANUP_ANNOTATION, annotation,
    paused_for, paused_since, requested,
};
use crate::machine::conditions;
use crate::pure::message;

/// The `Paused` condition's reason while paused.
pub const PAUSED_REASON: &str = "PausedByAnnotation";
/// The `Paused` condition's reason once resumed.
pub const RESUMED_REASON: &str = "Resumed";

/// Whether the object asks to be let go without its cleanup.
pub fn skips_cleanup(meta: &ObjectMeta) -> bool {
    annotation(meta, SKIP_CLEANUP_ANNOTATION).is_some_and(|v| v.trim() == "true")
}

/// The most of a reconcile request's value the status records (`lastHandledReconcileAt`):
/// a timestamp or a counter needs far less, and an annotation may hold 256 KiB.
pub const RECORDED_REQUEST: usize = 256;

/// The value of the reconcile-now annotation, if any, as the status records it (cut to
/// [`RECORDED_REQUEST`] bytes).
pub fn reconcile_requested(meta: &ObjectMeta) -> Option<String> {
    annotation(meta, RECONCILE_ANNOTATION)
        .map(|value| message::bounded(value.to_owned(), RECORDED_REQUEST))
}

/// Marks `conditions` paused (`Paused` True with `message`); whether anything changed.
pub fn pause(
    conditions: &mut Vec<Condition>,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> bool {
    conditions::set(
        conditions,
        PAUSED,
        "True",
        PAUSED_REASON,
        message,
        generation,
        now,
    )
    .unwrap_or(false)
}

/// Marks `conditions` resumed (`Paused` False), if they say paused; whether they did.
pub fn resume(conditions: &mut Vec<Condition>, generation: Option<i64>, now: Timestamp) -> bool {
    if paused_since(conditions).is_none() {
        return false;
    }
    conditions::set(
        conditions,
        PAUSED,
        "False",
        RESUMED_REASON,
        String::new(),
        generation,
        now,
    )
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use k8s_openapi::jiff::SignedDuration;

    use super::*;

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_annotation_pauses_with_its_reason_and_false_does_not() {
        assert_eq!(
            requested(&meta(&[(PAUSED_ANNOTATION, "true")])).as_deref(),
            Some("paused by the kube-fsm.dev/paused annotation")
        );
        assert_eq!(
            requested(&meta(&[(PAUSED_ANNOTATION, "INC-1234: disk full")])).as_deref(),
            Some("paused by the kube-fsm.dev/paused annotation: INC-1234: disk full")
        );
        assert_eq!(requested(&meta(&[(PAUSED_ANNOTATION, "false")])), None);
        assert_eq!(requested(&ObjectMeta::default()), None);
        assert!(skips_cleanup(&meta(&[(SKIP_CLEANUP_ANNOTATION, "true")])));
        assert!(!skips_cleanup(&meta(&[(SKIP_CLEANUP_ANNOTATION, "yes")])));
        assert_eq!(
            reconcile_requested(&meta(&[(RECONCILE_ANNOTATION, "2026-12-02T10:00:00Z")]))
                .as_deref(),
            Some("2026-12-02T10:00:00Z")
        );
        let huge = "9".repeat(200_000);
        let recorded = reconcile_requested(&meta(&[(RECONCILE_ANNOTATION, &huge)])).unwrap();
        assert_eq!(
            recorded.len(),
            RECORDED_REQUEST,
            "bounded, and the same each time"
        );
    }

    #[test]
    fn paused_time_is_the_recorded_time_plus_a_pause_ending_now() {
        let start: Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        let mut conditions = Vec::new();
        assert!(pause(&mut conditions, "why".into(), Some(1), start));
        assert!(
            !pause(&mut conditions, "why".into(), Some(1), start),
            "unchanged"
        );
        let now = start + SignedDuration::from_secs(90);
        assert_eq!(
            paused_for(Some(30), &conditions, now),
            Duration::from_secs(120)
        );
        assert!(resume(&mut conditions, Some(1), now));
        assert_eq!(conditions[0].status, "False");
        assert_eq!(
            paused_for(Some(120), &conditions, now),
            Duration::from_secs(120)
        );
        assert!(
            !resume(&mut conditions, Some(1), now),
            "not paused any more"
        );
        assert_eq!(paused_for(None, &[], now), Duration::ZERO);
    }
}
