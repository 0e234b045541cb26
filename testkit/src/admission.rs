//! The admission webhook in a test: served in-process on loopback with a development CA, and
//! registered for one labelled namespace only, so that tests running at the same time (and
//! the other test binaries) never meet it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, Resource};
use kube_fsm::admission::{
    Converter, Endpoint, FailurePolicy, Policy, ServingCertificate, Validator, Webhook,
    WebhookHealth, WebhookOptions, conversion_webhook, validating_webhook_configuration_for,
};
use kube_fsm::{Phase, StateMachine};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::cluster::{self, eventually};
use crate::proxy::Proxy;

/// The namespace label a test's webhook is registered for.
pub const SCOPE_LABEL: &str = "kube-fsm.dev/test-webhook";
/// The name of the object [`Registration::wait_active`] probes with.
pub const PROBE: &str = "webhook-probe";

/// A fresh namespace labelled for its own webhook, plus `labels`.
///
/// # Panics
/// When it cannot be created.
pub async fn namespace(client: &Client, prefix: &str, labels: &[(&str, &str)]) -> String {
    let name = cluster::fresh_name(prefix);
    let mut all: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.insert(SCOPE_LABEL.to_owned(), name.clone());
    cluster::create_namespace(client, &name, all).await;
    name
}

/// `K`'s webhook registered for one namespace, served by this process or by nothing.
pub struct Registration {
    client: Client,
    name: String,
    /// The served webhook's health (`None` when nothing serves it).
    pub health: Option<WebhookHealth>,
    task: Option<JoinHandle<()>>,
}

fn options(ns: &str, endpoint: Endpoint, failure: FailurePolicy) -> WebhookOptions {
    options_for((SCOPE_LABEL, ns), endpoint, failure)
}

/// Options for the namespaces labelled `label` (name, value).
fn options_for(label: (&str, &str), endpoint: Endpoint, failure: FailurePolicy) -> WebhookOptions {
    let mut options = WebhookOptions::new(endpoint);
    options.failure_policy = failure;
    options.timeout_seconds = 5;
    options.namespace_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([(label.0.to_owned(), label.1.to_owned())])),
        ..LabelSelector::default()
    });
    options
}

/// Serves `K`'s webhook under `policy` on 127.0.0.1 (a development CA in the `caBundle`) and
/// registers it for namespace `ns` with `failure`.
///
/// # Panics
/// When it cannot be served or registered.
pub async fn serve<K: Probe>(
    client: &Client,
    ns: &str,
    probe: K,
    policy: Policy,
    failure: FailurePolicy,
) -> Registration {
    let served = Served {
        crd: K::crd(),
        converter: None,
        behind_proxy: false,
    };
    serve_crd(
        client,
        ns,
        (SCOPE_LABEL, ns),
        probe,
        policy,
        failure,
        served,
    )
    .await
    .0
}

/// Serves `K`'s webhook under `policy` like [`serve`], for every namespace labelled `label`
/// (name, value; the probe in `ns`, which must be one of them), with the API server reaching
/// it through a [`Proxy`]: [`Proxy::down`] takes the webhook away (as a crashed webhook Pod
/// behind its Service), [`Proxy::heal`] brings it back.
///
/// # Panics
/// When it cannot be served or registered.
pub async fn serve_behind_proxy<K: Probe>(
    client: &Client,
    ns: &str,
    label: (&str, &str),
    probe: K,
    policy: Policy,
    failure: FailurePolicy,
) -> (Registration, Proxy) {
    let served = Served {
        crd: K::crd(),
        converter: None,
        behind_proxy: true,
    };
    let (registration, proxy) = serve_crd(client, ns, label, probe, policy, failure, served).await;
    (registration, proxy.expect("a proxy was asked for"))
}

/// A resource's webhook as a test serves it: for which CRD (all its served versions), with
/// which conversions, behind a proxy or not.
struct Served {
    crd: CustomResourceDefinition,
    converter: Option<Converter>,
    behind_proxy: bool,
}

/// Serves the webhook of a resource of several versions for namespace `ns` (labelled by
/// [`namespace`]): `crd` (e.g. `kube_fsm::crd_versions`) is installed with its conversions
/// sent to `converter` on the same server, and every served version is reviewed. `probe` is
/// created through `K`, the stored version.
///
/// # Panics
/// When it cannot be served, installed or registered.
pub async fn serve_versions<K: Probe>(
    client: &Client,
    ns: &str,
    probe: K,
    crd: CustomResourceDefinition,
    converter: Converter,
) -> Registration {
    let served = Served {
        crd,
        converter: Some(converter),
        behind_proxy: false,
    };
    serve_crd(
        client,
        ns,
        (SCOPE_LABEL, ns),
        probe,
        Policy::default(),
        FailurePolicy::Fail,
        served,
    )
    .await
    .0
}

async fn serve_crd<K: Probe>(
    client: &Client,
    ns: &str,
    label: (&str, &str),
    probe: K,
    policy: Policy,
    failure: FailurePolicy,
    served: Served,
) -> (Registration, Option<Proxy>) {
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"]).expect("certificate");
    let mut options = options_for(label, Endpoint::Url(String::new()), failure);
    options.ca_bundle = certificate.ca_bundle().map(str::to_owned);
    let validator = Validator::new::<K>(policy.clone()).expect("policy");
    let mut webhook = Webhook::bind("127.0.0.1:0".parse().expect("addr"), validator, certificate)
        .await
        .expect("bind webhook");
    let converts = served.converter.is_some();
    if let Some(converter) = served.converter {
        webhook = webhook.converter(converter);
    }
    let proxy = if served.behind_proxy {
        Some(Proxy::start(webhook.local_addr()).await)
    } else {
        None
    };
    let addr = proxy.as_ref().map_or(webhook.local_addr(), Proxy::addr);
    options.endpoint = Endpoint::Url(format!("https://{addr}"));
    let health = webhook.health();
    let task = tokio::spawn(webhook.run());
    if converts {
        cluster::install_crd(client, conversion_webhook(served.crd.clone(), &options)).await;
    }
    let api = Api::<K>::namespaced(client.clone(), ns);
    create_probe(&api, probe).await;
    let name = register(client, ns, &served.crd, &options, &policy).await;
    wait_active(&api, &name).await;
    let registration = Registration {
        client: client.clone(),
        name,
        health: Some(health),
        task: Some(task),
    };
    (registration, proxy)
}

/// What a probe object needs to be.
pub trait Probe:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + StateMachine
    + CustomResourceExt
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Probe for K where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + StateMachine
        + CustomResourceExt
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Creates `probe` at the initial phase, before any webhook is registered.
async fn create_probe<K: Probe>(api: &Api<K>, probe: K) {
    if api.get_opt(PROBE).await.expect("get probe").is_some() {
        return;
    }
    api.create(&PostParams::default(), &probe)
        .await
        .expect("create probe");
    let initial = <K::Phase as Phase>::initial().name();
    api.patch_status(
        PROBE,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": { "phase": initial } })),
    )
    .await
    .expect("probe at the initial phase");
}

/// Waits until the API server calls the webhook `name` (a configuration reaches the API
/// server's informer a moment after it is written): dry-runs removing the probe's phase until
/// the webhook, or the failure to reach it, refuses that.
async fn wait_active<K: Probe>(api: &Api<K>, name: &str) {
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let removal = Patch::Merge(serde_json::json!({ "status": { "phase": null } }));
    eventually(Duration::from_secs(30), || async {
        api.patch_status(PROBE, &dry_run, &removal)
            .await
            .is_err()
            .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("webhook {name} not called within 30 s"));
}

async fn register(
    client: &Client,
    ns: &str,
    crd: &CustomResourceDefinition,
    options: &WebhookOptions,
    policy: &Policy,
) -> String {
    let mut configuration = validating_webhook_configuration_for(crd, options, policy);
    let name = format!(
        "{ns}.{}",
        configuration.metadata.name.as_deref().unwrap_or("")
    );
    configuration.metadata.name = Some(name.clone());
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .expect("register the webhook");
    name
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Registration {
    /// Changes the failure policy of every webhook of the registration.
    ///
    /// # Panics
    /// When the API server refuses.
    pub async fn set_failure_policy(&self, failure: FailurePolicy) {
        let api = Api::<ValidatingWebhookConfiguration>::all(self.client.clone());
        let mut configuration = api.get(&self.name).await.expect("get configuration");
        for webhook in configuration.webhooks.iter_mut().flatten() {
            webhook.failure_policy = Some(format!("{failure:?}"));
        }
        api.replace(&self.name, &PostParams::default(), &configuration)
            .await
            .expect("replace configuration");
    }

    /// Unregisters the webhook and stops serving it.
    ///
    /// # Panics
    /// When the API server refuses.
    pub async fn remove(self) {
        Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("unregister the webhook");
        if let Some(task) = self.task {
            task.abort();
        }
    }
}

/// Another team's policy webhook (a Gatekeeper or Kyverno, say) on updates of `K` itself in
/// namespace `ns`, down under `Fail`: the API server refuses every metadata write of `K`
/// there (labels, finalizers) until it is removed. Returns once it refuses them.
///
/// # Panics
/// When it cannot be registered, or does not take effect.
pub async fn policy_webhook_down<K: Probe>(client: &Client, ns: &str, probe: K) -> Registration {
    let api = Api::<K>::namespaced(client.clone(), ns);
    create_probe(&api, probe).await;
    let mut options = options(
        ns,
        Endpoint::Url("https://127.0.0.1:1/".to_owned()),
        FailurePolicy::Fail,
    );
    options.ca_bundle = ServingCertificate::self_signed(&["127.0.0.1"])
        .expect("certificate")
        .ca_bundle()
        .map(str::to_owned);
    let mut configuration =
        validating_webhook_configuration_for(&K::crd(), &options, &Policy::default());
    let plural = K::crd().spec.names.plural;
    for webhook in configuration.webhooks.iter_mut().flatten() {
        webhook.name = format!("policy.{}", webhook.name);
        for rule in webhook.rules.iter_mut().flatten() {
            rule.operations = Some(vec!["UPDATE".to_owned()]);
            rule.resources = Some(vec![plural.clone()]);
        }
    }
    let name = format!("{ns}.policy");
    configuration.metadata.name = Some(name.clone());
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .expect("register the policy webhook");
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let label = Patch::Merge(serde_json::json!({ "metadata": { "labels": { "probe": "1" } } }));
    eventually(Duration::from_secs(30), || async {
        api.patch(PROBE, &dry_run, &label)
            .await
            .is_err()
            .then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("policy webhook {name} not called within 30 s"));
    Registration {
        client: client.clone(),
        name,
        health: None,
        task: None,
    }
}
