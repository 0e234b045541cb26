//! A scripted Database through a five-step backoff and a 10-minute timeout, on the virtual
//! clock: minutes of the machine's time in a moment of the test's.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

use super::{Scenario, ScenarioError};
use crate::handler::context::Context;
use crate::handler::step::Step;
use crate::machine::next::{Cleanup, Next};
use crate::test_machines::*;
use crate::testing::in_phase_since;

/// Fails `on_pending` as often as scripted, then accepts; provisions forever.
struct Scripted {
    failures_left: AtomicU32,
}

#[derive(Debug, thiserror::Error)]
#[error("the storage backend is not reachable yet")]
struct Unreachable;

impl DatabaseHandler for Scripted {
    type Error = Unreachable;

    async fn on_pending(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, Unreachable> {
        let left = self.failures_left.load(Ordering::SeqCst);
        if left > 0 {
            self.failures_left.store(left - 1, Ordering::SeqCst);
            return Err(Unreachable);
        }
        Ok(DatabasePendingEvent::Accept.into())
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, Unreachable> {
        Ok(Next::Stay)
    }

    async fn on_running(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, Unreachable> {
        Ok(Next::Stay)
    }

    async fn on_degraded(
        &self,
        _: &Database,
        _: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, Unreachable> {
        Ok(Next::Stay)
    }

    async fn cleanup(&self, _: &Database, _: &Context) -> Result<Cleanup, Unreachable> {
        Ok(Cleanup::Done)
    }
}

fn scripted(failures: u32) -> Scripted {
    Scripted {
        failures_left: AtomicU32::new(failures),
    }
}

fn pending_at(start: Timestamp) -> Database {
    in_phase_since(Database::sample("orders"), DatabasePhase::Pending, start)
}

#[tokio::test]
async fn five_failures_back_off_then_the_ten_minute_timeout_fails_the_database() {
    let wall = Instant::now();
    let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let handler = scripted(5);
    let mut run = Scenario::new(&handler, pending_at(start)).starting_at(start);

    let took = run
        .run_until(
            |phase| phase == DatabasePhase::Failed,
            Duration::from_secs(3600),
        )
        .await
        .expect("the timeout fails the Database within the hour");

    let waits: Vec<_> = run
        .entries()
        .iter()
        .filter(|entry| entry.error.is_some())
        .map(|entry| entry.wait.unwrap())
        .collect();
    let secs = |s: f64| Duration::from_secs_f64(s);
    assert_eq!(
        waits,
        [secs(0.5), secs(1.0), secs(2.0), secs(4.0), secs(8.0)]
    );
    let accepted = run
        .entries()
        .iter()
        .find(|entry| entry.phase == Some(DatabasePhase::Provisioning))
        .expect("accepted after the failures");
    assert_eq!(accepted.at, secs(15.5), "0.5 + 1 + 2 + 4 + 8 s of backoff");
    let failed = run.entries().last().unwrap();
    let transition = failed
        .transition
        .as_ref()
        .expect("the timeout's transition");
    assert_eq!(transition.reason, "ProvisioningTimedOut");
    assert_eq!(transition.to, DatabasePhase::Failed);
    // The status keeps whole seconds: the timeout falls due within a second of 10 min.
    assert!(
        took >= secs(15.5 + 600.0) && took <= secs(15.5 + 601.0),
        "the timeout fired after {took:?}"
    );
    // Provisioning requeues every 10 s: about 60 steps there, not a busy loop.
    let provisioning = run
        .entries()
        .iter()
        .filter(|entry| entry.phase == Some(DatabasePhase::Provisioning))
        .count();
    assert!((55..=65).contains(&provisioning), "{provisioning} steps");
    // The clock was moved, never waited for (what it took is printed, not asserted).
    eprintln!(
        "{took:?} of the machine's time in {} steps took {:?}",
        run.entries().len(),
        wall.elapsed()
    );
    assert!(
        wall.elapsed() < Duration::from_secs(60),
        "the scenario slept"
    );
}

#[tokio::test]
async fn a_limit_short_of_the_timeout_says_where_the_machine_is() {
    let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let handler = scripted(0);
    let mut run = Scenario::new(&handler, pending_at(start)).starting_at(start);
    let error = run
        .run_until(
            |phase| phase == DatabasePhase::Failed,
            Duration::from_secs(60),
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ScenarioError::TimedOut { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        "the machine did not get there within 60s of its time; it is in Provisioning"
    );
}

#[tokio::test]
async fn the_backoff_follows_its_settings_and_a_change_to_the_object_steps_at_once() {
    let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let handler = scripted(2);
    let mut run = Scenario::new(&handler, pending_at(start))
        .starting_at(start)
        .backoff(Duration::from_secs(1), Duration::from_secs(3))
        .jitter(0.0);
    // Two failures at half the ceiling (0.5 s, 1 s), then Provisioning.
    run.run_until(
        |phase| phase == DatabasePhase::Provisioning,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(run.elapsed(), Duration::from_millis(1500));
    // A change to the object (someone edits the spec) is stepped at once, then Provisioning
    // requeues after its 10 s.
    run.object_mut().spec.version = "17".into();
    let entry = run.step().await.unwrap().unwrap();
    assert_eq!(entry.at, Duration::from_millis(1500));
    assert_eq!(entry.wait, Some(Duration::from_secs(10)));
}
