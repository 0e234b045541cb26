//! Benchmarks of kube-fsm (results and commands: `BENCHMARKS.md` at the repository root).
//!
//! This library holds the run-time benchmark's subject: the resource `Big`, whose
//! 150-phase / 320-edge machine (`specs/big.yaml`) is compiled by the real `#[state_machine]`,
//! and [`big_match::can_transition_match`], the same edges as a `match`. Both, and the loops
//! that time them ([`harness`]), live in this one crate so that each lookup is inlined into
//! its loop the same way (or not: see [`harness`]). `specs/big.yaml` and `src/big_match.rs` are written by the
//! `gen-big` binary and checked in.
//!
//! The runs against a real API server keep their shared parts here too: [`chaos`], [`economy`]
//! (the API-economy run of `scripts/bench-scale`) [`example`] (the example operator as a
//! process of its own) and [`flaky`] (a flaky API server for such processes).

use kube::CustomResource;
use kube_fsm::{MachineStatus, state_machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod big_match;
pub mod chaos;
pub mod economy;
pub mod example;
pub mod flaky;

/// A resource with a big machine: 150 phases, 320 edges.
#[state_machine(spec = "specs/big.yaml")]
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "bench.kube-fsm.dev",
    version = "v1",
    kind = "Big",
    namespaced,
    status = "BigStatus"
)]
pub struct BigSpec {
    /// The image to run.
    pub image: String,
}

/// Status of [`Big`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct BigStatus {
    /// The machine's fields.
    #[serde(flatten)]
    pub machine: MachineStatus<BigPhase>,
}

/// The fixed seed of [`random_pairs`].
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// `n` pseudo-random `(from, to)` pairs over all 150 phases, from a xorshift64 seeded with
/// `seed`: the same array for every lookup under test, unpredictable to the branch predictor.
#[must_use]
pub fn random_pairs(n: usize, seed: u64) -> Vec<(BigPhase, BigPhase)> {
    let mut x = seed;
    let count = BigPhase::ALL.len() as u64;
    let pick = |x: u64| BigPhase::ALL[usize::try_from(x % count).unwrap_or_default()];
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (pick(x), pick(x >> 32))
        })
        .collect()
}

pub mod harness {
    //! The timed loops: each counts the legal pairs of a slice with one lookup. Every pair goes
    //! through `black_box`, so nothing is hoisted, folded or vectorized across calls, and the
    //! result is a data dependency (no branch on it).
    use std::hint::black_box;

    use crate::BigPhase;
    use crate::big_match::can_transition_match;

    /// The generated `BigPhase::can_transition_to` (a constant bit matrix), with the
    /// compiler's default inlining (it inlines the five-instruction lookup).
    #[inline(never)]
    #[must_use]
    pub fn bit_matrix(pairs: &[(BigPhase, BigPhase)]) -> u64 {
        let mut legal = 0;
        for &pair in pairs {
            let (from, to) = black_box(pair);
            legal += u64::from(from.can_transition_to(to));
        }
        legal
    }

    /// The hand-written `matches!` over the same edges, with the compiler's default inlining
    /// (it keeps the 3 KB jump-table function out of line).
    #[inline(never)]
    #[must_use]
    pub fn match_edges(pairs: &[(BigPhase, BigPhase)]) -> u64 {
        let mut legal = 0;
        for &pair in pairs {
            let (from, to) = black_box(pair);
            legal += u64::from(can_transition_match(from, to));
        }
        legal
    }

    /// The loop alone (a comparison instead of a lookup): the harness's own cost per pair.
    #[inline(never)]
    #[must_use]
    pub fn baseline(pairs: &[(BigPhase, BigPhase)]) -> u64 {
        let mut legal = 0;
        for &pair in pairs {
            let (from, to) = black_box(pair);
            legal += u64::from(from < to);
        }
        legal
    }

    #[inline(never)]
    fn bit_matrix_call(from: BigPhase, to: BigPhase) -> bool {
        from.can_transition_to(to)
    }

    #[inline(never)]
    fn match_call(from: BigPhase, to: BigPhase) -> bool {
        can_transition_match(from, to)
    }

    /// [`bit_matrix`] through a function that is not inlined.
    #[inline(never)]
    #[must_use]
    pub fn bit_matrix_not_inlined(pairs: &[(BigPhase, BigPhase)]) -> u64 {
        let mut legal = 0;
        for &pair in pairs {
            let (from, to) = black_box(pair);
            legal += u64::from(bit_matrix_call(from, to));
        }
        legal
    }

    /// [`match_edges`] through a function that is not inlined.
    #[inline(never)]
    #[must_use]
    pub fn match_edges_not_inlined(pairs: &[(BigPhase, BigPhase)]) -> u64 {
        let mut legal = 0;
        for &pair in pairs {
            let (from, to) = black_box(pair);
            legal += u64::from(match_call(from, to));
        }
        legal
    }
}
