//! A paused object (`kube-fsm.dev/paused`): no step, no hook, no drift remedy, no requeue; the
//! one write is its `Paused` condition (True, with the annotation's reason), announced by one
//! Normal `Paused` Event. Deleted while paused, its cleanup waits for the resume (the finalizer
//! gate says so in the condition and one `DeletionPaused` Event).
//! Resuming is the next step's business: it turns `Paused` False and settles the time paused
//! (see `pure::decide`); when that step fails, the failed reconcile does it (see
//! `engine::bookkeeping`), so a handler that still fails after a resume does not hold the
//! phase's timeout back.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;
use serde_json::json;

use crate::engine::{Attempt, Engine, Reconcilable, ReconcileError};
use crate::pure::pause;

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Keeps `object` paused for `reason`: writes the `Paused` condition when it does not say
    /// so yet, then waits for a change (the annotation's removal is one). A `deleted` object's
    /// condition and one `DeletionPaused` Event say that its cleanup waits for the resume.
    pub(crate) async fn paused(
        &self,
        api: &Api<K>,
        object: &K,
        reason: String,
        deleted: bool,
    ) -> Result<Attempt, ReconcileError> {
        let reason = if deleted {
            format!("{reason}; deleted: its cleanup runs once it is resumed")
        } else {
            reason
        };
        let mut conditions = object
            .machine_status()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let generation = object.meta().generation;
        let first = pause::paused_since(&conditions).is_none();
        if !pause::pause(
            &mut conditions,
            reason.clone(),
            generation,
            Timestamp::now(),
        ) {
            return Ok(Attempt::Done(None));
        }
        let patch = json!({ "status": { "conditions": conditions } });
        if let Some(stop) = self.write_status(api, object, &patch).await?.into() {
            return Ok(stop);
        }
        if deleted {
            tracing::info!(object = %object.name_any(), %reason, "deletion paused");
            let note = format!(
                "deleted while paused: cleanup waits until the {} annotation is removed (or {}: \"true\" lets it go without cleanup)",
                pause::PAUSED_ANNOTATION,
                pause::SKIP_CLEANUP_ANNOTATION
            );
            self.event(
                object,
                EventType::Normal,
                "DeletionPaused",
                "Delete".into(),
                note,
            )
            .await;
        } else if first {
            tracing::info!(object = %object.name_any(), %reason, "paused");
            let note = format!("{reason}; no step runs until the annotation is removed");
            self.event(object, EventType::Normal, "Paused", "Pause".into(), note)
                .await;
        }
        Ok(Attempt::Done(None))
    }

    /// Announces that a step resumed `object` (its stored `Paused` condition was True).
    pub(crate) async fn resumed(&self, object: &K) {
        let Some(since) = object
            .machine_status()
            .and_then(|s| pause::paused_since(&s.conditions))
        else {
            return;
        };
        let paused: Duration = Timestamp::now()
            .duration_since(since)
            .try_into()
            .unwrap_or_default();
        let note = format!(
            "resumed after {}s paused; the phase's timeout is due that much later",
            paused.as_secs()
        );
        tracing::info!(object = %object.name_any(), paused_s = paused.as_secs(), "resumed");
        self.event(object, EventType::Normal, "Resumed", "Resume".into(), note)
            .await;
    }
}
