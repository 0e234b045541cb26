//! `kube-fsm check` against the macro itself: every YAML-located error of the UI fixtures'
//! compiler output (`tests/ui/fail/*.stderr`, what `#[state_machine]` made rustc print) is
//! printed by the command, word for word, for the same spec file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests")
}

/// Runs `kube-fsm check` in the tests crate (where the fixtures' spec paths start).
fn check(specs: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kube-fsm"))
        .arg("check")
        .args(specs)
        .current_dir(tests_dir())
        .output()
        .expect("kube-fsm runs")
}

/// The compiler's messages in a snapshot whose location is a spec file (or its lock): by spec
/// path, each message as the macro wrote it (rustc indents its continuation lines by seven columns).
fn yaml_errors(stderr: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(first) = lines[i].strip_prefix("error: ") else {
            i += 1;
            continue;
        };
        let mut message = vec![first.to_owned()];
        i += 1;
        while i < lines.len() && lines[i].starts_with("       ") {
            message.push(lines[i][7..].to_owned());
            i += 1;
        }
        let located = message
            .get(1)
            .and_then(|l| l.trim_start().strip_prefix("--> "));
        if let Some(file) = located.and_then(|l| l.split(':').next())
            && file.ends_with(".yaml")
        {
            // A mistake in a spec's lock is reported for the spec.
            let spec = file.replace(".lock.yaml", ".yaml");
            found.push((spec, message.join("\n")));
        }
    }
    found
}

#[test]
fn check_prints_what_the_macro_makes_the_compiler_print() {
    let mut by_spec: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let fixtures = std::fs::read_dir(tests_dir().join("ui/fail")).expect("the UI fixtures");
    for entry in fixtures {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "stderr") {
            let stderr = std::fs::read_to_string(&path).expect("a snapshot");
            for (spec, message) in yaml_errors(&stderr) {
                by_spec.entry(spec).or_default().push(message);
            }
        }
    }
    let messages: usize = by_spec.values().map(Vec::len).sum();
    assert!(
        by_spec.len() >= 10 && messages >= 20,
        "too few located errors in the snapshots ({} specs, {messages} messages): did their format change?",
        by_spec.len()
    );
    for (spec, expected) in &by_spec {
        let out = check(&[spec]);
        let printed = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{spec}: {printed}");
        for message in expected {
            assert!(
                printed.contains(message.as_str()),
                "{spec}: the command does not print\n{message}\n--- it printed:\n{printed}"
            );
        }
    }
}

#[test]
fn the_reference_specs_pass_and_a_missing_file_fails() {
    let out = check(&[
        "../specs/database.yaml",
        "../specs/riskengine.yaml",
        "../specs/pipeline.yaml",
    ]);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(printed.matches(": ok (").count(), 3, "{printed}");

    let latin1 = std::env::temp_dir().join(format!("kube-fsm-check-{}.yaml", std::process::id()));
    std::fs::write(&latin1, b"phases:\n  Caf\xe9: {}\n").expect("a temporary file");
    let out = check(&[latin1.to_str().expect("a UTF-8 path")]);
    let _ = std::fs::remove_file(&latin1);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not UTF-8 text"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = check(&["../specs/database.yaml", "no/such/spec.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(
        printed.contains("cannot read the spec file `no/such/spec.yaml`"),
        "{printed}"
    );
}
