//! A machine driven on a virtual clock: the engine's steps one after another, each at the time
//! the engine would take it — at once after a status write (the write's watch event), after
//! the step's requeue (a phase's `requeue_after`, a due timeout), or after the backoff of a
//! failed handler — with the clock moved instead of waited for. A 10-minute timeout or a
//! backoff sequence is tested in milliseconds, and the same way every time.
//!
//! The handler is whatever the test gives: the real one, or one whose outcomes the test scripts
//! (fail three times, then succeed). Between steps the test may change the object as the world
//! would ([`Scenario::object_mut`]) or let time pass ([`Scenario::advance`]).
//!
//! ```no_run
//! # async fn demo<K, H>(handlers: H, object: K, failed: K::Phase)
//! # where K: kube_fsm::handler::Dispatch<H> + kube::Resource<DynamicType = ()> {
//! use std::time::Duration;
//! use kube_fsm::testing::scenario::Scenario;
//!
//! let mut run = Scenario::new(&handlers, object);
//! // Up to an hour of the machine's time, in as many steps as the engine would take.
//! run.run_until(|phase| phase == failed, Duration::from_secs(3600)).await.expect("fails in time");
//! for entry in run.entries() {
//!     println!("{:>8.1?} {:?} {:?}", entry.at, entry.phase, entry.error);
//! }
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Resource;

use crate::handler::context::Context;
use crate::handler::dispatch::Dispatch;
use crate::machine::state_machine::StateMachine;
use crate::machine::status::PhaseValue;
use crate::pure::backoff::Backoff;
use crate::testing::{Outcome, StepError, Transition, apply, no_cluster, step_in};

/// How many steps at one instant a scenario takes before it calls the machine stuck in a loop
/// (a handler that writes something new at every step, so the engine never rests).
const STEPS_AT_ONE_INSTANT: usize = 100;

/// One step of a scenario.
#[derive(Clone, Debug)]
pub struct Entry<P> {
    /// When it ran, since the scenario's start.
    pub at: Duration,
    /// The phase after it.
    pub phase: Option<P>,
    /// The transition it made, if any.
    pub transition: Option<Transition<P>>,
    /// The handler's error, if it failed (its `Display` text).
    pub error: Option<String>,
    /// How long until the engine would take the next step (`None`: not until something
    /// changes the object).
    pub wait: Option<Duration>,
}

/// Why a scenario ended before its goal.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The time limit passed first.
    #[error("the machine did not get there within {limit:?} of its time; it is in {phase}")]
    TimedOut {
        /// The limit given.
        limit: Duration,
        /// The phase it was in.
        phase: String,
    },
    /// The machine rests (nothing to do until the object changes) short of the goal.
    #[error(
        "the machine rests in {phase} after {at:?}, short of the goal: nothing is left for it to do until the object changes"
    )]
    Idle {
        /// The phase it rests in.
        phase: String,
        /// When, since the start.
        at: Duration,
    },
    /// The engine would step the object again and again without time passing.
    #[error(
        "the machine took {STEPS_AT_ONE_INSTANT} steps at {at:?} without resting: a handler changes the status at every step"
    )]
    Loop {
        /// When, since the start.
        at: Duration,
    },
    /// A step the engine would refuse (an illegal target, a status that does not encode).
    #[error("{0}")]
    Step(String),
}

/// A machine driven through its phases on a virtual clock (see the module).
pub struct Scenario<'h, K: StateMachine, H> {
    handler: &'h H,
    object: K,
    start: Timestamp,
    now: Timestamp,
    context: Arc<Context>,
    backoff: Backoff,
    draw: f64,
    failures: u32,
    next: Option<Duration>,
    at_this_instant: usize,
    entries: Vec<Entry<K::Phase>>,
}

impl<K: StateMachine + Resource, H> std::fmt::Debug for Scenario<'_, K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("object", &self.object.meta().name)
            .field("elapsed", &self.now.duration_since(self.start))
            .field("steps", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl<'h, K, H> Scenario<'h, K, H>
where
    K: Dispatch<H> + Resource<DynamicType = ()>,
{
    /// A scenario of `object` (as stored: a new object, or one put in a phase with
    /// [`crate::testing::in_phase_since`]) under `handler`, starting at the current time, with
    /// the engine's default backoff and no cluster behind the steps.
    pub fn new(handler: &'h H, object: K) -> Self {
        let start = Timestamp::now();
        Scenario {
            handler,
            object,
            start,
            now: start,
            context: no_cluster(),
            backoff: Backoff::default(),
            draw: 1.0,
            failures: 0,
            next: Some(Duration::ZERO),
            at_this_instant: 0,
            entries: Vec::new(),
        }
    }

    /// Starts the clock at `start` instead (e.g. the entry time given to `in_phase_since`).
    #[must_use]
    pub fn starting_at(mut self, start: Timestamp) -> Self {
        self.start = start;
        self.now = start;
        self
    }

    /// The backoff after failed handlers, as given to `Operator::backoff`.
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = Backoff { base, max };
        self
    }

    /// Where in its jitter range each backoff falls: 0 the shortest (half the ceiling), 1 the
    /// longest (the ceiling: base, 2 × base, 4 × base, …), which is the default.
    #[must_use]
    pub fn jitter(mut self, draw: f64) -> Self {
        self.draw = draw.clamp(0.0, 1.0);
        self
    }

    /// Runs the steps through `context` (caches, a client over a canned service).
    #[must_use]
    pub fn with_context(mut self, context: Arc<Context>) -> Self {
        self.context = context;
        self
    }

    /// The object as the steps left it.
    pub fn object(&self) -> &K {
        &self.object
    }

    /// The object, to change as the world would between steps (a child becomes ready, someone
    /// edits the spec); the engine then steps at once, as a watch event would make it.
    pub fn object_mut(&mut self) -> &mut K {
        self.next = Some(Duration::ZERO);
        &mut self.object
    }

    /// The phase the object is in.
    pub fn phase(&self) -> Option<K::Phase> {
        match self.object.machine_status()?.phase {
            Some(PhaseValue::Known(phase)) => Some(phase),
            _ => None,
        }
    }

    /// The virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now.duration_since(self.start).unsigned_abs()
    }

    /// Every step so far.
    pub fn entries(&self) -> &[Entry<K::Phase>] {
        &self.entries
    }

    /// Lets `time` pass without a step.
    pub fn advance(&mut self, time: Duration) {
        self.now = self.now.saturating_add(time).unwrap_or(self.now);
        if let Some(next) = self.next {
            self.next = Some(next.saturating_sub(time));
        }
    }

    /// Takes the next step when the engine would (`None`: it would not step again until the
    /// object changes): moves the clock to it, runs it, and records it.
    ///
    /// # Errors
    /// A step the engine would refuse ([`ScenarioError::Step`]).
    pub async fn step(&mut self) -> Result<Option<&Entry<K::Phase>>, ScenarioError> {
        let Some(wait) = self.next else {
            return Ok(None);
        };
        self.advance(wait);
        self.at_this_instant = if wait.is_zero() {
            self.at_this_instant + 1
        } else {
            1
        };
        let result = step_in(self.handler, &self.object, self.now, &self.context).await;
        let (transition, error, next) = match result {
            Ok(outcome) => self.took(&outcome),
            Err(StepError::Handler(error)) => {
                self.failures += 1;
                let delay = self.backoff.delay(self.failures, self.draw);
                (None, Some(error.to_string()), Some(delay))
            }
            Err(refused) => return Err(ScenarioError::Step(refused.to_string())),
        };
        self.next = next;
        self.entries.push(Entry {
            at: self.elapsed(),
            phase: self.phase(),
            transition,
            error,
            wait: next,
        });
        Ok(self.entries.last())
    }

    /// What an outcome leaves: its transition, no error, and when the engine steps again.
    fn took(
        &mut self,
        outcome: &Outcome<K>,
    ) -> (
        Option<Transition<K::Phase>>,
        Option<String>,
        Option<Duration>,
    ) {
        apply(&mut self.object, outcome);
        if let Some(veto) = outcome.vetoed.iter().find(|veto| veto.timeout) {
            // A refused timeout is retried with backoff, as a failure.
            self.failures += 1;
            let delay = self.backoff.delay(self.failures, self.draw);
            return (None, Some(veto.message.clone()), Some(delay));
        }
        self.failures = 0;
        let next = if outcome.writes_status {
            Some(Duration::ZERO) // the write comes back as a watch event
        } else {
            outcome.requeue
        };
        (outcome.transition.clone(), None, next)
    }

    /// Steps until the object's phase satisfies `goal`, for at most `limit` of virtual time.
    ///
    /// # Errors
    /// The time limit passed, the machine rests short of the goal, it loops without time
    /// passing, or the engine would refuse a step.
    pub async fn run_until(
        &mut self,
        goal: impl Fn(K::Phase) -> bool,
        limit: Duration,
    ) -> Result<Duration, ScenarioError> {
        loop {
            if self.phase().is_some_and(&goal) {
                return Ok(self.elapsed());
            }
            let phase = self
                .phase()
                .map_or_else(|| "no phase".to_owned(), |phase| phase.to_string());
            match self.next {
                None => {
                    return Err(ScenarioError::Idle {
                        phase,
                        at: self.elapsed(),
                    });
                }
                Some(wait) if self.elapsed() + wait > limit => {
                    return Err(ScenarioError::TimedOut { limit, phase });
                }
                Some(wait) if wait.is_zero() && self.at_this_instant >= STEPS_AT_ONE_INSTANT => {
                    return Err(ScenarioError::Loop { at: self.elapsed() });
                }
                Some(_) => {}
            }
            self.step().await?;
        }
    }
}

#[cfg(test)]
mod tests;
