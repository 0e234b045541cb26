//! The benchmarks' stand-in for the Database operator: the same machine, kind and command line
//! as the `database` example, with one ConfigMap per Database standing in for its workload
//! (`src/stand_in.rs`), so that it converges on a bare API server where no controller runs.
//! The API-economy, pace, scale and chaos runs drive it; it is not a database.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example stand_in -- crd | kubectl apply -f -
//! cargo run -p kube-fsm-examples --example stand_in -- run [--namespace NS] [--leader-elect]
//! ```

use std::process::ExitCode;

use kube_fsm_app::App;
use kube_fsm_examples::stand_in::{self, Handlers};

fn main() -> ExitCode {
    App::new("kube-fsm-examples")
        .machine(|client| stand_in::operator(client, Handlers::new(), None))
        .run()
}
