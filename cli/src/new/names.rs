//! The names a new operator is made of, checked with the spec compiler's own rules (the kind
//! and the API group) and cargo's (the crate), every problem at once.

use kube_fsm_codegen::names::{api_group_problem, camel_ident_problem, to_snake};

/// The names `kube-fsm new` was given, and those derived from them.
#[derive(Debug)]
pub struct Names {
    /// The crate, the binary and the operator (`my-operator`).
    pub name: String,
    /// The API group (`example.com`).
    pub group: String,
    /// The kind (`Website`).
    pub kind: String,
    /// Whether objects of the kind live in namespaces.
    pub namespaced: bool,
    /// Whether the scaffold includes an admission policy for the webhook.
    pub webhook: bool,
    /// Whether the machine runs a Deployment (else it writes a ConfigMap).
    pub workload: bool,
}

impl Names {
    /// The crate as a Rust path (`my_operator`).
    pub fn crate_ident(&self) -> String {
        self.name.replace('-', "_")
    }

    /// The kind's module and spec file name (`web_site`).
    pub fn kind_snake(&self) -> String {
        to_snake(&self.kind)
    }

    /// Every problem of the names, in the order given.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(problem) = crate_name_problem(&self.name) {
            problems.push(format!("the name: {problem}"));
        }
        if let Some(problem) = camel_ident_problem(&self.kind) {
            problems.push(format!(
                "--kind: {problem}; the kind names the generated Rust types ({}Phase, ...)",
                self.kind
            ));
        }
        if let Some(problem) = api_group_problem(&self.group) {
            problems.push(format!("--group: {problem}"));
        }
        problems
    }
}

/// Why `name` cannot be the crate's (and the binary's, and the Deployment's) name, or `None`:
/// lowercase ASCII letters, digits and `-`, starting with a letter, at most 63 characters (a
/// Kubernetes object name too).
fn crate_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Some(format!("`{name}` must start with a lowercase ASCII letter"));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Some(format!(
            "`{name}` contains `{bad}`: use lowercase letters, digits and `-` (it also names \
             the Deployment and its ServiceAccount)"
        ));
    }
    if name.ends_with('-') {
        return Some(format!("`{name}` must not end with `-`"));
    }
    if name.len() > 63 {
        return Some(format!("`{name}` is longer than 63 characters"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(name: &str, group: &str, kind: &str) -> Names {
        Names {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            namespaced: true,
            webhook: false,
            workload: false,
        }
    }

    #[test]
    fn good_names_have_no_problem_and_derive_the_rest() {
        let good = names("site-operator", "web.example.com", "WebSite");
        assert!(good.problems().is_empty());
        assert_eq!(good.crate_ident(), "site_operator");
        assert_eq!(good.kind_snake(), "web_site");
    }

    #[test]
    fn every_bad_name_is_reported_at_once() {
        let bad = names("Site_Operator", "example", "website");
        let problems = bad.problems();
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(problems[0].contains("lowercase"), "{}", problems[0]);
        assert!(problems[1].contains("UpperCamelCase"), "{}", problems[1]);
        assert!(problems[2].contains("no dot"), "{}", problems[2]);
        assert!(names("ops", "example.com", "Self").problems()[0].contains("keyword"));
        assert!(names("ops", "Example.com", "Site").problems()[0].contains("DNS"));
    }
}
