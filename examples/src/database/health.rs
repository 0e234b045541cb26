//! What the Service's EndpointSlices say, as the Database's `ServiceAvailable`: a pure
//! function of the cached slices, so that the condition claims nothing the EndpointSlice
//! controller has not reported. (`PodsReady` is the engine's: `from: db.ready` in the spec,
//! by kstatus's rules for the StatefulSet.)

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
