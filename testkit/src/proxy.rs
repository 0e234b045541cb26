//! A loopback TCP proxy in front of the API server, to cut one client off (a partition) and
//! let it back in, without touching the server or the other clients. TLS passes through
//! untouched: the client still verifies the API server's certificate (issued for 127.0.0.1).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
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
}

async fn connection(mut client: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<State>) {
    let state = *cut.borrow_and_update();
    match state {
        State::Up => {}
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
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        // Dropping both ends closes the connection under the client.
        _ = cut.wait_for(|state| *state != State::Up) => {}
    }
}
