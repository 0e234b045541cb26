//! `Api` construction for namespaced and cluster-scoped resources alike, behind one bound.
//!
//! [`Scoped`] is implemented for every resource type with a static type whose scope is
//! namespaced or cluster (every k8s-openapi type and every `CustomResource`), so a user's
//! signature says `K: Reconcilable<H>` or `C: Watched` and never names the scope.

use kube::core::{ClusterResourceScope, NamespaceResourceScope};
use kube::{Api, Client, Resource};

/// A resource type the runtime can build an `Api` for, namespaced or cluster-scoped.
/// Implemented for every `Resource<DynamicType = ()>` of either scope.
pub trait Scoped: Resource<DynamicType = ()> {
    /// The `Api` for objects of `T`, of the same scope as `Self` (e.g. `Self` as
    /// `PartialObjectMeta`), in `namespace` (ignored for cluster-scoped kinds; `None` means all
    /// namespaces).
    fn api_in<T>(client: Client, namespace: Option<&str>) -> Api<T>
    where
        T: Resource<Scope = Self::Scope, DynamicType = ()>;

    /// Whether the kind is cluster-scoped.
    fn cluster_scoped() -> bool;
}

impl<K> Scoped for K
where
    K: Resource<DynamicType = ()>,
    K::Scope: ScopedApi,
{
    fn api_in<T>(client: Client, namespace: Option<&str>) -> Api<T>
    where
        T: Resource<Scope = Self::Scope, DynamicType = ()>,
    {
        K::Scope::api(client, namespace)
    }

    fn cluster_scoped() -> bool {
        K::Scope::CLUSTER
    }
}

/// Implemented by kube's resource scopes: builds the `Api` an object lives in.
pub trait ScopedApi {
    /// Whether objects of this scope live outside namespaces.
    const CLUSTER: bool;

    /// The `Api` for objects of `K` in `namespace` (ignored for cluster-scoped kinds; `None`
    /// means all namespaces).
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl ScopedApi for NamespaceResourceScope {
    const CLUSTER: bool = false;

    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        }
    }
}

impl ScopedApi for ClusterResourceScope {
    const CLUSTER: bool = true;

    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::all(client)
    }
}
