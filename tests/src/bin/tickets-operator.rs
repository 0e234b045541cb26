//! The Ticket machine (two versions, `v1` stored, the webhook converting between them) as an
//! operator binary on the library's command line: what a team with a versioned CRD writes, run
//! by the cluster test of `run --webhook-register` (`tests/tests/cluster/manager.rs`).

use std::process::ExitCode;

use kube_fsm::Operator;
use kube_fsm_app::{App, Machine};
use kube_fsm_testkit::tickets::{self, v1};

fn main() -> ExitCode {
    App::new("tickets-operator")
        .machine_with(
            Machine::new(|client| Operator::<v1::Ticket, _>::new(client, tickets::Desk))
                .crd(tickets::crd())
                .converter(tickets::converter),
        )
        .run()
}
