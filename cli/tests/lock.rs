//! `kube-fsm lock` and the gate: the lock written for a spec holds later specs to it —
//! `check` refuses a renamed phase until it is retired, and a spec with errors gets no lock.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kube_fsm(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kube-fsm"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("kube-fsm runs")
}

/// A fresh folder with `specs/job.yaml` holding `spec`.
fn project(spec: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("kube-fsm-lock-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(dir.join("specs")).expect("a temporary folder");
    std::fs::write(dir.join("specs/job.yaml"), spec).expect("the spec");
    dir
}

const RELEASED: &str = "\
phases:
  Queued: { initial: true }
  Running: {}
  Done: { terminal: true }
transitions:
  - { from: Queued, to: Running }
  - { from: Running, to: Done }
";

#[test]
fn a_rename_is_refused_against_the_lock_until_retired_and_the_lock_bumps_on_purpose() {
    let dir = project(RELEASED);
    let out = kube_fsm(&dir, &["lock", "specs/job.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lock = std::fs::read_to_string(dir.join("specs/job.lock.yaml")).expect("the lock");
    assert!(lock.contains("  Queued: { initial: true }\n"), "{lock}");

    std::fs::write(
        dir.join("specs/job.yaml"),
        RELEASED.replace("Queued", "Pending"),
    )
    .unwrap();
    let out = kube_fsm(&dir, &["check", "specs/job.yaml"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(
            "the initial phase `Queued` of the released spec is neither declared nor retired"
        ) && said.contains("--> specs/job.yaml:1:1")
            && said.contains("= note: released at specs/job.lock.yaml:6:3"),
        "{said}"
    );

    let retired = RELEASED.replace("Queued", "Pending") + "retired:\n  Queued: Pending\n";
    std::fs::write(dir.join("specs/job.yaml"), retired).unwrap();
    let out = kube_fsm(&dir, &["check", "specs/job.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Meaning it: the lock follows the spec, and the rename without `retired:` passes.
    std::fs::write(
        dir.join("specs/job.yaml"),
        RELEASED.replace("Queued", "Pending"),
    )
    .unwrap();
    let out = kube_fsm(&dir, &["lock", "specs/job.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kube_fsm(&dir, &["check", "specs/job.yaml"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A spec with an error gets no lock, and the old one stays.
    std::fs::write(dir.join("specs/job.yaml"), "phases:\n  Pending: {}\n").unwrap();
    let before = std::fs::read_to_string(dir.join("specs/job.lock.yaml")).unwrap();
    let out = kube_fsm(&dir, &["lock", "specs/job.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(dir.join("specs/job.lock.yaml")).unwrap(),
        before
    );
    let _ = std::fs::remove_dir_all(&dir);
}
