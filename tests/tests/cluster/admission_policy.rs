//! The webhook's policy as ValidatingAdmissionPolicies (`validating_admission_policies_for`)
//! on a current API server (GA from 1.30; on older servers the test says it skipped), with no
//! webhook registered and no operator running: every person's write — each phase to each
//! phase, four ways (merge patch, JSON patch, server-side apply, PUT), the annotations that
//! steer the engine, the machine's own status fields — in an open namespace and in a
//! restricted tier gets from the API server the verdict the webhook's `Validator` gives, and
//! the policy's refusals say what the webhook's say; `kubectl patch --subresource=status`
//! meets the same refusals.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use kube::{Api, Client};
use kube_fsm::Phase;
use kube_fsm::admission::{
    OperatorIdentity, People, Policy, PolicyRule, Tier, Validator,
    validating_admission_policies_for,
};
use kube_fsm_testkit::admission;
use kube_fsm_testkit::cluster::{self, client, client_as, eventually, install_crds};
use kube_fsm_testkit::resources::{Database, DatabasePhase, sample};
use serde_json::{Value, json};

/// The policy under test: the envtest's `admin` (with field manager `kube-fsm`) is the
/// operator; on the platform only it enters Failed, group sre takes manual transitions and
/// pauses; in the restricted tier only it moves the phase and only carol asks for reconciles.
fn policy() -> Policy {
    let sre = || People {
        users: Vec::new(),
        groups: vec!["sre".into()],
    };
    Policy {
        operator: OperatorIdentity {
            users: vec!["admin".into()],
            field_managers: vec!["kube-fsm".into()],
            trust_field_managers: false,
        },
        platform: vec![
            PolicyRule::OnlyOperatorEnters(vec!["Failed".into()]),
            PolicyRule::ManualBy(sre()),
            PolicyRule::PauseBy(sre()),
        ],
        tiers: vec![Tier {
            name: "restricted".into(),
            namespace_selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("tier".into(), "restricted".into())])),
                ..Default::default()
            },
            rules: vec![
                PolicyRule::OnlyOperatorMovesPhase,
                PolicyRule::RequestReconcileBy(People {
                    users: vec!["carol".into()],
                    groups: Vec::new(),
                }),
            ],
        }],
    }
}

/// Who writes: a client, its user and groups as the API server sees them, its field manager.
struct Writer {
    client: Client,
    user: &'static str,
    groups: Vec<&'static str>,
    manager: &'static str,
}

async fn writers(admin: &Client) -> Vec<Writer> {
    let admin_groups = vec!["system:masters", "system:authenticated"];
    vec![
        Writer {
            client: admin.clone(),
            user: "admin",
            groups: admin_groups.clone(),
            manager: "kube-fsm",
        },
        Writer {
            client: admin.clone(),
            user: "admin",
            groups: admin_groups,
            manager: "kubectl-edit",
        },
        Writer {
            client: client_as("carol", &["sre", "system:masters"]).await,
            user: "carol",
            groups: vec!["sre", "system:masters", "system:authenticated"],
            manager: "kubectl",
        },
        Writer {
            client: client_as("mallory", &["system:masters"]).await,
            user: "mallory",
            groups: vec!["system:masters", "system:authenticated"],
            manager: "kubectl",
        },
    ]
}

/// What the webhook's `Validator` says of `writer` writing `new` over `old` (status or
/// not), in a namespace of the tier or not: `Ok`, or the refusal's message.
fn webhook_verdict(
    validator: &Validator,
    policy: &Policy,
    restricted: bool,
    writer: &Writer,
    old: &Value,
    new: &Value,
    status: bool,
) -> Result<(), String> {
    match webhook_refusals(validator, policy, restricted, writer, old, new, status).first() {
        Some(message) => Err(message.clone()),
        None => Ok(()),
    }
}

/// The message of each layer of the webhook's policy that refuses `writer` writing `new` over
/// `old` — the platform's, then the tier's in a namespace of the tier — as the API server's
/// policies may answer with either when both refuse.
fn webhook_refusals(
    validator: &Validator,
    policy: &Policy,
    restricted: bool,
    writer: &Writer,
    old: &Value,
    new: &Value,
    status: bool,
) -> Vec<String> {
    let mut request = json!({
        "uid": "1",
        "kind": { "group": "example.kube-fsm.dev", "version": "v1", "kind": "Database" },
        "resource": { "group": "example.kube-fsm.dev", "version": "v1", "resource": "databases" },
        "name": old["metadata"]["name"],
        "namespace": old["metadata"]["namespace"],
        "operation": "UPDATE",
        "userInfo": { "username": writer.user, "groups": writer.groups },
        "object": new,
        "oldObject": old,
        "options": { "kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": writer.manager },
    });
    if status {
        request["subResource"] = json!("status");
    }
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request,
    }))
    .expect("a review");
    let request: AdmissionRequest<DynamicObject> = review.try_into().expect("a request");
    // Each layer judged alone (`decide` with a tier judges that tier's rules only).
    let platform = validator.decide(None, &request);
    let tier = restricted.then(|| validator.decide(policy.tier("restricted"), &request));
    [Some(platform), tier]
        .into_iter()
        .flatten()
        .filter_map(|verdict| verdict.err().map(|violation| violation.message))
        .collect()
}

/// The API server's verdict: `Ok`, or the refusal's message (403 from a policy, 422 from the
/// CRD's rule).
fn server_verdict<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if matches!(status.code, 403 | 422) => Err(status.message),
        Err(other) => panic!("neither admitted nor refused: {other:?}"),
    }
}

/// The four ways to write `status.phase` (a dry run each), by `writer`.
async fn write_phase(
    writer: &Writer,
    ns: &str,
    stored: &Database,
    to: &str,
) -> Vec<(&'static str, Result<(), String>)> {
    let api: Api<Database> = Api::namespaced(writer.client.clone(), ns);
    let name = stored.metadata.name.clone().expect("name");
    let params = PatchParams {
        dry_run: true,
        field_manager: Some(writer.manager.into()),
        ..PatchParams::default()
    };
    let merge = Patch::Merge(json!({ "status": { "phase": to } }));
    let json_patch: json_patch::Patch = serde_json::from_value(json!([
        { "op": "replace", "path": "/status/phase", "value": to }
    ]))
    .expect("a JSON patch");
    let apply = Patch::Apply(json!({
        "apiVersion": "example.kube-fsm.dev/v1", "kind": "Database",
        "metadata": { "name": name }, "status": { "phase": to },
    }));
    let mut apply_params = PatchParams::apply(writer.manager).force();
    apply_params.dry_run = true;
    let mut replaced = serde_json::to_value(stored).expect("json");
    replaced["status"]["phase"] = json!(to);
    let replaced: Database = serde_json::from_value(replaced).expect("a Database");
    let post = PostParams {
        dry_run: true,
        field_manager: Some(writer.manager.into()),
    };
    vec![
        (
            "merge patch",
            server_verdict(api.patch_status(&name, &params, &merge).await),
        ),
        (
            "JSON patch",
            server_verdict(
                api.patch_status(&name, &params, &Patch::<()>::Json(json_patch))
                    .await,
            ),
        ),
        (
            "server-side apply",
            server_verdict(api.patch_status(&name, &apply_params, &apply).await),
        ),
        (
            "PUT",
            server_verdict(api.replace_status(&name, &post, &replaced).await),
        ),
    ]
}

/// Walks a new Database `name` to `phase` along the spec's edges, as the operator.
async fn walked(admin: &Client, ns: &str, name: &str, phase: DatabasePhase) -> Database {
    let api: Api<Database> = Api::namespaced(admin.clone(), ns);
    api.create(&PostParams::default(), &sample(name))
        .await
        .expect("create");
    let mut stored = None;
    for step in crate::admission::path_to(phase) {
        let patch = Patch::Merge(json!({ "status": { "phase": step.name() } }));
        let params = PatchParams {
            field_manager: Some("kube-fsm".into()),
            ..PatchParams::default()
        };
        stored = Some(
            api.patch_status(name, &params, &patch)
                .await
                .expect("the operator's move"),
        );
    }
    stored.expect("a path")
}

/// The ValidatingAdmissionPolicy API.
fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[tokio::test]
async fn the_policy_gives_the_webhooks_verdicts_inside_the_api_server() {
    let Some(admin) = client("admission_policy::verdicts").await else {
        return;
    };
    if cluster::minor(&admin).await < 30 {
        cluster::skip(
            "admission_policy::verdicts",
            "on this server: ValidatingAdmissionPolicy is GA from Kubernetes 1.30 (scripts/test runs it on the current server)",
        );
        return;
    }
    install_crds(&admin).await;
    let run = cluster::fresh_name("vap");
    let scope_label = "kube-fsm.dev/test-admission-policy";
    let open = admission::namespace(&admin, "vap-open", &[(scope_label, run.as_str())]).await;
    let restricted = admission::namespace(
        &admin,
        "vap-restricted",
        &[(scope_label, run.as_str()), ("tier", "restricted")],
    )
    .await;
    let policy = policy();
    let validator = Validator::new::<Database>(policy.clone()).expect("the policy fits");
    let scope = LabelSelector {
        match_labels: Some(BTreeMap::from([(scope_label.to_owned(), run.clone())])),
        ..Default::default()
    };
    let crd = kube_fsm::crd::<Database>();
    let objects = validating_admission_policies_for(&crd, &validator, Some(&scope));
    let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ],
        "the platform's layer and the tier's"
    );
    // Named after the run: other tests' servers see none of it.
    let mut created = Vec::new();
    for mut object in objects {
        let name = format!(
            "{run}.{}",
            object["metadata"]["name"].as_str().expect("name")
        );
        object["metadata"]["name"] = json!(name);
        let api: Api<DynamicObject> = match object["kind"].as_str() {
            Some("ValidatingAdmissionPolicy") => Api::all_with(
                admin.clone(),
                &resource("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
            ),
            _ => {
                let policy = format!(
                    "{run}.{}",
                    object["spec"]["policyName"].as_str().expect("policy")
                );
                object["spec"]["policyName"] = json!(policy);
                Api::all_with(
                    admin.clone(),
                    &resource(
                        "ValidatingAdmissionPolicyBinding",
                        "validatingadmissionpolicybindings",
                    ),
                )
            }
        };
        let object: DynamicObject = serde_json::from_value(object).expect("an object");
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|err| panic!("the API server takes {name}: {err}"));
        created.push((api, name));
    }

    // One Database in each phase, in each namespace, walked there by the operator.
    let phases: Vec<DatabasePhase> = DatabasePhase::ALL.to_vec();
    let mut stored = Vec::new();
    for ns in [&open, &restricted] {
        for &phase in &phases {
            let name = format!("at-{}", phase.name().to_lowercase());
            stored.push((ns.clone(), walked(&admin, ns, &name, phase).await));
        }
    }
    let writers = writers(&admin).await;
    // The policies take effect a moment after they are created: until a person's write of
    // the machine's clock is refused.
    let probe = &stored[0].1;
    let clock = Patch::Merge(json!({ "status": { "pausedSeconds": 1000 } }));
    let as_mallory: Api<Database> = Api::namespaced(writers[3].client.clone(), &open);
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let effective = eventually(Duration::from_secs(30), || async {
        as_mallory
            .patch_status(probe.metadata.name.as_deref()?, &dry, &clock)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    assert!(effective.is_some(), "the policies take effect");

    // Every phase to every phase, four ways, by every writer.
    let (mut admitted, mut refused) = (0, 0);
    for (ns, object) in &stored {
        let tier = ns == &restricted;
        let old = serde_json::to_value(object).expect("json");
        for &to in &phases {
            let mut new = old.clone();
            new["status"]["phase"] = json!(to.name());
            for writer in &writers {
                let expected = webhook_verdict(&validator, &policy, tier, writer, &old, &new, true);
                let refusals =
                    webhook_refusals(&validator, &policy, tier, writer, &old, &new, true);
                for (way, verdict) in write_phase(writer, ns, object, to.name()).await {
                    let case = format!(
                        "{} -> {to} in {ns} by {} ({}), {way}",
                        cluster::phase_of(object).unwrap_or_default(),
                        writer.user,
                        writer.manager
                    );
                    assert_eq!(
                        verdict.is_ok(),
                        expected.is_ok(),
                        "{case}: server {verdict:?}, webhook {expected:?}"
                    );
                    if let Err(message) = &verdict {
                        // The layer the server names refused in the webhook too: the
                        // platform's, or (in the tier) the tier's.
                        assert!(
                            refusals.iter().any(|said| message.contains(said.as_str())),
                            "{case}: {message} / {refusals:?}"
                        );
                        refused += 1;
                    } else {
                        admitted += 1;
                    }
                }
            }
        }
    }
    // kubectl's status writes meet the same server: an illegal move refused with the CRD's
    // sentence, a manual one with the policy's (mallory is no sre).
    let (pending, failed) = (&stored[0].1, &stored[4].1);
    for (object, to, said) in [
        (
            pending,
            "Running",
            "cannot move from Pending to Running: the Database state machine has no such transition",
        ),
        (
            failed,
            "Pending",
            "only group sre may take the manual transition Failed -> Pending",
        ),
    ] {
        let name = object.metadata.name.clone().expect("name");
        let patch = format!(r#"{{"status":{{"phase":"{to}"}}}}"#);
        let args = [
            "patch",
            "databases.example.kube-fsm.dev",
            &name,
            "-n",
            &open,
            "--subresource=status",
            "--type=merge",
            "-p",
            &patch,
            "--as=mallory",
            "--as-group=system:masters",
        ];
        let Some((ok, output)) = cluster::kubectl("admission_policy::kubectl", &args).await else {
            break;
        };
        assert!(!ok && output.contains(said), "kubectl {args:?}: {output}");
    }

    // The annotations that steer the engine, and the machine's own status fields.
    let (mut steering, mut owned) = (0, 0);
    for (ns, object) in stored
        .iter()
        .filter(|(_, o)| cluster::phase_of(o).as_deref() == Some("Running"))
    {
        let tier = ns == &restricted;
        let old = serde_json::to_value(object).expect("json");
        let name = object.metadata.name.clone().expect("name");
        for writer in &writers {
            let api: Api<Database> = Api::namespaced(writer.client.clone(), ns);
            let params = PatchParams {
                dry_run: true,
                field_manager: Some(writer.manager.into()),
                ..PatchParams::default()
            };
            for key in [
                "kube-fsm.dev/paused",
                "kube-fsm.dev/skip-cleanup",
                "kube-fsm.dev/reconcile-requested-at",
            ] {
                let mut new = old.clone();
                new["metadata"]["annotations"] = json!({ key: "true" });
                let expected =
                    webhook_verdict(&validator, &policy, tier, writer, &old, &new, false);
                let patch = Patch::Merge(json!({ "metadata": { "annotations": { key: "true" } } }));
                let verdict = server_verdict(api.patch(&name, &params, &patch).await);
                assert_eq!(
                    verdict.is_ok(),
                    expected.is_ok(),
                    "{key} in {ns} by {} ({}): server {verdict:?}, webhook {expected:?}",
                    writer.user,
                    writer.manager
                );
                steering += 1;
            }
            let ready = json!([{ "type": "Ready", "status": "False", "reason": "ByHand",
                "message": "", "lastTransitionTime": "2026-12-04T00:00:00Z" }]);
            for status in [
                json!({ "pausedSeconds": 1000 }),
                json!({ "conditions": ready }),
            ] {
                let mut new = old.clone();
                for (field, value) in status.as_object().expect("fields") {
                    new["status"][field] = value.clone();
                }
                let expected = webhook_verdict(&validator, &policy, tier, writer, &old, &new, true);
                let verdict = server_verdict(
                    api.patch_status(&name, &params, &Patch::Merge(json!({ "status": status })))
                        .await,
                );
                assert_eq!(
                    verdict.is_ok(),
                    expected.is_ok(),
                    "{status} in {ns} by {} ({}): server {verdict:?}, webhook {expected:?}",
                    writer.user,
                    writer.manager
                );
                if let (Err(message), Err(expected)) = (&verdict, &expected) {
                    assert!(
                        message.contains(expected.as_str()),
                        "{message} / {expected}"
                    );
                }
                owned += 1;
            }
        }
    }
    println!(
        "phase writes: {admitted} admitted, {refused} refused, each as the webhook decides; \
         annotation writes {steering}, owned-field writes {owned}, likewise"
    );
    assert!(admitted > 0 && refused > 0);
    for (api, name) in created.into_iter().rev() {
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
}
