use super::*;

#[test]
fn a_webhook_the_api_server_cannot_call_is_no_overload() {
    let status = |code: u16, message: &str| {
        kube::Error::Api(
            kube::core::Status {
                code,
                message: message.to_owned(),
                ..kube::core::Status::failure(message, "InternalError")
            }
            .boxed(),
        )
    };
    let webhook = status(
        500,
        "Internal error occurred: failed calling webhook \"phase.x\": connection refused",
    );
    assert_eq!(overload(&webhook), None);
    assert_eq!(
        overload(&status(500, "etcdserver: request timed out")),
        Some(None)
    );
    assert_eq!(
        overload(&status(503, "failed calling webhook")),
        Some(None),
        "only a 500 names a webhook call"
    );
}

#[test]
fn the_limit_halves_once_per_burst_of_overload_and_climbs_back_by_one_per_round() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(Some(32));
    assert!(aimd.overloaded(32, t0));
    assert_eq!(aimd.limit(), 16);
    // The other failures of the same burst do not cut again.
    assert!(!aimd.overloaded(32, t0 + Duration::from_millis(100)));
    assert_eq!(aimd.limit(), 16);
    assert!(aimd.overloaded(16, t0 + COOL_DOWN));
    assert_eq!(aimd.limit(), 8);
    // 8 successes (one round at limit 8) add one.
    for _ in 0..8 {
        aimd.succeeded();
    }
    assert_eq!(aimd.limit(), 9);
    for _ in 0..10_000 {
        aimd.succeeded();
    }
    assert_eq!(aimd.limit(), 32, "never above the configured concurrency");
}

#[test]
fn an_unbounded_limit_is_cut_from_what_was_in_flight_and_never_below_one() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(None);
    assert_eq!(aimd.limit(), usize::MAX);
    aimd.succeeded();
    assert_eq!(aimd.limit(), usize::MAX);
    aimd.overloaded(300, t0);
    assert_eq!(aimd.limit(), 150);
    for i in 1..20 {
        aimd.overloaded(1, t0 + COOL_DOWN * i);
    }
    assert_eq!(aimd.limit(), 1);
}

#[test]
fn the_bucket_spends_its_burst_then_spaces_writes_at_the_rate() {
    let t0 = Instant::now();
    let mut bucket = Bucket::new(10.0, 3, t0);
    assert_eq!(bucket.take(t0), None);
    assert_eq!(bucket.take(t0), None);
    assert_eq!(bucket.take(t0), None);
    let wait = bucket.take(t0).expect("empty");
    assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
    let wait = bucket.take(t0).expect("queued behind the first");
    assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
    // A second later the debt is paid and 8 tokens are back, capped at the burst.
    assert_eq!(bucket.take(t0 + Duration::from_secs(1)), None);
    assert_eq!(bucket.take(t0 + Duration::from_secs(1)), None);
    assert_eq!(bucket.take(t0 + Duration::from_secs(1)), None);
    assert!(bucket.take(t0 + Duration::from_secs(1)).is_some());
}

#[tokio::test]
async fn slots_wait_for_the_limit_and_one_retry_after_pauses_nobody() {
    let pace = Arc::new(Pace::new(Some(2), None));
    let a = pace.reconcile(pace.ticket()).await;
    let _b = pace.reconcile(pace.ticket()).await;
    let third =
        tokio::time::timeout(Duration::from_millis(50), pace.reconcile(pace.ticket())).await;
    assert!(third.is_err(), "a third reconcile waits while two run");
    drop(a);
    let c = tokio::time::timeout(Duration::from_millis(50), pace.reconcile(pace.ticket()))
        .await
        .expect("a freed slot is taken");
    drop(c);
    pace.ended(Some(Some(Duration::from_secs(30))));
    assert_eq!(pace.limit(), 2, "one 429 is no sustained overload");
    tokio::time::timeout(Duration::from_millis(50), pace.reconcile(pace.ticket()))
        .await
        .expect("its Retry-After delays its own object only");
}

#[tokio::test]
async fn waiting_reconciles_take_freed_slots_in_the_order_they_came() {
    // Many objects wait at the limit: each gets its slot in turn (as controller-runtime's
    // work queue), never overtaken, so no object waits behind more than the queue ahead
    // of it. (A lottery among the waiters left some objects waiting for seconds.)
    let pace = Arc::new(Pace::new(Some(1), None));
    let first = pace.reconcile(pace.ticket()).await;
    let order = std::sync::Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    for i in 0..50 {
        let (pace, order) = (pace.clone(), order.clone());
        waiting.push(tokio::spawn(async move {
            let _slot = pace.reconcile(pace.ticket()).await;
            order.lock().unwrap().push(i);
            tokio::task::yield_now().await;
        }));
        // Each in the queue before the next comes.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    drop(first);
    for task in waiting {
        task.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, (0..50).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_cut_limit_admits_no_one_until_enough_slots_are_back_and_a_grown_one_admits_more() {
    let pace = Arc::new(Pace::new(Some(4), None));
    let slots: Vec<_> =
        futures::future::join_all((0..4).map(|_| pace.reconcile(pace.ticket()))).await;
    // Sustained overload with 4 in flight: the limit halves to 2.
    for _ in 0..OVERLOAD_RUN {
        pace.ended(Some(None));
    }
    assert_eq!(pace.limit(), 2);
    let mut slots = slots.into_iter();
    drop(slots.next());
    drop(slots.next());
    let waits =
        tokio::time::timeout(Duration::from_millis(50), pace.reconcile(pace.ticket())).await;
    assert!(waits.is_err(), "2 still in flight at a limit of 2");
    drop(slots.next());
    tokio::time::timeout(Duration::from_millis(50), pace.reconcile(pace.ticket()))
        .await
        .expect("1 in flight at a limit of 2");
}

#[test]
fn only_sustained_overload_counts() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // A flaky server: one request in five refused at random, so that about 36 % of the
    // reconciles fail (those that write twice); no overload, however long it lasts
    // (with twenty outcomes and 60 %, 23 cuts in these 5 000).
    for seed in 0..4 {
        let mut flaky = Outcomes::default();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut cuts = 0;
        for i in 0..5_000 {
            if flaky.record(at(i * 5), rng.f64() < 0.36) {
                cuts += 1;
                flaky.clear();
            }
        }
        assert_eq!(cuts, 0, "seed {seed}: {cuts} cuts for 36 % sparse errors");
    }
    // An overloaded one: most requests refused.
    let mut overloaded = Outcomes::default();
    let first = (0..80).position(|i| overloaded.record(at(i * 5), i % 4 != 0));
    assert_eq!(first, Some(39), "forty outcomes, most of them overloaded");
    let mut refusing = Outcomes::default();
    let first = (0..80).position(|_| refusing.record(t0, true));
    assert_eq!(first, Some(OVERLOAD_RUN - 1), "a run of refusals, sooner");
    // Old outcomes do not count: a burst long ago is not overload now.
    let mut old = Outcomes::default();
    for i in 0..40 {
        old.record(at(i), true);
    }
    assert!(
        !old.record(at(20_000), true),
        "one fresh outcome is not enough"
    );
}

#[test]
fn overload_is_429_and_5xx_with_their_retry_after() {
    let status = |code: u16, after: u32| {
        kube::Error::Api(
            kube::core::Status {
                code,
                details: serde_json::from_value(serde_json::json!({ "retryAfterSeconds": after }))
                    .ok(),
                ..Default::default()
            }
            .boxed(),
        )
    };
    assert_eq!(
        overload(&status(429, 2)),
        Some(Some(Duration::from_secs(2)))
    );
    assert_eq!(overload(&status(503, 0)), Some(None));
    assert_eq!(overload(&status(409, 0)), None);
    assert_eq!(overload(&status(404, 1)), None);
    assert_eq!(
        overload(&status(504, 0)),
        Some(None),
        "the server's own timeout"
    );
    let timed_out = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer");
    assert_eq!(
        overload(&kube::Error::Service(Box::new(timed_out))),
        Some(None),
        "the client's deadline"
    );
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(overload(&kube::Error::Service(Box::new(refused))), None);
}

#[test]
fn a_transition_keeps_its_objects_place_for_the_change_it_brings_back() {
    let pace = Arc::new(Pace::new(Some(1), None));
    pace.arrived("ns/a".to_owned());
    let a = pace.dispatched("ns/a");
    pace.arrived("ns/b".to_owned());
    // a's transition was written: its change comes back, and keeps a's place, before b.
    pace.continues("ns/a".to_owned(), a.number());
    pace.arrived("ns/a".to_owned());
    let again = pace.dispatched("ns/a");
    let b = pace.dispatched("ns/b");
    assert_eq!(again.number(), a.number());
    assert!(again.number() < b.number());
}
