//! `/metrics` protected as controller-runtime's `FilterProvider` protects it
//! (`Endpoints::authorize`, `run --metrics-auth`), against the real API server's TokenReview
//! and SubjectAccessReview: no token 401, a token it does not accept 401, a ServiceAccount
//! without the metrics-reader role 403, one bound to it 200; the probes stay open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_fsm::admission::ServingCertificate;
use kube_fsm::serve::Endpoints;
use kube_fsm::watch::Health;
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::service_account;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` over TLS (trusting `ca`), with the bearer `token` if any: the status code and
/// the body.
async fn get(addr: SocketAddr, ca: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.expect("a PEM certificate")).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("name");
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("a TLS handshake with the endpoint's certificate");
    let authorization = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let request =
        format!("GET {path} HTTP/1.1\r\nhost: x\r\n{authorization}connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    // The server may close without a TLS close_notify once it has answered.
    let _ = stream.read_to_string(&mut answer).await;
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (code, body)
}

/// The first bytes answered to a request in clear text (none from a TLS server: it closes).
async fn plain_answer(addr: SocketAddr) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn metrics_are_served_only_to_subjects_the_api_server_authorizes() {
    let Some((admin, ns)) = cluster::prepare("metrics_auth", "fsm-metrics-auth").await else {
        return;
    };
    let certificate = ServingCertificate::self_signed(&["localhost"]).expect("certificate");
    let ca = certificate.ca_bundle().expect("a CA").to_owned();
    let (addr, server) = Endpoints::new(Registry::default(), Health::default())
        .authorize(admin.clone())
        .tls(certificate)
        .expect("TLS")
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

    assert!(
        !plain_answer(addr).await.contains("HTTP/1.1 "),
        "a request in clear text is not answered"
    );
    let (code, body) = get(addr, &ca, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("needs a bearer token"), "{body}");
    let (code, body) = get(addr, &ca, "/metrics", Some("not-a-token")).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(addr, &ca, "/metrics", Some(&stranger)).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!(
            "system:serviceaccount:{ns}:stranger may not get /metrics"
        )),
        "{body}"
    );
    // The binding reaches the authorizer a moment after it is written.
    let allowed = eventually(Duration::from_secs(30), || async {
        let (code, body) = get(addr, &ca, "/metrics", Some(&scraper)).await;
        (code == 200).then_some(body)
    })
    .await
    .expect("the bound scraper reads /metrics");
    assert!(allowed.contains("# EOF"), "{allowed}");
    let (code, _) = get(addr, &ca, "/machine", Some(&stranger)).await;
    assert_eq!(code, 403, "/machine is protected too");
    let (code, body) = get(addr, &ca, "/healthz", None).await;
    assert_eq!((code, body.as_str()), (200, "ok\n"), "the probes stay open");

    server.abort();
    let _ = bindings.delete(&role, &DeleteParams::default()).await;
    let _ = roles.delete(&role, &DeleteParams::default()).await;
}
