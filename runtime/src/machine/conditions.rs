//! metav1.Condition handling with apimachinery's rules (`meta.SetStatusCondition`):
//! upsert by type; `lastTransitionTime` moves only when `status` changes; reason, message and
//! observedGeneration always follow the latest call. Times are whole seconds, as Kubernetes
//! stores them, so a "changed?" comparison after a round trip does not lie.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{Timestamp, TimestampRound, Unit};

/// Errors of condition updates.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConditionError {
    /// The reason does not match Kubernetes' `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`.
    #[error(
        "invalid condition reason {0:?}: use a CamelCase word (letters, digits, `_`, `,`, `:`), e.g. \"PodsReady\""
    )]
    InvalidReason(String),
    /// The message is longer than Kubernetes allows (32768 bytes).
    #[error("condition message is {0} bytes, over Kubernetes' 32768-byte limit")]
    MessageTooLong(usize),
}

/// Checks a condition reason against the Kubernetes pattern and 1024-character limit.
pub fn validate_reason(reason: &str) -> Result<(), ConditionError> {
    let bytes = reason.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 1024
        && bytes[0].is_ascii_alphabetic()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':'))
        && !matches!(bytes[bytes.len() - 1], b',' | b':');
    if ok {
        Ok(())
    } else {
        Err(ConditionError::InvalidReason(reason.to_owned()))
    }
}

/// `now` truncated to whole seconds, as Kubernetes serialises times.
pub fn truncate(now: Timestamp) -> Time {
    Time(
        now.round(
            TimestampRound::new()
                .smallest(Unit::Second)
                .mode(k8s_openapi::jiff::RoundMode::Trunc),
        )
        .unwrap_or(now),
    )
}

/// The status string for a boolean.
pub fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// Upserts a condition. Returns whether anything a reader can see changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    observed_generation: Option<i64>,
    now: Timestamp,
) -> Result<bool, ConditionError> {
    validate_reason(reason)?;
    if message.len() > 32_768 {
        return Err(ConditionError::MessageTooLong(message.len()));
    }
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation,
            last_transition_time: truncate(now),
        });
        return Ok(true);
    };
    let mut changed = false;
    if existing.status != status {
        existing.status = status.to_owned();
        existing.last_transition_time = truncate(now);
        changed = true;
    }
    if existing.reason != reason {
        existing.reason = reason.to_owned();
        changed = true;
    }
    if existing.message != message {
        existing.message = message;
        changed = true;
    }
    if existing.observed_generation != observed_generation {
        existing.observed_generation = observed_generation;
        changed = true;
    }
    Ok(changed)
}

/// The status of a condition type: `Some(true)` for True, `Some(false)` for False, `None` when
/// absent or Unknown.
pub fn status_of(conditions: &[Condition], type_: &str) -> Option<bool> {
    match conditions
        .iter()
        .find(|c| c.type_ == type_)?
        .status
        .as_str()
    {
        "True" => Some(true),
        "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64, nanos: i32) -> Timestamp {
        Timestamp::new(seconds, nanos).unwrap()
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut c = Vec::new();
        assert!(
            set(
                &mut c,
                "Ready",
                "False",
                "Starting",
                "m".into(),
                Some(1),
                at(100, 700_000_000)
            )
            .unwrap()
        );
        assert_eq!(c[0].last_transition_time.0, at(100, 0));
        // Same status, new reason/message/generation: updated, time kept.
        assert!(
            set(
                &mut c,
                "Ready",
                "False",
                "Waiting",
                "m2".into(),
                Some(2),
                at(200, 0)
            )
            .unwrap()
        );
        assert_eq!(
            (
                c[0].reason.as_str(),
                c[0].message.as_str(),
                c[0].observed_generation
            ),
            ("Waiting", "m2", Some(2))
        );
        assert_eq!(c[0].last_transition_time.0, at(100, 0));
        // Nothing changed: reports no change.
        assert!(
            !set(
                &mut c,
                "Ready",
                "False",
                "Waiting",
                "m2".into(),
                Some(2),
                at(300, 0)
            )
            .unwrap()
        );
        // Status flips: time moves.
        assert!(
            set(
                &mut c,
                "Ready",
                "True",
                "Up",
                String::new(),
                Some(2),
                at(400, 5)
            )
            .unwrap()
        );
        assert_eq!(c[0].last_transition_time.0, at(400, 0));
        assert_eq!(c.len(), 1);
        assert_eq!(status_of(&c, "Ready"), Some(true));
        assert_eq!(status_of(&c, "Other"), None);
    }

    #[test]
    fn reasons_follow_the_kubernetes_pattern() {
        for ok in ["A", "PodsReady", "a_b", "X1,y:z9"] {
            assert_eq!(validate_reason(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "has space",
            "Trailing:",
            "dash-ed",
            &"A".repeat(1025),
        ] {
            assert!(validate_reason(bad).is_err(), "{bad}");
        }
        let mut c = Vec::new();
        assert!(
            set(
                &mut c,
                "Ready",
                "True",
                "not ok",
                String::new(),
                None,
                at(1, 0)
            )
            .is_err()
        );
        assert!(c.is_empty());
    }
}
