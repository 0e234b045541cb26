//! The operator against an API server that refuses writes as an overloaded one does (429 Too
//! Many Requests with `Retry-After`): it sends fewer writes the longer the overload lasts
//! (adaptive concurrency, `Retry-After` waited out by every reconcile), loses no transition,
//! and converges once the server accepts writes again; against a flaky one (a share of writes
//! refused at random), it keeps its concurrency.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_fsm_testkit::cluster::{self, eventually, phase_of};
use kube_fsm_testkit::handlers::Databases;
use kube_fsm_testkit::metrics::Recorded;
use kube_fsm_testkit::observer::Phases;
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::overload;
use kube_fsm_testkit::resources::*;

const OBJECTS: usize = 40;
const RETRY_AFTER: u32 = 2;

#[tokio::test]
async fn an_overloaded_api_server_gets_ever_fewer_writes_and_no_transition_is_lost() {
    let Some((client, ns)) = cluster::prepare(
        "an_overloaded_api_server_gets_ever_fewer_writes",
        "fsm-overload",
    )
    .await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (refusing, overload) = overload::client(config, RETRY_AFTER);
    let recorded = Recorded::default();
    // The tests' short per-object backoff (200 ms doubling to 2 s): the worst case for a storm
    // of retries.
    let operator = operator::in_namespace::<Database, _>(&refusing, &ns, Databases)
        .metrics(recorded.metrics());
    overload.refuse();
    let phases = Phases::watch(api.clone());
    let running = Running::spawn(operator);
    for i in 0..OBJECTS {
        api.create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create");
    }
    let window = Duration::from_secs(8);
    tokio::time::sleep(window).await;
    let refused = overload.refused();
    eprintln!(
        "{OBJECTS} objects, writes refused with Retry-After {RETRY_AFTER} s during {window:?}: \
         {refused}"
    );
    // Every reconcile in the window fails on its first write (its ReconcileFailed Event,
    // from the third failure in a row, is refused too). On their own backoff the objects
    // retried 670 refused writes in these 8 s (measured before pacing). Paced, 10 refusals in
    // a row are sustained overload: the limit halves from what was in flight, and every
    // reconcile waits out the Retry-After until one succeeds: about 14.
    assert!(
        refused <= OBJECTS as u64,
        "{refused} writes refused in {window:?}: the operator did not back off"
    );
    assert!(refused > 0, "the overload was seen");

    overload.recover();
    let recovered = Instant::now();
    let converged = eventually(Duration::from_secs(60), || async {
        let list = api.list(&ListParams::default()).await.ok()?;
        (list.items.len() == OBJECTS
            && list
                .items
                .iter()
                .all(|db| phase_of(db).as_deref() == Some("Running")))
        .then(|| recovered.elapsed())
    })
    .await
    .expect("every object reached Running once the server accepted writes");
    eprintln!("all {OBJECTS} Running {converged:?} after the overload ended");
    // Each object took the spec's path, as a watch of our own saw it stored: Provisioning
    // (its first step, out of Pending, is its first write), then Running — no move skipped,
    // repeated or undone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = phases.seen();
    assert_eq!(seen.len(), OBJECTS, "{seen:?}");
    for (name, moves) in &seen {
        assert_eq!(moves, &["Provisioning", "Running"], "{name}");
    }
    // And the engine counts what was stored.
    let text = recorded.text();
    assert_eq!(
        recorded.sum("kube_fsm_transitions_total", &[("to", "Running")]),
        OBJECTS as f64,
        "{text}"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_flaky_api_server_keeps_the_operators_concurrency() {
    let Some((client, ns)) = cluster::prepare("a_flaky_api_server", "fsm-flaky").await else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let config = kube::Config::infer().await.expect("kubeconfig");
    let (flaky, faults) = overload::client(config, 1);
    let recorded = Recorded::default();
    let operator =
        operator::in_namespace::<Database, _>(&flaky, &ns, Databases).metrics(recorded.metrics());
    // One write in five refused at random, with 429, 500 or 503: the server is idle, not
    // overloaded, so the operator must not slow down for it.
    faults.flaky(0.2);
    let running = Running::spawn(operator);
    let limit = || recorded.sum("kube_fsm_concurrency_limit", &[("machine", "Database")]);
    // The lowest limit seen, sampled while the objects converge.
    let lowest = std::cell::Cell::new(f64::MAX);
    const FLAKY_OBJECTS: usize = 60;
    let started = Instant::now();
    for i in 0..FLAKY_OBJECTS {
        api.create(&PostParams::default(), &sample(&format!("db-{i}")))
            .await
            .expect("create");
    }
    let converged = eventually(Duration::from_secs(90), || async {
        lowest.set(lowest.get().min(limit()));
        let list = api.list(&ListParams::default()).await.ok()?;
        (list.items.len() == FLAKY_OBJECTS
            && list
                .items
                .iter()
                .all(|db| phase_of(db).as_deref() == Some("Running")))
        .then(|| started.elapsed())
    })
    .await
    .expect("every object reached Running despite the faults");
    let lowest = lowest.get();
    eprintln!(
        "{FLAKY_OBJECTS} objects Running in {converged:?} with {} of {} writes refused; \
         concurrency limit at least {lowest} (now {})",
        faults.refused(),
        faults.refused() + faults.passed(),
        limit()
    );
    assert!(faults.refused() > 0, "faults were injected");
    // Sparse errors are no overload: at most one cut (32 -> 16), never the floor.
    assert!(
        lowest >= 16.0,
        "the concurrency fell to {lowest} under sparse errors"
    );
    // Nor are they news for the objects' owners: a refused write is a `ReconcileFailed` Event
    // only once it happened three times in a row to the object (one object in ten or so;
    // an Event per failure gave about 35 of the 60 objects one).
    let warned = cluster::events(&client, &ns, "ReconcileFailed").await.len();
    eprintln!("{warned} objects with a ReconcileFailed Event");
    assert!(
        warned <= FLAKY_OBJECTS / 4,
        "{warned} of {FLAKY_OBJECTS} objects got a ReconcileFailed Event for sparse refusals"
    );
    running.stop().await;
}

/// A loopback HTTP server answering every request with 503; returns its URL and the count of
/// requests it received.
async fn unavailable_server() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"unavailable","reason":"ServiceUnavailable","code":503}"#;
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, requests)
}

#[tokio::test]
async fn the_operators_client_hands_a_503_to_the_engine_at_once() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::atomic::Ordering;
    let (url, requests) = unavailable_server().await;
    let config = || kube::Config::new(url.parse().expect("url"));
    // kube's default client retries it (up to 15 times, backing off to minutes).
    let default = kube::Client::try_from(config()).expect("client");
    let listed = tokio::time::timeout(
        Duration::from_millis(500),
        Api::<ConfigMap>::all(default).list(&ListParams::default()),
    )
    .await;
    assert!(listed.is_err(), "still retrying after 500 ms");
    let by_default = requests.swap(0, Ordering::SeqCst);
    assert!(by_default >= 3, "kube retried: {by_default} requests");
    // kube_fsm::client does not: the engine sees the 503 at once and paces on it.
    let ours = kube_fsm::client(config()).expect("client");
    let listed = tokio::time::timeout(
        Duration::from_millis(500),
        Api::<ConfigMap>::all(ours).list(&ListParams::default()),
    )
    .await
    .expect("answered at once");
    assert!(
        matches!(&listed, Err(kube::Error::Api(status)) if status.code == 503),
        "{listed:?}"
    );
    assert_eq!(requests.load(Ordering::SeqCst), 1, "one request, no retry");
}
