//! What a certificate reload tells: the webhook's health and metrics, the log, and an Event
//! when the outcome changes.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

use super::health::{WebhookHealth, WebhookMetrics};
use crate::admission::tls::{ServingCertificate, timestamp};

/// Re-reads the certificate files if they changed, and tells what came of it: the health, the
/// metrics, the log and (when the outcome changed) an Event.
pub(super) fn reloaded(
    certificate: &ServingCertificate,
    health: &WebhookHealth,
    metrics: &WebhookMetrics,
    events: Option<&(Recorder, ObjectReference)>,
) {
    let result = certificate.reload();
    match &result {
        Ok(true) => tracing::info!("webhook certificate reloaded"),
        Ok(false) => {}
        Err(err) => {
            tracing::warn!(%err, "webhook certificate changed but does not load; serving the old one")
        }
    }
    if result.is_err() {
        metrics.certificate_error();
    }
    let expires = certificate.expires();
    let problem = result.err().map(|err| err.to_string());
    let changed = record(health, metrics, problem.clone(), expires);
    if let Some((recorder, regarding)) = events.filter(|_| changed) {
        let event = certificate_event(problem, expires);
        let (recorder, regarding) = (recorder.clone(), regarding.clone());
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&event, &regarding).await {
                tracing::warn!(%err, "could not record the webhook certificate's Event");
            }
        });
    }
}

/// Records the certificate served and its problem, if any, in the health and the metrics;
/// returns whether the problem changed.
pub(super) fn record(
    health: &WebhookHealth,
    metrics: &WebhookMetrics,
    problem: Option<String>,
    expires: Option<SystemTime>,
) -> bool {
    let changed = health.set_certificate(problem, expires);
    metrics.certificate_expires(expires);
    metrics.set_serving(health.ready().is_ok());
    changed
}

/// The Event telling that the certificate files do not load (`problem`), or load again.
fn certificate_event(problem: Option<String>, expires: Option<SystemTime>) -> Event {
    let until = expires.map_or_else(String::new, |at| format!(", valid until {}", timestamp(at)));
    let (type_, reason, note) = match problem {
        Some(problem) => (
            EventType::Warning,
            "CertificateNotLoaded",
            format!(
                "The webhook's new certificate does not load, so the previous one is still served{until}: {problem}."
            ),
        ),
        None => (
            EventType::Normal,
            "CertificateLoaded",
            format!("The webhook serves its new certificate{until}."),
        ),
    };
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "LoadCertificate".to_owned(),
        secondary: None,
    }
}
