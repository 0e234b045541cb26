//! A loopback TCP proxy in front of the API server, to cut one client off (a partition) and
//! let it back in, or to freeze its busy connections (a stalled watch), without touching the
//! server or the other clients. TLS passes through
//! untouched: the client still verifies the API server's certificate (issued for 127.0.0.1).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; stops when dropped.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    cut: Arc<watch::Sender<State>>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// A proxy on an ephemeral loopback port forwarding to `upstream`.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (cut, _) = watch::channel(State::Up);
        let cut = Arc::new(cut);
        let state = cut.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, upstream, state.subscribe()));
            }
        });
        Proxy { addr, cut, task }
    }

    /// A proxy in front of the API server that `config` names, and a client of that config
    /// that goes through it.
    ///
    /// # Panics
    /// When the config's server is not an `https://host:port` on loopback.
    pub async fn in_front_of(mut config: kube::Config) -> (Self, kube::Client) {
        let authority = config
            .cluster_url
            .authority()
            .expect("server address")
            .as_str();
        let upstream: SocketAddr = authority.parse().expect("a loopback host:port");
        let proxy = Proxy::start(upstream).await;
        config.cluster_url = format!("https://{}", proxy.addr)
            .parse()
            .expect("proxy URL");
        let client = kube::Client::try_from(config).expect("client through the proxy");
        (proxy, client)
    }

    /// The proxy's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the client off: open connections are closed, new ones are accepted but never
    /// answered (as a partitioned network behaves), until [`Proxy::heal`].
    pub fn cut(&self) {
        self.cut.send_replace(State::Stalled);
    }

    /// Takes the server away: open connections are closed and new ones closed at once (as a
    /// stopped API server behaves), until [`Proxy::heal`].
    pub fn down(&self) {
        self.cut.send_replace(State::Refused);
    }

    /// Freezes the connections that are busy now (the server sent bytes in the last second,
    /// as it does on a watch with events flowing): they stay open and deliver nothing either
    /// way — a stalled watch — until [`Proxy::heal`]; the quiet ones are closed, and new ones go
    /// through.
    pub fn freeze(&self) {
        self.cut.send_replace(State::Frozen);
    }

    /// Lets the client back in (connections stalled meanwhile are closed; it reconnects).
    pub fn heal(&self) {
        self.cut.send_replace(State::Up);
    }
}

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Up,
    Stalled,
    Refused,
    /// Busy connections hang, quiet ones are closed, new ones go through.
    Frozen,
}

/// How recently a connection's server must have sent bytes for [`Proxy::freeze`] to hang it.
const BUSY: Duration = Duration::from_secs(1);

async fn connection(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<State>) {
    let state = *cut.borrow_and_update();
    match state {
        State::Up | State::Frozen => {}
        State::Refused => return,
        State::Stalled => {
            // Stall until healed, then close: the client sees a hung connection.
            let _ = cut.wait_for(|state| *state == State::Up).await;
            let _ = client.shutdown().await;
            return;
        }
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let opened = Instant::now();
    // When the server last sent bytes, in milliseconds since `opened`.
    let heard = AtomicU64::new(0);
    let frozen = {
        let (mut from_client, mut to_client) = client.split();
        let (mut from_server, mut to_server) = server.split();
        let up = async { tokio::io::copy(&mut from_client, &mut to_server).await };
        let down = async {
            let mut buffer = vec![0u8; 16 * 1024];
            loop {
                let read = from_server.read(&mut buffer).await?;
                if read == 0 {
                    return to_client.shutdown().await;
                }
                let since = u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX);
                heard.store(since, Ordering::Relaxed);
                to_client.write_all(&buffer[..read]).await?;
            }
        };
        let pumps = futures::future::try_join(up, down);
        tokio::pin!(pumps);
        loop {
            tokio::select! {
                _ = &mut pumps => break false,
                changed = cut.changed() => {
                    if changed.is_err() {
                        break false;
                    }
                    match *cut.borrow_and_update() {
                        State::Up => {}
                        State::Frozen => {
                            let quiet = opened.elapsed().saturating_sub(Duration::from_millis(heard.load(Ordering::Relaxed)));
                            break quiet < BUSY;
                        }
                        // Dropping both ends closes the connection under the client.
                        State::Stalled | State::Refused => break false,
                    }
                }
            }
        }
    };
    if frozen {
        // Hold both ends open, forwarding nothing, until healed.
        let _ = cut.wait_for(|state| *state == State::Up).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_pass_both_ways() {
        let upstream = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let addr = upstream.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = upstream.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 || stream.write_all(&buffer[..read]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = Proxy::start(addr).await;
        let mut client = TcpStream::connect(proxy.addr()).await.expect("connect");
        client.write_all(b"hello").await.expect("write");
        let mut buffer = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(2), client.read_exact(&mut buffer))
            .await
            .expect("echoed in time")
            .expect("read");
        assert_eq!(&buffer, b"hello");
    }
}
