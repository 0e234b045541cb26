//! The annotations that steer the engine, as a policy guards them: `kube-fsm.dev/paused` and
//! `kube-fsm.dev/skip-cleanup` stop it (no timeout fires while paused; a deleted object leaves
//! what it made behind), `kube-fsm.dev/reconcile-requested-at` makes it run and write now.
//! They are edited through the resource itself (not `/status`), so whoever may edit an object
//! may steer it unless a rule says who. Pure: which of them a write changes.

use std::collections::BTreeMap;

use crate::pure::pause::{PAUSED_ANNOTATION, RECONCILE_ANNOTATION, SKIP_CLEANUP_ANNOTATION};

/// What a guarded annotation does, and so which rule guards it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Steer {
    /// Pausing, resuming, or skipping cleanup (`pauseBy`).
    Pause,
    /// Asking for a reconcile now (`requestReconcileBy`).
    Reconcile,
}

/// The guarded annotations, with the field path a refusal names.
pub(crate) const GUARDED: [(&str, Steer, &str); 3] = [
    (
        PAUSED_ANNOTATION,
        Steer::Pause,
        "metadata.annotations[kube-fsm.dev/paused]",
    ),
    (
        SKIP_CLEANUP_ANNOTATION,
        Steer::Pause,
        "metadata.annotations[kube-fsm.dev/skip-cleanup]",
    ),
    (
        RECONCILE_ANNOTATION,
        Steer::Reconcile,
        "metadata.annotations[kube-fsm.dev/reconcile-requested-at]",
    ),
];

/// One guarded annotation a write sets, changes or removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Changed {
    /// The annotation.
    pub key: &'static str,
    /// What it does.
    pub steer: Steer,
    /// Its field path, for the refusal.
    pub field: &'static str,
}

/// The annotations of an object.
type Annotations = BTreeMap<String, String>;

/// The guarded annotations whose value differs between the stored object's `old`
/// annotations and the written `new` ones (`None`: none, or no object, as before a create).
pub(crate) fn changed(old: Option<&Annotations>, new: Option<&Annotations>) -> Vec<Changed> {
    GUARDED
        .iter()
        .filter(|(key, ..)| value(old, key) != value(new, key))
        .map(|&(key, steer, field)| Changed { key, steer, field })
        .collect()
}

fn value<'a>(annotations: Option<&'a Annotations>, key: &str) -> Option<&'a String> {
    annotations.and_then(|a| a.get(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> Annotations {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn set_changed_and_removed_annotations_are_named_and_others_are_not() {
        let old = annotations(&[(PAUSED_ANNOTATION, "true"), ("note", "a")]);
        let new = annotations(&[(RECONCILE_ANNOTATION, "1"), ("note", "b")]);
        let keys: Vec<_> = changed(Some(&old), Some(&new))
            .into_iter()
            .map(|c| (c.key, c.steer))
            .collect();
        assert_eq!(
            keys,
            [
                (PAUSED_ANNOTATION, Steer::Pause),
                (RECONCILE_ANNOTATION, Steer::Reconcile)
            ]
        );
        assert!(changed(Some(&old), Some(&old)).is_empty());
        let created = annotations(&[(SKIP_CLEANUP_ANNOTATION, "true")]);
        assert_eq!(
            changed(None, Some(&created))[0].field,
            "metadata.annotations[kube-fsm.dev/skip-cleanup]"
        );
    }
}
