//! The Database admission webhook in the operator process: the machine's rules (and an optional
//! policy file) served over HTTPS, and, when asked, registered with the API server.

use std::net::SocketAddr;
use std::path::PathBuf;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube_fsm::admission::{
    Endpoint, FailurePolicy, Policy, ServingCertificate, Validator, Webhook, WebhookHealth,
    WebhookMetrics, WebhookOptions, validating_webhook_configuration,
};
use prometheus_client::registry::Registry;

use crate::BoxError;
use crate::database::Database;

/// How the webhook example (and the demo) serve and register the webhook.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to serve the webhook.
    pub addr: SocketAddr,
    /// The serving certificate and key (PEM); without them, a development CA is made.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The policy layers (YAML), if any.
    pub policy: Option<PathBuf>,
    /// Whether and where to register the webhook with the API server.
    pub register: Register,
    /// The CA bundle (PEM file) to register with file certificates.
    pub ca_file: Option<PathBuf>,
    /// The registration's failure policy.
    pub failure_policy: FailurePolicy,
    /// Register for the namespaces with this label only (`KEY=VALUE`).
    pub namespace_label: Option<(String, String)>,
}

/// Whether `start` registers the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Register {
    /// No: something else registers it (the webhook example's `config` prints the registration).
    No,
    /// Yes, for the API server to call this base URL (`https://HOST:PORT`).
    At(String),
    /// Yes, at the bound address (the API server runs on this machine: envtest, the demo).
    Bound,
}

/// Reads a policy file (YAML).
pub fn read_policy(path: &std::path::Path) -> Result<Policy, BoxError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// A started webhook: its health for `/healthz` and `/readyz`, and its address.
#[derive(Debug)]
pub struct Started {
    /// For `/healthz` (live) and `/readyz` (ready).
    pub health: WebhookHealth,
    /// The bound address.
    pub addr: SocketAddr,
    /// The registration's name, when registered.
    pub registered: Option<String>,
}

/// Serves the webhook (in its own task) and registers it when `register_url` is set; records
/// into `registry`.
pub async fn start(
    client: &Client,
    options: &Options,
    registry: &mut Registry,
) -> Result<Started, BoxError> {
    let policy = match &options.policy {
        Some(path) => read_policy(path)?,
        None => Policy::default(),
    };
    let certificate = match &options.tls {
        Some((cert, key)) => ServingCertificate::from_files(cert, key)?,
        None => {
            let host = match &options.register {
                Register::At(url) => {
                    host_of(url).ok_or_else(|| format!("not an https URL: {url}"))?
                }
                Register::No | Register::Bound => options.addr.ip().to_string(),
            };
            ServingCertificate::self_signed(&[host.as_str()])?
        }
    };
    let ca_bundle = match (&options.ca_file, certificate.ca_bundle()) {
        (Some(path), _) => Some(std::fs::read_to_string(path)?),
        (None, bundle) => bundle.map(str::to_owned),
    };
    let metrics = WebhookMetrics::default();
    metrics.register(registry);
    let validator = Validator::new::<Database>(policy.clone())?;
    let mut webhook = Webhook::bind(options.addr, validator, certificate)
        .await?
        .metrics(&metrics);
    if let Some(pod) = this_pod() {
        let recorder = Recorder::new(
            client.clone(),
            Reporter::from("kube-fsm-webhook".to_owned()),
        );
        webhook = webhook.events(recorder, pod);
    }
    let addr = webhook.local_addr();
    let health = webhook.health();
    tokio::spawn(webhook.run());
    let url = match &options.register {
        Register::No => None,
        Register::At(url) => Some(url.clone()),
        Register::Bound => Some(format!("https://{addr}")),
    };
    let registered = match url {
        Some(url) => {
            let mut registration = WebhookOptions::new(Endpoint::Url(url));
            registration.ca_bundle = ca_bundle;
            registration.failure_policy = options.failure_policy;
            registration.namespace_selector =
                options
                    .namespace_label
                    .clone()
                    .map(|(key, value)| LabelSelector {
                        match_labels: Some([(key, value)].into()),
                        ..LabelSelector::default()
                    });
            Some(register(client, &registration, &policy).await?)
        }
        None => None,
    };
    Ok(Started {
        health,
        addr,
        registered,
    })
}

/// This Pod (from `POD_NAME` and `POD_NAMESPACE`, set by the generated Deployment), which
/// the webhook's certificate Events are about; `None` outside a Pod.
fn this_pod() -> Option<ObjectReference> {
    let (name, namespace) = (
        std::env::var("POD_NAME").ok()?,
        std::env::var("POD_NAMESPACE").ok()?,
    );
    Some(ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(name),
        namespace: Some(namespace),
        ..ObjectReference::default()
    })
}

/// The registration of the Database webhook (the webhook example's `config`).
pub fn configuration(options: &WebhookOptions, policy: &Policy) -> ValidatingWebhookConfiguration {
    validating_webhook_configuration::<Database>(options, policy)
}

/// Applies the registration (server-side apply: creates it, or takes it over).
async fn register(
    client: &Client,
    options: &WebhookOptions,
    policy: &Policy,
) -> Result<String, BoxError> {
    let configuration = configuration(options, policy);
    let name = configuration.metadata.name.clone().unwrap_or_default();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("kube-fsm-examples").force(),
        &Patch::Apply(&configuration),
    )
    .await?;
    Ok(name)
}

/// Unregisters the webhook.
pub async fn unregister(client: &Client, name: &str) -> Result<(), BoxError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.delete(name, &kube::api::DeleteParams::default())
        .await?;
    Ok(())
}

/// `https://HOST:PORT/...` → `HOST` (brackets of an IPv6 address removed).
fn host_of(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    };
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
}

/// `KEY=VALUE` (a command-line argument).
pub fn key_value(value: &str) -> Result<(String, String), String> {
    let (key, value) = value
        .split_once('=')
        .ok_or(format!("takes KEY=VALUE, not {value:?}"))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// `NS/NAME[:PORT]` (a command-line argument): a Service endpoint.
pub fn service_endpoint(value: &str) -> Result<Endpoint, String> {
    let (namespace, rest) = value
        .split_once('/')
        .ok_or(format!("takes NS/NAME[:PORT], not {value:?}"))?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => (
            name,
            Some(port.parse().map_err(|_| format!("not a port: {port:?}"))?),
        ),
        None => (rest, None),
    };
    Ok(Endpoint::Service {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        port,
    })
}
