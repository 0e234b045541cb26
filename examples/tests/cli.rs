//! The library's command line as a user meets it, through the example operator of three kinds
//! (`examples/examples/operator.rs`): what each offline command prints, and the sentences it
//! answers mistakes with.

use std::process::Command;

use kube_fsm_testkit::example;

/// `operator ARGS`: exit code, stdout, stderr.
fn operator(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(example("operator"))
        .args(args)
        .output()
        .expect("operator runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn crd_prints_every_kind_as_one_yaml_stream() {
    let (code, out, err) = operator(&["crd"]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  name: "))
        .filter(|n| n.contains(".example.kube-fsm.dev"))
        .collect();
    assert_eq!(
        names,
        [
            "databases.example.kube-fsm.dev",
            "riskengines.example.kube-fsm.dev",
            "migrations.example.kube-fsm.dev"
        ]
    );
    assert_eq!(out.matches("---\n").count(), 3, "{out}");
}

#[test]
fn diagram_draws_each_machine_and_an_svg_needs_the_kind() {
    let (code, out, _) = operator(&["diagram", "--kind", "riskengine", "--format", "dot"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("digraph"), "{out}");
    let (code, out, _) = operator(&["diagram"]);
    assert_eq!(code, 0);
    assert_eq!(out.matches("stateDiagram-v2").count(), 3, "{out}");
    let (code, _, err) = operator(&["diagram", "--format", "svg"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "error: an SVG draws one machine: name it with --kind (Database, RiskEngine, Migration)"
    );
    let (code, _, err) = operator(&["diagram", "--kind", "Ticket"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "error: no machine of kind \"Ticket\": this operator runs Database, RiskEngine, Migration"
    );
}

#[test]
fn monitoring_writes_the_rules_and_dashboard_of_every_machine() {
    let dir = std::env::temp_dir().join(format!("kube-fsm-cli-monitoring-{}", std::process::id()));
    let (code, _, err) = operator(&["monitoring", "--out", &dir.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    let rules = std::fs::read_to_string(dir.join("prometheus-rules.yaml")).expect("rules");
    for controller in ["database", "riskengine", "migration"] {
        assert!(
            rules.contains(&format!("kube-fsm-{controller}.alerts")),
            "{rules}"
        );
    }
    assert!(dir.join("prometheus-rule.yaml").exists());
    assert!(dir.join("dashboard.json").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mistakes_are_refused_with_a_sentence_and_exit_code_2() {
    let (code, _, err) = operator(&["run", "--leader-elect", "--shards", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, _, err) = operator(&["run", "--webhook-register", "http://x"]);
    assert_eq!(code, 2);
    assert!(err.contains("takes `bound` or an https:// URL"), "{err}");
    let (code, _, err) = operator(&["manifests"]);
    assert_eq!(code, 2);
    assert!(err.contains("--image <IMAGE>"), "{err}");
}

#[test]
fn completions_and_help_name_the_operator_and_its_kinds() {
    let (code, out, _) = operator(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(out.contains("kube-fsm-examples"), "{out}");
    let (code, out, _) = operator(&["--help"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("The kube-fsm-examples operator: Database, RiskEngine, Migration."),
        "{out}"
    );
    let (_, out, _) = operator(&["run", "--help"]);
    assert!(out.contains("[env: KUBE_FSM_NAMESPACE=]"), "{out}");
}
