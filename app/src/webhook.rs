//! `run --webhook-addr`: one admission webhook (and conversion endpoint) for every kind of the
//! App, each kind's reviews judged by its own machine under its policy; with
//! `--webhook-register`, registered with the API server at start and removed at exit (a
//! development CA signs the certificate when no files are given), and the conversions of the
//! kinds it converts sent to it.

use std::net::SocketAddr;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Api, Client};
use prometheus_client::registry::Registry;

use super::args::{Register, RunArgs, read_policy, registration};
use super::{App, CliError};
use kube_fsm::admission::{
    Endpoint, Policy, ServingCertificate, Webhook, WebhookHealth, WebhookMetrics, WebhookOptions,
    conversion_webhook, validating_webhook_configuration_of,
};

/// A webhook being served.
pub(super) struct Served {
    /// For `/healthz` and `/readyz`.
    pub health: WebhookHealth,
    /// The registration's name, when `run` registered it.
    pub registered: Option<String>,
}

/// Serves every kind's admission reviews (and conversions) on `addr`, in its own task, and
/// registers them when asked.
pub(super) async fn start(
    app: &App,
    args: &RunArgs,
    addr: SocketAddr,
    client: &Client,
    registry: &mut Registry,
) -> Result<Served, CliError> {
    let invalid = |err: &dyn std::fmt::Display| CliError::Invalid(err.to_string());
    let certificate = match (args.webhook_tls.as_deref(), &args.webhook_register) {
        (Some([cert, key]), _) => ServingCertificate::from_files(cert, key),
        (Some(_), _) => return Err(invalid(&"--webhook-tls takes two files: CERT KEY")),
        (None, Some(Register::At(url))) => {
            let host = host_of(url.as_str())
                .ok_or_else(|| invalid(&format!("not an https URL: {url}")))?;
            ServingCertificate::self_signed(&[host.as_str()])
        }
        (None, _) => ServingCertificate::self_signed(&[addr.ip().to_string().as_str()]),
    }
    .map_err(|e| invalid(&e))?;
    let ca_bundle = certificate.ca_bundle().map(str::to_owned);
    let kinds: Vec<String> = app.machines.iter().map(|m| m.kind()).collect();
    if let Some((kind, _)) = args.webhook_policy.iter().find(|(k, _)| !kinds.contains(k)) {
        return Err(CliError::Invalid(format!(
            "--webhook-policy names {kind:?}, which this operator does not run ({})",
            kinds.join(", ")
        )));
    }
    let (mut validators, mut policies) = (Vec::new(), Vec::new());
    for machine in &app.machines {
        let kind = machine.kind();
        let policy = match args.webhook_policy.iter().find(|(k, _)| *k == kind) {
            Some((_, path)) => read_policy(path)?,
            None => Policy::default(),
        };
        let validator = machine
            .validator(policy.clone())
            .map_err(|err| CliError::Invalid(format!("the {kind} policy: {err}")))?;
        validators.push(validator);
        policies.push(policy);
    }
    let mut validators = validators.into_iter();
    let first = validators.next().ok_or_else(|| invalid(&"no machine"))?;
    let mut webhook = Webhook::bind(addr, first, certificate)
        .await
        .map_err(|e| invalid(&e))?;
    for validator in validators {
        webhook = webhook.validator(validator);
    }
    for converter in app.machines.iter().filter_map(|m| m.converter()) {
        webhook = webhook.converter(converter);
    }
    let metrics = WebhookMetrics::default();
    metrics.register(registry);
    webhook = webhook.metrics(&metrics);
    if let Some(pod) = this_pod() {
        let reporter = Reporter::from(format!("{}-webhook", app.name));
        webhook = webhook.events(Recorder::new(client.clone(), reporter), pod);
    }
    let health = webhook.health();
    let bound = webhook.local_addr();
    tracing::info!(addr = %bound, kinds = %kinds.join(", "), "serving the admission webhook");
    tokio::spawn(webhook.run());
    let registered = match &args.webhook_register {
        None => None,
        Some(target) => {
            let url = match target {
                Register::Bound => format!("https://{bound}"),
                Register::At(url) => url.clone(),
            };
            let mut options = WebhookOptions::new(Endpoint::Url(url));
            options.ca_bundle = ca_bundle;
            (options.failure_policy, options.namespace_selector) = registration(
                args.webhook_fail_open,
                args.webhook_namespace_label.as_ref(),
            );
            let crds: Vec<_> = app.machines.iter().map(|m| m.crd()).collect();
            // The kinds the webhook converts send their conversions here too.
            let converted = app.machines.iter().zip(&crds);
            for (_, crd) in
                converted.filter(|(m, crd)| m.converter().is_some() && crd.spec.versions.len() > 1)
            {
                convert_here(client, &app.name, crd, &options).await?;
            }
            let kinds: Vec<_> = crds.iter().zip(&policies).collect();
            let registration = validating_webhook_configuration_of(
                &kinds,
                &options,
                &format!("{}-webhook", app.name),
            );
            Some(register(client, &app.name, &registration).await?)
        }
    };
    Ok(Served { health, registered })
}

/// Applies the registration (server-side apply: creates it, or takes it over).
async fn register(
    client: &Client,
    manager: &str,
    registration: &ValidatingWebhookConfiguration,
) -> Result<String, CliError> {
    let name = registration.metadata.name.clone().unwrap_or_default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(registration),
        )
        .await
        .map_err(|err| CliError::Cluster(format!("cannot register the webhook {name}: {err}")))?;
    tracing::info!(registration = %name, "registered the admission webhook");
    Ok(name)
}

/// Points the installed CRD's conversions at this webhook (a merge patch of
/// `spec.conversion`; the rest of the CRD is left as installed). They stay so at exit: objects
/// stored in another version could not be read without them.
async fn convert_here(
    client: &Client,
    manager: &str,
    crd: &CustomResourceDefinition,
    options: &WebhookOptions,
) -> Result<(), CliError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let converting = conversion_webhook(crd.clone(), options);
    let patch = serde_json::json!({ "spec": { "conversion": converting.spec.conversion } });
    let params = PatchParams {
        field_manager: Some(manager.to_owned()),
        ..PatchParams::default()
    };
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|err| {
            CliError::Cluster(format!(
                "cannot send the conversions of {name} to the webhook (install the CRD first, with `{manager} crd`): {err}"
            ))
        })?;
    tracing::info!(crd = %name, "the CRD's conversions go to this webhook");
    Ok(())
}

/// Removes the registration `run` made (a failure is logged: the process is stopping).
pub(super) async fn unregister(client: &Client, name: &str) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    // Bounded, as the Lease's release: the stop must fit in the Pod's grace period.
    let deleted = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        api.delete(name, &DeleteParams::default()),
    )
    .await;
    match deleted {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => {
            tracing::warn!(registration = %name, %err, "cannot remove the webhook's registration");
        }
        Err(_) => {
            tracing::warn!(registration = %name, "cannot remove the webhook's registration within 5 s");
        }
    }
}

/// `https://HOST:PORT/...` → `HOST` (brackets of an IPv6 address removed).
fn host_of(url: &str) -> Option<String> {
    let authority = url.strip_prefix("https://")?.split('/').next()?;
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

/// This Pod (from `POD_NAME` and `POD_NAMESPACE`, which the generated Deployment sets), which
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
