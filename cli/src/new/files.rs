//! The files of a new operator: the templates under `templates/new/`, with the names put in.

use std::path::PathBuf;

use super::names::Names;

/// Which scaffolds a template belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    /// Every one.
    Always,
    /// `--webhook`'s.
    Webhook,
    /// The machine that writes a ConfigMap (the default).
    ConfigMap,
    /// `--workload`'s: the machine that runs a Deployment.
    Workload,
}

/// Each template, where it goes (`KIND` stands for the kind's snake-case name), and which
/// scaffolds have it.
const TEMPLATES: &[(&str, &str, Only)] = &[
    (
        include_str!("../../templates/new/Cargo.toml.tmpl"),
        "Cargo.toml",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/README.md.tmpl"),
        "README.md",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/gitignore.tmpl"),
        ".gitignore",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/dockerignore.tmpl"),
        ".dockerignore",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/Dockerfile.tmpl"),
        "Dockerfile",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/.github/workflows/ci.yml.tmpl"),
        ".github/workflows/ci.yml",
        Only::ConfigMap,
    ),
    (
        include_str!("../../templates/new/specs/machine.yaml.tmpl"),
        "specs/KIND.yaml",
        Only::ConfigMap,
    ),
    (
        include_str!("../../templates/new/src/main.rs.tmpl"),
        "src/main.rs",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/src/lib.rs.tmpl"),
        "src/lib.rs",
        Only::Always,
    ),
    (
        include_str!("../../templates/new/src/kind.rs.tmpl"),
        "src/KIND.rs",
        Only::ConfigMap,
    ),
    (
        include_str!("../../templates/new/src/kind/tests.rs.tmpl"),
        "src/KIND/tests.rs",
        Only::ConfigMap,
    ),
    (
        include_str!("../../templates/new/tests/cluster.rs.tmpl"),
        "tests/cluster.rs",
        Only::ConfigMap,
    ),
    (
        include_str!("../../templates/new/workload/ci.yml.tmpl"),
        ".github/workflows/ci.yml",
        Only::Workload,
    ),
    (
        include_str!("../../templates/new/workload/machine.yaml.tmpl"),
        "specs/KIND.yaml",
        Only::Workload,
    ),
    (
        include_str!("../../templates/new/workload/kind.rs.tmpl"),
        "src/KIND.rs",
        Only::Workload,
    ),
    (
        include_str!("../../templates/new/workload/tests.rs.tmpl"),
        "src/KIND/tests.rs",
        Only::Workload,
    ),
    (
        include_str!("../../templates/new/workload/cluster.rs.tmpl"),
        "tests/cluster.rs",
        Only::Workload,
    ),
    (
        include_str!("../../templates/new/policies/policy.yaml.tmpl"),
        "policies/KIND.yaml",
        Only::Webhook,
    ),
];

/// The files, as paths relative to the crate and their text.
pub fn files(names: &Names) -> Vec<(PathBuf, String)> {
    let values = values(names);
    let kind_snake = names.kind_snake();
    TEMPLATES
        .iter()
        .filter(|(_, _, only)| match only {
            Only::Always => true,
            Only::Webhook => names.webhook,
            Only::ConfigMap => !names.workload,
            Only::Workload => names.workload,
        })
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
    let work = |yes: &str, no: &str| if names.workload { yes } else { no }.to_owned();
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
                "\n    /// The namespace its child goes in.\n    pub namespace: String,",
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
        (
            "test_binaries",
            work(
                "The binaries come from KUBEBUILDER_ASSETS: setup-envtest's kube-apiserver and\n\
                 #    etcd, with kube-controller-manager, kube-scheduler, kwok and kwok.stages.yaml\n\
                 #    beside them (.github/workflows/ci.yml fetches them); or use your cluster with\n\
                 #    USE_EXISTING_CLUSTER=true. Without either the cluster test says SKIPPED.",
                "The server's binaries come from KUBEBUILDER_ASSETS (setup-envtest's), or use your\n\
                 #    cluster with USE_EXISTING_CLUSTER=true; without either the cluster test says SKIPPED.",
            ),
        ),
        (
            "yaml_spec",
            work(
                "image: registry.k8s.io/pause:3.10, replicas: 2",
                "message: \"hello, world\"",
            ),
        ),
        (
            "cluster_row",
            work(
                "the operator on a control plane with simulated nodes: Ready once its pods are, Degraded when one is not",
                "the operator against a real API server",
            ),
        ),
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
    fn every_placeholder_of_every_template_is_filled_in_both_scopes_and_both_machines() {
        for (namespaced, workload) in [(true, false), (false, false), (true, true), (false, true)] {
            let names = Names {
                name: "site-operator".into(),
                group: "web.example.com".into(),
                kind: "WebSite".into(),
                namespaced,
                webhook: true,
                workload,
            };
            let files = files(&names);
            let unique: std::collections::BTreeSet<_> = files.iter().map(|(p, _)| p).collect();
            assert_eq!(unique.len(), files.len(), "one template per path");
            let own = if workload {
                Only::Workload
            } else {
                Only::ConfigMap
            };
            let expected = TEMPLATES
                .iter()
                .filter(|(_, _, only)| [Only::Always, Only::Webhook, own].contains(only))
                .count();
            assert_eq!(files.len(), expected);
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
            workload: false,
        }
    }

    #[test]
    fn the_spec_compiles_and_each_phase_has_its_handler() {
        for workload in [false, true] {
            each_phase_has_its_handler(&Names { workload, ..site() });
        }
    }

    fn each_phase_has_its_handler(names: &Names) {
        let files = files(names);
        let (path, spec) = files
            .iter()
            .find(|(path, _)| path == &spec_path(names))
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
