//! The admission webhook under a connection flood, on the real API server: registered under
//! `failurePolicy: Fail`, it reviews every status write while a flood holds 2 000 idle TCP
//! connections to it (beyond its 1 024, and beyond 256 from each of the flood's addresses,
//! the API server's own among them) and opens 100 new ones a second. The flood never sends a
//! byte. Before the server evicted the connection waiting longest for a newcomer, it refused
//! the API server's new connections while the flood held its 1 024 (each for the 10 s of the
//! handshake's deadline): the writes that needed one failed ("failed calling webhook").

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube_fsm::admission::{FailurePolicy, Policy};
use kube_fsm_testkit::admission::{self, PROBE};
use kube_fsm_testkit::cluster::{client, install_crds};
use kube_fsm_testkit::resources::{Database, sample};
use tokio::net::{TcpSocket, TcpStream};

/// Idle connections the flood opens first.
const HELD: usize = 2_000;
/// New connections a second after that.
const PER_SECOND: usize = 100;
/// How long the flood lasts at most (the writes end it sooner, in about 15 s).
const FLOOD_FOR: Duration = Duration::from_secs(30);
/// Status writes reviewed during the flood.
const WRITES: usize = 100;
/// Status writes sent at once (each to its own object).
const BURST: usize = 10;

/// The flood's source addresses (all on loopback; the API server calls from 127.0.0.1).
fn sources() -> Vec<IpAddr> {
    (1..=8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, i)))
        .collect()
}

/// A bare TCP connection from `source` to `addr` (within a second), never written to.
async fn bare(source: IpAddr, addr: SocketAddr) -> Option<TcpStream> {
    let socket = TcpSocket::new_v4().ok()?;
    socket.bind(SocketAddr::new(source, 0)).ok()?;
    tokio::time::timeout(Duration::from_secs(1), socket.connect(addr))
        .await
        .ok()?
        .ok()
}

/// The address the API server calls the webhook of namespace `ns` at.
async fn webhook_addr(client: &kube::Client, ns: &str) -> SocketAddr {
    let configurations = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list webhook configurations");
    let url = configurations
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|name| name.starts_with(&format!("{ns}.")))
        })
        .flat_map(|c| c.webhooks.iter().flatten())
        .find_map(|w| w.client_config.url.clone())
        .expect("the test's registration");
    let authority = url.trim_start_matches("https://");
    authority
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("not https://IP:PORT: {url}"))
}

/// What the flood did: connections opened, and of them those the webhook closed.
struct Flooded {
    opened: usize,
    closed: usize,
}

/// Holds [`HELD`] idle connections to `addr` from [`sources`], then opens [`PER_SECOND`]
/// more a second, until `stop` or [`FLOOD_FOR`]; `ready` is set once the first are held.
fn flood(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Flooded> {
    tokio::spawn(async move {
        let started = Instant::now();
        let sources = sources();
        let from = |i: usize| sources[i % sources.len()];
        let mut held: Vec<TcpStream> = futures::stream::iter(0..HELD)
            .map(|i| bare(from(i), addr))
            .buffer_unordered(64)
            .filter_map(|stream| async move { stream })
            .collect()
            .await;
        ready.store(true, Ordering::Release);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut i = 0;
        while !stop.load(Ordering::Acquire) && started.elapsed() < FLOOD_FOR {
            tick.tick().await;
            for _ in 0..PER_SECOND / 10 {
                held.extend(bare(from(i), addr).await);
                i += 1;
            }
        }
        // A connection the server closed reads as end of file (or a reset); an open one
        // has nothing to read.
        let mut byte = [0u8; 1];
        let closed = held
            .iter()
            .filter(|stream| match stream.try_read(&mut byte) {
                Ok(n) => n == 0,
                Err(err) => err.kind() != std::io::ErrorKind::WouldBlock,
            })
            .count();
        Flooded {
            opened: held.len(),
            closed,
        }
    })
}

/// The `percent`th percentile of `sorted` (nearest rank).
fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    let at = (sorted.len().saturating_sub(1) * percent).div_ceil(100);
    sorted.get(at).copied().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_write_is_reviewed_while_a_flood_holds_the_webhooks_connections() {
    let Some(client) = client("webhook_flood").await else {
        return;
    };
    install_crds(&client).await;
    let ns = admission::namespace(&client, "webhook-flood", &[]).await;
    let registration = admission::serve(
        &client,
        &ns,
        sample(PROBE),
        Policy::default(),
        FailurePolicy::Fail,
    )
    .await;
    let addr = webhook_addr(&client, &ns).await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    for object in 0..BURST {
        let name = format!("flooded-{object}");
        api.create(&PostParams::default(), &sample(&name))
            .await
            .expect("create");
    }

    let (ready, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let flooding = flood(addr, ready.clone(), stop.clone());
    let waited = Instant::now();
    while !ready.load(Ordering::Acquire) && waited.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ready.load(Ordering::Acquire),
        "the flood's first connections within 30 s"
    );

    // Status writes (updates of the status subresource: reviewed), in bursts of BURST at once
    // (over HTTP/1.1 the API server opens a connection per review under way, so each burst
    // needs new connections while the flood holds the webhook's), one burst a second.
    let (mut latencies, mut failures) = (Vec::new(), Vec::new());
    let bursts_started = Instant::now();
    for burst in 0..WRITES / BURST {
        let writes = (0..BURST).map(|object| {
            let api = api.clone();
            async move {
                let patch = Patch::Merge(
                    serde_json::json!({ "status": { "endpoint": format!("burst-{burst}") } }),
                );
                let started = Instant::now();
                let name = format!("flooded-{object}");
                let written = api
                    .patch_status(&name, &PatchParams::default(), &patch)
                    .await;
                written.map(|_| started.elapsed())
            }
        });
        for written in futures::future::join_all(writes).await {
            match written {
                Ok(took) => latencies.push(took),
                Err(kube::Error::Api(status)) => failures.push(status.message),
                Err(err) => failures.push(err.to_string()),
            }
        }
        let next = Duration::from_secs(u64::try_from(burst).unwrap_or(0) + 1);
        tokio::time::sleep(next.saturating_sub(bursts_started.elapsed())).await;
    }
    stop.store(true, Ordering::Release);
    let flooded = flooding.await.expect("the flood");

    // Still the webhook deciding: an illegal write is refused by it.
    let illegal = Patch::Merge(serde_json::json!({ "status": { "phase": "Running" } }));
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let refused = api.patch_status(PROBE, &dry_run, &illegal).await;
    registration.remove().await;

    latencies.sort();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1000.0);
    eprintln!(
        "flood: {} bare connections to {addr} from {} addresses ({HELD} held first, then \
         {PER_SECOND}/s), {} of them closed by the webhook; {} of {WRITES} status writes \
         ({BURST} at once) reviewed; latency p50 {}, p90 {}, p99 {}, max {}",
        flooded.opened,
        sources().len(),
        flooded.closed,
        latencies.len(),
        ms(percentile(&latencies, 50)),
        ms(percentile(&latencies, 90)),
        ms(percentile(&latencies, 99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    assert!(
        failures.is_empty(),
        "{} writes failed under the flood:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        flooded.opened > 1_024,
        "the flood went beyond the webhook's connections"
    );
    let message = match refused {
        Err(kube::Error::Api(status)) => status.message,
        Err(err) => err.to_string(),
        Ok(_) => "admitted".to_owned(),
    };
    // Refused by the webhook — or first by the CRD's CEL rule, on a server that runs it.
    assert!(
        message.contains("denied the request") || message.contains("status.phase: Forbidden"),
        "an illegal move: {message}"
    );
}
