//! One connection from accept to close: the TLS handshake within its deadline, HTTP/1.1 with
//! keep-alive, and a watchdog that closes it when a deadline of its phase passes, when the
//! registry evicts it, or (gracefully) when it is too old.

use std::convert::Infallible;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_rustls::TlsAcceptor;

use super::answer::{Shared, answer};
use super::connections::{Ticket, Watched};
use super::health::Closed;
use super::limits::{Limits, MAX_AGE_GRACE};

/// Serves the connection `ticket` holds a place for, until it ends or must end (then the
/// ticket, dropped, gives the place back).
pub(super) async fn connection(
    stream: TcpStream,
    ticket: Ticket,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    limits: Limits,
) {
    let connection = ticket.connection().clone();
    let (peer, metrics) = (connection.peer(), &shared.metrics);
    let evicted = connection.evicted();
    tokio::pin!(evicted);
    let handshake = tokio::time::timeout(
        limits.handshake,
        tls.accept(Watched::new(stream, connection.clone())),
    );
    let stream = tokio::select! {
        biased;
        () = &mut evicted => return,
        accepted = handshake => match accepted {
            Ok(Ok(stream)) => stream,
            Ok(Err(err)) => {
                tracing::debug!(%peer, %err, "webhook TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "webhook TLS handshake timed out");
                metrics.closed(Closed::HandshakeTimeout);
                return;
            }
        },
    };
    connection.handshaken();
    let service = {
        let (shared, connection) = (shared.clone(), connection.clone());
        service_fn(move |request| {
            let (shared, connection) = (shared.clone(), connection.clone());
            async move {
                connection.busy();
                let response = answer(request, &shared).await;
                connection.answered();
                Ok::<_, Infallible>(response)
            }
        })
    };
    // hyper's header_read_timeout also runs while a kept-alive connection waits for its next
    // request (it starts when hyper waits for a head), so it would close idle connections
    // after it: the watchdog below keeps the header and idle deadlines apart instead.
    let http = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(http);
    let mut tick = tokio::time::interval(limits.tick());
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut shutting_down: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            () = &mut evicted => return,
            result = http.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%peer, %err, "webhook connection");
                }
                return;
            }
            _ = tick.tick() => {
                let now = Instant::now();
                if let Some(reason) = connection.overdue(now, &limits) {
                    tracing::debug!(%peer, ?reason, "webhook connection closed");
                    metrics.closed(reason);
                    return;
                }
                match shutting_down {
                    None if now.duration_since(connection.accepted()) >= limits.max_age => {
                        http.as_mut().graceful_shutdown();
                        metrics.closed(Closed::MaxAge);
                        shutting_down = Some(now);
                    }
                    Some(since) if now.duration_since(since) >= MAX_AGE_GRACE => return,
                    _ => {}
                }
            }
        }
    }
}
