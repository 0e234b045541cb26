//! One `coordination.k8s.io/v1` Lease, held the way client-go's leader election holds it: try
//! to acquire or renew with an optimistic lock on the Lease's resourceVersion; a Lease held by
//! another identity counts as expired only once its record has not changed for its duration
//! *as observed on this replica's clock* (so clock skew between replicas does not matter).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::time::Instant;

/// Errors of a Lease operation.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused the request or could not be reached.
    #[error("Lease request failed: {0}")]
    Kube(#[from] kube::Error),
}

/// What this replica last saw of the Lease, and when (on its own clock).
#[derive(Debug, Default)]
pub(crate) struct Observed {
    record: Option<(Option<String>, Option<String>)>,
    at: Option<Instant>,
}

impl Observed {
    /// Notes the record `(holder, renewTime)`; the clock restarts only when it changed.
    fn note(&mut self, holder: Option<String>, renewed: Option<String>) {
        let record = Some((holder, renewed));
        if self.record != record || self.at.is_none() {
            self.record = record;
            self.at = Some(Instant::now());
        }
    }

    /// Whether the record last seen names `identity` as the holder.
    pub fn held_by(&self, identity: &str) -> bool {
        matches!(&self.record, Some((Some(holder), _)) if holder == identity)
    }

    /// Notes `lease` as read and tells whether it is free for `identity` to take: nobody
    /// holds it, or its holder has not renewed it for its duration on this replica's clock.
    pub fn free(&mut self, lease: Option<&Lease>, identity: &str, default: Duration) -> bool {
        let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
            return true;
        };
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        self.note(
            holder.clone(),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
        );
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(default, Duration::from_secs);
        match holder {
            None => true,
            Some(holder) => holder != identity && !self.still_valid(duration),
        }
    }

    /// Whether a record held by someone else is still valid for `duration` since observed.
    fn still_valid(&self, duration: Duration) -> bool {
        self.at.is_some_and(|at| at.elapsed() < duration)
    }
}

/// The Lease `name` and who this replica is.
#[derive(Clone, Debug)]
pub(crate) struct LeaseLock {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

impl LeaseLock {
    /// Acquires the Lease if it is free or expired, or renews it if this replica holds it.
    /// `Ok(true)` when this replica holds it afterwards.
    pub async fn try_acquire_or_renew(&self, observed: &mut Observed) -> Result<bool, LeaseError> {
        let current = self.api.get_opt(&self.name).await?;
        self.acquire_or_renew(current, observed).await
    }

    /// [`LeaseLock::try_acquire_or_renew`] over `current`, the Lease as just read (`None`:
    /// it does not exist).
    pub async fn acquire_or_renew(
        &self,
        current: Option<Lease>,
        observed: &mut Observed,
    ) -> Result<bool, LeaseError> {
        let now = MicroTime(Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(status)) if status.is_conflict() || status.code == 409 => {
                    Ok(false)
                }
                Err(err) => Err(err.into()),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let free = observed.free(Some(&current), &self.identity, self.duration);
        if !ours && !free {
            return Ok(false);
        }
        let mut renewed = spec.clone();
        renewed.holder_identity = Some(self.identity.clone());
        renewed.lease_duration_seconds = Some(seconds);
        renewed.renew_time = Some(now.clone());
        if !ours {
            renewed.acquire_time = Some(now);
            renewed.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        self.write(&current, renewed).await
    }

    /// Gives the Lease up if this replica holds it, so another can take it at once.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = current.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let mut released = spec;
        released.holder_identity = None;
        released.lease_duration_seconds = Some(1);
        released.renew_time = Some(MicroTime(Timestamp::now()));
        self.write(&current, released).await.map(drop)
    }

    /// Writes `spec` over `current`, locked on its resourceVersion. `Ok(false)` on conflict.
    async fn write(&self, current: &Lease, spec: LeaseSpec) -> Result<bool, LeaseError> {
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": current.metadata.resource_version },
            "spec": {
                "holderIdentity": spec.holder_identity,
                "leaseDurationSeconds": spec.lease_duration_seconds,
                "acquireTime": spec.acquire_time,
                "renewTime": spec.renew_time,
                "leaseTransitions": spec.lease_transitions,
            },
        });
        let params = PatchParams {
            field_manager: Some(self.identity.clone()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch(&self.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}
