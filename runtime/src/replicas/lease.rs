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

use crate::watch::health::Health;

/// Errors of a Lease operation.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server refused the request or could not be reached.
    #[error("Lease request failed: {0}")]
    Kube(#[from] kube::Error),
}

impl LeaseError {
    /// Whether this is an RBAC refusal, recorded in `health` (which logs it once) if so.
    pub(crate) fn refused(&self, health: &Health) -> bool {
        let LeaseError::Kube(err) = self;
        health.refused(err)
    }
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
    /// holds it, `identity` does (a restarted replica of the same name takes its own back), or
    /// its holder has not renewed it for its duration on this replica's clock.
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
            Some(holder) => holder == identity || !self.still_valid(duration),
        }
    }

    /// Whether a record held by someone else is still valid for `duration` since observed.
    fn still_valid(&self, duration: Duration) -> bool {
        self.at.is_some_and(|at| at.elapsed() < duration)
    }
}

/// Who this replica is among the holders of a set of Leases, and client-go's timing for them
/// (`LeaseDuration`, `RenewDeadline`, `RetryPeriod`): shared by leader election and sharding.
#[derive(Clone, Debug)]
pub(crate) struct Timing {
    pub identity: String,
    pub duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for Timing {
    /// Identity = the host name plus a random suffix; 15 s, 10 s, 2 s.
    fn default() -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "kube-fsm".into());
        Timing {
            identity: format!("{host}-{:08x}", fastrand::u32(..)),
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Whole seconds, at least 2; the renew deadline and retry period shrink to fit (at most
    /// 2/3 and 1/5 of it).
    pub fn set_duration(&mut self, duration: Duration) {
        self.duration = Duration::from_secs(duration.as_secs().max(2));
        self.renew_deadline = self.renew_deadline.min(self.duration * 2 / 3);
        self.retry_period = self.retry_period.min(self.duration / 5);
    }

    /// Less than the duration; at least twice the retry period.
    pub fn set_renew_deadline(&mut self, deadline: Duration) {
        self.renew_deadline = deadline.clamp(self.retry_period * 2, self.duration * 9 / 10);
    }

    /// At least 100 ms, at most half the renew deadline.
    pub fn set_retry_period(&mut self, period: Duration) {
        self.retry_period = period
            .max(Duration::from_millis(100))
            .min(self.renew_deadline / 2);
    }

    /// A pause of about one retry period (jittered by up to 20 %, as client-go's).
    pub async fn pause(&self) {
        tokio::time::sleep(self.retry_period.mul_f64(1.0 + fastrand::f64() * 0.2)).await;
    }

    /// The Lease `name` of `api`, held as this replica.
    pub fn lock(&self, api: &Api<Lease>, name: String) -> LeaseLock {
        LeaseLock {
            api: api.clone(),
            name,
            identity: self.identity.clone(),
            duration: self.duration,
        }
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
        if !observed.free(Some(&current), &self.identity, self.duration) {
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
