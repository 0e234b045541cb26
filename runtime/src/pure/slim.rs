//! What a cache keeps of an object's metadata: not what makes up most of its size and no
//! controller reads.

use kube::api::ObjectMeta;

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what makes up most of a cached object's size and no controller reads:
/// `metadata.managedFields` and kubectl's last-applied copy of the object.
pub(crate) fn slim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// As [`slim`], but keeps the managedFields entries of server-side applies: the fields a
/// manager applied are those its next apply removes when it leaves them out, so
/// `Step::apply` reads its own entry to know whether an apply would change nothing.
pub(crate) fn slim_keeping_applies(meta: &mut ObjectMeta) {
    let applies: Option<Vec<_>> = meta.managed_fields.take().map(|entries| {
        entries
            .into_iter()
            .filter(|entry| entry.operation.as_deref() == Some("Apply"))
            .collect()
    });
    slim(meta);
    meta.managed_fields = applies.filter(|entries| !entries.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_drops_managed_fields_and_the_last_applied_copy_only() {
        let mut meta: ObjectMeta = serde_json::from_value(serde_json::json!({
            "name": "cm",
            "managedFields": [{ "manager": "kubectl", "operation": "Apply" }],
            "annotations": { LAST_APPLIED: "{...}", "team": "risk" },
        }))
        .expect("decodes");
        slim(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(
            meta.annotations,
            Some(std::collections::BTreeMap::from([(
                "team".into(),
                "risk".into()
            )]))
        );
        let mut only_last_applied = ObjectMeta {
            annotations: Some([(LAST_APPLIED.to_owned(), "{}".to_owned())].into()),
            ..ObjectMeta::default()
        };
        slim(&mut only_last_applied);
        assert_eq!(only_last_applied.annotations, None);
    }
}
