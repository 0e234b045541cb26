//! The kustomize base of the two-kind example operator (`operator manifests`): the checked-in
//! one (`examples/deploy/`) is what it writes today; its cert-manager and webhook objects fit
//! together; and the API server accepts every object of a kind it serves, in a server-side
//! dry run.

use std::collections::BTreeMap;
use std::path::Path;

use kube::Api;
use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube_fsm_testkit::{cluster, example_output, files};
use serde_json::Value;

const SNAPSHOT_ARGS: [&str; 7] = [
    "--image",
    "ghcr.io/kube-fsm/examples:0.1.0",
    "--namespace",
    "kube-fsm-system",
    "--replicas",
    "2",
    "--webhook",
];

/// The files `operator manifests ARGS --out DIR` writes, by name.
fn generate(args: &[&str]) -> BTreeMap<String, String> {
    let args: Vec<&str> = std::iter::once("manifests")
        .chain(args.iter().copied())
        .collect();
    example_output("operator", &args)
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}

#[test]
fn the_checked_in_base_is_what_the_example_writes() {
    let snapshot = files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"));
    let generated = generate(&SNAPSHOT_ARGS);
    assert_eq!(
        snapshot.keys().collect::<Vec<_>>(),
        generated.keys().collect::<Vec<_>>(),
        "regenerate with: rm -r examples/deploy && cargo run -p kube-fsm-examples --example operator -- manifests {} --out examples/deploy",
        SNAPSHOT_ARGS.join(" ")
    );
    for (file, text) in &generated {
        assert_eq!(&snapshot[file], text, "examples/deploy/{file} is stale");
    }
}

#[test]
fn the_webhook_objects_fit_together() {
    let files = generate(&SNAPSHOT_ARGS);
    let (deployment, certificate) = (
        yaml(&files["deployment.yaml"]),
        yaml(&files["webhook-certificate.yaml"]),
    );
    let (service, registration) = (
        yaml(&files["webhook-service.yaml"]),
        yaml(&files["validating-webhook-configuration.yaml"]),
    );
    let issuer = yaml(&files["webhook-issuer.yaml"]);
    let ns = "kube-fsm-system";
    let name = service["metadata"]["name"]
        .as_str()
        .expect("the Service's name");
    // cert-manager: a self-signed Issuer, a Certificate for the Service's DNS names into the
    // Secret the Pod mounts, and its CA injected into the registration.
    assert_eq!(issuer["kind"], "Issuer");
    assert!(issuer["spec"]["selfSigned"].is_object());
    assert_eq!(
        certificate["spec"]["issuerRef"]["name"],
        issuer["metadata"]["name"]
    );
    let dns: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        dns.contains(&format!("{name}.{ns}.svc").as_str()),
        "{dns:?}"
    );
    let volume = &deployment["spec"]["template"]["spec"]["volumes"][0];
    assert_eq!(
        volume["secret"]["secretName"],
        certificate["spec"]["secretName"]
    );
    assert_eq!(
        registration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{ns}/{}", certificate["metadata"]["name"].as_str().unwrap())
    );
    // The registration calls the Service, which reaches the Pod's webhook port.
    for webhook in registration["webhooks"].as_array().expect("webhooks") {
        assert_eq!(webhook["clientConfig"]["service"]["name"], name);
        assert_eq!(webhook["clientConfig"]["service"]["namespace"], ns);
        assert_eq!(webhook["failurePolicy"], "Fail");
    }
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert!(
        ports
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook")
    );
    // One webhook per kind in the one registration.
    let kinds: Vec<&str> = registration["webhooks"]
        .as_array()
        .expect("webhooks")
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "phase.databases.example.kube-fsm.dev",
            "phase.riskengines.example.kube-fsm.dev",
            "phase.migrations.example.kube-fsm.dev"
        ]
    );
    // Two replicas: leader election, and a disruption budget that keeps one.
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--leader-elect"), "{args}");
    assert!(files.contains_key("pod-disruption-budget.yaml"));
    // The Namespace is in the base, so that it applies to a fresh cluster.
    assert_eq!(yaml(&files["namespace.yaml"])["metadata"]["name"], ns);
}

#[test]
fn prometheus_holds_a_service_monitor_of_the_metrics_service() {
    let files = generate(&SNAPSHOT_ARGS);
    // The base names no prometheus-operator kind, so `kubectl apply -k` works without it.
    let base = yaml(&files["kustomization.yaml"]).to_string();
    assert!(!base.contains("monitor"), "{base}");
    let overlay = yaml(&files["prometheus/kustomization.yaml"]);
    assert_eq!(
        overlay["resources"],
        serde_json::json!(["service-monitor.yaml"])
    );
    let (monitor, service) = (
        yaml(&files["prometheus/service-monitor.yaml"]),
        yaml(&files["metrics-service.yaml"]),
    );
    assert_eq!(monitor["kind"], "ServiceMonitor");
    assert_eq!(monitor["metadata"]["namespace"], "kube-fsm-system");
    for (label, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
    let port = &monitor["spec"]["endpoints"][0];
    assert_eq!(port["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(
        (&port["path"], &port["scheme"]),
        (&"/metrics".into(), &"http".into())
    );
}

#[tokio::test]
async fn the_api_server_accepts_every_object_it_knows_in_a_dry_run() {
    let Some(client) = cluster::client("deploy_dry_run").await else {
        return;
    };
    let ns = cluster::namespace(&client, "fsm-deploy").await;
    // With the Database's policy enforced by the API server too (its CEL compiled there).
    let policy = format!(
        "Database={}/policies/database.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let files = generate(&[
        "--image",
        "example:1",
        "--namespace",
        &ns,
        "--replicas",
        "2",
        "--webhook",
        "--admission-policy",
        &policy,
    ]);
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let mut skipped = Vec::new();
    for (file, text) in files
        .iter()
        .filter(|(file, _)| !file.ends_with("kustomization.yaml"))
    {
        let object: DynamicObject = serde_saphyr::from_str(text).expect("an object");
        let types = object.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).expect("a GVK");
        let Some((resource, capabilities)) = discovery.resolve_gvk(&gvk) else {
            skipped.push(format!("{file} ({}/{})", types.api_version, types.kind));
            continue;
        };
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => Api::namespaced_with(client.clone(), &ns, &resource),
        };
        // Created, or (the CRD, which the tests installed) replaced, as `kubectl apply` does:
        // a server-side apply is refused on servers before 1.25, whose typed schema of a CRD
        // does not know the CEL rules (created otherwise, the server drops them).
        let name = object.metadata.name.clone().expect("a name");
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        let created = match api.create(&dry, &object).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let mut replacing = object.clone();
                let stored = api.get(&name).await.expect("the stored object");
                replacing.metadata.resource_version = stored.metadata.resource_version;
                api.replace(&name, &dry, &replacing).await
            }
            other => other,
        };
        created.unwrap_or_else(|err| panic!("{file}: the API server refuses it: {err}"));
    }
    // Kinds the server does not serve: cert-manager's and prometheus-operator's (not
    // installed), policy/v1 (1.21+), ValidatingAdmissionPolicy (1.30+).
    eprintln!("not served by this API server, checked for shape only: {skipped:?}");
    let served_policies = discovery
        .resolve_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        ))
        .is_some();
    for file in &skipped {
        assert!(
            file.contains("cert-manager.io")
                || file.contains("monitoring.coreos.com")
                || file.contains("policy/v1")
                || (!served_policies && file.contains("ValidatingAdmissionPolicy")),
            "{file}"
        );
    }
    assert!(
        files
            .keys()
            .any(|f| f.starts_with("validating-admission-policy-binding-")),
        "the base has the policy's binding"
    );
}
