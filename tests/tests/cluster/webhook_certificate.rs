//! The webhook's certificate on the real API server: changed files that do not load leave the
//! old certificate served and the webhook ready (every replica reads the same Secret: failing
//! readiness on it would empty the Service), and are told by a Warning Event, then a Normal one
//! once a good pair loads again.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::Api;
use kube::Resource;
use kube::api::PostParams;
use kube::runtime::events::{Recorder, Reporter};
use kube_fsm::admission::{Policy, ServingCertificate, Validator, Webhook};
use kube_fsm_testkit::cluster::{self, eventually};
use kube_fsm_testkit::resources::Database;

/// Writes a fresh self-signed pair for 127.0.0.1 into `dir`'s `tls.crt` and `tls.key`.
fn write_pair(dir: &Path) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .self_signed(&key)
        .expect("certificate");
    std::fs::write(dir.join("tls.crt"), cert.pem()).expect("write tls.crt");
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).expect("write tls.key");
}

#[tokio::test]
async fn a_certificate_that_does_not_load_is_told_by_an_event_and_the_webhook_stays_ready() {
    let Some((client, ns)) = cluster::prepare("a_certificate_that_does_not_load", "fsm-cert").await
    else {
        return;
    };
    // What the Events are about (the operator's Pod, in a deployment).
    let regarding = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some("operator".to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create the ConfigMap");
    let regarding: ObjectReference = regarding.object_ref(&());
    let dir = std::env::temp_dir().join(format!("kube-fsm-cert-{}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).expect("temp dir");
    write_pair(&dir);
    let certificate =
        ServingCertificate::from_files(dir.join("tls.crt"), dir.join("tls.key")).expect("pair");
    let recorder = Recorder::new(client.clone(), Reporter::from("kube-fsm-test".to_owned()));
    let validator = Validator::new::<Database>(Policy::default()).expect("validator");
    let webhook = Webhook::bind("127.0.0.1:0".parse().expect("addr"), validator, certificate)
        .await
        .expect("bind")
        .events(recorder, regarding);
    let health = webhook.health();
    let served = tokio::spawn(webhook.run());

    std::fs::write(dir.join("tls.crt"), "not a certificate").expect("break tls.crt");
    let warned = eventually(Duration::from_secs(30), || async {
        cluster::events(&client, &ns, "CertificateNotLoaded")
            .await
            .into_iter()
            .next()
    })
    .await
    .expect("a CertificateNotLoaded Event within 30 s");
    let note = warned.note.unwrap_or_default();
    assert!(
        note.contains("previous one is still served") && note.contains("tls.crt"),
        "{note}"
    );
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    assert_eq!(health.ready(), Ok(()), "the old certificate still works");
    assert!(health.certificate_problem().is_some());

    write_pair(&dir);
    let loaded = eventually(Duration::from_secs(30), || async {
        (!cluster::events(&client, &ns, "CertificateLoaded")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    served.abort();
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    assert!(loaded.is_some(), "a CertificateLoaded Event once it loads");
    assert_eq!(health.certificate_problem(), None);
}
