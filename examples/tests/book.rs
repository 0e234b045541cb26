//! The book stays true to the code: its metrics reference names every series the operator
//! serves (book/src/reference/metrics.md), and its Rust snippets compile (the doctests of
//! `kube_fsm_examples::book`).

use std::collections::BTreeSet;

/// Every metric family `Metrics` registers, with its help text, as `/metrics` says them.
fn served() -> Vec<(String, String)> {
    let mut registry = prometheus_client::registry::Registry::default();
    kube_fsm::metrics::Metrics::default().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("# HELP "))
        .filter_map(|rest| rest.split_once(' '))
        .map(|(name, help)| (name.to_owned(), help.to_owned()))
        .collect()
}

#[test]
fn the_metrics_reference_names_every_series_the_operator_serves() {
    let reference = std::fs::read_to_string("../book/src/reference/metrics.md").unwrap();
    let missing: BTreeSet<_> = served()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !reference.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "book/src/reference/metrics.md lacks {missing:?}"
    );
}

#[test]
#[ignore = "prints the metrics table for book/src/reference/metrics.md"]
fn print_the_metrics_table() {
    for (name, help) in served() {
        println!("| `{name}` | {help} |");
    }
}
