//! Who holds a connection, and in which phase: a registry that makes room for newcomers by
//! evicting the connection waiting longest, each connection's phase and deadlines, and the
//! IO wrapper (under TLS) that sees a request's first bytes and a write that does not
//! progress.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::health::Closed;
use super::{Limits, WebhookMetrics};

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Accepted; the TLS handshake is under way.
    Handshaking,
    /// Waiting for a request (the first one, or the next on a kept-alive connection).
    Idle { since: Instant },
    /// A request's head is arriving.
    ReadingHead { since: Instant },
    /// A request is being answered (its body read, the review decided).
    Busy,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// Requests answered.
    served: u64,
    /// Since when a write has been waiting for the client to read.
    write_blocked: Option<Instant>,
}

/// One connection's phase, as its task, its IO and the registry see it.
#[derive(Debug)]
pub(super) struct Connection {
    peer: IpAddr,
    accepted: Instant,
    state: Mutex<State>,
    /// Set (under the registry's lock) when the registry closes it for a newcomer.
    evicted: AtomicBool,
    notify: Notify,
}

impl Connection {
    fn new(peer: IpAddr, now: Instant) -> Self {
        Connection {
            peer,
            accepted: now,
            state: Mutex::new(State {
                phase: Phase::Handshaking,
                served: 0,
                write_blocked: None,
            }),
            evicted: AtomicBool::new(false),
            notify: Notify::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The client's address.
    pub(super) fn peer(&self) -> IpAddr {
        self.peer
    }

    /// When it was accepted.
    pub(super) fn accepted(&self) -> Instant {
        self.accepted
    }

    /// Completes when the registry has evicted it (create it first, then await it).
    pub(super) fn evicted(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// The handshake is done: waiting for the first request.
    pub(super) fn handshaken(&self) {
        self.state().phase = Phase::Idle {
            since: Instant::now(),
        };
    }

    /// A request's head is in: it is being answered.
    pub(super) fn busy(&self) {
        self.state().phase = Phase::Busy;
    }

    /// A request has been answered: waiting for the next one.
    pub(super) fn answered(&self) {
        let mut state = self.state();
        state.phase = Phase::Idle {
            since: Instant::now(),
        };
        state.served += 1;
    }

    /// Bytes came in: an idle connection is receiving a request's head.
    fn read(&self) {
        let mut state = self.state();
        if let Phase::Idle { .. } = state.phase {
            state.phase = Phase::ReadingHead {
                since: Instant::now(),
            };
        }
    }

    /// A write waits for the client to read.
    fn write_pending(&self) {
        self.state().write_blocked.get_or_insert_with(Instant::now);
    }

    /// A write made progress.
    fn wrote(&self) {
        self.state().write_blocked = None;
    }

    /// Why it must be closed now, if it must (the handshake's deadline is its task's).
    pub(super) fn overdue(&self, now: Instant, limits: &Limits) -> Option<Closed> {
        let state = self.state();
        if state
            .write_blocked
            .is_some_and(|since| now.duration_since(since) >= limits.write)
        {
            return Some(Closed::WriteTimeout);
        }
        match state.phase {
            Phase::Idle { since } if state.served > 0 => {
                (now.duration_since(since) >= limits.idle).then_some(Closed::Idle)
            }
            Phase::Idle { since } | Phase::ReadingHead { since } => {
                (now.duration_since(since) >= limits.header).then_some(Closed::HeaderTimeout)
            }
            Phase::Handshaking | Phase::Busy => None,
        }
    }

    /// Its rank as a victim, lowest first (`None`: busy, never evicted): one that has not
    /// completed its handshake, then one that has answered nothing yet, then the others;
    /// within each, the one waiting longest.
    fn evictable(&self) -> Option<(u8, Instant)> {
        let state = self.state();
        let proven = u8::from(state.served > 0);
        match state.phase {
            Phase::Handshaking => Some((0, self.accepted)),
            Phase::Idle { since } | Phase::ReadingHead { since } => Some((1 + proven, since)),
            Phase::Busy => None,
        }
    }
}

/// The connections open, and how many of them count against the limits.
#[derive(Debug, Default)]
struct Open {
    /// Every connection not yet closed, evicted ones included.
    all: HashMap<u64, Arc<Connection>>,
    /// The ones not evicted.
    live: usize,
    /// The ones not evicted, by peer.
    per_peer: HashMap<IpAddr, usize>,
    next: u64,
}

/// The connections open; it admits each new one, making room for it if need be.
#[derive(Debug)]
pub(super) struct Registry {
    limits: Limits,
    metrics: WebhookMetrics,
    open: Mutex<Open>,
}

impl Registry {
    pub(super) fn new(limits: Limits, metrics: WebhookMetrics) -> Arc<Self> {
        metrics.open(0);
        Arc::new(Registry {
            limits,
            metrics,
            open: Mutex::new(Open::default()),
        })
    }

    fn open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection from `peer`: at the peer's limit, the peer's connection
    /// waiting longest is evicted for it; at the total, anyone's. `None` (refused, counted)
    /// when every candidate is busy, or when evicted connections not yet gone already make
    /// twice the limit.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let (connections, per_peer) = (self.limits.connections.max(1), self.limits.per_peer.max(1));
        let mut open = self.open();
        let mut room = open.all.len() < connections.saturating_mul(2);
        if room && open.per_peer.get(&peer).copied().unwrap_or(0) >= per_peer {
            room = self.evict(&mut open, Some(peer));
        }
        if room && open.live >= connections {
            room = self.evict(&mut open, None);
        }
        if !room {
            drop(open);
            self.metrics.closed(Closed::Refused);
            return None;
        }
        let connection = Arc::new(Connection::new(peer, Instant::now()));
        let id = open.next;
        open.next += 1;
        open.all.insert(id, connection.clone());
        open.live += 1;
        *open.per_peer.entry(peer).or_default() += 1;
        self.metrics.open(open.all.len());
        Some(Ticket {
            registry: self.clone(),
            id,
            connection,
        })
    }

    /// Evicts the best victim (of `peer`'s connections, or of all); whether there was one.
    fn evict(&self, open: &mut Open, peer: Option<IpAddr>) -> bool {
        let victim = open
            .all
            .values()
            .filter(|c| !c.evicted.load(Ordering::Relaxed))
            .filter(|c| peer.is_none_or(|peer| c.peer == peer))
            .filter_map(|c| Some((c.evictable()?, c)))
            .min_by_key(|(rank, _)| *rank)
            .map(|(_, c)| c.clone());
        let Some(victim) = victim else {
            return false;
        };
        victim.evicted.store(true, Ordering::Relaxed);
        victim.notify.notify_one();
        open.live -= 1;
        Self::forget_peer(open, victim.peer);
        self.metrics.closed(Closed::Evicted);
        tracing::debug!(peer = %victim.peer, "webhook connection evicted for a newcomer");
        true
    }

    fn forget_peer(open: &mut Open, peer: IpAddr) {
        if let Some(count) = open.per_peer.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                open.per_peer.remove(&peer);
            }
        }
    }

    fn leave(&self, id: u64) {
        let mut open = self.open();
        if let Some(connection) = open.all.remove(&id)
            && !connection.evicted.load(Ordering::Relaxed)
        {
            open.live -= 1;
            Self::forget_peer(&mut open, connection.peer);
        }
        self.metrics.open(open.all.len());
    }
}

/// A connection's place in the registry, given up when dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    registry: Arc<Registry>,
    id: u64,
    connection: Arc<Connection>,
}

impl Ticket {
    /// The connection it holds a place for.
    pub(super) fn connection(&self) -> &Arc<Connection> {
        &self.connection
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.registry.leave(self.id);
    }
}

/// A stream (the TCP one, under TLS) that tells its [`Connection`] when a request starts
/// arriving and when a write waits on the client.
#[derive(Debug)]
pub(super) struct Watched<S> {
    inner: S,
    connection: Arc<Connection>,
}

impl<S> Watched<S> {
    pub(super) fn new(inner: S, connection: Arc<Connection>) -> Self {
        Watched { inner, connection }
    }

    fn track<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match &result {
            Poll::Pending => self.connection.write_pending(),
            Poll::Ready(_) => self.connection.wrote(),
        }
        result
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.connection.read();
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.track(result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.track(result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.track(result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.track(result)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn registry(connections: usize, per_peer: usize) -> Arc<Registry> {
        let limits = Limits {
            connections,
            per_peer,
            ..Limits::default()
        };
        Registry::new(limits, WebhookMetrics::default())
    }

    fn evicted(ticket: &Ticket) -> bool {
        ticket.connection().evicted.load(Ordering::Relaxed)
    }

    #[test]
    fn a_peer_at_its_limit_loses_its_longest_waiting_connection_and_others_keep_theirs() {
        let registry = registry(10, 2);
        let other = registry.admit(ip(2)).unwrap();
        let first = registry.admit(ip(1)).unwrap();
        let second = registry.admit(ip(1)).unwrap();
        let third = registry.admit(ip(1)).expect("room made");
        assert!(evicted(&first));
        assert!(!evicted(&second) && !evicted(&third) && !evicted(&other));
    }

    #[test]
    fn unfinished_handshakes_go_first_then_connections_that_served_nothing() {
        let registry = registry(3, 10);
        let served = registry.admit(ip(1)).unwrap();
        served.connection().handshaken();
        served.connection().busy();
        served.connection().answered();
        let idle = registry.admit(ip(2)).unwrap();
        idle.connection().handshaken();
        let handshaking = registry.admit(ip(3)).unwrap();
        let newcomer = registry.admit(ip(4)).unwrap();
        assert!(evicted(&handshaking), "the youngest, but still handshaking");
        newcomer.connection().handshaken();
        let _another = registry.admit(ip(5)).unwrap();
        assert!(evicted(&idle), "then the one that served nothing");
        assert!(!evicted(&served));
    }

    #[test]
    fn busy_connections_are_never_evicted_so_a_newcomer_is_refused() {
        let registry = registry(2, 10);
        let tickets: Vec<Ticket> = (1..=2)
            .map(|i| {
                let ticket = registry.admit(ip(i)).unwrap();
                ticket.connection().busy();
                ticket
            })
            .collect();
        assert!(registry.admit(ip(9)).is_none());
        drop(tickets);
        assert!(
            registry.admit(ip(9)).is_some(),
            "their places are given back"
        );
    }

    #[test]
    fn evicted_connections_not_yet_gone_count_up_to_twice_the_limit() {
        let registry = registry(2, 10);
        let held: Vec<Ticket> = (1..=4).map(|i| registry.admit(ip(i)).unwrap()).collect();
        assert_eq!(held.iter().filter(|t| evicted(t)).count(), 2);
        assert!(registry.admit(ip(5)).is_none(), "four not gone yet");
        drop(held);
        assert_eq!(registry.open().all.len(), 0);
        assert_eq!(registry.open().live, 0);
        assert!(registry.open().per_peer.is_empty());
    }

    #[test]
    fn deadlines_follow_the_phase() {
        let limits = Limits {
            header: Duration::from_secs(10),
            idle: Duration::from_secs(120),
            write: Duration::from_secs(5),
            ..Limits::default()
        };
        let connection = Connection::new(ip(1), Instant::now());
        let at = |seconds| Instant::now() + Duration::from_secs(seconds);
        assert_eq!(connection.overdue(at(60), &limits), None, "handshaking");
        connection.handshaken();
        assert_eq!(connection.overdue(at(9), &limits), None);
        assert_eq!(
            connection.overdue(at(11), &limits),
            Some(Closed::HeaderTimeout),
            "no first request"
        );
        connection.busy();
        assert_eq!(connection.overdue(at(300), &limits), None, "busy");
        connection.answered();
        assert_eq!(connection.overdue(at(100), &limits), None, "kept alive");
        assert_eq!(connection.overdue(at(121), &limits), Some(Closed::Idle));
        connection.read();
        assert_eq!(
            connection.overdue(at(11), &limits),
            Some(Closed::HeaderTimeout),
            "a head that takes too long"
        );
        connection.write_pending();
        assert_eq!(
            connection.overdue(at(6), &limits),
            Some(Closed::WriteTimeout)
        );
        connection.wrote();
        assert_eq!(connection.overdue(at(6), &limits), None);
    }
}
