//! What a watch selects, evaluated on an object: the label selector and the field selector of
//! a `watcher::Config` (the API server's syntax: `k`, `!k`, `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`; fields `metadata.name` and `metadata.namespace`). A cache
//! uses it to keep out of itself an object its own watch would never report (one the operator
//! wrote that its selectors do not match): such a copy would never be updated or removed.

use kube::api::ObjectMeta;

/// The label selector that requires both `theirs` (a watch's own, if any) and `ours`.
pub(crate) fn both(theirs: Option<&str>, ours: &str) -> String {
    match theirs {
        Some(theirs) => format!("{theirs},{ours}"),
        None => ours.to_owned(),
    }
}

/// The selection of one watch. A requirement this module cannot evaluate (a field other than
/// the name and the namespace, or a malformed selector the API server would refuse anyway)
/// is taken as met.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Selection {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

/// The fields a field selector's requirement is evaluated on; one on another field is left out.
const FIELDS: [&str; 2] = ["metadata.name", "metadata.namespace"];

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl Selection {
    /// The selection of `config`.
    pub(crate) fn of(config: &kube::runtime::watcher::Config) -> Self {
        Selection {
            labels: config
                .label_selector
                .as_deref()
                .map(requirements)
                .unwrap_or_default(),
            fields: config
                .field_selector
                .as_deref()
                .map(requirements)
                .unwrap_or_default()
                .into_iter()
                .filter(|r| FIELDS.contains(&r.key()))
                .collect(),
        }
    }

    /// Whether an object with `meta` is selected.
    pub(crate) fn matches(&self, meta: &ObjectMeta) -> bool {
        let labels = meta.labels.as_ref();
        let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
        let field = |key: &str| match key {
            "metadata.name" => Some(meta.name.as_deref().unwrap_or_default()),
            "metadata.namespace" => Some(meta.namespace.as_deref().unwrap_or_default()),
            _ => None,
        };
        self.labels.iter().all(|r| r.holds(label)) && self.fields.iter().all(|r| r.holds(field))
    }
}

impl Requirement {
    fn key(&self) -> &str {
        match self {
            Requirement::Exists(k)
            | Requirement::Absent(k)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _) => k,
        }
    }

    fn holds<'a>(&self, value: impl Fn(&str) -> Option<&'a str>) -> bool {
        let among =
            |values: &[String], v: Option<&str>| v.is_some_and(|v| values.iter().any(|x| x == v));
        match self {
            Requirement::Exists(k) => value(k).is_some(),
            Requirement::Absent(k) => value(k).is_none(),
            Requirement::In(k, values) => among(values, value(k)),
            Requirement::NotIn(k, values) => !among(values, value(k)),
        }
    }
}

/// The requirements of a selector string; the commas inside `( )` separate values, not
/// requirements. What does not parse is left out (taken as met).
fn requirements(selector: &str) -> Vec<Requirement> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .filter_map(requirement)
        .collect()
}

fn requirement(part: &str) -> Option<Requirement> {
    let owned = |s: &str| s.trim().to_owned();
    if let Some((key, value)) = part.split_once("!=") {
        return Some(Requirement::NotIn(owned(key), vec![owned(value)]));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Some(Requirement::In(owned(key), vec![owned(value)]));
    }
    let set = |rest: &str| -> Option<Vec<String>> {
        let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
        Some(
            inner
                .split(',')
                .map(owned)
                .filter(|v| !v.is_empty())
                .collect(),
        )
    };
    if let Some((key, rest)) = part.split_once(" notin ") {
        return Some(Requirement::NotIn(owned(key), set(rest)?));
    }
    if let Some((key, rest)) = part.split_once(" in ") {
        return Some(Requirement::In(owned(key), set(rest)?));
    }
    if let Some(key) = part.strip_prefix('!') {
        return Some(Requirement::Absent(owned(key)));
    }
    (!part.contains(char::is_whitespace)).then(|| Requirement::Exists(owned(part)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    #[test]
    fn both_selectors_are_required_together() {
        assert_eq!(both(None, "shard notin (0,1)"), "shard notin (0,1)");
        assert_eq!(both(Some("app=db"), "shard in (1)"), "app=db,shard in (1)");
    }

    fn meta(name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn label_selectors_are_evaluated_as_the_api_server_does() {
        let s = |selector: &str| Selection::of(&watcher::Config::default().labels(selector));
        let m = meta(
            "a",
            &[("app", "db"), ("tier", "x"), ("kube-fsm.dev/shard", "3")],
        );
        for (selector, expected) in [
            ("", true),
            ("app=db", true),
            ("app==db", true),
            ("app=web", false),
            ("app!=web", true),
            ("app!=db", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing!=x", true),
            ("tier in (x, y)", true),
            ("tier in (y)", false),
            ("missing in (x)", false),
            ("kube-fsm.dev/shard notin (0,1,2)", true),
            ("kube-fsm.dev/shard notin (3)", false),
            ("app=db,tier in (x,y),!missing", true),
            ("app=db,tier in (y,z)", false),
        ] {
            assert_eq!(s(selector).matches(&m), expected, "{selector}");
        }
    }

    #[test]
    fn name_and_namespace_fields_are_evaluated_and_other_fields_taken_as_met() {
        let s = |selector: &str| Selection::of(&watcher::Config::default().fields(selector));
        let m = meta("settings", &[]);
        assert!(s("metadata.name=settings").matches(&m));
        assert!(!s("metadata.name=other").matches(&m));
        assert!(!s("metadata.namespace!=ns").matches(&m));
        assert!(s("type=Opaque").matches(&m));
    }
}
