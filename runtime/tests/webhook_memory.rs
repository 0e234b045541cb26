//! The webhook's memory under stalled large bodies, in a test binary of its own (so that no
//! other test's allocations count): 100 clients each announce an 8 MiB review, send all but
//! its last byte and stall. The server buffers each body's first 64 KiB and, beyond that, only
//! what its shared 32 MiB budget allows (the rest are refused 503); a review is still answered
//! at once. The measurement starts only once every client's writes have ended — read by the
//! server, or refused — and reads what the server holds by its own count
//! (`WebhookMetrics::body_bytes`), so it cannot pass on bodies not yet arrived.
#![cfg(feature = "admission")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::CustomResource;
use kube_fsm::admission::{PATH, Policy, ServingCertificate, Validator, Webhook, WebhookMetrics};
use kube_fsm::{MachineStatus, state_machine};
use rustls::pki_types::pem::PemObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// What one review may be (the server's `MAX_BODY`).
const MAX_BODY: usize = 8 << 20;
/// What each body may hold without the shared budget (the server's `SMALL_BODY`).
const SMALL_BODY: usize = 64 << 10;
/// The budget all bodies share beyond that (the server's `BODY_BUDGET`).
const BODY_BUDGET: usize = 32 << 20;

#[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Job",
    namespaced,
    status = "JobStatus"
)]
pub struct JobSpec {}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobStatus {
    #[serde(flatten)]
    pub machine: MachineStatus<JobPhase>,
}

fn connector(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.expect("a CA certificate")).expect("trusted");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

async fn connect(tls: &TlsConnector, addr: SocketAddr) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    tls.connect(name, tcp).await.expect("TLS")
}

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

/// One legal review on a new connection: the whole answer.
async fn review(tls: &TlsConnector, addr: SocketAddr) -> String {
    let body = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "42",
            "kind": { "group": "example.com", "version": "v1", "kind": "Job" },
            "resource": { "group": "example.com", "version": "v1", "resource": "jobs" },
            "subResource": "status",
            "name": "job",
            "namespace": "ns",
            "operation": "UPDATE",
            "userInfo": { "username": "alice" },
            "object": { "apiVersion": "example.com/v1", "kind": "Job", "metadata": { "name": "job" }, "status": { "phase": "Done" } },
            "oldObject": { "apiVersion": "example.com/v1", "kind": "Job", "metadata": { "name": "job" }, "status": { "phase": "Pending" } },
        },
    })
    .to_string();
    let mut stream = connect(tls, addr).await;
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(body.as_bytes()).await.expect("body");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap_or_default();
    answer
}

/// Starts a client that announces an 8 MiB review, sends all but its last byte and stalls;
/// `sent` counts the clients whose writes have ended (all sent, or refused by the server).
fn stall(
    tls: TlsConnector,
    addr: SocketAddr,
    chunk: Arc<[u8]>,
    sent: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Option<TlsStream<TcpStream>>> {
    tokio::spawn(async move {
        let mut stream = connect(&tls, addr).await;
        let head = format!("POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {MAX_BODY}\r\n\r\n");
        let written = async {
            stream.write_all(head.as_bytes()).await?;
            for _ in 0..7 {
                stream.write_all(&chunk[..]).await?;
            }
            stream.write_all(&chunk[..chunk.len() - 1]).await?;
            stream.flush().await
        }
        .await;
        sent.fetch_add(1, Ordering::SeqCst);
        written.ok()?;
        tokio::time::sleep(Duration::from_secs(60)).await;
        Some(stream)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_large_bodies_neither_grow_the_process_nor_starve_a_review() {
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).expect("certificate");
    let tls = connector(certificate.ca_bundle().expect("a CA"));
    let validator = Validator::new::<Job>(Policy::default()).expect("validator");
    let metrics = WebhookMetrics::default();
    let webhook = Webhook::bind("127.0.0.1:0".parse().expect("addr"), validator, certificate)
        .await
        .expect("bind")
        .metrics(&metrics);
    let addr = webhook.local_addr();
    let server = tokio::spawn(webhook.run());
    assert!(review(&tls, addr).await.starts_with("HTTP/1.1 200"));
    let before = resident_bytes();

    // They share one buffer: what grows is the server's memory, not theirs.
    let chunk: Arc<[u8]> = vec![b' '; 1 << 20].into();
    let sent = Arc::new(AtomicUsize::new(0));
    let stalled: Vec<_> = (0..100)
        .map(|_| stall(tls.clone(), addr, chunk.clone(), sent.clone()))
        .collect();
    // Measured once every client's writes have ended: its bytes were read by the server (a
    // client's kernel buffers hold a few hundred KiB at most), or it was refused (503) for
    // want of budget. Within the server's 10 s body deadline, so none was let go yet.
    let asked = std::time::Instant::now();
    while sent.load(Ordering::SeqCst) < 100 {
        assert!(
            asked.elapsed() < Duration::from_secs(8),
            "only {} of 100 clients got their bodies out within 8 s",
            sent.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_sent = asked.elapsed();
    // What the server holds, by its own count: the bodies did arrive (the budget let four of
    // them be read all but their last byte: 32 MiB less 4 bytes, as measured), and no more
    // than the budget plus 64 KiB per body is held.
    let held = usize::try_from(metrics.body_bytes()).unwrap_or(0);
    assert!(
        held >= BODY_BUDGET / 2,
        "the server holds {held} bytes: the stalled bodies have not arrived"
    );
    assert!(
        held <= BODY_BUDGET + 100 * SMALL_BODY,
        "the server holds {held} bytes, more than its budget allows"
    );
    let grown = resident_bytes().saturating_sub(before);

    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(2), review(&tls, addr))
        .await
        .expect("a review is answered within 2 s while the bodies stall");
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"allowed\":true"), "{answer}");
    eprintln!(
        "100 stalled 8 MiB bodies, all sent in {all_sent:?}: the server holds {} MiB of them; \
         the process's RSS (clients' TLS buffers included) grew by {} MiB; a review took {took:?}",
        held >> 20,
        grown >> 20
    );
    // The process as a whole (the clients' buffers and 200 TLS sessions included), against the
    // +954 MiB of a server without the budget: a bound on the order, not the server's count.
    assert!(grown < 256 << 20, "RSS grew by {} MiB", grown >> 20);
    for task in stalled {
        task.abort();
    }
    server.abort();
}
