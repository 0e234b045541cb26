//! The `/machine` page of the example operator's HTTP endpoint, in headless Chromium (Debian's):
//! the machine's SVG renders — the screenshot, kept in `target/tmp/artifacts/`, has the blue of
//! the manual edge, the orange of the timeout and the grey of the terminal phase — and the
//! number of objects the page shows in each phase, in the picture and in its table, is what
//! the API server holds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_fsm::StateMachine as _;
use kube_fsm::metrics::Metrics;
use kube_fsm::serve::Endpoints;
use kube_fsm_examples::stand_in::{self, Handlers};
use kube_fsm_testkit::browser::Chromium;
use kube_fsm_testkit::cluster::{self, eventually, hand_edit, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::resources::{Database, DatabasePhase, DatabaseSpec};
use prometheus_client::registry::Registry;
use serde_json::json;

/// The count each phase's row of the page's table shows.
fn table(dom: &str) -> BTreeMap<String, usize> {
    dom.split("<tr data-phase=\"")
        .skip(1)
        .filter_map(|row| {
            let (phase, rest) = row.split_once('"')?;
            let n = rest.split("<td class=\"n\">").nth(1)?.split('<').next()?;
            Some((phase.to_owned(), n.parse().ok()?))
        })
        .collect()
}

/// The count the picture shows under `phase`'s name (its label's second line).
fn drawn(dom: &str, phase: &str) -> Option<usize> {
    let after = dom.split(&format!(">{phase}</tspan>")).nth(1)?;
    let label = after.strip_prefix("<tspan")?;
    label.split_once('>')?.1.split('<').next()?.parse().ok()
}

/// The objects per phase the API server holds.
async fn stored(api: &Api<Database>) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = DatabasePhase::ALL
        .iter()
        .map(|p| (p.as_str().to_owned(), 0))
        .collect();
    for db in api.list(&ListParams::default()).await.expect("list") {
        if let Some(phase) = db.machine_status().and_then(|m| m.phase.as_ref()) {
            *counts.entry(phase.to_string()).or_default() += 1;
        }
    }
    counts
}

#[tokio::test]
async fn the_machine_page_draws_the_machine_with_the_counts_the_api_server_holds() {
    let test = "machine_page::counts";
    let Some(chromium) = Chromium::find(test) else {
        return;
    };
    let Some((client, ns)) = cluster::prepare(test, "fsm-page").await else {
        return;
    };
    let mut registry = Registry::default();
    let metrics = Metrics::default();
    metrics.register(&mut registry);
    let operator = stand_in::operator(client.clone(), Handlers::new(), Some(&ns)).metrics(&metrics);
    let (addr, serving) = Endpoints::new(registry, operator.health())
        .machine::<Database>(&metrics)
        .serve("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("serve /machine");
    let url = format!("http://{addr}/machine");
    let running = Running::spawn(operator);

    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let names = ["db-0", "db-1", "db-2", "db-3"];
    for name in names {
        let db = Database::new(
            name,
            DatabaseSpec {
                version: "16".into(),
                replicas: 1,
            },
        );
        api.create(&PostParams::default(), &db)
            .await
            .expect("create");
    }
    for name in names {
        wait_phase(&api, name, "Running").await;
    }
    // A person gives up on one (a legal edge, adopted: Failed is terminal and stays).
    hand_edit(&api, "db-3", json!({ "phase": "Failed" })).await;
    wait_phase(&api, "db-3", "Failed").await;

    let expected: BTreeMap<String, usize> = DatabasePhase::ALL
        .iter()
        .map(|p| {
            let n = match p.as_str() {
                "Running" => 3,
                "Failed" => 1,
                _ => 0,
            };
            (p.as_str().to_owned(), n)
        })
        .collect();
    let seen = eventually(Duration::from_secs(30), || async {
        let dom = chromium.dom(&url).await;
        let shown = table(&dom);
        let held = stored(&api).await;
        (shown == held && held == expected).then_some(dom)
    })
    .await;
    let Some(dom) = seen else {
        let shown = table(&chromium.dom(&url).await);
        panic!(
            "the page shows {shown:?}, the API server holds {:?}, expected {expected:?}",
            stored(&api).await
        );
    };
    assert!(dom.contains("<svg"), "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    for (phase, n) in &expected {
        assert_eq!(
            drawn(&dom, phase),
            Some(*n),
            "{phase} in the picture: {dom}"
        );
    }

    let artifact = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("artifacts")
        .join("machine-page.png");
    let pixels = chromium.screenshot(&url, &artifact, (1400, 900)).await;
    eprintln!("{test}: the page's screenshot is {}", artifact.display());
    assert_eq!((pixels.width, pixels.height), (1400, 900));
    // Thin, anti-aliased and scaled lines: hues count, not exact colours. The manual edge
    // (Failed -> Pending) is blue, the timeout (Provisioning -> Failed) orange, the terminal
    // Failed filled grey, text and the engine's edges dark.
    let blue = pixels.count(|[r, g, b]| b > r.saturating_add(60) && b > g.saturating_add(30));
    let orange = pixels.count(|[r, g, b]| r > b.saturating_add(80) && r > g.saturating_add(30));
    let grey = pixels.count(|[r, g, b]| r == g && g == b && (0xe0..=0xec).contains(&r));
    let dark = pixels.count(|[r, g, b]| r < 0x60 && g < 0x60 && b < 0x60);
    eprintln!("{test}: {blue} blue, {orange} orange, {grey} grey, {dark} dark pixels");
    assert!(
        blue > 50,
        "the manual edge is not drawn: {blue} blue pixels ({})",
        artifact.display()
    );
    assert!(
        orange > 50,
        "the timeout edge is not drawn: {orange} orange pixels ({})",
        artifact.display()
    );
    assert!(
        grey > 500,
        "the terminal phase is not filled: {grey} grey pixels ({})",
        artifact.display()
    );
    assert!(
        dark > 500,
        "no text or edges drawn: {dark} dark pixels ({})",
        artifact.display()
    );

    running.stop().await;
    serving.abort();
}
