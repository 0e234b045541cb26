//! Per-object exponential backoff with jitter for failed reconciles, reset on success
//! (kube's Controller retries errors at whatever the error policy returns; it keeps no state:
//! the counts live in the engine's per-object memory), and when to retry after each kind of
//! failure ([`Backoff::retry`]).

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

    /// When to retry an object after its `failures`-th failure in a row, of kind `failure`,
    /// with `unit` in [0, 1) as the random draw:
    /// - a handler's (or any non-server) failure: the jittered backoff;
    /// - the API server answering with a `Retry-After` (429, 5xx): that long (plus up to 20 %
    ///   jitter) for the first [`RETRY_AFTER_RETRIES`] failures in a row, as client-go retries
    ///   such a request, and never sooner than it after that, when the backoff takes over. A
    ///   flaky server's chance runs of refusals then cost each object a second or two, not a
    ///   backoff doubled to half a minute; the server itself is protected by the adaptive
    ///   concurrency (the `pace` module), which bounds the retries in flight whatever each
    ///   object's delay;
    /// - the server unreachable or failing without a `Retry-After`: the backoff, capped at
    ///   `reconnect_max` (the watch's reconnect cap; the object is also rescheduled at once
    ///   when the connection comes back);
    /// - an admission webhook the API server could not call: the backoff, capped at
    ///   [`WEBHOOK_RETRY`] (plus up to 20 %), so the object goes on within seconds of the
    ///   webhook's return;
    /// - a request refused for want of a permission (RBAC): `reconnect_max` (plus up to 20 %)
    ///   from the first refusal on: a missing permission does not come back by itself, and
    ///   quick retries would only hammer the API server until someone grants it;
    /// - writes that kept conflicting with another writer's: [`CONFLICT_RETRY`] with ±50 %
    ///   jitter, however many times in a row — nothing is wrong with the object, it lost a race,
    ///   and a growing backoff would only leave it behind a busy co-writer for minutes.
    pub fn retry(
        &self,
        failures: u32,
        failure: Failure,
        reconnect_max: Duration,
        unit: f64,
    ) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        let backoff = self.delay(failures, unit);
        let jittered = |d: Duration| d.mul_f64(1.0 + unit * 0.2);
        match failure {
            Failure::Other => backoff,
            Failure::WebhookUnreachable => backoff.min(jittered(WEBHOOK_RETRY)),
            Failure::Refused => jittered(reconnect_max),
            Failure::Conflicted => CONFLICT_RETRY.mul_f64(0.5 + unit),
            Failure::Server {
                retry_after: Some(after),
            } if failures <= RETRY_AFTER_RETRIES => jittered(after),
            Failure::Server { retry_after } => backoff
                .min(reconnect_max)
                .max(retry_after.unwrap_or_default()),
        }
    }
}

/// How many failures in a row of an object are retried after the server's `Retry-After`
/// alone (client-go retries a request so answered up to 10 times).
pub const RETRY_AFTER_RETRIES: u32 = 10;

/// The longest wait before an object whose write was refused for want of an admission
/// webhook (down under `failurePolicy: Fail`) is retried.
pub const WEBHOOK_RETRY: Duration = Duration::from_secs(4);

/// The delay (±50 %) before an object whose writes kept conflicting is retried.
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// What a reconcile failed of, as far as its retry goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server could not be reached or could not serve the request (transport, 429,
    /// 5xx), with its `Retry-After` if it gave one.
    Server {
        /// The server's `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// The API server could not call an admission webhook (under `failurePolicy: Fail`).
    WebhookUnreachable,
    /// The API server refused a request for want of a permission (RBAC).
    Refused,
    /// Every write of the reconcile conflicted with another writer's.
    Conflicted,
    /// Anything else: a handler's failure, a refusal of this object's request.
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicts_are_retried_soon_however_many_in_a_row() {
        let b = Backoff::default();
        let cap = Duration::from_secs(30);
        for failures in [1, 5, 40] {
            let low = b.retry(failures, Failure::Conflicted, cap, 0.0);
            let high = b.retry(failures, Failure::Conflicted, cap, 0.999);
            assert_eq!(low, Duration::from_millis(100), "failure {failures}");
            assert!(
                high < Duration::from_millis(300),
                "failure {failures}: {high:?}"
            );
        }
    }

    #[test]
    fn a_retry_after_is_honoured_as_it_stands_ten_times_before_the_backoff_grows() {
        let b = Backoff::default();
        let cap = Duration::from_secs(30);
        let one = Failure::Server {
            retry_after: Some(Duration::from_secs(1)),
        };
        // A flaky server's chance run of refusals: each waits the server's second (plus up to
        // 20 %), not 0.5, 1, 2, 4 … 30 s (before: the seventh waited 16–30 s).
        for failures in 1..=RETRY_AFTER_RETRIES {
            let low = b.retry(failures, one, cap, 0.0);
            let high = b.retry(failures, one, cap, 0.999);
            assert_eq!(low, Duration::from_secs(1), "failure {failures}");
            assert!(
                high < Duration::from_millis(1_200),
                "failure {failures}: {high:?}"
            );
        }
        // Past that, the condition persists: the backoff, capped at the reconnect cap.
        assert_eq!(b.retry(11, one, cap, 0.0), cap);
        assert_eq!(b.retry(40, one, cap, 0.999), cap);
        // A longer Retry-After is never cut short.
        let long = Failure::Server {
            retry_after: Some(Duration::from_secs(60)),
        };
        assert_eq!(b.retry(20, long, cap, 0.0), Duration::from_secs(60));
        // A server failing without one: the backoff, within the cap.
        let bare = Failure::Server { retry_after: None };
        assert_eq!(b.retry(1, bare, cap, 0.0), Duration::from_millis(250));
        assert_eq!(b.retry(12, bare, cap, 0.0), cap);
        // A handler's failure: the backoff, up to its own maximum.
        assert_eq!(
            b.retry(12, Failure::Other, cap, 0.0),
            Duration::from_secs(150)
        );
        // A webhook down: within seconds.
        assert_eq!(
            b.retry(12, Failure::WebhookUnreachable, cap, 0.0),
            WEBHOOK_RETRY
        );
        assert_eq!(
            b.retry(1, Failure::WebhookUnreachable, cap, 0.0),
            Duration::from_millis(250)
        );
    }

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
