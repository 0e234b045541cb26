//! Name rules: Rust identifiers, Kubernetes condition types and API groups, case conversion.
//! The spec compiler's, and `kube-fsm new`'s for the names it scaffolds.

/// Every Rust keyword (strict, reserved and 2018+), which a phase or event may not be named.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
    "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "try", "typeof", "unsized", "virtual", "yield",
];

/// Associated items of the generated enums, which a variant may not shadow.
const RESERVED: &[&str] = &[
    "ALL",
    "INITIAL",
    "MACHINE",
    "NAMES",
    "TERMINAL",
    "EDGES",
    "SUCCESSORS",
];

/// Whether `name` is a Rust keyword.
pub fn is_keyword(name: &str) -> bool {
    KEYWORDS.contains(&name)
}

/// Why a phase or event name is not acceptable, or `None` when it is.
pub fn camel_ident_problem(name: &str) -> Option<String> {
    if KEYWORDS.contains(&name) {
        return Some(format!("`{name}` is a Rust keyword"));
    }
    if RESERVED.contains(&name) {
        return Some(format!(
            "`{name}` is reserved for an associated item of the generated enum"
        ));
    }
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Some("the name is empty".into());
    };
    if !first.is_ascii_uppercase() {
        return Some(format!(
            "`{name}` must start with an uppercase ASCII letter (UpperCamelCase)"
        ));
    }
    if let Some(bad) = name.chars().find(|c| !c.is_ascii_alphanumeric()) {
        return Some(format!(
            "`{name}` contains `{bad}`; use ASCII letters and digits only (UpperCamelCase)"
        ));
    }
    None
}

/// The UpperCamelCase spelling of a name, used to suggest a fix.
pub fn to_upper_camel(name: &str) -> String {
    let mut out = String::new();
    for word in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'X');
    }
    out
}

/// `ProvisioningTimedOut` → `provisioning_timed_out`, `HTTPReady` → `http_ready`.
pub fn to_snake(name: &str) -> String {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Why `name` is not a valid `metav1.Condition.type`, or `None`. The rule is apimachinery's:
/// an optional DNS-subdomain prefix and `/`, then a name of `[A-Za-z0-9][-A-Za-z0-9_.]*` that
/// ends alphanumeric, at most 316 characters in all.
pub fn condition_type_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a condition type cannot be empty".into());
    }
    if name.len() > 316 {
        return Some(format!("`{name}` is longer than 316 characters"));
    }
    let (prefix, local) = match name.split_once('/') {
        Some((prefix, local)) => (Some(prefix), local),
        None => (None, name),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Some(format!(
            "the prefix `{prefix}` of `{name}` is not a lowercase DNS subdomain"
        ));
    }
    let ok = !local.is_empty()
        && local.len() <= 63
        && local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric())
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    (!ok).then(|| {
        format!(
            "`{name}` is not a Kubernetes condition type (letters, digits, `-`, `_`, `.`, \
             starting and ending with a letter or digit, optionally prefixed by `domain/`)"
        )
    })
}

/// Whether `name` is a lowercase DNS subdomain (RFC 1123): dot-separated labels of lowercase
/// letters, digits and `-`, each 1–63 characters, not starting or ending with `-`; at most 253
/// characters.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Why `group` cannot be a custom resource's API group, or `None`: the API server wants a
/// lowercase DNS subdomain with at least one dot (`example.com`, `db.acme.io`).
pub fn api_group_problem(group: &str) -> Option<String> {
    if !is_dns_subdomain(group) {
        return Some(format!(
            "`{group}` is not a lowercase DNS subdomain (letters, digits and `-` in labels \
             separated by dots, e.g. `example.com`)"
        ));
    }
    (!group.contains('.')).then(|| {
        format!("`{group}` has no dot: a custom resource's group is a domain, e.g. `{group}.example.com`")
    })
}

/// The Rust variant name for a condition type: `example.com/pods-ready` → `PodsReady`.
pub fn condition_variant(name: &str) -> String {
    let local = name.rsplit('/').next().unwrap_or(name);
    to_upper_camel(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idents() {
        assert_eq!(camel_ident_problem("Pending"), None);
        assert_eq!(camel_ident_problem("None"), None);
        assert!(camel_ident_problem("pending").is_some());
        assert!(camel_ident_problem("Self").is_some());
        assert!(camel_ident_problem("Bad-Name").is_some());
        assert!(camel_ident_problem("").is_some());
    }

    #[test]
    fn cases() {
        assert_eq!(to_snake("ProvisioningTimedOut"), "provisioning_timed_out");
        assert_eq!(to_snake("HTTPReady"), "http_ready");
        assert_eq!(to_snake("Phase2Done"), "phase2_done");
        assert_eq!(to_upper_camel("pods-ready"), "PodsReady");
        assert_eq!(to_upper_camel("running"), "Running");
        assert_eq!(condition_variant("example.com/pods-ready"), "PodsReady");
    }

    #[test]
    fn condition_types() {
        assert_eq!(condition_type_problem("Ready"), None);
        assert_eq!(condition_type_problem("example.com/Pods_Ready.v2"), None);
        assert!(condition_type_problem("-Ready").is_some());
        assert!(condition_type_problem("Ready!").is_some());
        assert!(condition_type_problem("Ex.com/Ready").is_some());
        assert!(condition_type_problem("").is_some());
    }
}
