//! `--webhook`: the Database's admission webhook served in the demo's process on loopback
//! (a development CA), registered for the API server on this machine to call, removed at the
//! end. A deployed operator serves it with `run --webhook-addr` and is registered by its
//! manifests.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client};
use kube_fsm::admission::{
    Endpoint, Policy, ServingCertificate, Validator, Webhook, WebhookOptions,
    validating_webhook_configuration,
};
use kube_fsm_examples::database::Database;

use crate::BoxError;

/// Serves the webhook in its own task and registers it; its registration's name and address.
pub async fn start(client: &Client) -> Result<(String, std::net::SocketAddr), BoxError> {
    let certificate = ServingCertificate::self_signed(&["127.0.0.1"])?;
    let mut options = WebhookOptions::new(Endpoint::Url(String::new()));
    options.ca_bundle = certificate.ca_bundle().map(str::to_owned);
    let validator = Validator::new::<Database>(Policy::default())?;
    let webhook = Webhook::bind(([127, 0, 0, 1], 0).into(), validator, certificate).await?;
    let addr = webhook.local_addr();
    options.endpoint = Endpoint::Url(format!("https://{addr}"));
    tokio::spawn(webhook.run());
    let registration = validating_webhook_configuration::<Database>(&options, &Policy::default());
    let name = registration.metadata.name.clone().unwrap_or_default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("kube-fsm-demo").force(),
            &Patch::Apply(&registration),
        )
        .await?;
    Ok((name, addr))
}

/// Removes the registration.
pub async fn unregister(client: &Client, name: &str) -> Result<(), BoxError> {
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}
