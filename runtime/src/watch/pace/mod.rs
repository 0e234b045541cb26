//! Pacing the operator's traffic so that it never overloads the API server.
//!
//! Two mechanisms, as TCP's congestion control and client-go's client-side rate limiter:
//! - an adaptive limit on reconciles in flight (AIMD): it halves when the API server signals
//!   *sustained* overload — the last [`OVERLOAD_RUN`] reconciles in a row, or at least 70 % of
//!   the last [`OVERLOAD_SAMPLES`] (none older than [`OVERLOAD_WINDOW`]; each cut needs fresh
//!   evidence), ended in 429 Too Many Requests
//!   or a 5xx other than an admission webhook the API server could not call (see
//!   [`webhook_unreachable`]), or ran out of time (see [`overload`]) — at most once per
//!   [`COOL_DOWN`], and grows by one per `limit` reconciles that succeed, back up to the configured concurrency. Once overload is
//!   sustained, and until a reconcile succeeds, a 429's `Retry-After` (the Status'
//!   `details.retryAfterSeconds`) also pauses every new reconcile until it has passed. A flaky server's sparse errors do neither: each delays
//!   only its own object, by its backoff and at least the server's `Retry-After` (as client-go
//!   retries that one request);
//! - optionally, a token bucket on the engine's and the steps' writes (status and metadata
//!   patches, applies, deletes, Events): at most `per_second` on average, `burst` at once.
//!
//! Reconciles waiting for a place are served in line, by [`Ticket`]: the number of their
//! object's first change since its last reconcile, first come, first served.
//!
//! The decisions ([`Aimd`], [`Bucket`]) are pure and take the time as an argument; [`Pace`]
//! puts them behind a lock and the waits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::task::{Context, Poll, Waker};
use tokio::time::Instant;

/// The shortest time between two decreases: the overload signals of one burst of requests
/// arrive together and must cut the limit once, not once per request.
pub const COOL_DOWN: Duration = Duration::from_millis(500);

/// How many of the last reconciles' outcomes tell sustained overload from sparse errors.
/// Forty, so that chance does not mimic overload: a flaky server refusing one request in
/// five fails about 36 % of the reconciles that write twice, and twenty such outcomes reach
/// a 60 % share every few hundred reconciles (the limit then sank to 3 and stayed low);
/// forty reach 70 % about once in 50 000.
pub const OVERLOAD_SAMPLES: usize = 40;
/// Outcomes older than this no longer count.
pub const OVERLOAD_WINDOW: Duration = Duration::from_secs(10);
/// The longest pause a `Retry-After` may impose (a server asking for more is still retried).
const MAX_PAUSE: Duration = Duration::from_secs(60);
/// The share of overloaded outcomes among the last ones that is sustained overload.
const OVERLOAD_SHARE: f64 = 0.7;
/// As many overloaded outcomes in a row are sustained overload too (sooner than the share:
/// 36 % of the reconciles failing at random makes such a run once in 27 000 outcomes).
pub const OVERLOAD_RUN: usize = 10;

/// The outcomes of the last reconciles (overloaded or not), newest last.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcomes(std::collections::VecDeque<(Instant, bool)>);

impl Outcomes {
    /// Records one outcome at `now`; returns whether the server is overloaded *now*: this
    /// outcome was, and so were the last [`OVERLOAD_RUN`], or at least 70 % of the last
    /// [`OVERLOAD_SAMPLES`] (all within [`OVERLOAD_WINDOW`]).
    pub fn record(&mut self, now: Instant, overloaded: bool) -> bool {
        self.0.push_back((now, overloaded));
        while self.0.len() > OVERLOAD_SAMPLES
            || self
                .0
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > OVERLOAD_WINDOW)
        {
            self.0.pop_front();
        }
        let bad = self.0.iter().filter(|(_, o)| *o).count();
        let run = self.0.iter().rev().take_while(|(_, o)| *o).count();
        overloaded
            && (run >= OVERLOAD_RUN
                || (self.0.len() >= OVERLOAD_SAMPLES
                    && bad as f64 >= OVERLOAD_SHARE * self.0.len() as f64))
    }

    /// Forgets every outcome: a cut has used their evidence, the next needs its own.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// The adaptive limit on reconciles in flight: additive increase, multiplicative decrease.
#[derive(Clone, Debug, PartialEq)]
pub struct Aimd {
    /// `usize::MAX`: unbounded (until the first overload).
    limit: usize,
    max: usize,
    /// Successes since the limit last grew.
    credit: usize,
    last_cut: Option<Instant>,
}

impl Aimd {
    /// Starts at `max` (`None`: unbounded until the first overload).
    pub fn new(max: Option<usize>) -> Self {
        let max = max.map_or(usize::MAX, |m| m.max(1));
        Aimd {
            limit: max,
            max,
            credit: 0,
            last_cut: None,
        }
    }

    /// How many reconciles may be in flight.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// One reconcile succeeded: the limit grows by one per `limit` successes (one round).
    pub fn succeeded(&mut self) {
        if self.limit >= self.max {
            return;
        }
        self.credit += 1;
        if self.credit >= self.limit {
            self.credit = 0;
            self.limit += 1;
        }
    }

    /// The API server signalled overload while `in_flight` reconciles ran: the limit halves
    /// (from what was really in flight, when that was less), once per [`COOL_DOWN`]. Returns
    /// whether it was cut.
    pub fn overloaded(&mut self, in_flight: usize, now: Instant) -> bool {
        if self
            .last_cut
            .is_some_and(|at| now.duration_since(at) < COOL_DOWN)
        {
            return false;
        }
        self.last_cut = Some(now);
        self.credit = 0;
        self.limit = (self.limit.min(in_flight) / 2).max(1);
        true
    }
}

/// A token bucket: `per_second` tokens a second, at most `burst` saved.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub fn new(per_second: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Bucket {
            per_second: per_second.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Takes a token: `None` when one was there, else how long until the taken token is due
    /// (the caller waits that long; tokens taken ahead queue up in order).
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.burst) - 1.0;
        self.at = now;
        (self.tokens < 0.0).then(|| {
            Duration::try_from_secs_f64(-self.tokens / self.per_second).unwrap_or(Duration::MAX)
        })
    }
}

/// The shared pacing state of one operator.
#[derive(Debug)]
pub struct Pace {
    state: Mutex<State>,
    /// The next [`Ticket`].
    tickets: AtomicU64,
    /// The objects with a change not reconciled yet, with the number of the first such
    /// change (by `namespace/name`).
    arrivals: Mutex<HashMap<String, u64>>,
}

/// A reconcile's place in line for a slot: the ticket of its object's first change since its
/// last reconcile ([`Pace::arrived`]), or one taken when kube's controller dispatches it.
/// Waiting reconciles get their slots in the order of their tickets — first come, first
/// served, as controller-runtime's work queue serves its objects — whatever order kube's
/// scheduler hands them over in (it reverses the triggers that fall due together).
/// Dropped before its slot, it leaves the line.
#[derive(Debug)]
pub struct Ticket {
    number: u64,
    pace: Arc<Pace>,
    /// In line ([`Ticket::enlist`], or waiting in [`Pace::reconcile`]).
    enlisted: bool,
}

impl Ticket {
    /// Its number: the lower, the earlier in line.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Takes its place in line now, before its reconcile first runs: no reconcile with a later
    /// ticket gets a slot before this one has (or has left the line). For reconciles that go
    /// straight to [`Pace::reconcile`]; one that may wait on something else first only gets
    /// in line once it asks for its slot.
    #[must_use]
    pub fn enlist(mut self) -> Self {
        self.pace.state().waiting.entry(self.number).or_insert(None);
        self.enlisted = true;
        self
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.enlisted {
            let mut state = self.pace.state();
            state.waiting.remove(&self.number);
            state.wake_first();
        }
    }
}

#[derive(Debug)]
struct State {
    aimd: Aimd,
    outcomes: Outcomes,
    /// Sustained overload was seen and no reconcile has succeeded since: every overloaded
    /// outcome counts (cuts, pauses) until one does.
    overloaded: bool,
    in_flight: usize,
    /// The reconciles in line for a slot, by ticket number, with what wakes each (none yet:
    /// enlisted, not yet polled).
    waiting: BTreeMap<u64, Option<Waker>>,
    paused_until: Option<Instant>,
    writes: Option<Bucket>,
    /// Where the limit is reported (`kube_fsm_concurrency_limit`).
    metrics: Option<std::sync::Arc<crate::metrics::MachineMetrics>>,
}

impl Default for Pace {
    /// Unbounded, no rate limit: adapts only after the first overload.
    fn default() -> Self {
        Pace::new(None, None)
    }
}

impl Pace {
    /// At most `concurrency` reconciles in flight (adaptive below that), and writes limited to
    /// `(per_second, burst)`.
    pub fn new(concurrency: Option<usize>, writes: Option<(f64, u32)>) -> Self {
        Pace {
            tickets: AtomicU64::new(0),
            arrivals: Mutex::new(HashMap::new()),
            state: Mutex::new(State {
                aimd: Aimd::new(concurrency),
                outcomes: Outcomes::default(),
                overloaded: false,
                in_flight: 0,
                waiting: BTreeMap::new(),
                paused_until: None,
                writes: writes.map(|(rate, burst)| Bucket::new(rate, burst, Instant::now())),
                metrics: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reports the limit into `metrics` from now on.
    pub(crate) fn with_metrics(
        self,
        metrics: std::sync::Arc<crate::metrics::MachineMetrics>,
    ) -> Self {
        {
            let mut state = self.state();
            metrics.concurrency_limit(state.aimd.limit());
            state.metrics = Some(metrics);
        }
        self
    }

    /// The current limit on reconciles in flight.
    #[cfg(test)]
    pub fn limit(&self) -> usize {
        self.state().aimd.limit()
    }

    fn number(&self) -> u64 {
        self.tickets.fetch_add(1, AtomicOrdering::Relaxed)
    }

    /// A place in line for a slot, after every ticket taken before.
    #[cfg(test)]
    pub fn ticket(self: &Arc<Self>) -> Ticket {
        let number = self.number();
        self.ticket_numbered(number)
    }

    fn ticket_numbered(self: &Arc<Self>, number: u64) -> Ticket {
        Ticket {
            number,
            pace: self.clone(),
            enlisted: false,
        }
    }

    fn arrivals(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.arrivals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The object `key` changed (its watch event, on its way to kube's controller): its place
    /// in line, unless it already has one.
    pub fn arrived(&self, key: String) {
        self.arrivals().entry(key).or_insert_with(|| self.number());
    }

    /// The next change of `key` (the one a transition just written brings back) keeps the
    /// place in line `number`, unless an earlier one is already noted.
    pub fn continues(&self, key: String, number: u64) {
        self.arrivals()
            .entry(key)
            .and_modify(|n| *n = (*n).min(number))
            .or_insert(number);
    }

    /// The place in line of a reconcile of `key` dispatched now: its first change's since its
    /// last reconcile, else a new one (a requeue, a child's change).
    pub fn dispatched(self: &Arc<Self>, key: &str) -> Ticket {
        let arrived = self.arrivals().remove(key);
        let number = arrived.unwrap_or_else(|| self.number());
        self.ticket_numbered(number)
    }

    /// Forgets the places of objects `keep` says are gone, once more than `most` are held
    /// (a change of an object deleted before its reconcile).
    pub fn prune(&self, most: usize, keep: impl Fn(&str) -> bool) {
        let mut arrivals = self.arrivals();
        if arrivals.len() > most {
            arrivals.retain(|key, _| keep(key));
        }
    }

    /// Waits for a place among the reconciles in flight, after every reconcile in line with an
    /// earlier `ticket` (and out a sustained overload's `Retry-After` pause: one that begins
    /// while it waits in line is waited out holding the slot).
    pub async fn reconcile(&self, ticket: Ticket) -> Slot<'_> {
        self.paused().await;
        let slot = InLine { pace: self, ticket }.await;
        self.paused().await;
        slot
    }

    /// Waits out a sustained overload's pause, if one is on.
    async fn paused(&self) {
        let paused = self.state().paused_until.filter(|&u| u > Instant::now());
        if let Some(until) = paused {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Waits for a write token (at once without a rate limit).
    pub async fn write(&self) {
        let wait = {
            let mut state = self.state();
            state.writes.as_mut().and_then(|b| b.take(Instant::now()))
        };
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }

    /// A reconcile ended: `Some(retry_after)` when the API server signalled overload (its
    /// `Retry-After` delays that object only, in the error policy), `None` when it did not.
    pub fn ended(&self, overload: Option<Option<Duration>>) {
        let mut state = self.state();
        let now = Instant::now();
        let before = state.aimd.limit();
        let sustained = state.outcomes.record(now, overload.is_some());
        if overload.is_none() {
            state.aimd.succeeded();
            state.overloaded = false;
        } else if sustained || state.overloaded {
            state.overloaded = true;
            let in_flight = state.in_flight;
            // Each cut needs evidence of its own (the outcomes start afresh); the pauses
            // follow every refusal until a reconcile succeeds.
            if sustained && state.aimd.overloaded(in_flight, now) {
                state.outcomes.clear();
                tracing::info!(
                    limit = state.aimd.limit(),
                    "the API server signals sustained overload: fewer reconciles at once"
                );
            }
            if let Some(Some(after)) = overload {
                let until = now + after.min(MAX_PAUSE);
                state.paused_until = state.paused_until.max(Some(until));
            }
        }
        let limit = state.aimd.limit();
        if limit != before {
            if limit > before {
                state.wake_first();
            }
            if let Some(metrics) = &state.metrics {
                metrics.concurrency_limit(limit);
            }
        }
    }
}

impl State {
    /// Wakes the first reconcile in line, if a slot is free for it (one enlisted but not yet
    /// polled takes it when it is).
    fn wake_first(&self) {
        if self.in_flight < self.aimd.limit()
            && let Some(Some(waker)) = self.waiting.values().next()
        {
            waker.wake_by_ref();
        }
    }
}

/// Waiting in line for a slot: granted when one is free and no reconcile with an earlier
/// ticket is in line; leaves the line when dropped (its ticket does).
struct InLine<'a> {
    pace: &'a Pace,
    ticket: Ticket,
}

impl<'a> Future for InLine<'a> {
    type Output = Slot<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Slot<'a>> {
        let pace = self.pace;
        let number = self.ticket.number;
        let mut state = pace.state();
        let first = state.waiting.keys().next().is_none_or(|&n| n >= number);
        if first && state.in_flight < state.aimd.limit() {
            state.waiting.remove(&number);
            self.ticket.enlisted = false;
            state.in_flight += 1;
            // Room for more: the next in line goes on too.
            state.wake_first();
            return Poll::Ready(Slot(pace));
        }
        state.waiting.insert(number, Some(cx.waker().clone()));
        self.ticket.enlisted = true;
        Poll::Pending
    }
}

/// A place among the reconciles in flight, given back when dropped.
#[derive(Debug)]
pub struct Slot<'a>(&'a Pace);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight -= 1;
        state.wake_first();
    }
}

/// How many reconciles kube's controller may start for a bound of `concurrency` in flight
/// (0: unbounded, and so is the window): eight times the bound, at least 256. They wait here,
/// in line by ticket (first come, first served), for their slots; the triggers past the window
/// wait in kube's scheduler, which takes them in no order. The window is bounded because kube's
/// runner polls every reconcile it started each time it is woken (its `FutureHashMap`): with
/// 10 000 objects parked in the line, that polling took a third of the operator's CPU and the
/// time grew with the square of the objects (BENCHMARKS.md, "Lost pace").
pub fn window(concurrency: u16) -> u16 {
    if concurrency == 0 {
        0
    } else {
        concurrency.saturating_mul(8).max(256)
    }
}

/// Whether the API server refused a request because it could not call an admission webhook
/// (`500`, "failed calling webhook" under `failurePolicy: Fail`): the webhook is down, not
/// the API server overloaded, so it does not cut the concurrency, and the request is retried
/// soon, to go on within seconds of the webhook's return.
pub fn webhook_unreachable(status: &kube::core::Status) -> bool {
    status.code == 500 && status.message.contains("failed calling webhook")
}

/// Whether `error` is the API server signalling overload (429, 5xx, a request that ran out of
/// time on either side: the server's `504 Timeout`, the client's deadline or read timeout),
/// and its `Retry-After`.
pub fn overload(error: &kube::Error) -> Option<Option<Duration>> {
    if timed_out(error) {
        return Some(None);
    }
    match error {
        kube::Error::Api(status) if webhook_unreachable(status) => None,
        kube::Error::Api(status) if status.code == 429 || status.code >= 500 => Some(
            status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
        ),
        _ => None,
    }
}

/// Whether a request behind `error` ran out of time on the client's side (an I/O timeout
/// anywhere in its chain: the client's request deadline, a connection's read timeout).
fn timed_out(error: &kube::Error) -> bool {
    std::iter::successors(Some(error as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
    .filter_map(|e| e.downcast_ref::<std::io::Error>())
    .any(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests;
