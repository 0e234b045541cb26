//! Per-object exponential backoff with jitter for failed reconciles, reset on success
//! (kube's Controller retries errors at whatever the error policy returns; it keeps no state).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
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
}

/// Consecutive failure counts per object.
#[derive(Debug)]
pub struct FailureCounts<Key> {
    counts: Mutex<HashMap<Key, u32>>,
}

impl<Key> Default for FailureCounts<Key> {
    fn default() -> Self {
        FailureCounts {
            counts: Mutex::new(HashMap::new()),
        }
    }
}

impl<Key: Eq + Hash> FailureCounts<Key> {
    /// Records a failure and returns the count so far.
    pub fn fail(&self, key: Key) -> u32 {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets the failures of `key` (after a success).
    pub fn reset(&self, key: &Key) {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
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

    #[test]
    fn counts_reset_on_success() {
        let f = FailureCounts::default();
        assert_eq!(f.fail("a"), 1);
        assert_eq!(f.fail("a"), 2);
        assert_eq!(f.fail("b"), 1);
        f.reset(&"a");
        assert_eq!(f.fail("a"), 1);
    }
}
