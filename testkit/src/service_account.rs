//! Running as a `ServiceAccount` with only the permissions given: the account created, a token
//! minted through the `TokenRequest` API, and a client that authenticates with it and counts
//! every answer (so a test can say the API server answered 0 × 403, and how many requests the
//! operator sent).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::client::{Body, ClientBuilder};
use kube::{Api, Client};
use kube_fsm_generate::rbac::RbacObjects;
use tower::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the API server answered a `ServiceAccount`'s client.
#[derive(Debug, Default)]
pub struct Tally {
    requests: AtomicU64,
    forbidden: AtomicU64,
}

impl Tally {
    /// Requests answered.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Of those, 403 Forbidden.
    pub fn forbidden(&self) -> u64 {
        self.forbidden.load(Ordering::SeqCst)
    }
}

/// Creates the `ServiceAccount` `name` in `namespace` and returns a token of it (from the
/// `TokenRequest` API, valid an hour).
///
/// # Panics
/// When the API server refuses the account or the token.
pub async fn token(admin: &Client, namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    accounts
        .create(&PostParams::default(), &account)
        .await
        .expect("create the ServiceAccount");
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token for the ServiceAccount")
        .status
        .and_then(|status| status.token)
        .expect("the token")
}

/// Creates the `ServiceAccount` `name` in `namespace` and returns a client authenticated as it
/// (a token from the `TokenRequest` API), with the tally of its answers. It has no permission
/// until [`grant`] gives it some.
///
/// # Panics
/// When the API server refuses the account or the token.
pub async fn client(admin: &Client, namespace: &str, name: &str) -> (Client, Arc<Tally>) {
    let token = token(admin, namespace, name).await;
    let mut config = kube::Config::infer()
        .await
        .expect("the test cluster's config");
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    let tally = Arc::new(Tally::default());
    let counted = tally.clone();
    let client = ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&tower::layer::layer_fn(move |inner| Counting {
            inner,
            tally: counted.clone(),
        }))
        .build();
    (client, tally)
}

/// Applies `objects` (the `Roles`, `ClusterRoles` and bindings of an `Rbac`) as `admin`, and waits
/// until the API server's authorizer lets `account` (the `ServiceAccount`'s client) use each
/// rule (new bindings take a moment to reach it).
///
/// # Panics
/// When the API server refuses one, or a rule does not take effect within 10 s.
pub async fn grant(admin: &Client, objects: &RbacObjects, account: &Client) {
    let params = PostParams::default();
    for role in &objects.cluster_roles {
        let api: Api<ClusterRole> = Api::all(admin.clone());
        api.create(&params, role)
            .await
            .expect("create the ClusterRole");
    }
    for binding in &objects.cluster_role_bindings {
        let api: Api<ClusterRoleBinding> = Api::all(admin.clone());
        api.create(&params, binding)
            .await
            .expect("create the ClusterRoleBinding");
    }
    for role in &objects.roles {
        let api: Api<Role> = Api::namespaced(
            admin.clone(),
            role.metadata.namespace.as_deref().unwrap_or("default"),
        );
        api.create(&params, role).await.expect("create the Role");
    }
    for binding in &objects.role_bindings {
        let api: Api<RoleBinding> = Api::namespaced(
            admin.clone(),
            binding.metadata.namespace.as_deref().unwrap_or("default"),
        );
        api.create(&params, binding)
            .await
            .expect("create the RoleBinding");
    }
    let cluster = objects
        .cluster_roles
        .iter()
        .map(|r| (None, r.rules.clone()));
    let namespaced = objects
        .roles
        .iter()
        .map(|r| (r.metadata.namespace.clone(), r.rules.clone()));
    let reviews: Api<SelfSubjectAccessReview> = Api::all(account.clone());
    for (namespace, rules) in cluster.chain(namespaced) {
        for rule in rules.unwrap_or_default() {
            let review = review(namespace.clone(), &rule);
            let allowed =
                crate::cluster::eventually(std::time::Duration::from_secs(10), || async {
                    let answer = reviews.create(&params, &review).await.ok()?;
                    answer.status.is_some_and(|s| s.allowed).then_some(())
                })
                .await;
            assert!(allowed.is_some(), "the rule {rule:?} did not take effect");
        }
    }
}

/// Whether the requester may use `rule`'s first verb on its first resource (and first name,
/// if it names objects) in `namespace`.
fn review(namespace: Option<String>, rule: &PolicyRule) -> SelfSubjectAccessReview {
    let resource = rule
        .resources
        .as_ref()
        .and_then(|r| r.first())
        .cloned()
        .unwrap_or_default();
    let (resource, subresource) = match resource.split_once('/') {
        Some((resource, sub)) => (resource.to_owned(), Some(sub.to_owned())),
        None => (resource, None),
    };
    SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace,
                verb: rule.verbs.first().cloned(),
                group: rule.api_groups.as_ref().and_then(|g| g.first()).cloned(),
                resource: Some(resource),
                subresource,
                // A rule for named objects is asked about one of them.
                name: rule
                    .resource_names
                    .as_ref()
                    .and_then(|n| n.first())
                    .cloned(),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    }
}

/// Deletes the cluster-scoped objects of `objects` (the namespaced ones go with their
/// namespace).
pub async fn revoke(admin: &Client, objects: &RbacObjects) {
    let params = DeleteParams::default();
    for role in &objects.cluster_roles {
        let name = role.metadata.name.as_deref().unwrap_or_default();
        let _ = Api::<ClusterRole>::all(admin.clone())
            .delete(name, &params)
            .await;
    }
    for binding in &objects.cluster_role_bindings {
        let name = binding.metadata.name.as_deref().unwrap_or_default();
        let _ = Api::<ClusterRoleBinding>::all(admin.clone())
            .delete(name, &params)
            .await;
    }
}

struct Counting<S> {
    inner: S,
    tally: Arc<Tally>,
}

impl<S, B> Service<Request<Body>> for Counting<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError>,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let answer = self.inner.call(request);
        let tally = self.tally.clone();
        Box::pin(async move {
            let response = answer.await?;
            tally.requests.fetch_add(1, Ordering::SeqCst);
            if response.status() == http::StatusCode::FORBIDDEN {
                tally.forbidden.fetch_add(1, Ordering::SeqCst);
            }
            Ok(response)
        })
    }
}
