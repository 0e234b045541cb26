//! Who wrote `status.phase`, as `metadata.managedFields` records it: the manager whose entry
//! owns the field, the most recent when several do.

use kube::api::ObjectMeta;

/// The field manager that owns `status.phase` (the latest writer of it), if managedFields
/// say.
pub(crate) fn phase_writer(meta: &ObjectMeta) -> Option<&str> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .and_then(|f| f.0.get("f:status"))
                .and_then(|s| s.get("f:phase"))
                .is_some()
        })
        .max_by_key(|entry| entry.time.as_ref().map(|t| t.0))
        .and_then(|entry| entry.manager.as_deref())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    use super::*;

    fn entry(manager: &str, fields: serde_json::Value, time: &str) -> ManagedFieldsEntry {
        serde_json::from_value(serde_json::json!({
            "manager": manager, "operation": "Update", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": fields, "time": time,
        }))
        .unwrap()
    }

    #[test]
    fn the_owner_of_status_phase_wrote_it() {
        let phase = serde_json::json!({ "f:status": { "f:phase": {}, "f:conditions": {} } });
        let conditions = serde_json::json!({ "f:status": { "f:conditions": {} } });
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![
                entry("kube-fsm", conditions, "2026-12-01T10:00:00Z"),
                entry("kubectl-fsm", phase.clone(), "2026-12-01T10:05:00Z"),
            ]),
            ..ObjectMeta::default()
        };
        assert_eq!(phase_writer(&meta), Some("kubectl-fsm"));
        // Two owners (an apply and an update): the later one.
        meta.managed_fields.as_mut().unwrap().push(entry(
            "kubectl-edit",
            phase,
            "2026-12-01T10:06:00Z",
        ));
        assert_eq!(phase_writer(&meta), Some("kubectl-edit"));
        assert_eq!(phase_writer(&ObjectMeta::default()), None);
    }
}
