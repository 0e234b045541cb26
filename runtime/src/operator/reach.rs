//! What a least-privilege grant still reaches beyond the operator's own objects because RBAC
//! cannot narrow it — list and watch by label, or objects whose names are known only once the
//! Pods run —, said in sentences beside the manifests with what to do about it. Pure.

use crate::operator::rbac::{Permission, Rbac, Scope, Verb};

impl Rbac {
    /// One sentence per grant that reaches objects the operator does not own and RBAC cannot
    /// narrow: every Secret of the cluster (a cluster-wide operator owning or watching
    /// Secrets), every Lease of a namespace (sharding: the replicas' membership Leases are
    /// named after their Pods). Empty: nothing reaches further than its need.
    pub fn reach(&self) -> Vec<String> {
        self.permissions()
            .iter()
            .filter(|p| p.names.is_empty())
            .filter_map(reach_of)
            .collect()
    }
}

fn reach_of(permission: &Permission) -> Option<String> {
    let verbs = || {
        let verbs: Vec<&str> = permission.verbs.iter().map(|v| v.as_str()).collect();
        verbs.join(", ")
    };
    let why = permission.why.join("; ");
    match (
        permission.group.as_str(),
        permission.resource.as_str(),
        &permission.scope,
    ) {
        ("", "secrets", Scope::Cluster) => Some(format!(
            "The operator may {} every Secret in the cluster ({why}): RBAC cannot narrow list \
             and watch to the Secrets it makes, and a label selector is a filter anyone who \
             creates a Secret can match. Run it for one namespace (Operator::namespace), which \
             grants a Role there, or keep what it makes out of Secrets.",
            verbs()
        )),
        ("coordination.k8s.io", "leases", Scope::Namespace(namespace))
            if permission.verbs.contains(&Verb::Patch) =>
        {
            Some(format!(
                "The operator may {} every Lease in namespace {namespace} ({why}): the \
                 membership Leases are named after the replicas' Pods, which RBAC cannot know \
                 ahead. Keep its Leases in a namespace of their own, where nothing else keeps \
                 a Lease.",
                verbs()
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_wide_secrets_and_a_namespace_of_leases_are_said_and_named_grants_are_not() {
        let mut rbac = Rbac::default();
        rbac.grant(
            "",
            "secrets",
            Scope::Cluster,
            [Verb::List, Verb::Watch, Verb::Delete],
            "Operator::owns::<Secret>",
        );
        rbac.grant(
            "",
            "secrets",
            Scope::Namespace("team-a".into()),
            [Verb::List],
            "Operator::owns::<Secret>",
        );
        rbac.grant(
            "coordination.k8s.io",
            "leases",
            Scope::Namespace("ops".into()),
            [Verb::Get, Verb::Patch, Verb::Delete],
            "sharding",
        );
        rbac.grant_named(
            "coordination.k8s.io",
            "leases",
            Scope::Namespace("elsewhere".into()),
            [Verb::Get, Verb::Patch],
            ["op".to_owned()],
            "leader election",
        );
        let said = rbac.reach();
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(
            said[1].starts_with(
                "The operator may get, patch, delete every Lease in namespace ops (sharding)"
            ),
            "{}",
            said[1]
        );
        assert!(
            said[0].starts_with(
                "The operator may list, watch, delete every Secret in the cluster \
                 (Operator::owns::<Secret>)"
            ),
            "{}",
            said[0]
        );
    }
}
