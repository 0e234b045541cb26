//! The Database demo as `scripts/demo` runs it, on a control plane of its own (the demo takes
//! a node away: on the shared one it would evict the other tests' pods): each object seen from
//! its creation on, its StatefulSet's replicas becoming ready, Degraded while a node is gone
//! and Running again once one joins, a migration Succeeded and one Failed with their Jobs'
//! reasons, and everything collected at the end.

use kube_fsm_testkit::cluster;

const BIN: &str = env!("CARGO_BIN_EXE_kube-fsm-demo");

#[tokio::test]
async fn the_database_demo_shows_each_transition_as_it_happens() {
    let test = "the_database_demo";
    let Some(cluster) = cluster::own_control_plane(test, 3).await else {
        return;
    };
    let out = tokio::process::Command::new(BIN)
        .args(["--example", "database", "--objects", "3", "--replicas", "3"])
        .args(["--timeout", "60"])
        .env("KUBECONFIG", cluster.kubeconfig())
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
            format!("{db}: The StatefulSet {db} is ready: Partition rollout complete. updated: 3."),
            format!("{db}: Provisioning → Running"),
            format!("{db}: Running → Degraded"),
            format!("{db}: Degraded → Running"),
            format!("{db}: deleted"),
        ] {
            assert!(stdout.contains(&line), "missing {line:?} in:\n{stdout}");
        }
    }
    for line in [
        "away (drained, then deleted): 3 Database(s) lose the replica they run there",
        "migration add-index: Succeeded (CompletionsReached: ",
        "migration drop-column: Failed (BackoffLimitExceeded: ",
        "all Databases and their workloads are gone",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        !stderr.contains("WARN"),
        "the demo's operator warned:\n{stderr}"
    );
}

/// A kubeconfig that names no current context (e.g. what deleting kwokctl's cluster leaves
/// behind) gets a sentence naming the file and what to do, not kube's bare error.
#[tokio::test]
async fn a_kubeconfig_without_a_current_context_is_named_with_what_to_do() {
    let dir = std::env::temp_dir().join(format!("kube-fsm-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: \"\"\n",
    )
    .expect("a kubeconfig");
    let out = tokio::process::Command::new(BIN)
        .args(["--example", "database"])
        .env("KUBECONFIG", &path)
        .output()
        .await
        .expect("the demo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "error: the kubeconfig {} names no current context, so the demo cannot tell which \
             cluster to use: set one (kubectl config use-context NAME), or unset KUBECONFIG so \
             that scripts/demo starts a local control plane",
            path.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
