//! What a conversion would lose, in JSON: the paths holding data in one value that another
//! lacks, and putting such data back. `null`, `{}` and `[]` hold no data: a field left out and
//! a field set to nothing read the same.

use std::fmt;

use serde_json::{Map, Value};

/// One step of a path into a JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// A path into a JSON value, shown as `spec.owner.name` or `spec.tags[2]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Path {
    root: &'static str,
    steps: Vec<Step>,
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.root)?;
        for step in &self.steps {
            match step {
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

fn holds_data(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Array(items) => !items.is_empty(),
        Value::Object(fields) => !fields.is_empty(),
        _ => true,
    }
}

/// The paths (under `root`) where `original` holds data that `kept` lacks.
pub(super) fn dropped(root: &'static str, original: &Value, kept: &Value) -> Vec<Path> {
    let mut found = Vec::new();
    walk(original, kept, &mut Vec::new(), &mut |steps| {
        found.push(Path {
            root,
            steps: steps.to_vec(),
        });
    });
    found
}

fn walk(original: &Value, kept: &Value, at: &mut Vec<Step>, found: &mut dyn FnMut(&[Step])) {
    if !holds_data(original) {
        return;
    }
    match (original, kept) {
        (Value::Object(fields), Value::Object(kept)) => {
            for (key, value) in fields {
                at.push(Step::Key(key.clone()));
                walk(value, kept.get(key).unwrap_or(&Value::Null), at, found);
                at.pop();
            }
        }
        (Value::Array(items), Value::Array(kept)) if items.len() == kept.len() => {
            for (i, (item, kept)) in items.iter().zip(kept).enumerate() {
                at.push(Step::Index(i));
                walk(item, kept, at, found);
                at.pop();
            }
        }
        (Value::Object(_) | Value::Array(_), _) => found(at),
        (scalar, kept)
            if !holds_data(kept)
                || std::mem::discriminant(scalar) != std::mem::discriminant(kept) =>
        {
            found(at);
        }
        _ => {}
    }
}

/// Copies the value at `path` in `from` into `into`, where `into` holds no data there
/// (creating the objects on the way; an array index `into` lacks is not created).
pub(super) fn fill(into: &mut Value, from: &Value, path: &Path) {
    let mut source = from;
    for step in &path.steps {
        source = match step {
            Step::Key(key) => &source[key.as_str()],
            Step::Index(i) => &source[*i],
        };
    }
    let mut target = into;
    for step in &path.steps {
        target = match step {
            Step::Key(key) => {
                if !target.is_object() {
                    *target = Value::Object(Map::new());
                }
                let Value::Object(fields) = target else {
                    return;
                };
                fields.entry(key.clone()).or_insert(Value::Null)
            }
            Step::Index(i) => match target.get_mut(*i) {
                Some(item) => item,
                None => return,
            },
        };
    }
    if !holds_data(target) {
        *target = source.clone();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn data_missing_or_changed_in_kind_is_dropped_and_nothing_is_not() {
        let original = json!({ "a": 1, "b": { "c": "x", "d": null, "e": [] }, "f": [1, 2] });
        let kept = json!({ "a": 1, "b": {}, "f": [1] });
        let paths: Vec<String> = dropped("spec", &original, &kept)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(paths, ["spec.b.c", "spec.f"]);
        assert!(dropped("spec", &original, &original).is_empty());
        let retyped = dropped("spec", &json!({ "a": 1 }), &json!({ "a": "1" }));
        assert_eq!(retyped.len(), 1);
    }

    #[test]
    fn what_was_dropped_is_filled_back_where_nothing_is() {
        let saved = json!({ "a": 1, "b": { "c": "x" }, "f": [1, 2] });
        let mut now = json!({ "a": 2, "f": [7] });
        for path in dropped("spec", &saved, &json!({ "a": 9, "f": [7] })) {
            fill(&mut now, &saved, &path);
        }
        assert_eq!(
            now,
            json!({ "a": 2, "b": { "c": "x" }, "f": [7] }),
            "f holds data already: not overwritten"
        );
    }
}
