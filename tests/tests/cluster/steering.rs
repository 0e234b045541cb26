//! Who may steer the engine by annotation, on the real API server: under a `pauseBy` rule (in a
//! tier) and a `requestReconcileBy` rule (on the platform), a tenant can neither create an
//! object paused nor pause, resume or skip the cleanup of one, nor ask for a reconcile —
//! through a merge patch, a JSON patch or a server-side apply alike —, while the people named
//! and the operator's identity can.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use kube_fsm::admission::{FailurePolicy, OperatorIdentity, People, Policy, PolicyRule, Tier};
use kube_fsm_testkit::admission::{self, PROBE};
use kube_fsm_testkit::cluster::{client, client_as, install_crds};
use kube_fsm_testkit::resources::*;
use serde_json::json;

fn sre() -> People {
    People {
        users: Vec::new(),
        groups: vec!["sre".to_owned()],
    }
}

/// Pausing is for sre in the namespaces of tier `restricted`; reconcile requests are for sre
/// everywhere. The operator is field manager `kube-fsm` (one administrator identity plays every
/// part, told apart by impersonation and field managers).
fn policy() -> Policy {
    Policy {
        operator: OperatorIdentity {
            users: Vec::new(),
            field_managers: vec!["kube-fsm".to_owned()],
            trust_field_managers: true,
        },
        platform: vec![PolicyRule::RequestReconcileBy(sre())],
        tiers: vec![Tier {
            name: "restricted".to_owned(),
            namespace_selector: LabelSelector {
                match_labels: Some([("tier".to_owned(), "restricted".to_owned())].into()),
                ..LabelSelector::default()
            },
            rules: vec![PolicyRule::PauseBy(sre())],
        }],
    }
}

fn refused(result: Result<Database, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) if status.code == 422 => status.message,
        other => panic!("expected the webhook's refusal, got {other:?}"),
    }
}

fn annotated(name: &str, key: &str, value: &str) -> Database {
    let mut db = sample(name);
    db.metadata.annotations = Some([(key.to_owned(), value.to_owned())].into());
    db
}

/// The three ways a client writes an annotation: a merge patch, a JSON patch (which needs the
/// annotations map to exist: the sample has none, so it adds the map) and a server-side apply.
async fn annotate(
    api: &Api<Database>,
    name: &str,
    key: &str,
    value: &str,
    how: &str,
) -> Result<Database, kube::Error> {
    let params = PatchParams {
        field_manager: Some("tenant-tool".to_owned()),
        ..PatchParams::default()
    };
    match how {
        "merge" => {
            let patch = json!({ "metadata": { "annotations": { key: value } } });
            api.patch(name, &params, &Patch::Merge(patch)).await
        }
        "json" => {
            let patch: json_patch::Patch = serde_json::from_value(json!([
                { "op": "add", "path": "/metadata/annotations", "value": { key: value } },
            ]))
            .expect("json patch");
            api.patch(name, &params, &Patch::<()>::Json(patch)).await
        }
        _ => {
            let patch = json!({
                "apiVersion": Database::api_version(&()), "kind": "Database",
                "metadata": { "name": name, "annotations": { key: value } },
            });
            api.patch(name, &params.force(), &Patch::Apply(patch)).await
        }
    }
}

#[tokio::test]
async fn only_the_people_named_pause_skip_cleanup_or_request_reconciles() {
    let Some(admin) = client("steering").await else {
        return;
    };
    install_crds(&admin).await;
    let ns = admission::namespace(&admin, "steering", &[("tier", "restricted")]).await;
    let registration =
        admission::serve(&admin, &ns, sample(PROBE), policy(), FailurePolicy::Fail).await;
    let tenant: Client = client_as("tenant", &["system:masters"]).await;
    let as_tenant: Api<Database> = Api::namespaced(tenant, &ns);
    let on_call: Client = client_as("carol", &["sre", "system:masters"]).await;
    let as_sre: Api<Database> = Api::namespaced(on_call, &ns);
    let api: Api<Database> = Api::namespaced(admin.clone(), &ns);

    // Created paused by a tenant: refused; by sre: admitted.
    let message = refused(
        as_tenant
            .create(
                &PostParams::default(),
                &annotated("t", "kube-fsm.dev/paused", "true"),
            )
            .await,
    );
    assert!(
        message.contains(
            "in namespaces of tier restricted, only group sre may pause or resume an object, or \
             skip its cleanup (annotation kube-fsm.dev/paused); user tenant"
        ),
        "{message}"
    );
    as_sre
        .create(
            &PostParams::default(),
            &annotated("s", "kube-fsm.dev/paused", "true"),
        )
        .await
        .expect("sre creates it paused");
    as_tenant
        .create(&PostParams::default(), &sample("db"))
        .await
        .expect("a tenant creates an object that steers nothing");

    for how in ["merge", "json", "apply"] {
        for (key, value, rule) in [
            ("kube-fsm.dev/paused", "true", "pause or resume"),
            ("kube-fsm.dev/skip-cleanup", "true", "pause or resume"),
            (
                "kube-fsm.dev/reconcile-requested-at",
                "2026-12-03T10:00:00Z",
                "ask for a reconcile now",
            ),
        ] {
            let message = refused(annotate(&as_tenant, "db", key, value, how).await);
            assert!(
                message.contains(rule) && message.contains(&format!("(annotation {key})")),
                "{how} {key}: {message}"
            );
        }
    }
    // A tenant resuming what sre paused is a change of the annotation too.
    let resume = json!({ "metadata": { "annotations": { "kube-fsm.dev/paused": null } } });
    let message = refused(
        as_tenant
            .patch("s", &PatchParams::default(), &Patch::Merge(&resume))
            .await,
    );
    assert!(message.contains("pause or resume"), "{message}");
    // Other annotations and labels are the tenant's own.
    let own = json!({ "metadata": { "annotations": { "team": "db" }, "labels": { "a": "b" } } });
    as_tenant
        .patch("db", &PatchParams::default(), &Patch::Merge(&own))
        .await
        .expect("a tenant's own annotations");

    // The people named, and the operator's identity, may.
    annotate(&as_sre, "db", "kube-fsm.dev/paused", "maintenance", "merge")
        .await
        .expect("sre pauses");
    as_sre
        .patch("s", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("sre resumes");
    let operator = PatchParams {
        field_manager: Some("kube-fsm".to_owned()),
        ..PatchParams::default()
    };
    let request =
        json!({ "metadata": { "annotations": { "kube-fsm.dev/reconcile-requested-at": "1" } } });
    api.patch("db", &operator, &Patch::Merge(&request))
        .await
        .expect("the operator's identity is exempt");
    let stored = api.get("db").await.expect("get");
    let annotations = stored.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("kube-fsm.dev/paused").map(String::as_str),
        Some("maintenance")
    );
    assert!(!annotations.contains_key("kube-fsm.dev/skip-cleanup"));
    registration.remove().await;
}
