//! A client that holds back one kind of request until the test lets it go: a layer in the
//! client's stack that parks every request matching a predicate (before it reaches the API
//! server) and sends it on once [`Hold::release`] is called, so a test can change the object in
//! between — as a slow network or a busy replica would leave a writer working from a view that
//! is no longer current.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::{Body, ClientBuilder, DynBody};
use tokio::sync::watch;
use tower::{BoxError, Service};

/// Which requests are held.
pub type Matcher = dyn Fn(&Request<Body>) -> bool + Send + Sync;

/// The switch and the counts of one holding client.
pub struct Hold {
    matches: Box<Matcher>,
    released: watch::Sender<bool>,
    /// Matching requests that arrived, and those answered since.
    held: AtomicU64,
    answered: AtomicU64,
    /// The status code of the last answered one.
    last_status: AtomicU64,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("held", &self.held.load(Ordering::SeqCst))
            .field("answered", &self.answered.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl Hold {
    /// How many matching requests arrived so far.
    #[must_use]
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// How many matching requests were answered since their release, and the last one's
    /// status code.
    #[must_use]
    pub fn answered(&self) -> (u64, u16) {
        (
            self.answered.load(Ordering::SeqCst),
            u16::try_from(self.last_status.load(Ordering::SeqCst)).unwrap_or(0),
        )
    }

    /// Sends the held requests on, and every matching one from now on.
    pub fn release(&self) {
        self.released.send_replace(true);
    }
}

/// A client of `config` that holds every request `matches` selects until [`Hold::release`].
///
/// # Panics
/// When the client stack cannot be built.
pub fn client(
    config: kube::Config,
    matches: impl Fn(&Request<Body>) -> bool + Send + Sync + 'static,
) -> (kube::Client, Arc<Hold>) {
    let hold = Arc::new(Hold {
        matches: Box::new(matches),
        released: watch::channel(false).0,
        held: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        last_status: AtomicU64::new(0),
    });
    let shared = hold.clone();
    let client = ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&tower::layer::layer_fn(move |inner| Holding {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            hold: shared.clone(),
        }))
        .build();
    (client, hold)
}

struct Holding<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    hold: Arc<Hold>,
}

impl<S> Service<Request<Body>> for Holding<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is checked under the lock in `call`, when the request goes on.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let hold = self.hold.clone();
        let inner = self.inner.clone();
        Box::pin(async move {
            let matched = (hold.matches)(&request);
            if matched {
                hold.held.fetch_add(1, Ordering::SeqCst);
                let _ = hold
                    .released
                    .subscribe()
                    .wait_for(|released| *released)
                    .await;
            }
            let answer = {
                let mut service = inner.lock().await;
                futures::future::poll_fn(|cx| service.poll_ready(cx)).await?;
                service.call(request)
            }
            .await;
            if matched {
                if let Ok(response) = &answer {
                    hold.last_status
                        .store(u64::from(response.status().as_u16()), Ordering::SeqCst);
                }
                hold.answered.fetch_add(1, Ordering::SeqCst);
            }
            answer
        })
    }
}
