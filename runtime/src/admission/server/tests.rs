//! The server against TLS clients on loopback: what the API server needs of it (keep-alive,
//! answers under a flood, a certificate problem that does not stop it) and what it counts.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::answer::MAX_BODY;
use super::*;
use crate::admission::Policy;
use crate::admission::configuration::PATH;
use crate::admission::conversion::CONVERT_PATH;
use crate::admission::tests_support::{MACHINE, status_update};

/// A TLS client trusting the webhook's development CA.
fn connector(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn try_connect(
    tls: &TlsConnector,
    addr: SocketAddr,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tls.connect(name, tcp).await
}

async fn connect(tls: &TlsConnector, addr: SocketAddr) -> TlsStream<TcpStream> {
    try_connect(tls, addr).await.unwrap()
}

/// A legal review (an AdmissionReview's JSON).
fn legal() -> String {
    status_update(Some("Pending"), Some("Running"), "kube-fsm").to_string()
}

/// POSTs one legal review on a new connection; the whole answer.
async fn review(tls: &TlsConnector, addr: SocketAddr) -> String {
    post(tls, addr, PATH, &legal()).await
}

/// POSTs `body` to `path` on a new connection; the whole answer.
async fn post(tls: &TlsConnector, addr: SocketAddr, path: &str, body: &str) -> String {
    try_post(tls, addr, "POST", path, body)
        .await
        .unwrap_or_default()
}

/// Sends `method path` with `body` on a new connection (closed after the answer); the whole
/// answer, or why there is none.
async fn try_post(
    tls: &TlsConnector,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<String> {
    let mut stream = try_connect(tls, addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap_or_default();
    Ok(answer)
}

/// Sends one review on `stream`, keeping it open; the answer's status line and body.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S) -> Result<String, String> {
    let body = legal();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .map_err(|err| format!("write: {err}"))?;
    read_response(stream).await
}

/// Reads one HTTP response of known length: its head and body.
async fn read_response<S: AsyncRead + Unpin>(stream: &mut S) -> Result<String, String> {
    let mut buffer = Vec::new();
    let mut byte = [0u8; 1];
    while !buffer.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(0) => return Err("closed before an answer".to_owned()),
            Ok(_) => buffer.push(byte[0]),
            Err(err) => return Err(format!("read: {err}")),
        }
    }
    let head = String::from_utf8_lossy(&buffer).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .ok_or_else(|| format!("no content-length in {head}"))?;
    let mut body = vec![0; length];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|err| format!("read body: {err}"))?;
    Ok(format!("{head}{}", String::from_utf8_lossy(&body)))
}

/// A webhook serving [`MACHINE`] on 127.0.0.1 with `limits` (and conversions when
/// `converts`), recording into a fresh registry.
struct Served {
    addr: SocketAddr,
    tls: TlsConnector,
    registry: Registry,
    health: WebhookHealth,
    task: tokio::task::JoinHandle<()>,
}

impl Served {
    async fn start(limits: Limits, converts: bool) -> Served {
        let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).unwrap();
        let tls = connector(certificate.ca_bundle().unwrap());
        Self::start_with(certificate, tls, limits, converts, RELOAD_EVERY).await
    }

    async fn start_with(
        certificate: ServingCertificate,
        tls: TlsConnector,
        limits: Limits,
        converts: bool,
        reload_every: Duration,
    ) -> Served {
        let validator = Validator::for_machine(&MACHINE, Policy::default());
        let metrics = WebhookMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut webhook = Webhook::bind("127.0.0.1:0".parse().unwrap(), validator, certificate)
            .await
            .unwrap()
            .limits(limits)
            .metrics(&metrics);
        webhook.reload_every = reload_every;
        if converts {
            webhook = webhook.converter(crate::admission::conversion::tests::converter());
        }
        let (addr, health) = (webhook.local_addr(), webhook.health());
        let task = tokio::spawn(webhook.run());
        Served {
            addr,
            tls,
            registry,
            health,
            task,
        }
    }

    /// The value of one series (`name{labels}` as Prometheus's text shows it; 0 if absent).
    fn sample(&self, series: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        text.lines()
            .find_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                (name == series).then(|| value.parse().unwrap())
            })
            .unwrap_or(0.0)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits (at most `within`) until `done`.
async fn until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

#[tokio::test]
async fn conversions_are_served_at_their_path_beside_the_reviews_and_only_when_given() {
    let conversion = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "u-2",
            "desiredAPIVersion": "example.com/v1",
            "objects": [{
                "apiVersion": "example.com/v1alpha1",
                "kind": "Ticket",
                "metadata": { "name": "t", "namespace": "ns" },
                "spec": { "title": "t", "assignee": null },
                "status": { "phase": "Working" },
            }],
        },
    })
    .to_string();
    let mut served = Vec::new();
    for converts in [true, false] {
        let webhook = Served::start(Limits::default(), converts).await;
        let converted = post(&webhook.tls, webhook.addr, CONVERT_PATH, &conversion).await;
        let reviewed = review(&webhook.tls, webhook.addr).await;
        served.push((converted, reviewed));
    }
    let (converted, reviewed) = &served[0];
    assert!(converted.starts_with("HTTP/1.1 200"), "{converted}");
    assert!(converted.contains(r#""summary":"t""#), "{converted}");
    assert!(
        converted.contains(r#""status":{"phase":"Working"}"#),
        "{converted}"
    );
    assert!(reviewed.starts_with("HTTP/1.1 200"), "{reviewed}");
    let (converted, _) = &served[1];
    assert!(converted.starts_with("HTTP/1.1 404"), "{converted}");
    assert!(converted.contains("no conversions served"), "{converted}");
}

/// One port for every machine of a process: each review goes to the validator of its group
/// and kind, a kind the webhook does not review (another group's kind of the same name
/// included) is refused with a sentence saying so.
#[tokio::test]
async fn one_webhook_reviews_each_kind_by_its_own_machine() {
    use crate::admission::tests_support::GATED;
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).unwrap();
    let tls = connector(certificate.ca_bundle().unwrap());
    let webhook = Webhook::bind(
        "127.0.0.1:0".parse().unwrap(),
        Validator::for_machine(&MACHINE, Policy::default()),
        certificate,
    )
    .await
    .unwrap()
    .validator(Validator::for_machine(&GATED, Policy::default()));
    let addr = webhook.local_addr();
    let task = tokio::spawn(webhook.run());
    let of_group_kind = |group: &str, kind: &str, old: &str, new: &str| {
        let mut review = status_update(Some(old), Some(new), "kubectl");
        review["request"]["kind"]["group"] = group.into();
        review["request"]["kind"]["kind"] = kind.into();
        review.to_string()
    };
    let of_kind = |kind: &str, old: &str, new: &str| of_group_kind("example.com", kind, old, new);
    let allowed = |answer: &str| answer.contains(r#""allowed":true"#);
    // Pending -> Running is a Job edge; Pending -> Approved a (manual) Change edge only.
    let job = post(&tls, addr, PATH, &of_kind("Job", "Pending", "Running")).await;
    assert!(allowed(&job), "{job}");
    let job = post(&tls, addr, PATH, &of_kind("Job", "Pending", "Approved")).await;
    // Each refused by its own machine: Approved is no Job phase, Running no Change phase.
    assert!(
        !allowed(&job) && job.contains(r#"\"Done\", \"Failed\""#),
        "{job}"
    );
    let change = post(&tls, addr, PATH, &of_kind("Change", "Pending", "Approved")).await;
    assert!(allowed(&change), "{change}");
    let change = post(&tls, addr, PATH, &of_kind("Change", "Pending", "Running")).await;
    assert!(
        !allowed(&change) && change.contains(r#"\"Approved\", \"Rejected\""#),
        "{change}"
    );
    let other = post(&tls, addr, PATH, &of_kind("Ticket", "Pending", "Running")).await;
    assert!(!allowed(&other), "{other}");
    assert!(
        other.contains(
            "this webhook reviews Job.example.com, Change.example.com, not Ticket.example.com"
        ),
        "{other}"
    );
    let elsewhere = of_group_kind("batch.example.org", "Job", "Pending", "Running");
    let elsewhere = post(&tls, addr, PATH, &elsewhere).await;
    assert!(
        !allowed(&elsewhere) && elsewhere.contains("not Job.batch.example.org"),
        "{elsewhere}"
    );
    task.abort();
}

/// The API server's webhook client keeps an idle connection for 90 s and sends its next
/// review on it: the server must not close it first.
#[tokio::test]
async fn an_idle_keep_alive_connection_lasts_a_minute_and_serves_again() {
    let webhook = Served::start(Limits::default(), false).await;
    let mut stream = connect(&webhook.tls, webhook.addr).await;
    let first = exchange(&mut stream).await.expect("the first review");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let second = exchange(&mut stream)
        .await
        .expect("a second review on the connection idle for 60 s");
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains("\"allowed\":true"), "{second}");
}

/// Connects from `source` (a loopback address) to `addr`, within a second.
async fn bare_connect(source: IpAddr, addr: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(source, 0)).ok()?;
    tokio::time::timeout(Duration::from_secs(1), socket.connect(addr))
        .await
        .ok()?
        .ok()
}

/// A flood of bare TCP connections from `sources` (one each every `every`, held, never a
/// byte sent) until `stop` is set or `bound` has passed; returns how many it opened.
fn flood(
    addr: SocketAddr,
    sources: Vec<IpAddr>,
    every: Duration,
    bound: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut held = Vec::new();
        let mut tick = tokio::time::interval(every);
        while !stop.load(Ordering::Acquire) && started.elapsed() < bound && held.len() < 20_000 {
            tick.tick().await;
            for &source in &sources {
                if let Some(stream) = bare_connect(source, addr).await {
                    held.push(stream);
                }
            }
        }
        held.len()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bare_connections_does_not_keep_a_newcomer_from_being_answered() {
    let limits = Limits {
        connections: 16,
        per_peer: 4,
        handshake: Duration::from_secs(2),
        ..Limits::default()
    };
    let webhook = Served::start(limits, false).await;
    // 8 peers, the reviewer's own address among them: each beyond its 4, all beyond 16.
    let sources: Vec<IpAddr> = (1..=8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = flood(
        webhook.addr,
        sources,
        Duration::from_millis(100),
        Duration::from_secs(60),
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut answered, mut failures) = (0, Vec::new());
    for _ in 0..20 {
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            try_post(&webhook.tls, webhook.addr, "POST", PATH, &legal()),
        )
        .await;
        match result {
            Ok(Ok(answer)) if answer.starts_with("HTTP/1.1 200") => answered += 1,
            Ok(Ok(answer)) => failures.push(format!("answered {answer:?}")),
            Ok(Err(err)) => failures.push(err.to_string()),
            Err(_) => failures.push("no answer within 5 s".to_owned()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Release);
    let opened = flooding.await.unwrap();
    let evicted = webhook.sample(r#"kube_fsm_webhook_connections_closed_total{reason="evicted"}"#);
    eprintln!(
        "flood of {opened} bare connections: {answered} of 20 reviews answered; {evicted} evicted; {failures:?}"
    );
    assert_eq!(answered, 20, "{failures:?}");
    assert!(evicted > 0.0, "the flood was evicted, not refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nobody_reads_is_closed_after_the_write_deadline() {
    let limits = Limits {
        write: Duration::from_secs(1),
        ..Limits::default()
    };
    let webhook = Served::start(limits, true).await;
    // A conversion of one object of 7 MiB, to its own version: a reply as large.
    let conversion = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "u-3",
            "desiredAPIVersion": "example.com/v1alpha1",
            "objects": [{
                "apiVersion": "example.com/v1alpha1",
                "kind": "Ticket",
                "metadata": { "name": "t", "namespace": "ns" },
                "spec": { "title": "x".repeat(7 << 20), "assignee": null },
            }],
        },
    })
    .to_string();
    // A small receive window that the client never drains (no autotuning past it).
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(8 << 10).unwrap();
    let tcp = socket.connect(webhook.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = webhook.tls.connect(name, tcp).await.unwrap();
    let head = format!(
        "POST {CONVERT_PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        conversion.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(conversion.as_bytes()).await.unwrap();
    stream.flush().await.unwrap();
    let open = r"kube_fsm_webhook_connections";
    let timed_out = r#"kube_fsm_webhook_connections_closed_total{reason="write_timeout"}"#;
    let started = Instant::now();
    let closed = until(Duration::from_secs(10), || webhook.sample(timed_out) >= 1.0).await;
    eprintln!(
        "an unread 7 MiB answer: closed for its write deadline after {:?}",
        started.elapsed()
    );
    assert!(
        closed,
        "the stalled answer's connection is closed within 10 s"
    );
    assert_eq!(webhook.sample(open), 0.0, "its slot is free");
    let answer = review(&webhook.tls, webhook.addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(stream);
}

/// A CA and a serving certificate for 127.0.0.1 signed by it (valid until `expires`, if
/// given), in `dir`: (CA PEM, cert file, key file).
fn certificate_files(
    dir: &std::path::Path,
    expires: Option<std::time::SystemTime>,
) -> (String, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    if let Some(expires) = expires {
        leaf.not_after = expires.into();
    }
    let leaf = leaf
        .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
        .unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (ca_cert.pem(), cert_file, key_file)
}

/// A webhook serving a certificate for 127.0.0.1 (valid until `expires`, if given) from files
/// in a fresh folder, re-read every 100 ms: the webhook, the folder and the certificate file.
async fn served_from_files(
    expires: Option<std::time::SystemTime>,
) -> (Served, std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("kube-fsm-webhook-{}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = certificate_files(&dir, expires);
    let certificate = ServingCertificate::from_files(&cert, &key).unwrap();
    let webhook = Served::start_with(
        certificate,
        connector(&ca),
        Limits::default(),
        false,
        Duration::from_millis(100),
    )
    .await;
    (webhook, dir, cert)
}

#[tokio::test]
async fn a_certificate_that_does_not_load_keeps_the_webhook_live_and_ready_on_the_old_one() {
    let (webhook, dir, cert) = served_from_files(None).await;
    assert!(
        review(&webhook.tls, webhook.addr)
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(
        (webhook.health.live(), webhook.health.ready()),
        (Ok(()), Ok(()))
    );
    assert!(webhook.sample("kube_fsm_webhook_certificate_expiry_timestamp_seconds") > 0.0);

    std::fs::write(&cert, "not a certificate").unwrap();
    let told = until(Duration::from_secs(5), || {
        webhook.health.certificate_problem().is_some()
    })
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        told,
        "the problem is told within 5 s of a broken certificate"
    );
    let problem = webhook.health.certificate_problem().unwrap();
    assert!(problem.contains("tls.crt"), "{problem}");
    // Every replica reads the same Secret: unready on it would empty the Service.
    assert_eq!(
        (webhook.health.live(), webhook.health.ready()),
        (Ok(()), Ok(())),
        "live and ready: the old certificate still works"
    );
    let answer = review(&webhook.tls, webhook.addr).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the old one is served: {answer}"
    );
    assert_eq!(webhook.sample("kube_fsm_webhook_serving"), 1.0);
    assert!(webhook.sample("kube_fsm_webhook_certificate_errors_total") >= 1.0);
}

#[tokio::test]
async fn a_certificate_that_expires_while_served_makes_the_webhook_unready_not_dead() {
    let expires = std::time::SystemTime::now() + Duration::from_secs(2);
    let (webhook, dir, _) = served_from_files(Some(expires)).await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(until(Duration::from_secs(1), || webhook.health.ready().is_ok()).await);
    let unready = until(Duration::from_secs(10), || webhook.health.ready().is_err()).await;
    assert!(unready, "unready once the certificate served has expired");
    let reason = webhook.health.ready().unwrap_err();
    assert!(reason.contains("expired at"), "{reason}");
    assert_eq!(webhook.health.live(), Ok(()), "alive: it still serves");
    let gauge = until(Duration::from_secs(1), || {
        webhook.sample("kube_fsm_webhook_serving") == 0.0
    })
    .await;
    assert!(gauge, "kube_fsm_webhook_serving says it too");
}

#[tokio::test]
async fn every_answer_is_counted_by_route_and_code_and_conversions_apart() {
    let limits = Limits {
        body: Duration::from_secs(1),
        ..Limits::default()
    };
    let webhook = Served::start(limits, true).await;
    let (tls, addr) = (&webhook.tls, webhook.addr);
    let send = |method: &'static str, path: &'static str, body: String| async move {
        try_post(tls, addr, method, path, &body).await.unwrap()
    };
    let status = |answer: &str| answer.split(' ').nth(1).unwrap_or_default().to_owned();
    assert_eq!(
        status(&send("POST", "/anything/else?x=1", String::new()).await),
        "404"
    );
    assert_eq!(
        status(&send("POST", "/validate/tier/nobody", String::new()).await),
        "404"
    );
    assert_eq!(status(&send("GET", PATH, String::new()).await), "405");
    assert_eq!(status(&send("POST", PATH, "{".to_owned()).await), "400");
    assert_eq!(status(&send("POST", PATH, legal()).await), "200");
    let denied = status_update(Some("Pending"), Some("Done"), "kube-fsm").to_string();
    assert_eq!(status(&send("POST", PATH, denied).await), "200");
    let failing = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "u-4",
            "desiredAPIVersion": "elsewhere.example.com/v1",
            "objects": [{
                "apiVersion": "example.com/v1alpha1", "kind": "Ticket",
                "metadata": { "name": "t", "namespace": "ns" },
                "spec": { "title": "t", "assignee": null },
            }],
        },
    });
    let converted = send("POST", CONVERT_PATH, failing.to_string()).await;
    assert!(converted.contains("not a version of"), "{converted}");
    // Announced too large.
    let mut stream = connect(tls, addr).await;
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_response(&mut stream).await.unwrap();
    assert_eq!(status(&answer), "413", "{answer}");
    // A body that stops coming.
    let mut stream = connect(tls, addr).await;
    stream
        .write_all(
            format!("POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{{").as_bytes(),
        )
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), read_response(&mut stream))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    assert_eq!(status(&answer), "408", "{answer}");

    let requests = |route: &str, code: u16| {
        webhook.sample(&format!(
            r#"controller_runtime_webhook_requests_total{{webhook="{route}",code="{code}"}}"#
        ))
    };
    assert_eq!(
        requests("other", 404),
        2.0,
        "unknown paths, under one label"
    );
    assert_eq!(requests(PATH, 405), 1.0);
    assert_eq!(requests(PATH, 400), 1.0);
    assert_eq!(requests(PATH, 413), 1.0);
    assert_eq!(requests(PATH, 408), 1.0);
    assert_eq!(requests(PATH, 200), 2.0);
    assert_eq!(requests(CONVERT_PATH, 200), 1.0);
    let denials = |route: &str| {
        webhook.sample(&format!(
            r#"kube_fsm_admission_denied_total{{webhook="{route}"}}"#
        ))
    };
    assert_eq!(denials(PATH), 1.0);
    assert_eq!(
        denials(CONVERT_PATH),
        0.0,
        "a failed conversion is no denial"
    );
    assert_eq!(webhook.sample("kube_fsm_conversion_failures_total"), 1.0);
}

#[tokio::test]
async fn each_deadline_closes_its_connection_and_is_counted_by_reason() {
    let limits = Limits {
        handshake: Duration::from_secs(1),
        header: Duration::from_secs(1),
        idle: Duration::from_secs(2),
        ..Limits::default()
    };
    let webhook = Served::start(limits, false).await;
    let closed = |reason: &str| {
        webhook.sample(&format!(
            r#"kube_fsm_webhook_connections_closed_total{{reason="{reason}"}}"#
        ))
    };
    // No handshake; a handshake but no request; half a head; a request, then nothing.
    let mut bare = TcpStream::connect(webhook.addr).await.unwrap();
    let mut silent = connect(&webhook.tls, webhook.addr).await;
    let mut slow = connect(&webhook.tls, webhook.addr).await;
    slow.write_all(b"POST /validate HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    slow.flush().await.unwrap();
    let mut idle = connect(&webhook.tls, webhook.addr).await;
    let first = exchange(&mut idle).await.unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");

    let ends = |started: Instant| async move {
        let mut byte = [0u8; 1];
        (bare.read(&mut byte).await.unwrap_or(0), started.elapsed())
    };
    let (read, took) = ends(Instant::now()).await;
    assert_eq!(read, 0, "closed without a handshake");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let mut rest = Vec::new();
    for stream in [&mut silent, &mut slow, &mut idle] {
        let started = Instant::now();
        let mut buffer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buffer))
            .await
            .expect("closed within 5 s");
        rest.push(started.elapsed());
    }
    eprintln!("closed after: no handshake {took:?}; no request, half a head, idle {rest:?}");
    assert_eq!(closed("handshake_timeout"), 1.0);
    assert_eq!(closed("header_timeout"), 2.0);
    assert_eq!(closed("idle"), 1.0);
    assert_eq!(webhook.sample("kube_fsm_webhook_connections"), 0.0);
}

#[tokio::test]
async fn a_connection_is_shut_down_gracefully_at_its_maximum_age() {
    let limits = Limits {
        max_age: Duration::from_secs(1),
        ..Limits::default()
    };
    let webhook = Served::start(limits, false).await;
    let mut stream = connect(&webhook.tls, webhook.addr).await;
    let first = exchange(&mut stream).await.unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let mut buffer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buffer))
        .await
        .expect("closed within 5 s");
    assert_eq!(
        webhook.sample(r#"kube_fsm_webhook_connections_closed_total{reason="max_age"}"#),
        1.0
    );
}

/// A CA (its PEM) and a client certificate it signed (the certificate's and key's PEM), as the
/// API server's admission configuration would present.
fn client_pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(Vec::new()).unwrap();
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = leaf
        .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
        .unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// A TLS client trusting `ca` that presents the client certificate `cert` with `key`.
fn connector_with_client_cert(ca: &str, cert: &str, key: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for der in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(der.unwrap()).unwrap();
    }
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn with_a_client_ca_only_clients_it_signed_are_answered() {
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).unwrap();
    let served_by = certificate.ca_bundle().unwrap().to_owned();
    let (client_ca, cert, key) = client_pki();
    let validator = Validator::for_machine(&MACHINE, Policy::default());
    let webhook = Webhook::bind("127.0.0.1:0".parse().unwrap(), validator, certificate)
        .await
        .unwrap()
        .client_ca(client_ca.as_bytes())
        .unwrap();
    let addr = webhook.local_addr();
    let task = tokio::spawn(webhook.run());

    // The API server's certificate, signed by the CA given: answered.
    let signed = connector_with_client_cert(&served_by, &cert, &key);
    let answer = review(&signed, addr).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // No certificate, or one another CA signed: no answer.
    let (_, other_cert, other_key) = client_pki();
    for (who, tls) in [
        ("no certificate", connector(&served_by)),
        (
            "another CA's",
            connector_with_client_cert(&served_by, &other_cert, &other_key),
        ),
    ] {
        // (TLS 1.3: the server's verdict on the client certificate comes after the client's
        // handshake ends, so it shows as a request that gets no answer.)
        let answer = try_post(&tls, addr, "POST", PATH, &legal()).await;
        let answered = answer.is_ok_and(|a| a.starts_with("HTTP/1.1 200"));
        assert!(!answered, "{who}: answered");
    }
    task.abort();
}
