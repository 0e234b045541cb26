//! Property tests of the pure decision core: for any stored status (declared, undeclared or no
//! phase; any entry time, also centuries off; any conditions), any clock and any handler
//! outcome and veto, a step plans only a legal move, fires a due timeout unless vetoed, and
//! writes only when something changed.

use crate::handler::context::Context;
use crate::handler::step::Step;
use crate::handler::step_plan::{self, legal_over};
use crate::machine::conditions::ConditionError;
use crate::machine::data::Phase;
use crate::machine::next::{Cleanup, Next, Verdict};
use crate::machine::status::{MachineStatus, PhaseValue};
use crate::pure::decide;
use crate::test_machines::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

/// A handler whose every decision comes from the test case.
#[derive(Clone, Debug)]
struct Arbitrary {
    choice: u8,
    pods: Option<bool>,
    service: Option<bool>,
    veto: bool,
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct Error(#[from] ConditionError);

impl Arbitrary {
    fn set(&self, step: &mut Step<Database>) -> Result<(), Error> {
        if let Some(pods) = self.pods {
            step.set_condition(DatabaseCondition::PodsReady, pods, "Checked", "")?;
        }
        if let Some(service) = self.service {
            step.set_condition(DatabaseCondition::ServiceAvailable, service, "Checked", "")?;
        }
        Ok(())
    }
}

impl DatabaseHandler for Arbitrary {
    type Error = Error;

    async fn on_pending(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabasePendingNext, Error> {
        self.set(step)?;
        Ok(match self.choice % 2 {
            0 => Next::Stay,
            _ => DatabasePendingEvent::Accept.into(),
        })
    }

    async fn on_provisioning(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseProvisioningNext, Error> {
        self.set(step)?;
        Ok(match self.choice % 3 {
            0 => Next::Stay,
            1 => DatabaseProvisioningEvent::Fail.into(),
            _ => DatabaseProvisioningTarget::Running.into(),
        })
    }

    async fn on_running(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseRunningNext, Error> {
        self.set(step)?;
        Ok(match self.choice % 3 {
            0 => Next::Stay,
            1 => DatabaseRunningEvent::Fail.into(),
            _ => DatabaseRunningTarget::Degraded.into(),
        })
    }

    async fn on_degraded(
        &self,
        _: &Database,
        step: &mut Step<Database>,
    ) -> Result<DatabaseDegradedNext, Error> {
        self.set(step)?;
        Ok(match self.choice % 3 {
            0 => Next::Stay,
            1 => DatabaseDegradedEvent::Fail.into(),
            _ => DatabaseDegradedTarget::Running.into(),
        })
    }

    async fn cleanup(&self, _: &Database, _: &Context) -> Result<Cleanup, Error> {
        Ok(Cleanup::Done)
    }

    async fn before_transition(
        &self,
        _: &Database,
        _: DatabasePhase,
        _: DatabasePhase,
    ) -> Result<Verdict, Error> {
        Ok(if self.veto {
            Verdict::Veto("no".into())
        } else {
            Verdict::Allow
        })
    }
}

fn phase_value() -> impl Strategy<Value = Option<PhaseValue<DatabasePhase>>> {
    prop_oneof![
        Just(None),
        (0..DatabasePhase::ALL.len()).prop_map(|i| Some(PhaseValue::Known(DatabasePhase::ALL[i]))),
        "[A-Za-z]{1,12}".prop_map(|s| Some(PhaseValue::parse(&s))),
    ]
}

fn condition(type_: &'static str) -> impl Strategy<Value = Option<Condition>> {
    prop_oneof![
        Just(None),
        prop_oneof![Just("True"), Just("False"), Just("Unknown")].prop_map(move |status| {
            Some(Condition {
                type_: type_.into(),
                status: status.into(),
                reason: "Seen".into(),
                message: String::new(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            })
        }),
    ]
}

/// Seconds from the epoch: far in the past (to year ~1000), recent, or a little in the future.
fn seconds() -> impl Strategy<Value = i64> {
    prop_oneof![-30_000_000_000i64..0, 1_700_000_000i64..1_800_000_000]
}

prop_compose! {
    fn status()(
        phase in phase_value(),
        entered in phase_value(),
        at in proptest::option::of(seconds()),
        pods in condition("PodsReady"),
        service in condition("ServiceAvailable"),
    ) -> Option<MachineStatus<DatabasePhase>> {
        let conditions = [pods, service].into_iter().flatten().collect();
        Some(MachineStatus {
            phase,
            conditions,
            observed_generation: Some(1),
            last_phase_transition_time: at.map(|s| Time(Timestamp::from_second(s).unwrap())),
            entered_phase: entered,
            ..MachineStatus::default()
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn every_planned_move_is_legal_and_a_due_timeout_fires_unless_vetoed(
        stored in prop_oneof![Just(None), status()],
        now in 1_750_000_000i64..1_760_000_000,
        choice in any::<u8>(),
        pods in proptest::option::of(any::<bool>()),
        service in proptest::option::of(any::<bool>()),
        veto in any::<bool>(),
    ) {
        let mut db = Database::sample("db");
        db.metadata.generation = Some(1);
        if let Some(status) = stored {
            db.status = Some(DatabaseStatus { machine: status, endpoint: None });
        }
        let handler = Arbitrary { choice, pods, service, veto };
        let now = Timestamp::from_second(now).unwrap();
        let _memory = MEMORY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let plan = runtime.block_on(async { step_plan::plan(&handler, &db, now, &crate::testing::no_cluster()).await })
            .expect("typed handlers cannot choose an illegal move");
        let stored = db.status.as_ref().map(|s| &s.machine);
        let stored_phase = stored.and_then(|s| s.phase.as_ref());
        let Some(PhaseValue::Known(to)) = plan.machine().phase else {
            return Err(TestCaseError::fail("a step always plans a declared phase"));
        };
        prop_assert!(legal_over(stored_phase, to), "{stored_phase:?} -> {to}");
        if let Some(transition) = &plan.transition {
            prop_assert_eq!(transition.to, to);
        }
        // A due timeout fires unless vetoed.
        let position = &plan.position;
        if let Some((target, _)) = decide::timeout_due(position.phase, position.entered_at, now)
            && position.is_settled()
            && !veto
        {
            prop_assert_eq!(to, target);
        }
        if veto {
            prop_assert!(
                to == position.phase,
                "a vetoed step stays: {} -> {to}",
                position.phase
            );
        }
        // Nothing changed, nothing written.
        if plan.patch.is_none() {
            prop_assert_eq!(Some(&plan.machine().phase), stored.map(|s| &s.phase));
        }
        // A requeue is never in the past nor absurdly far.
        if let Some(requeue) = plan.requeue {
            prop_assert!(requeue.as_secs() <= 600 + 1, "{requeue:?}");
        }
        prop_assert!(DatabasePhase::ALL.contains(&to) && to.index() < DatabasePhase::ALL.len());
    }
}
