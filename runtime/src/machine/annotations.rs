//! The annotations the engine reads on stored objects and the conditions it keeps beside the
//! spec's own, for the engine and for tools that read or set them (`kubectl fsm`): pausing, a
//! reconcile now, letting go without cleanup; `Paused`, `Ready`, `Reconciling`, `Stalled`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

/// The annotation that pauses an object: any value but `"false"` (the value is the reason
/// shown; `"true"` says only that it is paused).
pub const PAUSED_ANNOTATION: &str = "kube-fsm.dev/paused";
/// The annotation that lets a deleted object go without its `cleanup` (what it made is left
/// behind, orphaned): `"true"`.
pub const SKIP_CLEANUP_ANNOTATION: &str = "kube-fsm.dev/skip-cleanup";
/// The annotation that asks for a reconcile now (Flux's convention): any new value.
pub const RECONCILE_ANNOTATION: &str = "kube-fsm.dev/reconcile-requested-at";
/// The condition type the engine keeps while an object is paused (and `False` after).
pub const PAUSED: &str = "Paused";
/// The condition type `ready:` is kept as.
pub const READY: &str = "Ready";
/// The condition type of an object still converging.
pub const RECONCILING: &str = "Reconciling";
/// The condition type of an object that cannot progress without help.
pub const STALLED: &str = "Stalled";

pub(crate) fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Why the object is paused, if its annotation says it is.
pub fn requested(meta: &ObjectMeta) -> Option<String> {
    match annotation(meta, PAUSED_ANNOTATION)?.trim() {
        "false" | "" => None,
        "true" => Some(format!("paused by the {PAUSED_ANNOTATION} annotation")),
        reason => Some(format!(
            "paused by the {PAUSED_ANNOTATION} annotation: {reason}"
        )),
    }
}

/// Since when the stored conditions say the object is paused.
pub fn paused_since(conditions: &[Condition]) -> Option<Timestamp> {
    conditions
        .iter()
        .find(|c| c.type_ == PAUSED && c.status == "True")
        .map(|c| c.last_transition_time.0)
}

/// How long the object has been paused in its phase at `now`: the time recorded
/// (`pausedSeconds`) plus a pause that is ending now.
pub fn paused_for(
    recorded_seconds: Option<i64>,
    conditions: &[Condition],
    now: Timestamp,
) -> Duration {
    let recorded = Duration::from_secs(recorded_seconds.unwrap_or(0).max(0).unsigned_abs());
    let ongoing = paused_since(conditions).map_or(Duration::ZERO, |since| {
        now.duration_since(since).try_into().unwrap_or_default()
    });
    recorded + ongoing
}
