//! The two lookups under benchmark describe the same machine, and it has the promised shape.

use kube_fsm_benches::big_match::can_transition_match;
use kube_fsm_benches::{BigPhase, harness, random_pairs};

#[test]
fn bit_matrix_and_match_agree_on_every_pair() {
    let mut edges = 0;
    for from in BigPhase::ALL {
        for to in BigPhase::ALL {
            let legal = from.can_transition_to(to);
            assert_eq!(legal, can_transition_match(from, to), "{from} -> {to}");
            assert_eq!(legal, from.successors().contains(&to), "{from} -> {to}");
            edges += usize::from(legal);
        }
    }
    assert_eq!(BigPhase::ALL.len(), 150);
    assert_eq!(edges, 320);
    assert_eq!(BigPhase::MACHINE.edges.len(), 320);
}

#[test]
fn every_phase_is_on_the_chain_and_only_the_last_is_terminal() {
    for pair in BigPhase::ALL.windows(2) {
        assert!(
            pair[0].can_transition_to(pair[1]),
            "{} -> {}",
            pair[0],
            pair[1]
        );
    }
    let terminal: Vec<BigPhase> = BigPhase::ALL
        .into_iter()
        .filter(|p| p.is_terminal())
        .collect();
    assert_eq!(terminal, [BigPhase::Phase149]);
    assert!(BigPhase::Phase149.successors().is_empty());
}

#[test]
fn harness_loops_count_the_same_pairs() {
    let pairs = random_pairs(1 << 12, kube_fsm_benches::SEED);
    let expected = pairs
        .iter()
        .filter(|(f, t)| f.can_transition_to(*t))
        .count() as u64;
    assert!(expected > 0, "some random pairs are edges");
    assert_eq!(harness::bit_matrix(&pairs), expected);
    assert_eq!(harness::match_edges(&pairs), expected);
    assert_eq!(harness::bit_matrix_not_inlined(&pairs), expected);
    assert_eq!(harness::match_edges_not_inlined(&pairs), expected);
}
