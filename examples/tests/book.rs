//! The book stays true to the code: its metrics reference names every series the operator
//! serves (book/src/reference/metrics.md), its command-line reference is an operator's help
//! (book/src/reference/cli.md; `kube-fsm`'s own sections are checked by the cli crate), and
//! its Rust snippets compile (the doctests of `kube_fsm_examples::book`).

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

/// Each `### \`my-operator SUB\`` section of the command-line reference shows what an `App`'s
/// `SUB --help` prints (the `operator` example's, named `my-operator` there).
#[test]
fn the_cli_reference_shows_each_commands_help_as_it_is() {
    let reference = std::fs::read_to_string("../book/src/reference/cli.md").unwrap();
    let mut checked = Vec::new();
    for section in reference.split("\n### `my-operator ").skip(1) {
        let (command, rest) = section
            .split_once('`')
            .expect("the heading's closing quote");
        let shown = rest
            .split_once("```text\n")
            .and_then(|(_, block)| block.split_once("```"))
            .map(|(block, _)| block)
            .expect("a text block under the heading");
        let help = std::process::Command::new(kube_fsm_testkit::example("operator"))
            .args([command, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout)
            .unwrap()
            .replace("Usage: kube-fsm-examples ", "Usage: my-operator ");
        assert_eq!(
            shown.trim_end(),
            help.trim_end(),
            "book/src/reference/cli.md: `my-operator {command}` is stale; paste the operator \
             example's `{command} --help`"
        );
        checked.push(command.to_owned());
    }
    let commands = [
        "run",
        "crd",
        "manifests",
        "monitoring",
        "diagram",
        "check",
        "completions",
    ];
    assert_eq!(checked, commands);
}
