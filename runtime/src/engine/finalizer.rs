//! The spec's finalizer: added before any phase handler runs; on deletion, `cleanup` until it
//! reports done, then the declared children that take part in an `after:` order removed in
//! reverse order (JOSDK's `deletePostcondition`: each gone before the next), then removed.
//! Both writes are locked on the resourceVersion read; a conflict sends the whole attempt back
//! to a fresh read (the object may be gone, or its finalizers changed), and a 404 means there
//! is nothing left to do.
//!
//! A paused object's deletion waits: no cleanup runs until it is resumed (as Cluster API and
//! Flux leave a paused or suspended object's resources alone), so pausing before a delete
//! never loses what the object made. `kube-fsm.dev/skip-cleanup: "true"` lets the finalizer go
//! without cleanup, paused or not: the object's external resources are orphaned, on purpose.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::EventType;

use crate::engine::write::Write;
use crate::engine::{Attempt, Engine, Reconcilable, ReconcileError};
use crate::handler::step::Step;
use crate::machine::next::Cleanup;
use crate::pure::pause;

/// How soon a deletion waiting for a declared child to go looks again, should the child's
/// deletion event be missed.
const CHILD_REMOVAL_RECHECK: Duration = Duration::from_secs(10);

/// What the finalizer step leaves to do.
pub(crate) enum Gate<K> {
    /// Go on with the phase step on this object.
    Proceed(K),
    /// Stop this attempt here.
    Stop(Attempt),
}

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
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
        if object.meta().deletion_timestamp.is_none() {
            if present {
                return Ok(Gate::Proceed(object));
            }
            let mut all = object.finalizers().to_vec();
            all.push(finalizer.to_owned());
            return Ok(match self.patch_finalizers(api, &object, &all).await? {
                Write::Landed(added) => Gate::Proceed(added),
                Write::Conflict => Gate::Stop(Attempt::Conflict),
                Write::Gone => Gate::Stop(Attempt::Done(None)),
                Write::Fenced(requeue) => Gate::Stop(Attempt::Done(requeue)),
            });
        }
        if !present {
            return Ok(Gate::Stop(Attempt::Done(None)));
        }
        let skipped = pause::skips_cleanup(object.meta());
        if !skipped {
            if let Some(reason) = pause::requested(object.meta()) {
                return self
                    .paused(api, &object, reason, true)
                    .await
                    .map(Gate::Stop);
            }
            // Boxed, as the phase handlers' steps are (see `step_plan::plan`): user code's
            // future on the heap, the engine's small.
            let cleanup = Box::pin(K::cleanup(&self.handler, &object, &self.context))
                .await
                .map_err(|e| ReconcileError::Handler(Box::new(e)))?;
            if let Cleanup::InProgress(after) = cleanup {
                return Ok(Gate::Stop(Attempt::Done(Some(after))));
            }
            // Then the children declared with an order, in reverse `after:` order; each one's
            // deletion event brings the object back here for the next.
            let step = Step::new(&object, Timestamp::now(), self.context.clone());
            if !Box::pin(K::remove_children(&step)).await? {
                return Ok(Gate::Stop(Attempt::Done(Some(CHILD_REMOVAL_RECHECK))));
            }
        }
        let rest: Vec<String> = object
            .finalizers()
            .iter()
            .filter(|f| *f != finalizer)
            .cloned()
            .collect();
        match self.patch_finalizers(api, &object, &rest).await? {
            Write::Landed(_) => {}
            Write::Conflict => return Ok(Gate::Stop(Attempt::Conflict)),
            // Already gone (a stale duplicate of this step removed the finalizer).
            Write::Gone => return Ok(Gate::Stop(Attempt::Done(None))),
            Write::Fenced(requeue) => return Ok(Gate::Stop(Attempt::Done(requeue))),
        }
        // The memory stays until the object leaves the cache: its stale-cache guard keeps a late
        // copy that still shows the finalizer from running cleanup again.
        let (reason, note) = if skipped {
            let note = format!(
                "removed finalizer {finalizer} without cleanup, as {} asks: what the object made is left behind",
                pause::SKIP_CLEANUP_ANNOTATION
            );
            ("CleanupSkipped", note)
        } else {
            ("CleanupDone", format!("removed finalizer {finalizer}"))
        };
        self.event(
            &object,
            EventType::Normal,
            reason,
            "Cleanup".to_owned(),
            note,
        )
        .await;
        Ok(Gate::Stop(Attempt::Done(None)))
    }

    /// Replaces `metadata.finalizers`, locked on the resourceVersion we read.
    async fn patch_finalizers(
        &self,
        api: &Api<K>,
        object: &K,
        finalizers: &[String],
    ) -> Result<Write<K>, ReconcileError> {
        let patch = serde_json::json!({ "metadata": { "finalizers": finalizers } });
        self.write_object(api, object, &patch).await
    }
}
