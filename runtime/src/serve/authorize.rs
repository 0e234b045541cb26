//! Who may read `/metrics` and `/machine` when the endpoint is protected
//! ([`Endpoints::authorize`](super::Endpoints::authorize)), as controller-runtime's
//! `FilterProvider` decides: the request's bearer token is authenticated by the API server
//! (`TokenReview`) and its subject authorized to `get` the path (`SubjectAccessReview` of a
//! non-resource URL). Verdicts are remembered for [`REMEMBER`] per token and path, so a scrape
//! every few seconds costs the API server two requests a window, not two a scrape.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// How long a verdict is remembered.
pub(super) const REMEMBER: Duration = Duration::from_secs(10);
/// Verdicts remembered at most (all forgotten when full: a flood of bad tokens cannot grow it).
const MAX_REMEMBERED: usize = 1024;

/// What a request may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Served.
    Allowed,
    /// 401: no token, or one the API server does not authenticate.
    Unauthenticated(String),
    /// 403: the subject may not get the path.
    Forbidden(String),
    /// 503: the API server could not be asked (not remembered).
    Unavailable(String),
}

/// The API server's word on tokens, remembered a while.
pub(super) struct Authorizer {
    client: Client,
    remembered: Mutex<HashMap<(String, String), (Instant, Verdict)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the tokens.
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    pub(super) fn new(client: Client) -> Self {
        Authorizer {
            client,
            remembered: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict on a request for `path` with the `Authorization` header `header`.
    pub(super) async fn check(&self, header: Option<&str>, path: &str) -> Verdict {
        let Some(token) = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
        else {
            return Verdict::Unauthenticated(format!(
                "{path} needs a bearer token (Authorization: Bearer TOKEN) of a subject allowed to get it"
            ));
        };
        let key = (token.to_owned(), path.to_owned());
        if let Some(verdict) = self.remembered(&key) {
            return verdict;
        }
        let verdict = self.ask(token, path).await;
        if !matches!(verdict, Verdict::Unavailable(_)) {
            let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
            if remembered.len() >= MAX_REMEMBERED {
                remembered.clear();
            }
            remembered.insert(key, (Instant::now(), verdict.clone()));
        }
        verdict
    }

    fn remembered(&self, key: &(String, String)) -> Option<Verdict> {
        let remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        let (at, verdict) = remembered.get(key)?;
        (at.elapsed() < REMEMBER).then(|| verdict.clone())
    }

    async fn ask(&self, token: &str, path: &str) -> Verdict {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(reviewed) => reviewed.status.unwrap_or_default(),
            Err(err) => {
                return Verdict::Unavailable(format!("cannot authenticate the token: {err}"));
            }
        };
        let user = match (reviewed.authenticated, reviewed.user) {
            (Some(true), Some(user)) => user,
            _ => {
                let why = reviewed
                    .error
                    .unwrap_or_else(|| "not authenticated".to_owned());
                return Verdict::Unauthenticated(format!(
                    "the API server does not accept the token: {why}"
                ));
            }
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
        {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => Verdict::Allowed,
            Ok(_) => Verdict::Forbidden(format!(
                "{name} may not get {path}: bind it to a ClusterRole that allows get on the non-resource URL {path} (the generated metrics-reader role)"
            )),
            Err(err) => Verdict::Unavailable(format!("cannot authorize {name}: {err}")),
        }
    }
}
