//! The files of a new operator: the templates under `templates/new/`, with the names put in.

use std::path::PathBuf;

use super::names::Names;

/// Each template, where it goes (`KIND` stands for the kind's snake-case name), and whether
/// only `--webhook` asks for it.
const TEMPLATES: &[(&str, &str, bool)] = &[
    (
        include_str!("../../templates/new/Cargo.toml.tmpl"),
        "Cargo.toml",
        false,
    ),
    (
        include_str!("../../templates/new/README.md.tmpl"),
        "README.md",
        false,
    ),
    (
        include_str!("../../templates/new/gitignore.tmpl"),
        ".gitignore",
        false,
    ),
    (
        include_str!("../../templates/new/dockerignore.tmpl"),
        ".dockerignore",
        false,
    ),
    (
        include_str!("../../templates/new/Dockerfile.tmpl"),
        "Dockerfile",
        false,
    ),
    (
        include_str!("../../templates/new/.github/workflows/ci.yml.tmpl"),
        ".github/workflows/ci.yml",
        false,
    ),
    (
        include_str!("../../templates/new/specs/machine.yaml.tmpl"),
        "specs/KIND.yaml",
        false,
    ),
    (
        include_str!("../../templates/new/src/main.rs.tmpl"),
        "src/main.rs",
        false,
    ),
    (
        include_str!("../../templates/new/src/lib.rs.tmpl"),
        "src/lib.rs",
        false,
    ),
    (
        include_str!("../../templates/new/src/kind.rs.tmpl"),
        "src/KIND.rs",
        false,
    ),
    (
        include_str!("../../templates/new/src/kind/tests.rs.tmpl"),
        "src/KIND/tests.rs",
        false,
    ),
    (
        include_str!("../../templates/new/tests/cluster.rs.tmpl"),
        "tests/cluster.rs",
        false,
    ),
    (
        include_str!("../../templates/new/policies/policy.yaml.tmpl"),
        "policies/KIND.yaml",
        true,
    ),
];

/// The files, as paths relative to the crate and their text.
pub fn files(names: &Names) -> Vec<(PathBuf, String)> {
    let values = values(names);
    let kind_snake = names.kind_snake();
    TEMPLATES
        .iter()
        .filter(|(_, _, webhook)| names.webhook || !webhook)
        .map(|(template, path, _)| {
            (
                PathBuf::from(path.replace("KIND", &kind_snake)),
                render(template, &values),
            )
        })
        .collect()
}

/// The spec file's path in the crate.
pub fn spec_path(names: &Names) -> PathBuf {
    PathBuf::from(format!("specs/{}.yaml", names.kind_snake()))
}

/// Every placeholder's value.
fn values(names: &Names) -> Vec<(&'static str, String)> {
    let kind = &names.kind;
    let kind_snake = names.kind_snake();
    let namespaced = names.namespaced;
    // A cluster-scoped kind says in its spec where its ConfigMap goes.
    let pick = |yes: &str, no: &str| if namespaced { yes } else { no }.to_owned();
    vec![
        ("name", names.name.clone()),
        ("crate", names.crate_ident()),
        ("group", names.group.clone()),
        ("kind", kind.clone()),
        ("kind_lower", kind.to_lowercase()),
        ("kind_snake_dashed", kind_snake.replace('_', "-")),
        ("kind_snake", kind_snake),
        ("kube_fsm_version", env!("CARGO_PKG_VERSION").to_owned()),
        ("rust_version", env!("CARGO_PKG_RUST_VERSION").to_owned()),
        ("kube_scope", pick("\n    namespaced,", "")),
        (
            "namespace_field",
            pick(
                "",
                "\n    /// The namespace the ConfigMap goes in.\n    pub namespace: String,",
            ),
        ),
        (
            "child_namespace",
            pick("object.namespace()", "Some(object.spec.namespace.clone())"),
        ),
        (
            "sample_namespace_field",
            pick("", "\n            namespace: \"default\".to_owned(),"),
        ),
        (
            "sample_namespace",
            pick("Some(\"default\".to_owned())", "None"),
        ),
        (
            "test_namespace_field",
            pick("", "\n            namespace: namespace.clone(),"),
        ),
        (
            "test_object_namespace",
            pick("Some(namespace.clone())", "None"),
        ),
        (
            "api_in_namespace",
            pick(
                "Api::namespaced(client.clone(), &namespace)",
                "Api::all(client.clone())",
            ),
        ),
        ("run_namespace", String::new()),
        ("yaml_namespace", pick(", namespace: default", "")),
        ("yaml_namespace_field", pick("", ", namespace: default")),
        (
            "manifests_webhook",
            if names.webhook {
                format!(
                    " --webhook --admission-policy {kind}=policies/{}.yaml",
                    names.kind_snake()
                )
            } else {
                String::new()
            },
        ),
        (
            "webhook_row",
            if names.webhook {
                format!(
                    "\n| `policies/{}.yaml` | who may do what beyond the edges: the webhook's policy, or the API server's (1.30+) |",
                    names.kind_snake()
                )
            } else {
                String::new()
            },
        ),
    ]
}

/// `template` with every `{{key}}` replaced by its value.
fn render(template: &str, values: &[(&str, String)]) -> String {
    let mut text = template.to_owned();
    for (key, value) in values {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` still holds a `{{word}}` placeholder (GitHub's `${{ expr }}` has spaces).
    fn leftover(text: &str) -> Option<&str> {
        let start = text.find("{{")?;
        let end = start + text[start..].find("}}")? + 2;
        let inner = &text[start + 2..end - 2];
        if inner.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            Some(&text[start..end])
        } else {
            leftover(&text[end..])
        }
    }

    #[test]
    fn every_placeholder_of_every_template_is_filled_in_both_scopes() {
        for namespaced in [true, false] {
            let names = Names {
                name: "site-operator".into(),
                group: "web.example.com".into(),
                kind: "WebSite".into(),
                namespaced,
                webhook: true,
            };
            let files = files(&names);
            assert_eq!(files.len(), TEMPLATES.len());
            for (path, text) in &files {
                assert_eq!(leftover(text), None, "{}", path.display());
                assert!(!path.to_string_lossy().contains("KIND"));
            }
        }
    }

    /// A namespaced `Site` without the webhook.
    fn site() -> Names {
        Names {
            name: "ops".into(),
            group: "example.com".into(),
            kind: "Site".into(),
            namespaced: true,
            webhook: false,
        }
    }

    #[test]
    fn the_spec_compiles_and_each_phase_has_its_handler() {
        let names = site();
        let files = files(&names);
        let (path, spec) = files
            .iter()
            .find(|(path, _)| path == &spec_path(&names))
            .unwrap();
        let checked = kube_fsm_codegen::check(&path.display().to_string(), spec, None)
            .unwrap_or_else(|errors| panic!("{}", errors.join("\n")));
        let (_, handlers) = files
            .iter()
            .find(|(path, _)| path.ends_with("site.rs"))
            .unwrap();
        for phase in &checked.phases {
            let method = format!("async fn on_{}(", phase.to_lowercase());
            assert_eq!(
                handlers.contains(&method),
                phase != "Failed",
                "{method}: every phase but the terminal one has a handler"
            );
        }
    }

    #[test]
    fn the_policy_comes_with_the_webhook_only() {
        let names = site();
        let files = files(&names);
        assert!(files.iter().all(|(path, _)| !path.starts_with("policies")));
        assert!(files.iter().any(|(path, _)| path == &spec_path(&names)));
    }
}
