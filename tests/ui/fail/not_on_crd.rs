use kube_fsm::state_machine;

#[state_machine(phases(Pending(initial), Done(terminal)), transitions(Pending -> Done))]
pub struct JobSpec {}

fn main() {}
