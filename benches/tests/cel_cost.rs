//! The estimated cost of the CEL phase rules for the 150-phase / 320-edge machine, against the
//! API server's limits (figure recorded in BENCHMARKS.md; `--nocapture` prints it).
//!
//! The estimate follows the Kubernetes cost model's worst case for these rules: a string
//! comparison costs `1 + ceil(0.1 * maxLength)` (the CRD helper sets `maxLength` on
//! `status.phase` to the longest phase name), a list literal `10 + n`, `x in list` one
//! comparison per item, every `||`, `&&` and `!` 1.

use kube_fsm::StateMachine;
use kube_fsm::machine::MachineData;
use kube_fsm_benches::Big;

/// The API server's limit on one rule's estimated cost (`PerCallLimit`).
const PER_CALL_LIMIT: u64 = 1_000_000;

fn estimated_transition_rule_cost(machine: &MachineData) -> u64 {
    let longest = machine
        .phases
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0) as u64;
    let compare = 1 + longest.div_ceil(10);
    let list_in = |n: u64| 10 + n + n * compare;
    let mut cost = compare; // self == oldSelf
    for from in 0..machine.phases.len() {
        let mut targets: Vec<usize> = machine
            .edges
            .iter()
            .filter(|e| e.from == from && e.to != from)
            .map(|e| e.to)
            .collect();
        targets.sort_unstable();
        targets.dedup();
        if !targets.is_empty() {
            // || (oldSelf == 'From' && self in [...])
            cost += 2 + compare + list_in(targets.len() as u64);
        }
    }
    // || (oldSelf == 'Retired' && self in ['Phase']) per retired name
    cost += machine.retired.len() as u64 * (2 + compare + list_in(1));
    // || !(oldSelf in [every phase and retired name])
    cost + 2 + list_in((machine.phases.len() + machine.retired.len()) as u64)
}

#[test]
fn the_phase_rules_of_a_150_phase_machine_cost_far_under_the_limit() {
    let machine = Big::machine();
    assert_eq!((machine.phases.len(), machine.edges.len()), (150, 320));
    let cost = estimated_transition_rule_cost(machine);
    println!(
        "estimated cost of the transition rule: {cost} ({:.2}% of the per-rule limit {PER_CALL_LIMIT}), \
         rule length {} bytes",
        cost as f64 * 100.0 / PER_CALL_LIMIT as f64,
        machine.cel_phase_rule.len()
    );
    assert!(cost < PER_CALL_LIMIT / 100, "{cost}");

    // kube's own analysis of the rules as placed in the CRD agrees: no cost warning.
    let crd = kube_fsm::crd::<Big>();
    let schema = serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap()).unwrap();
    let status = &schema["openAPIV3Schema"]["properties"]["status"];
    let phase = kube::core::cel::compile_schema(&status["properties"]["phase"]);
    let warnings = kube::core::cel::analyze_rule(
        machine.cel_phase_rule,
        &phase,
        kube::core::cel::ScopeContext::CrdValidation,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
}
