//! The `monitoring` example's rules and dashboard: the checked-in ones (`examples/monitoring/`)
//! are what it writes today, the PrometheusRule wraps the rules file's groups, and the
//! dashboard's every query is one of the panels kube-fsm describes. (promtool checks and
//! unit-tests the rules: `scripts/prometheus check`; a real Prometheus evaluates them and the
//! dashboard's queries in the cluster tests.)

use std::collections::BTreeMap;
use std::path::Path;

use kube_fsm_testkit::example_output;
use serde_json::Value;

const SNAPSHOT_ARGS: [&str; 1] = ["--webhook"];

fn generate(args: &[&str]) -> BTreeMap<String, String> {
    example_output("monitoring", args)
}

#[test]
fn the_checked_in_rules_and_dashboard_are_what_the_example_writes() {
    // The whole folder (its files; `tests/` holds the hand-written promtool tests): a file the
    // example no longer writes, or one it writes that is not checked in, is stale too.
    let mut checked_in =
        kube_fsm_testkit::files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("monitoring"));
    checked_in.retain(|file, _| !file.starts_with("tests/"));
    let written = generate(&SNAPSHOT_ARGS);
    let regenerate = format!(
        "regenerate with: cargo run -p kube-fsm-examples --example monitoring -- {} --out examples/monitoring",
        SNAPSHOT_ARGS.join(" ")
    );
    assert!(!written.is_empty(), "the example wrote nothing");
    assert_eq!(
        checked_in.keys().collect::<Vec<_>>(),
        written.keys().collect::<Vec<_>>(),
        "examples/monitoring/ holds other files than the example writes; {regenerate}"
    );
    for (file, text) in &written {
        assert_eq!(
            &checked_in[file], text,
            "examples/monitoring/{file} is stale; {regenerate}"
        );
    }
}

#[test]
fn the_prometheus_rule_holds_the_rules_file_and_matchers_reach_every_query() {
    let files = generate(&["--matchers", "job=\"db\""]);
    let rules: Value = serde_saphyr::from_str(&files["prometheus-rules.yaml"]).expect("YAML");
    let object: Value = serde_saphyr::from_str(&files["prometheus-rule.yaml"]).expect("YAML");
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(object["spec"], rules);
    let dashboard: Value = serde_json::from_str(&files["dashboard.json"]).expect("JSON");
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a query");
            assert!(expr.contains("job=\"db\""), "{expr}");
            queries += 1;
        }
    }
    assert!(queries >= 10, "{queries} queries");
}
