//! Per-object exponential backoff with jitter for failed reconciles, reset on success
//! (kube's Controller retries errors at whatever the error policy returns; it keeps no state:
//! the counts live in the engine's per-object memory).

use std::time::Duration;

/// Backoff settings: the first delay doubles per consecutive failure up to `max`, then each
/// delay is drawn uniformly from [delay/2, delay] so failing objects do not retry in lockstep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Upper bound.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The delay before retry number `failures` (1 = after the first failure), without jitter.
    pub fn ceiling(&self, failures: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failures.saturating_sub(1).min(31))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The jittered delay for `failures`, with `unit` in [0, 1) as the random draw.
    pub fn delay(&self, failures: u32, unit: f64) -> Duration {
        let ceiling = self.ceiling(failures);
        ceiling / 2 + ceiling.mul_f64(unit.clamp(0.0, 1.0) / 2.0)
    }

    /// The delay for `failures`, with a random draw.
    pub fn jittered(&self, failures: u32) -> Duration {
        self.delay(failures, fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(10),
        };
        assert_eq!(b.ceiling(1), Duration::from_secs(1));
        assert_eq!(b.ceiling(2), Duration::from_secs(2));
        assert_eq!(b.ceiling(4), Duration::from_secs(8));
        assert_eq!(b.ceiling(5), Duration::from_secs(10));
        assert_eq!(b.ceiling(500), Duration::from_secs(10));
        assert_eq!(b.delay(3, 0.0), Duration::from_secs(2));
        let near_top = b.delay(3, 0.999_999);
        assert!(near_top > Duration::from_millis(3_999) && near_top < Duration::from_secs(4));
        assert_eq!(
            b.delay(3, 7.0),
            Duration::from_secs(4),
            "the draw is clamped to [0, 1]"
        );
    }
}
