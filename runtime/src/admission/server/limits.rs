//! How much of the server one client, or all of them, may hold, and for how long.

use std::time::Duration;

/// Connections open at once ([`Limits::connections`] by default).
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections open at once from one IP address ([`Limits::per_peer`] by default).
pub const MAX_PER_PEER: usize = 256;
/// Time for a client to finish the TLS handshake ([`Limits::handshake`] by default).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);
/// Time for a request's head ([`Limits::header`] by default).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time for a client to send a request's body once its headers are in ([`Limits::body`] by
/// default; the API server sends a review at once, and waits at most 30 s, `timeoutSeconds`,
/// for the answer).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Time a keep-alive connection may wait for its next request ([`Limits::idle`] by default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Time a response write may make no progress ([`Limits::write`] by default).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Age at which a connection is shut down gracefully ([`Limits::max_age`] by default).
pub const MAX_AGE: Duration = Duration::from_secs(600);
/// Time a connection shut down for its age has to finish the request under way: the longest
/// an API server waits for a webhook (`timeoutSeconds` is at most 30).
pub const MAX_AGE_GRACE: Duration = Duration::from_secs(30);

/// The server's limits on its clients ([`super::Webhook::limits`]). The port faces the
/// cluster network: these keep any client, or many, from holding the server away from the
/// API server, while the API server's own connections stay open as long as it keeps them.
///
/// A newcomer at [`Limits::per_peer`] or [`Limits::connections`] takes the place of an
/// established connection that is not in the middle of a request (handshaking, idle, or
/// sending a request's head), the one waiting longest, preferring one that has not completed
/// a handshake, then one that has served no request; it is refused only when every connection
/// is answering a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once (default 1 024). Connections closed to make room but not yet
    /// gone count until they are, up to twice this.
    pub connections: usize,
    /// Connections open at once from one IP address (default 256).
    pub per_peer: usize,
    /// Time from accepting a connection to the end of its TLS handshake (default 3 s).
    pub handshake: Duration,
    /// Time from the first byte of a request's head to its end, and from the handshake to
    /// the first byte of the first request (default 10 s).
    pub header: Duration,
    /// Time from a request's head to the end of its body (default 10 s); the request is
    /// answered 408.
    pub body: Duration,
    /// Time an established connection may wait for its next request (default 120 s). It
    /// must be longer than the client keeps idle connections: the API server's webhook
    /// client (Go's `http.Transport`, `IdleConnTimeout` 90 s) reuses an idle connection for
    /// its next review and does not retry a POST that fails on it, so a server closing idle
    /// connections first makes reviews fail at random.
    pub idle: Duration,
    /// Time a response write may make no progress, e.g. to a client that does not read its
    /// answer (default 10 s).
    pub write: Duration,
    /// Age at which a connection is shut down gracefully: the request under way is answered,
    /// then it is closed; one still busy 30 s later is closed anyway (default 10 minutes).
    pub max_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: MAX_CONNECTIONS,
            per_peer: MAX_PER_PEER,
            handshake: HANDSHAKE_TIMEOUT,
            header: HEADER_TIMEOUT,
            body: REQUEST_DEADLINE,
            idle: IDLE_TIMEOUT,
            write: WRITE_TIMEOUT,
            max_age: MAX_AGE,
        }
    }
}

impl Limits {
    /// How often a connection's deadlines are checked: every second, or more often when a
    /// deadline is shorter than a few seconds (tests).
    pub(super) fn tick(&self) -> Duration {
        let shortest = [self.header, self.idle, self.write, self.max_age]
            .into_iter()
            .min()
            .unwrap_or(Duration::from_secs(1));
        (shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}
