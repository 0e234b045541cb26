//! What the engine tells the world and the handler after a step: Kubernetes Events (one per
//! transition, one per distinct veto), metrics, the span's fields, and the `after_transition`
//! hook, which runs at least once per persisted move (retried on the object's next reconcile
//! until it succeeds, while the process lives).

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::events::{Event, EventType};

use crate::engine::{Engine, Reconcilable, ReconcileError, RecordedEvents, guard};
use crate::handler::step_plan::Plan;
use crate::machine::data::Phase;
use crate::machine::status::PhaseValue;
use crate::pure::decide::Transition;
use crate::replicas::turn;

impl<K, H> Engine<K, H>
where
    K: Reconcilable<H>,
    H: Send + Sync + 'static,
{
    /// Records the step's vetoes: the metric for each, a Warning Event only for a veto that
    /// differs from the last one. Returns when to retry a vetoed timeout (backing off).
    pub(crate) async fn vetoes(&self, object: &K, plan: &Plan<K>) -> Option<Duration> {
        let Some(veto) = plan.vetoed.last() else {
            self.memory.with(object, |e| e.veto = None);
            return None;
        };
        for v in &plan.vetoed {
            self.metrics.vetoed(v.from.name(), v.to.name());
        }
        let (distinct, count) = self.memory.with(object, |e| match &mut e.veto {
            Some((last, count)) if last == veto => {
                *count = count.saturating_add(1);
                (false, *count)
            }
            last => {
                *last = Some((veto.clone(), 1));
                (true, 1)
            }
        });
        if distinct {
            for v in &plan.vetoed {
                let (from, to) = (v.from, v.to);
                self.event(
                    object,
                    EventType::Warning,
                    "TransitionVetoed",
                    format!("{from}To{to}"),
                    format!("{from} → {to}: {}", v.message),
                )
                .await;
            }
        }
        plan.timeout_vetoed()
            .then(|| self.config.backoff.jittered(count))
    }

    /// Reports a persisted transition and runs `after_transition` for it.
    pub(crate) async fn transitioned(
        &self,
        object: &K,
        transition: &Transition<K::Phase>,
        stayed: Option<Duration>,
    ) -> Result<(), ReconcileError> {
        // A new object starts in the initial phase, whose handler ran in the first step: when
        // that step already takes an edge out of it, the move is `Pending → X` in the Event,
        // the metric, the trace and the hook alike, although the first status written says X
        // (the initial phase is never stored then). Only a first write of the initial phase
        // itself has no `from`.
        let initial = K::Phase::initial();
        let to = transition.to;
        let from = match &transition.from {
            Some(from) => Some(from.clone()),
            None if to != initial => Some(PhaseValue::Known(initial)),
            None => None,
        };
        let from_name = from.as_ref().map_or("", PhaseValue::as_str);
        let note = match &from {
            None => format!("initialised in {initial}"),
            Some(_) => format!("{from_name} → {to}"),
        };
        self.metrics.transition(from.as_ref(), to.name(), stayed);
        let span = tracing::Span::current();
        span.record("state.from", from_name);
        span.record("state.to", to.name());
        span.record("reason", transition.reason);
        tracing::info!(
            state.from = from_name,
            state.to = to.name(),
            reason = transition.reason,
            "transition"
        );
        let action: String = format!(
            "{}To{to}",
            from.as_ref().map_or(initial.name(), PhaseValue::as_str)
        )
        .chars()
        .take(128)
        .collect();
        self.event(object, EventType::Normal, transition.reason, action, note)
            .await;
        let hook = match &from {
            Some(PhaseValue::Known(from)) => Some((*from, to)),
            _ => None,
        };
        if let Some(hook) = hook {
            self.memory.with(object, |e| e.owed_hook = Some(hook));
            self.pay_owed_hook(object).await?;
        }
        Ok(())
    }

    /// Runs an `after_transition` hook that has not succeeded yet; a failure fails the
    /// reconcile, which retries it (with backoff) before anything else.
    pub(crate) async fn pay_owed_hook(&self, object: &K) -> Result<(), ReconcileError> {
        let Some((from, to)) = self.memory.read(object, |e| e.owed_hook).flatten() else {
            return Ok(());
        };
        let hook = K::after_transition(&self.handler, object, from, to);
        let after = to
            .data()
            .handler_timeout_ms
            .map_or(self.config.handler_timeout, Duration::from_millis);
        guard::bounded(hook, after, || {
            format!("the after_transition hook of {from} → {to}")
        })
        .await
        .map_err(|timed_out| {
            self.metrics.handler_timed_out(to.name());
            ReconcileError::HandlerTimedOut(timed_out)
        })?
        .map_err(|e| ReconcileError::Handler(Box::new(e)))?;
        self.memory.with(object, |e| {
            if e.owed_hook == Some((from, to)) {
                e.owed_hook = None;
            }
        });
        Ok(())
    }

    /// Publishes an Event, if the configured [`RecordedEvents`] policy wants it; a failure to record
    /// it is logged, never fatal. kube's Recorder
    /// folds repeats of the same (type, reason, action) into one series, so `action` names
    /// what happened (e.g. `RunningToDegraded`), keeping different transitions apart.
    pub(crate) async fn event(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: String,
        note: String,
    ) {
        let wanted = match self.config.events {
            RecordedEvents::All => true,
            RecordedEvents::Warnings => type_ == EventType::Warning,
            RecordedEvents::Off => false,
        };
        if !wanted {
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action,
            secondary: None,
        };
        self.context.pace().write().await;
        let reference = object.object_ref(&());
        let recorder = self.context.recorder_for(&reference);
        let Some(published) = turn::write(recorder.publish(&event, &reference)).await else {
            tracing::debug!(object = %object.name_any(), reason, "not recorded: this replica no longer holds the object's Lease or shard");
            return;
        };
        if let Err(err) = published
            && !self.health.refused(&err)
        {
            tracing::warn!(object = %object.name_any(), %err, "could not record event");
        }
    }
}
