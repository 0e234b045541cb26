//! The least-privilege RBAC of an operator, computed from its own wiring ([`Operator::rbac`]):
//! every request the engine can send for the configured operator, as verbs on resources, with
//! the builder call each comes from; nothing else. The generators turn it into Roles,
//! ClusterRoles and their bindings (`kube_fsm_generate::rbac`).

use std::collections::BTreeSet;

use crate::engine::RecordedEvents;
use crate::operator::Operator;
use crate::replicas::Replicas;
use crate::watch::scope::Scoped;

/// A verb of the Kubernetes API, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// Read one object.
    Get,
    /// List objects.
    List,
    /// Watch objects.
    Watch,
    /// Create an object.
    Create,
    /// Replace an object (PUT).
    Update,
    /// Patch an object (merge, JSON or server-side apply).
    Patch,
    /// Delete an object.
    Delete,
}

impl Verb {
    /// The name RBAC rules use.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// Where a permission applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every namespace, or a cluster-scoped kind: a ClusterRole.
    Cluster,
    /// One namespace: a Role there.
    Namespace(String),
}

/// Verbs on one resource in one scope, and the builder calls that need them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permission {
    /// The API group (`""`: the core group).
    pub group: String,
    /// The resource (plural), with a subresource after a `/` (`databases/status`).
    pub resource: String,
    /// Where.
    pub scope: Scope,
    /// The verbs.
    pub verbs: BTreeSet<Verb>,
    /// Only the objects of these names (`resourceNames`); empty: every object.
    pub names: BTreeSet<String>,
    /// Why, one line per need (e.g. `Operator::owns::<ConfigMap>: watched, applied`).
    pub why: Vec<String>,
}

impl Verb {
    /// Whether RBAC can restrict the verb to named objects: not `create` (the name may come
    /// from `generateName`), `list` or `watch` (collections).
    pub fn nameable(self) -> bool {
        !matches!(self, Verb::Create | Verb::List | Verb::Watch)
    }
}

/// What an operator may do and nothing more: the permissions [`Operator::rbac`] computed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rbac {
    permissions: Vec<Permission>,
}

impl Rbac {
    /// The permissions, sorted by scope, group and resource.
    pub fn permissions(&self) -> &[Permission] {
        &self.permissions
    }

    /// Adds `verbs` on `resource` of `group` in `scope`, for `why`; merged with what is there.
    pub fn grant(
        &mut self,
        group: &str,
        resource: &str,
        scope: Scope,
        verbs: impl IntoIterator<Item = Verb>,
        why: impl Into<String>,
    ) {
        self.add(group, resource, scope, verbs, BTreeSet::new(), why.into());
    }

    /// Adds `verbs` on the objects named `names` of `resource`, for `why`: the verbs RBAC can
    /// restrict by name ([`Verb::nameable`]) only on those, the others on every object.
    pub fn grant_named(
        &mut self,
        group: &str,
        resource: &str,
        scope: Scope,
        verbs: impl IntoIterator<Item = Verb>,
        names: impl IntoIterator<Item = String>,
        why: impl Into<String>,
    ) {
        let why = why.into();
        let names: BTreeSet<String> = names.into_iter().collect();
        let (named, any): (Vec<Verb>, Vec<Verb>) = verbs.into_iter().partition(|v| v.nameable());
        if !named.is_empty() {
            self.add(group, resource, scope.clone(), named, names, why.clone());
        }
        if !any.is_empty() {
            self.add(group, resource, scope, any, BTreeSet::new(), why);
        }
    }

    fn add(
        &mut self,
        group: &str,
        resource: &str,
        scope: Scope,
        verbs: impl IntoIterator<Item = Verb>,
        names: BTreeSet<String>,
        why: String,
    ) {
        let at = self.permissions.iter().position(|p| {
            p.group == group && p.resource == resource && p.scope == scope && p.names == names
        });
        let at = at.unwrap_or_else(|| {
            self.permissions.push(Permission {
                group: group.to_owned(),
                resource: resource.to_owned(),
                scope,
                verbs: BTreeSet::new(),
                names,
                why: Vec::new(),
            });
            self.permissions.len() - 1
        });
        let permission = &mut self.permissions[at];
        permission.verbs.extend(verbs);
        if !permission.why.contains(&why) {
            permission.why.push(why);
        }
        self.permissions.sort_by(|a, b| {
            (&a.scope, &a.group, &a.resource, &a.names).cmp(&(
                &b.scope,
                &b.group,
                &b.resource,
                &b.names,
            ))
        });
    }

    /// Adds every permission of `other` (the machines of one process share one
    /// ServiceAccount: its role is the union of theirs).
    pub fn merge(&mut self, other: &Rbac) {
        for p in &other.permissions {
            for why in &p.why {
                let verbs = p.verbs.iter().copied();
                let (names, scope) = (p.names.clone(), p.scope.clone());
                self.add(&p.group, &p.resource, scope, verbs, names, why.clone());
            }
        }
    }

    /// This without the permission at `index` (as an operator whose role lacks one rule).
    #[must_use]
    pub fn without(&self, index: usize) -> Rbac {
        let mut permissions = self.permissions.clone();
        if index < permissions.len() {
            permissions.remove(index);
        }
        Rbac { permissions }
    }
}

/// A kind the builder was told about, before the operator's namespace is known.
#[derive(Clone, Debug)]
pub(crate) struct KindNeed {
    group: String,
    resource: String,
    cluster_scoped: bool,
    verbs: Vec<Verb>,
    /// Only these objects, where RBAC can say so (empty: every object).
    names: Vec<String>,
    why: String,
}

impl KindNeed {
    /// `verbs` on `R`, for `why`.
    pub(crate) fn of<R: Scoped>(verbs: &[Verb], why: String) -> Self {
        KindNeed {
            group: R::group(&()).into_owned(),
            resource: R::plural(&()).into_owned(),
            cluster_scoped: R::cluster_scoped(),
            verbs: verbs.to_vec(),
            names: Vec::new(),
            why,
        }
    }

    /// Whether `other` grants the same permissions (whatever its reason).
    pub(crate) fn grants_as(&self, other: &KindNeed) -> bool {
        (&self.group, &self.resource, &self.verbs, &self.names)
            == (&other.group, &other.resource, &other.verbs, &other.names)
    }
}

/// The scope of a kind for an operator watching `namespace` (`None`: all).
fn scope(cluster_scoped: bool, namespace: Option<&str>) -> Scope {
    match namespace {
        Some(namespace) if !cluster_scoped => Scope::Namespace(namespace.to_owned()),
        _ => Scope::Cluster,
    }
}

impl<K, H> Operator<K, H>
where
    K: crate::engine::Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// The RBAC permissions this operator needs as configured, and no more (its
    /// ServiceAccount's Role or ClusterRole: `kube_fsm_generate::rbac::RbacObjects`).
    /// Namespaced operators ([`Operator::namespace`]) get their permissions in that namespace
    /// (plus the Lease namespace); cluster-wide ones cluster-wide, except the Leases. What each
    /// builder call adds:
    ///
    /// | from | resource | verbs |
    /// |---|---|---|
    /// | the machine's kind `K` | `K`'s plural | list, watch (its watch), get (the re-read after a conflict), patch (when the spec has a finalizer, or with sharding: the shard label) |
    /// | every step | `K`'s plural`/status` | patch (the status writes) |
    /// | [`Operator::owns::<C>`](Operator::owns) | `C`'s plural | list, watch, create and patch (server-side apply: the API server asks for create when the child is new; shard labels), delete (`Step::delete`; also what the `OwnerReferencesPermissionEnforcement` admission plugin asks of a writer of ownerReferences) |
    /// | [`Operator::watches::<R>`](Operator::watches), [`watches_shared`](Operator::watches_shared) | `R`'s plural | list, watch |
    /// | [`Operator::needs::<R>`](Operator::needs) | `R`'s plural | the verbs given |
    /// | Events, unless [`RecordedEvents::Off`] | `events` (`events.k8s.io`) | create, patch |
    /// | [`crate::replicas::LeaderElection`] | `leases` (`coordination.k8s.io`) in its namespace | get, create, patch |
    /// | [`crate::replicas::Sharding`] | `leases` in its namespace | get, list, create, patch, delete |
    ///
    /// Requests a handler sends through its own client (e.g. the Database example's cleanup
    /// deleting its child) and the admission webhook's registration are declared with
    /// [`Operator::needs`].
    pub fn rbac(&self) -> Rbac {
        let namespace = self.namespace.as_deref();
        let own = scope(K::cluster_scoped(), namespace);
        let (group, plural) = (K::group(&()), K::plural(&()));
        let mut rbac = Rbac::default();
        let mut verbs = vec![Verb::List, Verb::Watch, Verb::Get];
        let sharded = matches!(self.replicas, Replicas::Sharded(_));
        if K::machine().finalizer.is_some() || sharded {
            verbs.push(Verb::Patch);
        }
        rbac.grant(
            &group,
            &plural,
            own.clone(),
            verbs,
            "the machine's kind: watched, re-read after a conflict, its finalizer or shard label patched",
        );
        rbac.grant(
            &group,
            &format!("{plural}/status"),
            own.clone(),
            [Verb::Patch],
            "the machine's status writes",
        );
        for need in &self.needs {
            rbac.grant_named(
                &need.group,
                &need.resource,
                scope(need.cluster_scoped, namespace),
                need.verbs.iter().copied(),
                need.names.iter().cloned(),
                need.why.clone(),
            );
        }
        if self.config.events != RecordedEvents::Off {
            rbac.grant(
                "events.k8s.io",
                "events",
                own,
                [Verb::Create, Verb::Patch],
                "Kubernetes Events (RecordedEvents)",
            );
        }
        match &self.replicas {
            Replicas::One => {}
            Replicas::LeaderElection(election) => rbac.grant_named(
                "coordination.k8s.io",
                "leases",
                Scope::Namespace(election.namespace().to_owned()),
                [Verb::Get, Verb::Create, Verb::Patch],
                [election.lease().to_owned()],
                "leader election",
            ),
            Replicas::Sharded(sharding) => rbac.grant(
                "coordination.k8s.io",
                "leases",
                Scope::Namespace(sharding.namespace.clone()),
                [
                    Verb::Get,
                    Verb::List,
                    Verb::Create,
                    Verb::Patch,
                    Verb::Delete,
                ],
                "sharding: the shard and membership Leases",
            ),
        }
        rbac
    }

    /// Declares what handlers (or code beside the operator, e.g. the admission webhook's
    /// registration) send through their own client: `verbs` on `R`, so that
    /// [`Operator::rbac`] includes them.
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kube_fsm::operator::rbac::Verb;
    /// // The cleanup handler deletes the children through its own `Api`.
    /// operator.needs::<ConfigMap>(&[Verb::Delete], "cleanup deletes the child")
    /// # }
    /// ```
    #[must_use]
    pub fn needs<R: Scoped>(mut self, verbs: &[Verb], why: &str) -> Self {
        self.needs
            .push(KindNeed::of::<R>(verbs, format!("Operator::needs: {why}")));
        self
    }

    /// [`Operator::needs`] on the objects named `names` only (`resourceNames`), for the verbs
    /// RBAC can restrict by name; `create`, `list` and `watch` still apply to every object of
    /// `R`, so leave them out where something else creates the object.
    ///
    /// ```no_run
    /// # fn demo<K, H>(operator: kube_fsm::Operator<K, H>) -> kube_fsm::Operator<K, H> where K: kube_fsm::Reconcilable<H>, H: Send + Sync + 'static {
    /// use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    /// use kube_fsm::operator::rbac::Verb;
    /// // It updates its own webhook registration (the manifests create it), and no other.
    /// operator.needs_named::<ValidatingWebhookConfiguration>(
    ///     &[Verb::Get, Verb::Patch],
    ///     &["databases.example.kube-fsm.dev"],
    ///     "updates its webhook registration",
    /// )
    /// # }
    /// ```
    #[must_use]
    pub fn needs_named<R: Scoped>(mut self, verbs: &[Verb], names: &[&str], why: &str) -> Self {
        let mut need = KindNeed::of::<R>(verbs, format!("Operator::needs_named: {why}"));
        need.names = names.iter().map(|&n| n.to_owned()).collect();
        self.needs.push(need);
        self
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::runtime::watcher;

    use super::{Scope, Verb};
    use crate::engine::RecordedEvents;
    use crate::handler::step::Step;
    use crate::machine::next::Next;
    use crate::operator::Operator;
    use crate::replicas::leader::LeaderElection;
    use crate::test_machines::{
        Database, DatabaseDegradedNext, DatabaseHandler, DatabasePendingNext,
        DatabaseProvisioningNext, DatabaseRunningNext,
    };

    #[derive(Clone)]
    struct Handlers;

    impl DatabaseHandler for Handlers {
        type Error = std::convert::Infallible;

        async fn on_pending(
            &self,
            _: &Database,
            _: &mut Step<Database>,
        ) -> Result<DatabasePendingNext, Self::Error> {
            Ok(Next::Stay)
        }

        async fn on_provisioning(
            &self,
            _: &Database,
            _: &mut Step<Database>,
        ) -> Result<DatabaseProvisioningNext, Self::Error> {
            Ok(Next::Stay)
        }

        async fn on_running(
            &self,
            _: &Database,
            _: &mut Step<Database>,
        ) -> Result<DatabaseRunningNext, Self::Error> {
            Ok(Next::Stay)
        }

        async fn on_degraded(
            &self,
            _: &Database,
            _: &mut Step<Database>,
        ) -> Result<DatabaseDegradedNext, Self::Error> {
            Ok(Next::Stay)
        }

        async fn cleanup(
            &self,
            _: &Database,
            _: &crate::handler::context::Context,
        ) -> Result<crate::machine::next::Cleanup, Self::Error> {
            Ok(crate::machine::next::Cleanup::Done)
        }
    }

    fn summary(rbac: &super::Rbac) -> Vec<String> {
        rbac.permissions()
            .iter()
            .map(|p| {
                let verbs: Vec<&str> = p.verbs.iter().map(|v| v.as_str()).collect();
                let names: Vec<&str> = p.names.iter().map(String::as_str).collect();
                let named = if names.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", names.join(","))
                };
                format!(
                    "{:?} {}/{}{named} {}",
                    p.scope,
                    p.group,
                    p.resource,
                    verbs.join(",")
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn a_namespaced_operator_needs_namespaced_permissions_and_a_cluster_wide_one_cluster_ones()
     {
        let client = crate::testing::no_cluster().client().clone();
        let wired = || {
            Operator::<Database, Handlers>::new(client.clone(), Handlers)
                .owns::<ConfigMap>(watcher::Config::default())
                .watches_shared::<ConfigMap>(watcher::Config::default(), |_| false)
                .owns::<Secret>(watcher::Config::default())
        };
        let namespaced = wired()
            .namespace("team-a")
            .replicas(LeaderElection::new("op", "ops"))
            .rbac();
        let ns = |n: &str| format!("{:?}", Scope::Namespace(n.into()));
        assert_eq!(
            summary(&namespaced),
            [
                format!("{} coordination.k8s.io/leases create", ns("ops")),
                format!("{} coordination.k8s.io/leases [op] get,patch", ns("ops")),
                format!(
                    "{} /configmaps list,watch,create,patch,delete",
                    ns("team-a")
                ),
                format!("{} /secrets list,watch,create,patch,delete", ns("team-a")),
                format!("{} events.k8s.io/events create,patch", ns("team-a")),
                format!(
                    "{} fsm.example.com/databases get,list,watch,patch",
                    ns("team-a")
                ),
                format!("{} fsm.example.com/databases/status patch", ns("team-a")),
            ],
            "owned and watched ConfigMaps share one rule; the Lease in its own namespace, by name"
        );
        let cluster = wired().record_events(RecordedEvents::Off).rbac();
        assert!(
            cluster
                .permissions()
                .iter()
                .all(|p| p.scope == Scope::Cluster)
        );
        assert!(
            !cluster.permissions().iter().any(|p| p.resource == "events"),
            "no Events recorded, no Events granted"
        );
        assert!(
            cluster.permissions()[0].verbs.contains(&Verb::Delete),
            "owned kinds may be deleted (Step::delete, cleanup)"
        );
    }
}
