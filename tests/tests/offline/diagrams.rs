//! The reference machine's diagrams against reviewed snapshots (`tests/snapshots/`).
//! Set `UPDATE_SNAPSHOTS=1` to rewrite them after an intended change, then review the diff.

use std::path::Path;

use kube_fsm_testkit::resources::DatabasePhase;

fn check(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("snapshots")
        .join(name);
    if std::env::var("UPDATE_SNAPSHOTS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_SNAPSHOTS=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual, expected,
        "{name} changed; review and rerun with UPDATE_SNAPSHOTS=1"
    );
}

#[test]
fn mermaid_of_the_reference_machine() {
    check("database.mmd", DatabasePhase::MACHINE.mermaid);
}

#[test]
fn dot_of_the_reference_machine() {
    check("database.dot", DatabasePhase::MACHINE.dot);
}
