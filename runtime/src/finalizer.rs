//! The spec's finalizer (DESIGN §4 step 1): added before any phase handler runs; on deletion,
//! `cleanup` until it reports done, then removed, locked on the resourceVersion read.

use std::time::Duration;

use kube::api::Patch;
use kube::{Api, ResourceExt};

use crate::next::Cleanup;
use crate::reconcile::{Engine, ReconcileError, Reconciled};
use crate::scope::ScopedApi;

/// What the finalizer step leaves to do.
pub(crate) enum Gate<K> {
    /// Go on with the phase step on this object.
    Proceed(K),
    /// Stop here; reconcile again after this long, or on the next change (`None`).
    Done(Option<Duration>),
}

impl<K, H> Engine<K, H>
where
    K: Reconciled<H>,
    K::Scope: ScopedApi,
    H: Send + Sync + 'static,
{
    /// Adds the finalizer before any handler runs, and runs cleanup on deletion.
    pub(crate) async fn finalizer(
        &self,
        api: &Api<K>,
        object: K,
        finalizer: &str,
    ) -> Result<Gate<K>, ReconcileError> {
        let present = object.finalizers().iter().any(|f| f == finalizer);
        if object.meta().deletion_timestamp.is_some() {
            if !present {
                return Ok(Gate::Done(None));
            }
            let cleanup = K::cleanup(&self.handler, &object)
                .await
                .map_err(|e| ReconcileError::Handler(Box::new(e)))?;
            if let Cleanup::Pending(after) = cleanup {
                return Ok(Gate::Done(Some(after)));
            }
            let rest: Vec<&String> = object
                .finalizers()
                .iter()
                .filter(|f| *f != finalizer)
                .collect();
            match self.patch_finalizers(api, &object, &rest).await {
                Ok(_) => {}
                // Already gone (a stale duplicate of this step removed it): nothing to do.
                Err(ReconcileError::Kube(kube::Error::Api(status))) if status.is_not_found() => {
                    return Ok(Gate::Done(None));
                }
                // Changed meanwhile: look again.
                Err(ReconcileError::Kube(kube::Error::Api(status))) if status.is_conflict() => {
                    return Ok(Gate::Done(Some(Duration::from_millis(100))));
                }
                Err(err) => return Err(err),
            }
            self.forget(&object);
            self.event(
                &object,
                kube::runtime::events::EventType::Normal,
                "CleanupDone",
                "Cleanup".to_owned(),
                format!("removed finalizer {finalizer}"),
            )
            .await;
            return Ok(Gate::Done(None));
        }
        if present {
            return Ok(Gate::Proceed(object));
        }
        let mut all: Vec<&String> = object.finalizers().iter().collect();
        let owned = finalizer.to_owned();
        all.push(&owned);
        Ok(Gate::Proceed(
            self.patch_finalizers(api, &object, &all).await?,
        ))
    }

    /// Replaces `metadata.finalizers`, locked on the resourceVersion we read.
    async fn patch_finalizers(
        &self,
        api: &Api<K>,
        object: &K,
        finalizers: &[&String],
    ) -> Result<K, ReconcileError> {
        let patch = serde_json::json!({
            "metadata": { "finalizers": finalizers, "resourceVersion": object.resource_version() }
        });
        let patched = api
            .patch(
                &object.name_any(),
                &self.patch_params(),
                &Patch::Merge(&patch),
            )
            .await?;
        self.remember_write(object);
        Ok(patched)
    }
}
