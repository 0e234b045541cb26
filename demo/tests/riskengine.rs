//! The RiskEngine example against the real API server, as `scripts/demo` runs it: the schema
//! bound on `spec.timeoutSeconds` refused by the API server, tenants in three namespaces
//! reaching Active, a version off the watched allow-list held with a message until the list
//! admits it, lost credentials recreated, and every child cleaned up on deletion. The demo checks each step itself and
//! exits non-zero when one does not hold.

use kube_fsm_testkit::cluster;

const BIN: &str = env!("CARGO_BIN_EXE_kube-fsm-demo");

#[tokio::test]
async fn the_riskengine_demo_holds_every_step_on_the_real_api_server() {
    let Some(client) = cluster::client("the_riskengine_demo").await else {
        return;
    };
    // A fresh name for the tenants and the platform, so runs never share an allow-list.
    let prefix = cluster::namespace(&client, "fsm-risk").await;
    let platform = format!("{prefix}-platform");
    let out = tokio::process::Command::new(BIN)
        .args(["--example", "riskengine", "--namespace", &prefix])
        .args(["--platform-namespace", &platform, "--timeout", "60"])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for expected in [
        "spec.timeoutSeconds: Invalid value: 10",
        "version 0.9 is not on the platform's allow-list (1.4, 1.5, 2.0)",
        "legacy is Active (version 0.9)",
        "the operator recreated it (a new token); pricing is Active again",
        "the cleanup removed every config and credentials child",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}
