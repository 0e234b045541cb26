//! Whether a step's status write, refused with 409 Conflict, may be sent again unchanged over
//! the object as the server holds it now, instead of redoing the step.
//!
//! A status write is locked on the resourceVersion the step read, and any write to the object
//! bumps it: a GitOps tool's annotation, another controller's label. Redoing the step after
//! each of those repeats the handler's side effects, and a writer quicker than a step starves
//! the object. But the step's decision is a function of what the engine reads of the object:
//! its spec (the generation), its status, whether it is being deleted, its finalizers and the
//! engine's own annotations and labels (`kube-fsm.dev/…`: pause, reconcile requests, shards).
//! When none of those changed, the planned write is exactly the one the step would plan again,
//! and it is sent locked on the new resourceVersion: still a write over exactly the object read
//! (a move is never written over a phase it was not computed from), still a merge patch of the
//! machine's and the handler's status fields only (another writer's fields are never
//! overwritten). A change the handler reads elsewhere (another annotation, a label) brings its
//! own watch event and so its own step.

use kube::api::ObjectMeta;
use serde_json::Value;

/// The prefix of the annotations and labels the engine reads.
const ENGINE_KEYS: &str = "kube-fsm.dev/";

/// Whether the object as read (`read`, its status `read_status`) and as the server holds it
/// now (`fresh`, `fresh_status`) are the same to a step.
pub(crate) fn same_to_a_step(
    read: &ObjectMeta,
    read_status: &Value,
    fresh: &ObjectMeta,
    fresh_status: &Value,
) -> bool {
    let engine_keys = |meta: &ObjectMeta| {
        let own = |map: &Option<std::collections::BTreeMap<String, String>>| {
            map.iter()
                .flatten()
                .filter(|(k, _)| k.starts_with(ENGINE_KEYS))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
        };
        (own(&meta.annotations), own(&meta.labels))
    };
    read.uid == fresh.uid
        && read.generation == fresh.generation
        && read.deletion_timestamp == fresh.deletion_timestamp
        && read.finalizers == fresh.finalizers
        && engine_keys(read) == engine_keys(fresh)
        && read_status == fresh_status
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn meta(annotations: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            uid: Some("u".into()),
            generation: Some(2),
            resource_version: Some("10".into()),
            finalizers: Some(vec!["example.com/cleanup".into()]),
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
    fn another_writers_annotation_leaves_the_step_as_it_was() {
        let status = json!({ "phase": "Pending" });
        let read = meta(&[("gitops.example/ping", "1")]);
        let mut fresh = meta(&[("gitops.example/ping", "2")]);
        fresh.resource_version = Some("11".into());
        fresh.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        assert!(same_to_a_step(&read, &status, &fresh, &status));
    }

    #[test]
    fn what_the_step_reads_changed_means_the_step_is_redone() {
        let status = json!({ "phase": "Pending" });
        let read = meta(&[]);
        let changed = [
            ObjectMeta {
                generation: Some(3),
                ..meta(&[])
            },
            ObjectMeta {
                finalizers: None,
                ..meta(&[])
            },
            ObjectMeta {
                uid: Some("other".into()),
                ..meta(&[])
            },
            meta(&[("kube-fsm.dev/paused", "maintenance")]),
            ObjectMeta {
                labels: Some(BTreeMap::from([("kube-fsm.dev/shard".into(), "3".into())])),
                ..meta(&[])
            },
        ];
        for fresh in &changed {
            assert!(!same_to_a_step(&read, &status, fresh, &status), "{fresh:?}");
        }
        let moved = json!({ "phase": "Provisioning" });
        assert!(!same_to_a_step(&read, &status, &read, &moved));
    }
}
