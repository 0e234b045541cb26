//! What a stored object says about its machine: phase, entry time, conditions, pause.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::ObjectMeta;
use kube_fsm::machine::{PAUSED_ANNOTATION, pause_requested, paused_for};
use serde_json::Value;

/// A stored object, read as JSON.
pub struct Stored<'a>(pub &'a Value);

impl<'a> Stored<'a> {
    /// `metadata.name`.
    pub fn name(&self) -> &'a str {
        self.0["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// `metadata.namespace`, or "".
    pub fn namespace(&self) -> &'a str {
        self.0["metadata"]["namespace"].as_str().unwrap_or_default()
    }

    /// `metadata.uid`, or "".
    pub fn uid(&self) -> &'a str {
        self.0["metadata"]["uid"].as_str().unwrap_or_default()
    }

    /// `status.phase`.
    pub fn phase(&self) -> Option<&'a str> {
        self.0["status"]["phase"].as_str()
    }

    /// When the current phase was entered, if the recorded time is its own.
    pub fn entered(&self) -> Option<Timestamp> {
        let status = &self.0["status"];
        let entered_phase = status["enteredPhase"].as_str();
        if entered_phase.is_some() && entered_phase != self.phase() {
            return None;
        }
        status["lastPhaseTransitionTime"].as_str()?.parse().ok()
    }

    /// The condition of `type_`: its status, reason, message and last transition time.
    pub fn condition(&self, type_: &str) -> Option<&Value> {
        self.0["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
    }

    /// The status of condition `type_` (`True`, `False`, `Unknown`), or `absent`.
    pub fn condition_status(&self, type_: &str) -> &str {
        self.condition(type_)
            .and_then(|c| c["status"].as_str())
            .unwrap_or("absent")
    }

    /// The pause annotation's value, while it pauses the object (as the engine reads it).
    pub fn paused(&self) -> Option<&str> {
        let meta: ObjectMeta = serde_json::from_value(self.0["metadata"].clone()).ok()?;
        pause_requested(&meta)?;
        self.0["metadata"]["annotations"][PAUSED_ANNOTATION].as_str()
    }

    /// Time spent paused in the current phase at `now`, as the engine counts it toward the
    /// phase's timeout.
    pub fn paused_for(&self, now: Timestamp) -> SignedDuration {
        let status = &self.0["status"];
        let conditions: Vec<Condition> =
            serde_json::from_value(status["conditions"].clone()).unwrap_or_default();
        let paused = paused_for(status["pausedSeconds"].as_i64(), &conditions, now);
        SignedDuration::try_from(paused).unwrap_or(SignedDuration::MAX)
    }
}

/// A duration as kubectl writes ages: `45s`, `12m`, `3h20m`, `2d4h`.
pub fn human(duration: SignedDuration) -> String {
    let secs = duration.as_secs().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => match (secs / 3600, secs % 3600 / 60) {
            (h, 0) => format!("{h}h"),
            (h, m) => format!("{h}h{m}m"),
        },
        _ => match (secs / 86_400, secs % 86_400 / 3600) {
            (d, 0) => format!("{d}d"),
            (d, h) => format!("{d}d{h}h"),
        },
    }
}

/// A duration in milliseconds as the spec writes it: `10m`, `90s`, `6h`.
pub fn spec_duration(ms: u64) -> String {
    human(SignedDuration::from_millis(
        i64::try_from(ms).unwrap_or(i64::MAX),
    ))
}
