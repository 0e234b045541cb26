//! The RBAC objects of an operator: its [`Rbac`] (computed from its wiring by
//! `Operator::rbac`) as Roles, ClusterRoles and their bindings for one ServiceAccount.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use kube_fsm::operator::rbac::{Permission, Rbac, Scope};

/// The RBAC objects granting an [`Rbac`] to one ServiceAccount.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RbacObjects {
    /// The cluster-wide permissions (none: empty).
    pub cluster_roles: Vec<ClusterRole>,
    /// Their bindings to the ServiceAccount.
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// One Role per namespace the operator needs something in.
    pub roles: Vec<Role>,
    /// Their bindings to the ServiceAccount.
    pub role_bindings: Vec<RoleBinding>,
}

/// The RBAC rule granting `permission`.
pub fn rule(permission: &Permission) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![permission.group.clone()]),
        resources: Some(vec![permission.resource.clone()]),
        resource_names: (!permission.names.is_empty())
            .then(|| permission.names.iter().cloned().collect()),
        verbs: permission
            .verbs
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        ..PolicyRule::default()
    }
}

impl RbacObjects {
    /// The Roles and ClusterRoles named `name` granting `rbac`'s permissions, bound to the
    /// ServiceAccount `service_account` in `namespace`.
    pub fn new(rbac: &Rbac, name: &str, service_account: &str, namespace: &str) -> Self {
        let mut by_scope: BTreeMap<&Scope, Vec<PolicyRule>> = BTreeMap::new();
        for permission in rbac.permissions() {
            by_scope
                .entry(&permission.scope)
                .or_default()
                .push(rule(permission));
        }
        let subjects = Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: service_account.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        }]);
        let role_ref = |kind: &str| RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: kind.into(),
            name: name.into(),
        };
        let meta = |namespace: Option<&str>| ObjectMeta {
            name: Some(name.into()),
            namespace: namespace.map(str::to_owned),
            ..ObjectMeta::default()
        };
        let mut objects = RbacObjects::default();
        for (scope, rules) in by_scope {
            match scope {
                Scope::Cluster => {
                    objects.cluster_roles.push(ClusterRole {
                        metadata: meta(None),
                        rules: Some(rules),
                        ..ClusterRole::default()
                    });
                    objects.cluster_role_bindings.push(ClusterRoleBinding {
                        metadata: meta(None),
                        role_ref: role_ref("ClusterRole"),
                        subjects: subjects.clone(),
                    });
                }
                Scope::Namespace(at) => {
                    objects.roles.push(Role {
                        metadata: meta(Some(at)),
                        rules: Some(rules),
                    });
                    objects.role_bindings.push(RoleBinding {
                        metadata: meta(Some(at)),
                        role_ref: role_ref("Role"),
                        subjects: subjects.clone(),
                    });
                }
            }
        }
        objects
    }
}

#[cfg(test)]
mod tests {
    use kube_fsm::operator::rbac::{Rbac, Scope, Verb};

    use super::RbacObjects;

    #[test]
    fn namespaced_permissions_get_a_role_per_namespace_and_names_stay_on_their_rule() {
        let mut rbac = Rbac::default();
        let ops = || Scope::Namespace("ops".into());
        rbac.grant_named(
            "coordination.k8s.io",
            "leases",
            ops(),
            [Verb::Create, Verb::Get, Verb::Patch],
            ["op".to_owned()],
            "the Lease",
        );
        rbac.grant(
            "",
            "configmaps",
            Scope::Namespace("team-a".into()),
            [Verb::List, Verb::Watch],
            "owned",
        );
        let objects = RbacObjects::new(&rbac, "op", "op", "ops");
        assert!(objects.cluster_roles.is_empty());
        assert_eq!(objects.roles.len(), 2, "team-a and the Lease namespace");
        let named: Vec<_> = (objects.roles.iter())
            .flat_map(|r| r.rules.iter().flatten())
            .filter(|r| r.resources.as_deref() == Some(&["leases".to_owned()][..]))
            .map(|r| (r.resource_names.clone(), r.verbs.clone()))
            .collect();
        assert_eq!(
            named,
            [
                (None, vec!["create".to_owned()]),
                (
                    Some(vec!["op".to_owned()]),
                    vec!["get".to_owned(), "patch".to_owned()]
                ),
            ],
            "only its own Lease may be read and renewed; create cannot be restricted by name"
        );
    }

    #[test]
    fn cluster_permissions_get_one_cluster_role_bound_to_the_service_account() {
        let mut rbac = Rbac::default();
        rbac.grant("", "secrets", Scope::Cluster, [Verb::List], "owned");
        let objects = RbacObjects::new(&rbac, "op", "op-account", "ops");
        assert_eq!((objects.cluster_roles.len(), objects.roles.len()), (1, 0));
        let subject = &objects.cluster_role_bindings[0].subjects.as_ref().unwrap()[0];
        assert_eq!(
            (
                subject.kind.as_str(),
                subject.name.as_str(),
                subject.namespace.as_deref()
            ),
            ("ServiceAccount", "op-account", Some("ops"))
        );
        assert_eq!(
            objects.cluster_role_bindings[0].role_ref.kind,
            "ClusterRole"
        );
    }
}
