//! `kubectl fsm explain` lists the declared children of the object's phase with what they
//! report, read from the control plane: the Database example's Secret, Service and
//! StatefulSet, whose pods the scheduler places on simulated nodes.

use kube::Api;
use kube::api::PostParams;
use kube_fsm_examples::database::{self, Database};
use kube_fsm_testkit::cluster::{self, wait_phase};
use kube_fsm_testkit::operator::Running;
use kube_fsm_testkit::workload;

#[tokio::test]
async fn explain_lists_the_phases_children_with_their_readiness() {
    let test = "kubectl_fsm::explain_lists_the_phases_children";
    let Some(client) = cluster::control_plane(test).await else {
        return;
    };
    cluster::install_crd(&client, database::crd()).await;
    let ns = cluster::namespace(&client, "cp-explain").await;
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    let running = Running::spawn(database::operator(client.clone(), Some(&ns)));
    api.create(&PostParams::default(), &workload::database("orders", 2))
        .await
        .expect("create");
    wait_phase(&api, "orders", "Running").await;

    let kubeconfig = std::env::var("KUBE_FSM_CONTROL_PLANE_KUBECONFIG").expect("its kubeconfig");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-fsm"))
        .args([
            "--kubeconfig",
            &kubeconfig,
            "-n",
            &ns,
            "explain",
            "db/orders",
        ])
        .output()
        .await
        .expect("run kubectl-fsm");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    for line in [
        "Children:\n",
        "  credentials  Secret orders-credentials — The Secret orders-credentials is ready",
        "  service      Service orders — The Service orders is ready",
        "  db           StatefulSet orders — The StatefulSet orders is ready",
    ] {
        assert!(said.contains(line), "{line:?} in:\n{said}");
    }
    running.stop().await;
}
