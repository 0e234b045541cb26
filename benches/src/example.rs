//! The example operator (`example-operator`, the Database example with the benchmarks' knobs)
//! for the benches that drive it as a process of its own: its release binary beside the
//! bench's, its CRD, and the operator as a child process whose own `/metrics` the bench reads
//! over HTTP.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::Client;
use kube_fsm_testkit::cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The error type of the bench binaries.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A release binary beside the running one (`target/release/NAME`).
///
/// # Errors
/// When it is not built.
pub fn sibling(name: &str) -> Result<PathBuf, BoxError> {
    let path = std::env::current_exe()?.with_file_name(name);
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is not built (scripts/bench-scale and scripts/bench-scale-n build it; the examples: cargo build --release -p kube-fsm-examples --examples)",
            path.display()
        )
        .into())
    }
}

/// Installs the example's CRD with the tests' helper ([`cluster::install_crd`]: create or
/// replace, wait until Established; the API server refusing it panics, as in the tests).
pub async fn install_crd(client: &Client) {
    cluster::install_crd(client, kube_fsm_examples::stand_in::crd()).await;
}

/// A loopback address with a port free right now (for an operator's `--metrics-addr`).
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// The body of `GET path` from the HTTP/1.1 server at `addr`.
///
/// # Errors
/// When the server cannot be reached or does not answer 200.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<String, BoxError> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET http://{addr}{path}: no complete response"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.starts_with("HTTP/1.1 200") {
        Ok(body.to_owned())
    } else {
        Err(format!("GET http://{addr}{path}: {status}").into())
    }
}

/// The pid of the bench's kube-apiserver (`KUBE_FSM_ENVTEST_DIR` locates it), for its CPU time.
pub fn apiserver_pid() -> Option<u32> {
    let dir = std::env::var("KUBE_FSM_ENVTEST_DIR").ok()?;
    std::fs::read_to_string(format!("{dir}/kube-apiserver.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// CPU seconds (user + system) and peak RSS (bytes) of a process, from `/proc`.
pub fn process_stats(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some((ticks / 100.0, hwm_kib * 1024))
}

/// `example-operator` as a child process, serving its metrics on a loopback port; killed
/// when dropped.
#[derive(Debug)]
pub struct Operator {
    child: Child,
    metrics: SocketAddr,
}

impl Operator {
    /// Starts `example-operator ARGS --metrics-addr 127.0.0.1:PORT` (a free port) and
    /// waits until its `/metrics` answers. Its log goes to this process's stderr, filtered by
    /// `KUBE_FSM_OPERATOR_LOG` (default `warn`).
    ///
    /// # Errors
    /// When it cannot start, exits, or does not serve `/metrics` within 30 s.
    pub async fn start(args: &[String]) -> Result<Self, BoxError> {
        let metrics = free_port()?;
        let mut child = Command::new(sibling("example-operator")?)
            .args(args)
            .args(["--metrics-addr", &metrics.to_string()])
            .env(
                "RUST_LOG",
                std::env::var("KUBE_FSM_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(format!("the operator exited at once ({status})").into());
            }
            match http_get(metrics, "/metrics").await {
                Ok(_) => return Ok(Operator { child, metrics }),
                Err(err) if Instant::now() >= deadline => {
                    return Err(format!("the operator serves no /metrics after 30 s: {err}").into());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The body of `GET path` from its metrics endpoint (`/metrics`, `/healthz`, `/readyz`).
    ///
    /// # Errors
    /// When it cannot be reached or does not answer 200.
    pub async fn get(&self, path: &str) -> Result<String, BoxError> {
        http_get(self.metrics, path).await
    }

    /// Its metrics now (the Prometheus text of its `/metrics`).
    ///
    /// # Errors
    /// When they cannot be read.
    pub async fn metrics(&self) -> Result<String, BoxError> {
        http_get(self.metrics, "/metrics").await
    }

    /// Stops it as a cluster would: SIGTERM (in-flight reconciles finish, nothing new starts),
    /// then SIGKILL if it has not exited after `patience`. Returns whether it stopped in time.
    ///
    /// # Errors
    /// When it cannot be signalled or waited for.
    pub async fn stop(mut self, patience: Duration) -> Result<bool, BoxError> {
        if let Some(pid) = self.child.id() {
            // `kill`: this workspace forbids the unsafe code a direct kill(2) would need.
            let sent = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await?;
            if !sent.success() {
                return Err(format!("kill -TERM {pid} failed: {sent}").into());
            }
        }
        match tokio::time::timeout(patience, self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(true)
            }
            Err(_) => {
                self.child.kill().await?;
                Ok(false)
            }
        }
    }
}
