//! What `kubectl get` shows for a machine's resource: the API server's own Table rendering
//! (the request kubectl makes) of the CRD from `kube_fsm::crd`, on the real API server.

use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_fsm_testkit::cluster;
use kube_fsm_testkit::resources::{Database, sample};
use serde_json::{Value, json};

#[tokio::test]
async fn kubectl_get_shows_phase_and_ready_columns() {
    let Some((client, ns)) =
        cluster::prepare("kubectl_get_shows_phase_and_ready_columns", "fsm-columns").await
    else {
        return;
    };
    let api: Api<Database> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &sample("db"))
        .await
        .expect("create");
    // Along the machine's edges (a server that runs the CRD's CEL rules refuses any other way).
    for phase in ["Pending", "Provisioning", "Running"] {
        let status = json!({ "status": {
            "phase": phase,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }});
        api.patch_status("db", &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("status");
    }

    let request = http::Request::get(format!(
        "/apis/example.kube-fsm.dev/v1/namespaces/{ns}/databases"
    ))
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .expect("request");
    let table: Value =
        serde_json::from_str(&client.request_text(request).await.expect("table")).expect("json");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("a Table")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Phase", "Ready", "Age"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (&cells[0], &cells[1], &cells[2]),
        (&json!("db"), &json!("Running"), &json!("True"))
    );
}
