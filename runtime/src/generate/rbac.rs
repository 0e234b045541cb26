//! The RBAC objects of an operator: its [`Rbac`] (computed from its wiring by
//! `Operator::rbac`) as Roles, ClusterRoles and their bindings for one ServiceAccount.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::operator::rbac::{Permission, Rbac, Scope};

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

impl Permission {
    /// The RBAC rule granting it.
    pub fn rule(&self) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![self.group.clone()]),
            resources: Some(vec![self.resource.clone()]),
            resource_names: (!self.names.is_empty()).then(|| self.names.iter().cloned().collect()),
            verbs: self.verbs.iter().map(|v| v.as_str().to_owned()).collect(),
            ..PolicyRule::default()
        }
    }
}

impl Rbac {
    /// The Roles and ClusterRoles named `name` granting these permissions, bound to the
    /// ServiceAccount `service_account` in `namespace`.
    pub fn objects(&self, name: &str, service_account: &str, namespace: &str) -> RbacObjects {
        let mut by_scope: BTreeMap<&Scope, Vec<PolicyRule>> = BTreeMap::new();
        for permission in self.permissions() {
            by_scope
                .entry(&permission.scope)
                .or_default()
                .push(permission.rule());
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
