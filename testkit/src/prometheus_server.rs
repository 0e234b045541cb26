//! A real Prometheus for end-to-end tests (Debian's, which `scripts/prometheus` unpacks and names
//! in `KUBE_FSM_PROMETHEUS`): it scrapes the given targets and evaluates the given rules every
//! second, on loopback, with its data in a temporary folder; tests ask it over its HTTP API.
//! Skipped loudly without one, required with `KUBE_FSM_REQUIRE_CLUSTER=1`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use crate::cluster::{eventually, fresh_name, tool};

/// How often the server scrapes and evaluates its rules.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// A running Prometheus; killed (and its folder removed) when dropped.
#[derive(Debug)]
pub struct Server {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Server {
    /// Starts one scraping `targets` (their `/metrics`) as job `operator`, with `rules` (a rules
    /// file's text) loaded, and waits until it is ready. `None`, after a loud message, when
    /// there is no Prometheus and the run does not require one.
    ///
    /// # Panics
    /// When one is required and missing, or it does not start.
    pub async fn start(test: &str, targets: &[SocketAddr], rules: &str) -> Option<Server> {
        let binary = tool(
            test,
            "KUBE_FSM_PROMETHEUS",
            "scripts/prometheus ensure; eval \"$(scripts/prometheus env)\"",
        )?;
        let dir = std::env::temp_dir().join(fresh_name("kube-fsm-prometheus"));
        std::fs::create_dir_all(&dir).expect("a folder for Prometheus");
        std::fs::write(dir.join("rules.yaml"), rules).expect("the rules file");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: operator\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("the configuration");
        let addr = free_port();
        let child = Command::new(binary)
            .current_dir(&dir)
            .arg("--config.file=prometheus.yml")
            .arg("--storage.tsdb.path=data")
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).expect("a log file"))
            .kill_on_drop(true)
            .spawn()
            .expect("start Prometheus");
        let server = Server { child, addr, dir };
        let ready = eventually(Duration::from_secs(30), || async {
            server.get("/-/ready").await.map(|_| ())
        })
        .await;
        assert!(
            ready.is_some(),
            "Prometheus did not become ready: {}",
            server.log()
        );
        Some(server)
    }

    /// The result of an instant query (`data.result`).
    ///
    /// # Panics
    /// When Prometheus refuses the query.
    pub async fn query(&self, expr: &str) -> Vec<Value> {
        let body = self
            .get(&format!("/api/v1/query?query={}", encode(expr)))
            .await
            .unwrap_or_else(|| panic!("query {expr}: no answer; {}", self.log()));
        assert_eq!(body["status"], "success", "query {expr}: {body}");
        body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The alerts pending or firing now (`/api/v1/alerts`).
    pub async fn alerts(&self) -> Vec<Value> {
        self.get("/api/v1/alerts")
            .await
            .and_then(|body| body["data"]["alerts"].as_array().cloned())
            .unwrap_or_default()
    }

    /// The alert `name` with the label `label`, pending or firing now: its `state`,
    /// `activeAt` (when it became pending), labels, annotations and value.
    pub async fn alert(&self, name: &str, label: (&str, &str)) -> Option<Value> {
        self.alerts().await.into_iter().find(|alert| {
            let labels = &alert["labels"];
            labels["alertname"] == name && labels[label.0] == label.1
        })
    }

    /// The rule groups loaded (`/api/v1/rules`).
    pub async fn rule_groups(&self) -> Vec<Value> {
        self.get("/api/v1/rules")
            .await
            .and_then(|body| body["data"]["groups"].as_array().cloned())
            .unwrap_or_default()
    }

    /// What the server logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` (HTTP/1.0, so the body is not chunked): the JSON body of a 200, else `None`.
    async fn get(&self, path: &str) -> Option<Value> {
        let mut stream = TcpStream::connect(self.addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr);
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        Some(serde_json::from_str(body).unwrap_or(Value::Null))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port free now.
fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Percent-encodes everything but the unreserved characters (RFC 3986).
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
