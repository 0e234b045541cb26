//! The generated alerts and dashboard on a real Prometheus (Debian's), scraping an operator on
//! the real API server through the examples' `/metrics` endpoint: an object whose handler never
//! reports `PodsReady` makes the near-timeout alert go pending, then firing within the rule's
//! `for:` and one evaluation interval, before the timeout itself; a hand edit fires the drift
//! alert; and every query of the dashboard returns data.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;
use kube_fsm::metrics::Metrics;
use kube_fsm::{Next, Step};
use kube_fsm_generate::alerts::Alerts;
use kube_fsm_generate::dashboard::Dashboard;
use kube_fsm_testkit::cluster::{self, eventually, wait_phase};
use kube_fsm_testkit::operator::{self, Running};
use kube_fsm_testkit::prometheus_server::{INTERVAL, Server};
use kube_fsm_testkit::resources::*;
use prometheus_client::registry::Registry;
use serde_json::json;

/// Never reports `PodsReady`: its objects wait in Provisioning until the timeout.
#[derive(Clone, Copy, Debug)]
struct NeverReady;

impl OverdueHandler for NeverReady {
    type Error = std::convert::Infallible;

    async fn on_provisioning(
        &self,
        _: &Overdue,
        _: &mut Step<Overdue>,
    ) -> Result<OverdueProvisioningNext, Self::Error> {
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Overdue,
        _: &mut Step<Overdue>,
    ) -> Result<OverdueRunningNext, Self::Error> {
        Ok(Next::Stay)
    }
}

/// The near fraction and `for:` of the test's rules: half of Overdue's 40 s timeout, for 5 s.
const NEAR: f64 = 0.5;
const NEAR_FOR: Duration = Duration::from_secs(5);
/// How late the test may notice a state change it polls for.
const POLL: Duration = Duration::from_millis(250);

fn entered(object: &Overdue) -> Timestamp {
    object
        .status
        .as_ref()
        .and_then(|s| s.machine.entered_at())
        .expect("an entry time")
}

fn secs(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).expect("a short duration")
}

#[tokio::test]
async fn prometheus_fires_the_near_timeout_and_drift_alerts_and_answers_every_dashboard_query() {
    let test = "prometheus::alerts";
    let Some((client, ns)) = cluster::prepare(test, "fsm-prom").await else {
        return;
    };
    let mut registry = Registry::default();
    let metrics = Metrics::default();
    metrics.register(&mut registry);
    let operator = operator::in_namespace::<Overdue, _>(&client, &ns, NeverReady).metrics(&metrics);
    let (addr, serving) = kube_fsm::serve::Endpoints::new(registry, operator.health())
        .serve("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("serve /metrics");
    let job = "job=\"operator\"";
    let alerts = Alerts::new()
        .machine::<Overdue>()
        .near_timeout(NEAR, NEAR_FOR)
        .matchers(job);
    let rules = serde_json::to_string(&alerts.rules()).expect("the rules as JSON, which is YAML");
    let Some(prometheus) = Server::start(test, &[addr], &rules).await else {
        return;
    };
    assert_eq!(
        prometheus.rule_groups().await.len(),
        2,
        "the recording and the alerting group are loaded: {}",
        prometheus.log()
    );
    let running = Running::spawn(operator);
    let api: Api<Overdue> = Api::namespaced(client.clone(), &ns);
    api.create(
        &PostParams::default(),
        &Overdue::new("slow", OverdueSpec {}),
    )
    .await
    .expect("create");
    let slow = wait_phase(&api, "slow", "Provisioning").await;
    // Half the timeout is used from here on; the timeout itself fires 20 s later.
    let near = entered(&slow) + secs(Duration::from_secs(20));
    let timeout = entered(&slow) + secs(Duration::from_secs(40));

    let firing = loop {
        let alert = prometheus
            .alert("OverdueProvisioningNearTimeout", ("phase", "Provisioning"))
            .await;
        let now = Timestamp::now();
        if let Some(alert) = alert.filter(|a| a["state"] == "firing") {
            break (alert, now);
        }
        assert!(
            now < timeout,
            "the near-timeout alert did not fire before the timeout; {}",
            prometheus.log()
        );
        tokio::time::sleep(POLL).await;
    };
    let (alert, fired) = firing;
    let pending: Timestamp = alert["activeAt"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .expect("activeAt, when the alert became pending");
    // Prometheus sees the crossing at its next scrape, and the rule at its next evaluation.
    assert!(
        pending >= near - secs(POLL) && pending <= near + secs(2 * INTERVAL + POLL),
        "pending at {pending}, half the timeout used at {near}"
    );
    // It fires once it has held for `for:`: seen firing by one evaluation later (and a poll).
    let held = fired.duration_since(pending);
    assert!(
        held >= secs(NEAR_FOR) && held <= secs(NEAR_FOR + INTERVAL + 2 * POLL),
        "seen firing {held} after it became pending (for: {NEAR_FOR:?})"
    );
    assert_eq!(
        alert["annotations"]["summary"],
        "An Overdue has used 50% of its Provisioning timeout (40s)"
    );

    // A hand edit off the machine's edges (Provisioning -> Done is none): drift, alerted at the
    // next evaluation after the scrape that counts it.
    api.create(
        &PostParams::default(),
        &Overdue::new("edited", OverdueSpec {}),
    )
    .await
    .expect("create");
    wait_phase(&api, "edited", "Provisioning").await;
    // (A server that runs the CRD's CEL rules refuses the edit: no drift to alert on.)
    if cluster::hand_edit_unless_refused(&api, "edited", json!({ "phase": "Done" })).await {
        let drift = eventually(Duration::from_secs(15), || async {
            prometheus
                .alert("OverdueDrift", ("action", "adopted"))
                .await
                .filter(|alert| alert["state"] == "firing")
        })
        .await;
        assert!(
            drift.is_some(),
            "the drift alert did not fire: {:?}",
            prometheus.alerts().await
        );
    }

    // Every query of the dashboard, over every namespace, returns data.
    let dashboard = Dashboard::new("Overdue").machine::<Overdue>().matchers(job);
    for (_, panels) in dashboard.panels() {
        for panel in panels {
            for (expr, _) in &panel.queries {
                let expr = expr.replace("$namespace", ".*");
                let result = prometheus.query(&expr).await;
                assert!(
                    !result.is_empty(),
                    "{}: {expr} returned nothing",
                    panel.title
                );
            }
        }
    }
    running.stop().await;
    serving.abort();
}
