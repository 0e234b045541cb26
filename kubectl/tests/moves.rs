//! `kubectl fsm move` refuses exactly what the API server refuses: for every pair of phases
//! (declared, retired and undeclared) of the example and test machines, the plugin's check of
//! the machine it reads from the CRD (`Description::check_move`) agrees with the admission
//! webhook's own (`admission::check`, the CEL rules' twin). The object changing under a move is
//! the cluster test's (a 409, said in a sentence).

use kube_fsm::machine::{Description, MachineData};
use kube_fsm_testkit::resources::{
    ChangePhase, DatabasePhase, GuardedPhase, PipelinePhase, RiskEnginePhase,
};

fn agree(machine: &'static MachineData) -> usize {
    let description = Description::of(machine);
    let mut names: Vec<&str> = machine.phases.iter().map(|p| p.name).collect();
    names.extend(machine.retired.iter().map(|r| r.name));
    names.push("Bogus");
    let mut pairs = 0;
    for from in &names {
        for to in &names {
            let plugin = description.check_move(Some(from), to).is_ok();
            let server = kube_fsm::admission::check(machine, Some(from), Some(to)).is_ok();
            assert_eq!(
                plugin, server,
                "{} {from} -> {to}: kubectl fsm says {plugin}, the API server {server}",
                machine.kind
            );
            pairs += 1;
        }
    }
    pairs
}

#[test]
fn every_move_of_every_machine_is_refused_by_the_plugin_as_by_the_server() {
    let pairs = [
        agree(<DatabasePhase as kube_fsm::Phase>::MACHINE),
        agree(<RiskEnginePhase as kube_fsm::Phase>::MACHINE),
        agree(<ChangePhase as kube_fsm::Phase>::MACHINE),
        agree(<GuardedPhase as kube_fsm::Phase>::MACHINE),
        agree(<PipelinePhase as kube_fsm::Phase>::MACHINE),
    ];
    assert!(pairs.iter().all(|&n| n >= 9), "{pairs:?}");
}
