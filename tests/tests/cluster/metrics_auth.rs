//! `/metrics` protected as controller-runtime's `FilterProvider` protects it
//! (`Endpoints::authorize`, `run --metrics-auth`), against the real API server's TokenReview
//! and SubjectAccessReview: no token 401, a token it does not accept 401, a ServiceAccount
//! without the metrics-reader role 403, one bound to it 200; the probes stay open.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fsm::controller::Health;
use kube_fsm::serve::Endpoints;
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::service_account;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` with the bearer `token`, if any: the status code and the body.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let authorization = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: x\r\n{authorization}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

#[tokio::test]
async fn metrics_are_served_only_to_subjects_the_api_server_authorizes() {
    let Some((admin, ns)) = cluster::prepare("metrics_auth", "fsm-metrics-auth").await else {
        return;
    };
    let (addr, server) = Endpoints::new(Registry::default(), Health::default())
        .authorize(admin.clone())
        .serve("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("serve");
    let stranger = service_account::token(&admin, &ns, "stranger").await;
    let scraper = service_account::token(&admin, &ns, "scraper").await;
    let role = format!("{ns}-metrics-reader");
    let reader = ClusterRole {
        metadata: kube::api::ObjectMeta {
            name: Some(role.clone()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
        ..Default::default()
    };
    let binding = ClusterRoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some(role.clone()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "scraper".into(),
            namespace: Some(ns.clone()),
            ..Default::default()
        }]),
    };
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    roles
        .create(&PostParams::default(), &reader)
        .await
        .expect("role");
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");

    let (code, body) = get(addr, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("needs a bearer token"), "{body}");
    let (code, body) = get(addr, "/metrics", Some("not-a-token")).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(addr, "/metrics", Some(&stranger)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!(
            "system:serviceaccount:{ns}:stranger may not get /metrics"
        )),
        "{body}"
    );
    // The binding reaches the authorizer a moment after it is written.
    let allowed = eventually(Duration::from_secs(30), || async {
        let (code, body) = get(addr, "/metrics", Some(&scraper)).await;
        (code == 200).then_some(body)
    })
    .await
    .expect("the bound scraper reads /metrics");
    assert!(allowed.contains("# EOF"), "{allowed}");
    let (code, _) = get(addr, "/machine", Some(&stranger)).await;
    assert_eq!(code, 403, "/machine is protected too");
    let (code, body) = get(addr, "/healthz", None).await;
    assert_eq!((code, body.as_str()), (200, "ok\n"), "the probes stay open");

    server.abort();
    let _ = bindings.delete(&role, &DeleteParams::default()).await;
    let _ = roles.delete(&role, &DeleteParams::default()).await;
}
