//! JSON merge patches (RFC 7386) computed as the difference between two documents: the
//! engine's status write carries only what a step changed, so fields it did not touch (also
//! those of other writers) are left as stored, and a field that disappeared is removed.

use serde_json::{Map, Value};

/// The merge patch from the `stored` status (none yet: `{}`) to `new`; `None` when they are
/// the same.
///
/// # Errors
/// When either does not encode as JSON.
pub fn status_diff<S: serde::Serialize>(
    stored: Option<&S>,
    new: &S,
) -> Result<Option<Value>, serde_json::Error> {
    let before = match stored {
        Some(stored) => serde_json::to_value(stored)?,
        None => Value::Object(serde_json::Map::new()),
    };
    Ok(diff(&before, &serde_json::to_value(new)?))
}

/// The merge patch that turns `old` into `new`, or `None` when they are equal. Objects are
/// compared key by key; any other value (lists included, as merge patches replace lists
/// whole) is replaced when it differs; a key missing from `new`, or `null` in it, becomes
/// `null` (removal).
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) if value.is_null() && before.is_null() => {}
                    Some(before) => {
                        if let Some(change) = diff(before, value) {
                            patch.insert(key.clone(), change);
                        }
                    }
                    None if value.is_null() => {}
                    None => {
                        patch.insert(key.clone(), strip_nulls(value));
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) && !old[key].is_null() {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        (old, new) if old == new => None,
        // A replaced object must not keep the old one's keys: `null` first is not possible in
        // one patch, so the new value goes whole (nulls inside it would mean removal).
        (_, new) => Some(strip_nulls(new)),
    }
}

/// `value` without `null` members of objects (in a merge patch they would mean "remove").
fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_changes_are_in_the_patch() {
        let old = json!({"phase": "Running", "endpoint": "a", "replicas": 1, "other": "kept"});
        let new = json!({"phase": "Running", "endpoint": "b", "replicas": 1, "other": "kept"});
        assert_eq!(diff(&old, &new), Some(json!({"endpoint": "b"})));
        assert_eq!(diff(&old, &old), None);
    }

    #[test]
    fn removed_and_nulled_fields_become_null() {
        let old = json!({"endpoint": "a", "backup": {"time": "t", "size": 1}});
        let new = json!({"backup": {"time": null, "size": 1}});
        assert_eq!(
            diff(&old, &new),
            Some(json!({"endpoint": null, "backup": {"time": null}}))
        );
        assert_eq!(diff(&json!({"a": null}), &json!({})), None);
    }

    #[test]
    fn lists_are_replaced_whole_and_new_objects_carry_no_nulls() {
        let old = json!({"conditions": [{"type": "A"}], "s": "x"});
        let new = json!({"conditions": [{"type": "A"}, {"type": "B"}], "s": {"k": 1, "n": null}});
        assert_eq!(
            diff(&old, &new),
            Some(json!({"conditions": [{"type": "A"}, {"type": "B"}], "s": {"k": 1}}))
        );
    }

    #[test]
    fn applying_the_diff_yields_the_new_document_without_nulls() {
        let cases = [
            (
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"b": {"c": 4}, "e": [1]}),
            ),
            (json!({}), json!({"x": {"y": {"z": true}}})),
            (json!({"x": "s"}), json!({"x": {"y": null, "z": 1}})),
        ];
        for (old, new) in cases {
            let patched = diff(&old, &new).map_or(old.clone(), |p| apply(&old, &p));
            assert_eq!(patched, strip_nulls(&new), "{old} -> {new}");
        }
    }

    /// `target` with `patch` merged in (RFC 7386), to check a diff against.
    fn apply(target: &Value, patch: &Value) -> Value {
        match patch {
            Value::Object(patch) => {
                let mut out = match target {
                    Value::Object(map) => map.clone(),
                    _ => Map::new(),
                };
                for (key, value) in patch {
                    if value.is_null() {
                        out.remove(key);
                    } else {
                        let merged = apply(out.get(key).unwrap_or(&Value::Null), value);
                        out.insert(key.clone(), merged);
                    }
                }
                Value::Object(out)
            }
            other => other.clone(),
        }
    }
}
