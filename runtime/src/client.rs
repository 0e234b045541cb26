//! The operator's kube client, without kube's own retry. kube's default client retries a 429,
//! 503 or 504 up to 15 times, backing off to 1 000 s: the engine then sees an overloaded API
//! server only minutes later, and a reconcile holds its slot all that time. The engine retries
//! every failed reconcile itself — per object, with backoff, no sooner than the server's
//! `Retry-After` — and paces the whole operator on what it sees, so [`client`] leaves kube's
//! retry out.

/// A client for `config` without kube's built-in retry of 429, 503 and 504 (up to 15 times,
/// over minutes), so that each such answer reaches the engine's pacing and per-object backoff
/// at once. Use it for the client given to [`crate::Operator::new`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = kube_fsm::client(kube::Config::infer().await?)?;
/// # let _ = client; Ok(()) }
/// ```
///
/// # Errors
/// When kube cannot build a client of `config` (its TLS or auth settings).
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}
