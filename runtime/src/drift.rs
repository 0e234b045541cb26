//! Drift: a stored phase this controller did not write and that does not follow the phase it
//! last wrote along an edge (a hand edit of status, or another writer), or a phase the spec
//! does not declare at all (a typo, or a phase of an older spec). Pure: what is drift, and
//! what to write about it; the reconciler does the I/O.

use crate::machine::{DriftPolicy, Phase};
use crate::status::PhaseValue;

/// Drift found in a stored phase.
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
    /// A value the spec does not declare.
    Undeclared {
        /// The phase this controller last wrote or accepted, if it remembers one.
        last: Option<P>,
        /// The value found.
        found: String,
    },
}

/// What the controller does about drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy<P> {
    /// Continue from the phase found.
    Adopt(P),
    /// Write this phase back.
    Revert(P),
    /// Start again at the initial phase (an undeclared value and nothing to go back to).
    Reset,
}

impl<P: Phase> Drift<P> {
    /// Compares the stored phase with the last one this controller wrote or accepted (`None`
    /// after a restart, or for an object it has not seen: then only undeclared values are
    /// drift).
    pub fn detect(last: Option<P>, stored: Option<&PhaseValue<P>>) -> Option<Self> {
        match (stored?, last) {
            (PhaseValue::Unknown(found), last) => Some(Drift::Undeclared {
                last,
                found: found.clone(),
            }),
            (PhaseValue::Known(found), Some(last))
                if *found != last && !last.can_transition_to(*found) =>
            {
                Some(Drift::Illegal {
                    last,
                    found: *found,
                })
            }
            _ => None,
        }
    }

    /// The remedy `policy` prescribes.
    pub fn remedy(&self, policy: DriftPolicy) -> Remedy<P> {
        match (self, policy) {
            (Drift::Illegal { found, .. }, DriftPolicy::Adopt) => Remedy::Adopt(*found),
            (Drift::Illegal { last, .. }, DriftPolicy::Revert) => Remedy::Revert(*last),
            (
                Drift::Undeclared {
                    last: Some(last), ..
                },
                DriftPolicy::Revert,
            ) => Remedy::Revert(*last),
            (Drift::Undeclared { .. }, _) => Remedy::Reset,
        }
    }

    /// The Warning Event's note.
    pub fn describe(&self, remedy: Remedy<P>) -> String {
        let found = match self {
            Drift::Illegal { last, found } => format!(
                "status.phase is {found}, which this controller did not write and which does not \
                 follow {last}, the phase it last wrote"
            ),
            Drift::Undeclared { found, .. } => {
                format!("status.phase is {found:?}, which the spec does not declare")
            }
        };
        let action = match remedy {
            Remedy::Adopt(p) => format!("continuing from {p} (drift: adopt)"),
            Remedy::Revert(p) => format!("writing {p} back (drift: revert)"),
            Remedy::Reset => format!("starting again at {}", P::initial()),
        };
        format!("{found}; {action}")
    }
}

impl<P> Remedy<P> {
    /// The `action` label of `kube_fsm_drift_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Remedy::Adopt(_) => "adopted",
            Remedy::Revert(_) => "reverted",
            Remedy::Reset => "reset",
        }
    }
}
