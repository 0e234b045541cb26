//! Drift: a stored phase this controller did not write and that does not follow the phase it
//! last wrote along an edge (a hand edit of status, or another writer), a phase the spec does
//! not declare at all (a typo, or a phase of an older spec), or a status whose phase was
//! removed. A phase the spec lists under `retired:` is not drift: it moves to its successor.
//! Pure: what is drift, and what to do and say about it; the reconciler does the I/O.

use crate::machine::data::{DriftPolicy, Phase};
use crate::machine::status::PhaseValue;

/// Drift found in a stored phase (or a retired phase to migrate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Drift<P> {
    /// A declared phase that is neither the last one this controller accepted nor a
    /// successor of it.
    Illegal {
        /// The phase this controller last wrote or accepted.
        last: P,
        /// The phase found.
        found: P,
    },
    /// A value the spec does not declare (and does not list under `retired:`).
    Undeclared {
        /// The phase this controller last wrote or accepted, if it remembers one.
        last: Option<P>,
        /// The value found.
        found: String,
    },
    /// A phase name the spec lists under `retired:`.
    Retired {
        /// The retired name found.
        found: String,
        /// The declared phase it moves to.
        to: P,
    },
    /// The phase was removed (the whole status, or `status.phase`) after this controller had
    /// written one.
    Removed {
        /// The phase this controller last wrote or accepted.
        last: P,
    },
}

/// What the controller does about drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy<P> {
    /// Continue from the phase found.
    Adopt(P),
    /// Write this phase back (its entry time as it was: a revert does not restart its clock).
    Revert(P),
    /// Leave the object as it is: no handler, no write; look again with backoff. An
    /// undeclared value is never silently replaced.
    Hold,
    /// Move a retired phase to its declared successor, without running any handler.
    Migrate(P),
    /// Start again at the initial phase, as for a new object (the status was removed).
    Reset,
}

impl<P: Phase> Drift<P> {
    /// Compares the stored phase with the last one this controller wrote or accepted (`None`
    /// after a restart, or for an object it has not seen: then only undeclared, retired or
    /// removed values are found).
    pub fn detect(last: Option<P>, stored: Option<&PhaseValue<P>>) -> Option<Self> {
        match (stored, last) {
            (None, Some(last)) => Some(Drift::Removed { last }),
            (None, None) => None,
            (Some(PhaseValue::Unknown(found)), last) => Some(match retired_successor::<P>(found) {
                Some(to) => Drift::Retired {
                    found: found.clone(),
                    to,
                },
                None => Drift::Undeclared {
                    last,
                    found: found.clone(),
                },
            }),
            (Some(PhaseValue::Known(found)), Some(last))
                if *found != last && !last.can_transition_to(*found) =>
            {
                Some(Drift::Illegal {
                    last,
                    found: *found,
                })
            }
            (Some(PhaseValue::Known(_)), _) => None,
        }
    }

    /// The remedy `policy` prescribes.
    pub fn remedy(&self, policy: DriftPolicy) -> Remedy<P> {
        match (self, policy) {
            (Drift::Retired { to, .. }, _) => Remedy::Migrate(*to),
            (Drift::Illegal { found, .. }, DriftPolicy::Adopt) => Remedy::Adopt(*found),
            (
                Drift::Illegal { last, .. }
                | Drift::Removed { last }
                | Drift::Undeclared {
                    last: Some(last), ..
                },
                DriftPolicy::Revert,
            ) => Remedy::Revert(*last),
            (Drift::Undeclared { .. }, _) => Remedy::Hold,
            (Drift::Removed { .. }, DriftPolicy::Adopt) => Remedy::Reset,
        }
    }

    /// What to do when the write `remedy` prescribed is refused by the API server (its CEL
    /// rule forbids the way back) or must not be repeated: adopt a declared phase, hold an
    /// undeclared or retired one, start again after a removal.
    pub fn unrevertable(&self) -> Remedy<P> {
        match self {
            Drift::Illegal { found, .. } => Remedy::Adopt(*found),
            Drift::Undeclared { .. } | Drift::Retired { .. } => Remedy::Hold,
            Drift::Removed { .. } => Remedy::Reset,
        }
    }

    /// The Event's note.
    pub fn describe(&self, remedy: Remedy<P>) -> String {
        let found = match self {
            Drift::Illegal { last, found } => format!(
                "status.phase is {found}, which this controller did not write and which does not \
                 follow {last}, the phase it last wrote"
            ),
            Drift::Undeclared { found, .. } => {
                format!("status.phase is {found:?}, which the spec does not declare")
            }
            Drift::Retired { found, .. } => {
                format!("status.phase is {found:?}, a phase the spec has retired")
            }
            Drift::Removed { last } => {
                format!("status.phase was removed; this controller last wrote {last}")
            }
        };
        let action = match remedy {
            Remedy::Adopt(p) => format!("continuing from {p} (drift: adopt)"),
            Remedy::Revert(p) => format!("writing {p} back (drift: revert)"),
            Remedy::Hold => "holding the object as it is until the phase is corrected or the \
                             spec maps it under `retired:`"
                .to_owned(),
            Remedy::Migrate(p) => format!("moving it to {p} without running any handler"),
            Remedy::Reset => format!("starting again at {}", P::initial()),
        };
        format!("{found}; {action}")
    }
}

/// The phase `phase` was moved from by a person along a manual edge, if it was: the phase its
/// recorded entry time belongs to (`entered`, when another writer left it behind), else the
/// last one this controller accepted. The engine never takes a manual edge, so such a move
/// is a person's, and legal (no drift).
pub fn manual_move<P: Phase>(
    last: Option<P>,
    entered: Option<&PhaseValue<P>>,
    phase: P,
) -> Option<P> {
    if last == Some(phase) {
        return None;
    }
    let from = match entered {
        Some(PhaseValue::Known(entered)) if *entered != phase => Some(*entered),
        _ => last,
    }?;
    from.is_manual_edge(phase).then_some(from)
}

/// The declared phase a retired name moves to, if the spec retires `name`.
pub fn retired_successor<P: Phase>(name: &str) -> Option<P> {
    P::MACHINE
        .retired
        .iter()
        .find(|r| r.name == name)
        .and_then(|r| P::from_index(r.to))
}

/// Every `action` label of `kube_fsm_drift_total` ([`Remedy::label`]).
pub const DRIFT_ACTIONS: [&str; 5] = ["adopted", "reverted", "held", "migrated", "reset"];

impl<P> Remedy<P> {
    /// The `action` label of `kube_fsm_drift_total` (one of [`DRIFT_ACTIONS`]).
    pub fn label(&self) -> &'static str {
        match self {
            Remedy::Adopt(_) => "adopted",
            Remedy::Revert(_) => "reverted",
            Remedy::Hold => "held",
            Remedy::Migrate(_) => "migrated",
            Remedy::Reset => "reset",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DRIFT_ACTIONS, Drift, Remedy, manual_move};
    use crate::machine::data::DriftPolicy;
    use crate::machine::status::PhaseValue;
    use crate::test_machines::DatabasePhase;

    #[test]
    fn every_remedy_label_is_listed_for_the_metric() {
        let remedies: [Remedy<DatabasePhase>; 5] = [
            Remedy::Adopt(DatabasePhase::Running),
            Remedy::Revert(DatabasePhase::Running),
            Remedy::Hold,
            Remedy::Migrate(DatabasePhase::Running),
            Remedy::Reset,
        ];
        assert_eq!(remedies.map(|r| r.label()), DRIFT_ACTIONS);
    }

    #[test]
    fn a_move_along_a_manual_edge_is_a_persons_and_no_drift() {
        use DatabasePhase::{Failed, Pending, Running};
        let known = |p| Some(PhaseValue::Known(p));
        assert_eq!(Drift::detect(Some(Failed), known(Pending).as_ref()), None);
        // From the controller's memory, or from the entry time's phase after a restart.
        assert_eq!(manual_move(Some(Failed), None, Pending), Some(Failed));
        assert_eq!(
            manual_move(None, known(Failed).as_ref(), Pending),
            Some(Failed)
        );
        // Seen already, or along an edge the engine takes: not a manual move.
        assert_eq!(
            manual_move(Some(Pending), known(Failed).as_ref(), Pending),
            None
        );
        assert_eq!(manual_move(Some(Running), None, Failed), None);
        assert_eq!(manual_move(None, known(Pending).as_ref(), Pending), None);
    }

    #[test]
    fn drift_is_a_phase_that_does_not_follow_the_last_one_accepted() {
        use DatabasePhase::{Degraded, Pending, Provisioning, Running};
        let known = |p| Some(PhaseValue::Known(p));
        // Staying, or following an edge, is no drift; nothing remembered, nothing to compare.
        assert_eq!(Drift::detect(Some(Running), known(Running).as_ref()), None);
        assert_eq!(Drift::detect(Some(Running), known(Degraded).as_ref()), None);
        assert_eq!(Drift::detect(None, known(Pending).as_ref()), None);
        assert_eq!(
            Drift::<DatabasePhase>::detect(None, None),
            None,
            "a new object"
        );
        // The phase removed after this controller wrote one: drift, not a silent restart.
        let removed = Drift::detect(Some(Running), None).expect("drift");
        assert_eq!(removed, Drift::Removed { last: Running });
        assert_eq!(removed.remedy(DriftPolicy::Revert), Remedy::Revert(Running));
        assert_eq!(removed.remedy(DriftPolicy::Adopt), Remedy::Reset);
        let illegal = Drift::detect(Some(Running), known(Provisioning).as_ref()).expect("drift");
        assert_eq!(
            illegal.remedy(DriftPolicy::Adopt),
            Remedy::Adopt(Provisioning)
        );
        assert_eq!(illegal.remedy(DriftPolicy::Revert), Remedy::Revert(Running));
        // An undeclared value is drift even without memory; without a phase to go back to it is
        // held where it is (never silently reset), under either policy.
        let typo = Some(PhaseValue::Unknown("Runing".into()));
        let undeclared = Drift::detect(None, typo.as_ref()).expect("drift");
        assert_eq!(undeclared.remedy(DriftPolicy::Revert), Remedy::Hold);
        assert_eq!(undeclared.remedy(DriftPolicy::Adopt), Remedy::Hold);
        assert_eq!(
            Drift::detect(Some(Running), typo.as_ref())
                .expect("drift")
                .remedy(DriftPolicy::Adopt),
            Remedy::Hold
        );
        assert_eq!(
            Drift::detect(Some(Running), typo.as_ref())
                .expect("drift")
                .remedy(DriftPolicy::Revert),
            Remedy::Revert(Running)
        );
        assert_eq!(
            illegal.describe(Remedy::Adopt(Provisioning)),
            "status.phase is Provisioning, which this controller did not write and which does not \
             follow Running, the phase it last wrote; continuing from Provisioning (drift: adopt)"
        );
    }
}
