//! What an RBAC refusal names. The API server's authorizer words every 403 the same way
//! (`User "…" cannot VERB resource "RESOURCE" in API group "GROUP" in the namespace "NS"`, or
//! `… at the cluster scope`); the engine reads the verb, resource, group and namespace from it,
//! so that it can report which permission the operator lacks. A 403 worded otherwise (an
//! admission webhook's denial) is no missing permission.

/// A permission the API server said the requester lacks.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Refusal {
    /// The verb, e.g. `patch`.
    pub verb: String,
    /// The resource, with its subresource, e.g. `databases/status`.
    pub resource: String,
    /// The API group (`""`: the core group).
    pub group: String,
    /// The namespace (`None`: the cluster scope).
    pub namespace: Option<String>,
}

impl Refusal {
    /// The permission an answer says is missing, if it is a refusal for want of one: a 401
    /// (no valid credentials at all), or a 403 read from its message or, for the refusal of a
    /// server-side apply that would create the object (the API server asks for `create` then,
    /// and words it `… is forbidden: ` with no reason), from its details.
    pub(crate) fn of(status: &kube::core::Status) -> Option<Self> {
        if status.code == 401 {
            return Some(Refusal {
                verb: "authenticate".into(),
                resource: "(any)".into(),
                group: String::new(),
                namespace: None,
            });
        }
        if status.code != 403 {
            return None;
        }
        if let Some(refusal) = Self::parse(&status.message) {
            return Some(refusal);
        }
        let details = status.details.as_ref()?;
        (status.reason == "Forbidden"
            && status.message.trim_end().ends_with("is forbidden:")
            && !details.kind.is_empty())
        .then(|| Refusal {
            verb: "create".into(),
            resource: details.kind.clone(),
            group: details.group.clone(),
            namespace: None,
        })
    }

    /// The permission `message` (a 403's message) says is missing, if it is an RBAC refusal.
    pub(crate) fn parse(message: &str) -> Option<Self> {
        let quoted = |text: &str, before: &str| -> Option<String> {
            let rest = &text[text.find(before)? + before.len()..];
            Some(rest[..rest.find('"')?].to_owned())
        };
        let after_cannot = &message[message.find(" cannot ")? + " cannot ".len()..];
        let verb = after_cannot.split_whitespace().next()?.to_owned();
        let resource = quoted(after_cannot, "resource \"")?;
        let group = quoted(after_cannot, "in API group \"")?;
        let namespace = quoted(after_cannot, "in the namespace \"");
        Some(Refusal {
            verb,
            resource,
            group,
            namespace,
        })
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot {} {}", self.verb, self.resource)?;
        if !self.group.is_empty() {
            write!(f, " (API group {})", self.group)?;
        }
        match &self.namespace {
            Some(namespace) => write!(f, " in namespace {namespace}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn reads_the_authorizers_words() {
        let namespaced = Refusal::parse(
            "databases.example.kube-fsm.dev \"a\" is forbidden: User \
             \"system:serviceaccount:ops:db\" cannot patch resource \"databases/status\" in API \
             group \"example.kube-fsm.dev\" in the namespace \"team-a\"",
        )
        .expect("an RBAC refusal");
        assert_eq!(
            namespaced.to_string(),
            "cannot patch databases/status (API group example.kube-fsm.dev) in namespace team-a"
        );
        let cluster = Refusal::parse(
            "configmaps is forbidden: User \"system:serviceaccount:ops:db\" cannot list \
             resource \"configmaps\" in API group \"\" at the cluster scope",
        )
        .expect("an RBAC refusal");
        assert_eq!(cluster.to_string(), "cannot list configmaps");
        assert_eq!(
            Refusal::parse("admission webhook \"x\" denied the request: no"),
            None,
            "a webhook's denial names no permission"
        );
        assert_eq!(Refusal::parse("User \"u\" cannot"), None, "cut short");
    }

    #[test]
    fn an_apply_that_would_create_is_a_refused_create() {
        let status = kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "configmaps \"db\" is forbidden: ".into(),
            details: Some(kube::core::response::StatusDetails {
                name: "db".into(),
                group: String::new(),
                kind: "configmaps".into(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 0,
            }),
            ..Default::default()
        };
        assert_eq!(
            Refusal::of(&status).map(|r| r.to_string()).as_deref(),
            Some("cannot create configmaps")
        );
    }
}
