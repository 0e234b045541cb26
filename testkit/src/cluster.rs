//! Access to the real API server the integration tests run against: the cluster named by
//! `KUBECONFIG` (scripts/envtest provisions one). Without a cluster the tests skip loudly,
//! unless `KUBE_FSM_REQUIRE_CLUSTER=1` (set by scripts/test, so CI never skips).

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::OnceCell;

/// Whether this run must not skip what needs a cluster (`KUBE_FSM_REQUIRE_CLUSTER=1`, as
/// `scripts/test` sets it).
fn required() -> bool {
    std::env::var("KUBE_FSM_REQUIRE_CLUSTER").is_ok_and(|v| v == "1")
}

/// Says loudly that `test` did not run, and why: on the process's own stderr (libtest
/// captures `eprintln!` of a passing test, not this, so the line shows under plain `cargo
/// test` too) and, when `KUBE_FSM_SKIP_LOG` names a file, as a line appended to it:
/// `scripts/test` counts them, and `--quick` fails on any.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("*** SKIPPED {test}: {why}");
    let _ = writeln!(std::io::stderr(), "\n{line}\n");
    if let Some(path) = std::env::var_os("KUBE_FSM_SKIP_LOG")
        && let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// The program the environment variable `var` names, which `setup` (the shell commands a
/// developer runs, e.g. `eval "$(scripts/prometheus env)"`) provides; `None`, after a loud
/// message, when it is unset and the run does not require a cluster.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and `var` is unset.
#[must_use]
pub fn tool(test: &str, var: &str, setup: &str) -> Option<std::ffi::OsString> {
    let found = std::env::var_os(var);
    if found.is_none() {
        assert!(
            !required(),
            "{test}: KUBE_FSM_REQUIRE_CLUSTER=1 but {var} is not set ({setup})"
        );
        skip(test, &format!("no {var} ({setup})."));
    }
    found
}

/// A client for the test cluster, or `None` (after a loud message) when there is none and the
/// run does not require one.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and no cluster answers.
pub async fn client(test: &str) -> Option<Client> {
    let client = match Client::try_default().await {
        Ok(client) => match client.apiserver_version().await {
            Ok(_) => Ok(client),
            Err(err) => Err(err.to_string()),
        },
        Err(err) => Err(err.to_string()),
    };
    match client {
        Ok(client) => Some(client),
        Err(err) if required() => {
            panic!("{test}: KUBE_FSM_REQUIRE_CLUSTER=1 but no API server answers: {err}")
        }
        Err(err) => {
            skip(
                test,
                &format!(
                    "no Kubernetes API server ({err}). Run `scripts/test` (it provisions one with scripts/envtest) to run it."
                ),
            );
            None
        }
    }
}

/// A client for the test cluster acting as `user` in `groups` (impersonated by the test's own
/// identity, an administrator): to play a person with a group. Add `system:masters` to the
/// groups for the rights to do anything else.
///
/// # Panics
/// When the configuration cannot be read.
pub async fn client_as(user: &str, groups: &[&str]) -> Client {
    let mut config = kube::Config::infer().await.expect("kube config");
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Client::try_from(config).expect("client")
}

/// A client for the current Kubernetes that runs beside the tests' 1.20 server
/// (`scripts/envtest start --version current`; its kubeconfig named by
/// `KUBE_FSM_CURRENT_KUBECONFIG`, as `scripts/test` sets it), or `None` after a loud message
/// when there is none and the run does not require one.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and there is none, or it does not answer.
pub async fn current(test: &str) -> Option<Client> {
    let path = tool(
        test,
        "KUBE_FSM_CURRENT_KUBECONFIG",
        "scripts/envtest start --version current; export KUBE_FSM_CURRENT_KUBECONFIG=~/.cache/kube-fsm/envtest-current/kubeconfig",
    )?;
    named(test, &path, "the current API server").await
}

/// A client for the cluster with a control plane — the current API server with the
/// controllers, the scheduler and kwok's simulated nodes beside it (`scripts/envtest start
/// --version current --control-plane`, in a state dir of its own: its kubeconfig named by
/// `KUBE_FSM_CONTROL_PLANE_KUBECONFIG`, as `scripts/test` sets it) — or `None` after a loud
/// message when there is none and the run does not require one.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and there is none, or it does not answer.
pub async fn control_plane(test: &str) -> Option<Client> {
    let path = tool(
        test,
        "KUBE_FSM_CONTROL_PLANE_KUBECONFIG",
        "KUBE_FSM_ENVTEST_DIR=~/.cache/kube-fsm/envtest-control-plane scripts/envtest start --version current --control-plane; export KUBE_FSM_CONTROL_PLANE_KUBECONFIG=~/.cache/kube-fsm/envtest-control-plane/kubeconfig",
    )?;
    named(test, &path, "the control plane's API server").await
}

/// A cluster of the test's own with the control plane and `nodes` simulated nodes, for a test
/// that takes nodes away (on the shared control plane it would evict the other tests' pods):
/// started by `kube-fsm-envtest` from `KUBE_FSM_CONTROL_PLANE_ASSETS` (`scripts/envtest assets
/// --version current --control-plane`, as `scripts/test` sets it), stopped when dropped; or
/// `None` after a loud message when there are no assets and the run does not require them.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and there are no assets, or the cluster does not start.
pub async fn own_control_plane(test: &str, nodes: u32) -> Option<kube_fsm_envtest::TestCluster> {
    let assets = tool(
        test,
        "KUBE_FSM_CONTROL_PLANE_ASSETS",
        "export KUBE_FSM_CONTROL_PLANE_ASSETS=$(scripts/envtest assets --version current --control-plane)",
    )?;
    kube_fsm_envtest::TestCluster::builder()
        .assets(assets)
        .nodes(nodes)
        .start(test)
        .await
}

/// A client of the kubeconfig at `path` (`what` names its server in messages).
async fn named(test: &str, path: &std::ffi::OsStr, what: &str) -> Option<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|err| panic!("{test}: the kubeconfig of {what}: {err}"));
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap_or_else(|err| panic!("{test}: the config of {what}: {err}"));
    let client = Client::try_from(config).expect("client");
    match client.apiserver_version().await {
        Ok(_) => Some(client),
        Err(err) => {
            assert!(!required(), "{test}: {what} does not answer: {err}");
            skip(test, &format!("{what} does not answer: {err}"));
            None
        }
    }
}

/// What most integration tests start with: a client ([`client`]), the test CRDs installed
/// ([`install_crds`]) and a fresh namespace named after `prefix` ([`namespace`]).
pub async fn prepare(test: &str, prefix: &str) -> Option<(Client, String)> {
    let client = client(test).await?;
    install_crds(&client).await;
    let ns = namespace(&client, prefix).await;
    Some((client, ns))
}

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Installs the test CRDs once per process and waits until they are served.
///
/// # Panics
/// When the API server refuses them.
pub async fn install_crds(client: &Client) {
    CRDS.get_or_init(|| async {
        for crd in [
            kube_fsm::crd::<crate::resources::Database>(),
            kube_fsm::crd::<crate::resources::Pipeline>(),
            kube_fsm::crd::<crate::resources::Timer>(),
            kube_fsm::crd::<crate::resources::Sleeper>(),
            kube_fsm::crd::<crate::resources::Overdue>(),
            kube_fsm::crd::<crate::resources::Change>(),
            loose_status_crd(kube_fsm::crd::<crate::resources::Relay>()),
            older_spec_crd(kube_fsm::crd::<crate::resources::Guarded>()),
        ] {
            install_crd(client, crd).await;
        }
    })
    .await;
}

/// Creates `crd`, or replaces the spec of the one of that name, and waits until it is
/// Established.
///
/// # Panics
/// When the API server refuses it.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("crd name");
    match api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            // Another test may be replacing it at the same time: read again on a conflict.
            let replaced = eventually(Duration::from_secs(10), || async {
                let mut current = api.get(&name).await.expect("get crd");
                current.spec = crd.spec.clone();
                current.metadata.annotations = crd.metadata.annotations.clone();
                match api.replace(&name, &PostParams::default(), &current).await {
                    Ok(_) => Some(()),
                    Err(kube::Error::Api(status)) if status.code == 409 => None,
                    Err(err) => panic!("replacing CRD {name}: {err}"),
                }
            })
            .await;
            replaced.unwrap_or_else(|| panic!("CRD {name}: every replace conflicted for 10 s"));
        }
        Err(err) => panic!("installing CRD {name}: {err}"),
    }
    eventually(Duration::from_secs(30), || async {
        let crd = api.get(&name).await.ok()?;
        let established = crd
            .status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("CRD {name} not established"));
}

/// The CRD as an older spec's CRD would be: `status.phase` without the enum, length bound and
/// CEL rules of today's phases (an older spec's rules were its own), so a phase the spec no
/// longer declares can be stored.
#[must_use]
pub fn older_spec_crd(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        without_phase_rules(root);
        let phase = root
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("status"))
            .and_then(|status| status.properties.as_mut()?.get_mut("phase"));
        if let Some(phase) = phase {
            phase.enum_ = None;
            phase.max_length = None;
            phase.x_kubernetes_validations = None;
        }
    }
    crd
}

/// `root` without the machine's CEL rules placed on it (the first-phase rule, whose
/// `fieldPath` is `.status.phase`).
fn without_phase_rules(root: &mut JSONSchemaProps) {
    if let Some(rules) = &mut root.x_kubernetes_validations {
        rules.retain(|r| r.field_path.as_deref() != Some(".status.phase"));
        if rules.is_empty() {
            root.x_kubernetes_validations = None;
        }
    }
}

/// `crd` with a status that takes any fields (as a CRD installed by hand, or by an older
/// version of an operator, may), so that a status that does not decode can be stored.
fn loose_status_crd(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // Such a CRD had none of the machine's rules on the phase either.
        without_phase_rules(root);
        let status = root.properties.as_mut().and_then(|p| p.get_mut("status"));
        if let Some(status) = status {
            *status = JSONSchemaProps {
                type_: Some("object".into()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..JSONSchemaProps::default()
            };
        }
    }
    crd
}

/// A fresh namespace for one test.
///
/// # Panics
/// When it cannot be created.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = fresh_name(prefix);
    create_namespace(client, &name, std::collections::BTreeMap::new()).await;
    name
}

/// `PREFIX-XXXXXX`: a name no other test run uses.
#[must_use]
pub fn fresh_name(prefix: &str) -> String {
    format!("{prefix}-{:06x}", fastrand::u32(..0x00ff_ffff))
}

/// Creates the namespace `name` with `labels`.
///
/// # Panics
/// When it cannot be created.
pub async fn create_namespace(
    client: &Client,
    name: &str,
    labels: std::collections::BTreeMap<String, String>,
) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: (!labels.is_empty()).then_some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// Merge-patches the status by hand with `status`, as `kubectl edit --subresource=status` would
/// (field manager `hand-edit`).
///
/// # Panics
/// When the API server refuses the patch.
pub async fn hand_edit<K>(api: &Api<K>, name: &str, status: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    patch_by_hand(api, name, status).await.expect("hand edit");
}

/// The status patch of a hand edit (field manager `hand-edit`), as the API server answered it.
async fn patch_by_hand<K>(api: &Api<K>, name: &str, status: serde_json::Value) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::PatchParams {
        field_manager: Some("hand-edit".into()),
        ..kube::api::PatchParams::default()
    };
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &params, &kube::api::Patch::Merge(&patch))
        .await
}

/// Whether the API server runs CRDs' CEL validation rules (`x-kubernetes-validations`, on by
/// default from Kubernetes 1.25).
///
/// # Panics
/// When the server does not say its version.
pub async fn enforces_cel(client: &Client) -> bool {
    minor(client).await >= 25
}

/// The server's minor version (of Kubernetes 1).
///
/// # Panics
/// When the server does not say its version, or it is not 1.x.
pub async fn minor(client: &Client) -> u32 {
    let version = client
        .apiserver_version()
        .await
        .expect("the server's version");
    assert_eq!(version.major, "1", "a Kubernetes 1.x server");
    version
        .minor
        .trim_end_matches('+')
        .parse()
        .expect("a numeric minor version")
}

/// [`hand_edit`], unless the API server refuses it by the CRD's CEL rules (servers from 1.25
/// on run them: a hand edit off the machine's edges cannot be stored there, so there is no
/// drift to see): whether it was stored. Says so loudly when it was refused.
///
/// # Panics
/// When the API server refuses it otherwise.
pub async fn hand_edit_unless_refused<K>(
    api: &Api<K>,
    name: &str,
    status: serde_json::Value,
) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match patch_by_hand(api, name, status).await {
        Ok(_) => true,
        Err(kube::Error::Api(refused))
            if refused.code == 422 && refused.message.contains("status.phase: Forbidden") =>
        {
            eprintln!(
                "*** the API server's CEL rule refused the hand edit ({}): no drift to see on \
                 this server; the 1.20 run of the suite checks the engine's answer to drift",
                refused.message
            );
            false
        }
        Err(err) => panic!("hand edit: {err}"),
    }
}

/// The reasons of every Event in `ns`.
///
/// # Panics
/// When they cannot be listed.
pub async fn all_events(client: &Client, ns: &str) -> Vec<String> {
    list_events(client, ns)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Every Warning Event in `ns`, as `reason: note`.
pub async fn warning_events(client: &Client, ns: &str) -> Vec<String> {
    list_events(client, ns)
        .await
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

async fn list_events(client: &Client, ns: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default())
        .await
        .expect("list events")
        .items
}

/// The Events in `ns` with `reason`.
///
/// # Panics
/// When they cannot be listed.
pub async fn events(client: &Client, ns: &str, reason: &str) -> Vec<Event> {
    list_events(client, ns)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The stored `status.phase` of `object`, declared or not.
pub fn phase_of<K: kube_fsm::StateMachine>(object: &K) -> Option<String> {
    Some(object.machine_status()?.phase.as_ref()?.as_str().to_owned())
}

/// Waits up to 30 s until the object `name` is in `phase`, and returns it.
///
/// # Panics
/// When it does not get there, naming the phase it is in.
pub async fn wait_phase<K>(api: &Api<K>, name: &str, phase: &str) -> K
where
    K: kube_fsm::StateMachine + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let reached = eventually(Duration::from_secs(30), || async {
        api.get(name)
            .await
            .ok()
            .filter(|o| phase_of(o).as_deref() == Some(phase))
    })
    .await;
    if let Some(object) = reached {
        return object;
    }
    // Read on this runtime (a blocking read here would wait for the runtime it blocks, and
    // the test would hang instead of failing).
    let now = api.get(name).await.ok().and_then(|o| phase_of(&o));
    panic!("{name} did not reach {phase}; it is {now:?}")
}

/// Polls `check` every 100 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sum of the API server's `apiserver_request_total` counters whose labels include every
/// `key="value"` pair given (read from the server's `/metrics`, not from our own counters; see
/// [`crate::prometheus::Requests::matching`]).
///
/// # Panics
/// When `/metrics` cannot be read, or a label is not one that [`crate::prometheus::Key`] keeps.
pub async fn requests(client: &Client, labels: &[(&str, &str)]) -> u64 {
    crate::prometheus::Requests::scrape(client)
        .await
        .expect("read the API server's /metrics")
        .matching(labels)
}

/// The example operator's `Database` kind (`examples/`), for tests and benches that drive it
/// as a process and see its objects untyped.
#[must_use]
pub fn example_databases() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "example.kube-fsm.dev".into(),
        version: "v1".into(),
        api_version: "example.kube-fsm.dev/v1".into(),
        kind: "Database".into(),
        plural: "databases".into(),
    }
}

/// Runs the test cluster's kubectl (`KUBE_FSM_KUBECTL`, the 1.20 client `scripts/envtest`
/// unpacks) with `args` against `KUBECONFIG`: its exit status and its output (stdout then
/// stderr). `None`, after a loud message, when there is none and the run does not require a
/// cluster.
///
/// # Panics
/// When `KUBE_FSM_REQUIRE_CLUSTER=1` and there is no kubectl, or it cannot be run.
pub async fn kubectl(test: &str, args: &[&str]) -> Option<(bool, String)> {
    let kubectl = tool(test, "KUBE_FSM_KUBECTL", "eval \"$(scripts/envtest env)\"")?;
    let output = tokio::process::Command::new(kubectl)
        .args(args)
        .output()
        .await
        .expect("run kubectl");
    let mut said = String::from_utf8_lossy(&output.stdout).into_owned();
    said.push_str(&String::from_utf8_lossy(&output.stderr));
    Some((output.status.success(), said))
}
