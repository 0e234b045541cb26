//! The engine's writes: merge patches locked on the resourceVersion they were computed from,
//! so a write lands only over exactly the object that was read. Each landed write teaches the
//! stale-cache guard the version the server returned. A step's write refused because another
//! writer touched what the step does not read is sent again over the object as it is now
//! (see `pure::rebase`).

use kube::api::Patch;
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::engine::{During, Engine, EngineRequest, Reconcilable, ReconcileError, Requeue};
use crate::pure::rebase;
use crate::replicas::turn;

/// How a locked write ended.
pub(crate) enum Write<K> {
    /// Accepted; the object as the server returned it.
    Landed(K),
    /// 409: someone else wrote the object since it was read.
    Conflict,
    /// 404: the object is gone.
    Gone,
    /// Not written: this replica's leadership, or the holding of the object's shard this
    /// reconcile started under, ended or is late (see [`crate::replicas::turn`]); when to
    /// look again (soon while the renewal is only late,
    /// so a timeout or requeue this step computed is deferred, not lost).
    Fenced(Requeue),
}

/// Where a patch goes.
#[derive(Clone, Copy)]
enum Target {
    Object,
    Status,
}

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Merge-patches the status subresource of `object` with `patch` (`{"status": ...}`).
    pub(crate) async fn write_status(
        &self,
        api: &Api<K>,
        object: &K,
        patch: &Value,
    ) -> Result<Write<K>, ReconcileError> {
        let written = self.locked(api, object, patch, Target::Status).await?;
        if matches!(written, Write::Landed(_)) {
            self.metrics.status_written();
        }
        Ok(written)
    }

    /// A step's status write ([`Self::write_status`]): on a conflict, the object is read again,
    /// and while it is the same to a step as `object` (another writer changed only what the
    /// step does not read), the same `patch` is sent over it, up to `max_conflict_retries`
    /// times; `Write::Conflict` when what the step read changed (the step is redone).
    pub(crate) async fn write_step_status(
        &self,
        api: &Api<K>,
        object: &K,
        patch: &Value,
    ) -> Result<Write<K>, ReconcileError> {
        let mut written = self.write_status(api, object, patch).await?;
        if !matches!(written, Write::Conflict) {
            return Ok(written);
        }
        // Only after a conflict: what the step read, to compare the fresh object with.
        let read_status = serde_json::to_value(object.status_of())?;
        for _ in 0..self.config.max_conflict_retries {
            if !matches!(written, Write::Conflict) {
                break;
            }
            let Some(fresh) = api
                .get_opt(&object.name_any())
                .await
                .during(EngineRequest::ReRead)?
            else {
                self.memory.forget(object);
                return Ok(Write::Gone);
            };
            let fresh_status = serde_json::to_value(fresh.status_of())?;
            if !rebase::same_to_a_step(object.meta(), &read_status, fresh.meta(), &fresh_status) {
                return Ok(Write::Conflict);
            }
            self.metrics.conflict();
            let version = fresh.resource_version();
            self.memory
                .with(&fresh, |e| e.versions.read(version.as_deref()));
            written = self.write_status(api, &fresh, patch).await?;
        }
        Ok(written)
    }

    /// Merge-patches the object itself (its metadata: the finalizers) with `patch`.
    pub(crate) async fn write_object(
        &self,
        api: &Api<K>,
        object: &K,
        patch: &Value,
    ) -> Result<Write<K>, ReconcileError> {
        self.locked(api, object, patch, Target::Object).await
    }

    async fn locked(
        &self,
        api: &Api<K>,
        object: &K,
        patch: &Value,
        target: Target,
    ) -> Result<Write<K>, ReconcileError> {
        let based_on = object.resource_version();
        let mut patch = patch.clone();
        patch["metadata"]["resourceVersion"] = based_on.clone().into();
        let name = object.name_any();
        let params = self.patch_params();
        self.context.pace().write().await;
        let request = async {
            match target {
                Target::Status => {
                    api.patch_status(&name, &params, &Patch::Merge(&patch))
                        .await
                }
                Target::Object => api.patch(&name, &params, &Patch::Merge(&patch)).await,
            }
        };
        let Some(result) = turn::write(request).await else {
            return Ok(Write::Fenced(self.turns().again(object.meta())));
        };
        match result {
            Ok(written) => {
                self.health.restored();
                let returned = written.resource_version();
                self.memory.with(object, |e| {
                    e.versions.wrote(based_on.as_deref(), returned.as_deref());
                });
                Ok(Write::Landed(written))
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(Write::Conflict),
            Err(kube::Error::Api(status)) if status.is_not_found() => {
                self.memory.forget(object);
                Ok(Write::Gone)
            }
            Err(err) => Err(err).during(match target {
                Target::Status => EngineRequest::StatusWrite,
                Target::Object => EngineRequest::Finalizer,
            }),
        }
    }
}
