//! The Database demo against the real API server, as `scripts/demo` runs it: each object is
//! seen from its creation on, with every transition printed as the API server stores it
//! (before, its watch could list the objects after they had converged: `found in Running` for
//! each, `0 status writes observed`).

use kube_fsm_testkit::cluster;

const BIN: &str = env!("CARGO_BIN_EXE_kube-fsm-demo");

#[tokio::test]
async fn the_database_demo_shows_each_transition_as_it_happens() {
    let Some(client) = cluster::client("the_database_demo").await else {
        return;
    };
    let ns = cluster::namespace(&client, "fsm-demo-db").await;
    let out = tokio::process::Command::new(BIN)
        .args(["--example", "database", "--objects", "3"])
        .args(["--namespace", &ns, "--timeout", "60"])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(
        !stdout.contains("found in"),
        "listed after converging:\n{stdout}"
    );
    for db in ["db-0", "db-1", "db-2"] {
        for line in [
            format!("{db}: created (Pending)"),
            format!("{db}: Pending → Provisioning"),
            format!("{db}: Provisioning → Running"),
            format!("{db}: deleted"),
        ] {
            assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
        }
    }
    assert!(
        stdout.contains("(6 status writes observed, 2.00 per object)"),
        "{stdout}"
    );
}
