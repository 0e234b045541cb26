//! What the workload's own status says, as the Database's two conditions: pure functions of
//! the cached StatefulSet and EndpointSlices (the rules kstatus applies to a StatefulSet), so
//! that no condition claims what the controllers have not reported.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// A condition's value with its reason and a sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the condition holds.
    pub holds: bool,
    /// Its reason (CamelCase).
    pub reason: &'static str,
    /// Its message, a sentence.
    pub message: String,
}

impl Verdict {
    fn new(holds: bool, reason: &'static str, message: String) -> Self {
        Verdict {
            holds,
            reason,
            message,
        }
    }
}

/// `PodsReady`: the StatefulSet controller has seen its latest spec, its update is rolled out
/// (current revision = update revision), and exactly `desired` replicas exist, are ready and
/// are up to date.
#[must_use]
pub fn pods_ready(set: Option<&StatefulSet>, desired: u32) -> Verdict {
    let Some(set) = set else {
        return Verdict::new(
            false,
            "StatefulSetMissing",
            "Its StatefulSet has just been applied; the controller has not reported on it yet."
                .into(),
        );
    };
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let status = set.status.clone().unwrap_or_default();
    let generation = set.metadata.generation.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Verdict::new(
            false,
            "Progressing",
            format!(
                "The StatefulSet controller has not yet seen generation {generation} of {name}."
            ),
        );
    }
    let count = |n: Option<i32>| u32::try_from(n.unwrap_or(0)).unwrap_or(0);
    let (ready, existing) = (count(status.ready_replicas), count(Some(status.replicas)));
    if existing > desired {
        return Verdict::new(
            false,
            "ScalingDown",
            format!("{name} scales down to {desired} replicas; {existing} still exist."),
        );
    }
    let current = status.current_revision.unwrap_or_default();
    let update = status.update_revision.unwrap_or_default();
    let updated = count(status.updated_replicas);
    if current != update {
        return Verdict::new(
            false,
            "RollingOut",
            format!("{name} rolls out revision {update}: {updated} of {desired} replicas updated."),
        );
    }
    let up = ready.min(existing).min(updated);
    if up < desired {
        return Verdict::new(
            false,
            "ReplicasNotReady",
            format!("{up} of {desired} replicas of {name} are ready."),
        );
    }
    Verdict::new(
        true,
        "ReplicasReady",
        format!("{desired} of {desired} replicas of {name} are ready, at revision {current}."),
    )
}

/// `ServiceAvailable`: the Service's EndpointSlices list at least one ready endpoint (an
/// endpoint whose `ready` is unset counts as ready, as the API says).
#[must_use]
pub fn service_available(slices: &[std::sync::Arc<EndpointSlice>], endpoint: &str) -> Verdict {
    let ready = slices
        .iter()
        .flat_map(|slice| slice.endpoints.iter().flatten())
        .filter(|e| !e.addresses.is_empty())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .count();
    if ready == 0 {
        return Verdict::new(
            false,
            "NoReadyEndpoints",
            format!("Nothing answers at {endpoint} yet: its Service has no ready endpoint."),
        );
    }
    Verdict::new(
        true,
        "EndpointsReady",
        format!("Answers at {endpoint} ({ready} ready endpoint(s))."),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn set(generation: i64, status: serde_json::Value) -> StatefulSet {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "db", "generation": generation },
            "status": status,
        }))
        .expect("a StatefulSet")
    }

    fn settled(ready: i32, current: &str, update: &str) -> serde_json::Value {
        serde_json::json!({
            "observedGeneration": 2, "replicas": 3, "readyReplicas": ready,
            "updatedReplicas": 3, "currentRevision": current, "updateRevision": update,
        })
    }

    #[test]
    fn pods_are_ready_only_when_the_controller_says_every_replica_is() {
        assert!(!pods_ready(None, 3).holds);
        let unseen = pods_ready(Some(&set(3, settled(3, "a", "a"))), 3);
        assert_eq!(unseen.reason, "Progressing");
        let lost = pods_ready(Some(&set(2, settled(2, "a", "a"))), 3);
        assert_eq!(
            (lost.reason, lost.message.as_str()),
            ("ReplicasNotReady", "2 of 3 replicas of db are ready.")
        );
        let rolling = pods_ready(Some(&set(2, settled(3, "a", "b"))), 3);
        assert_eq!(rolling.reason, "RollingOut");
        let ready = pods_ready(Some(&set(2, settled(3, "a", "a"))), 3);
        assert!(ready.holds, "{ready:?}");
        assert_eq!(
            ready.message,
            "3 of 3 replicas of db are ready, at revision a."
        );
        let scaled_up = pods_ready(Some(&set(2, settled(3, "a", "a"))), 5);
        assert!(!scaled_up.holds);
    }

    #[test]
    fn the_service_is_available_with_one_ready_endpoint() {
        let slice = |ready: &[Option<bool>]| {
            let endpoints: Vec<_> = ready
                .iter()
                .map(|r| serde_json::json!({ "addresses": ["10.0.0.1"], "conditions": { "ready": r } }))
                .collect();
            Arc::new(
                serde_json::from_value::<EndpointSlice>(serde_json::json!({
                    "addressType": "IPv4", "endpoints": endpoints, "metadata": {},
                }))
                .expect("an EndpointSlice"),
            )
        };
        let at = "db.ns.svc:5432";
        assert!(!service_available(&[], at).holds);
        assert!(!service_available(&[slice(&[Some(false)])], at).holds);
        let up = service_available(&[slice(&[Some(false), None]), slice(&[Some(true)])], at);
        assert!(up.holds);
        assert_eq!(
            up.message,
            "Answers at db.ns.svc:5432 (2 ready endpoint(s))."
        );
    }
}
