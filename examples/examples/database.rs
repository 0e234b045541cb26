//! The Database operator alone: `specs/database.yaml`'s machine and the handlers of
//! `src/database/` (a StatefulSet, its headless Service and credentials per Database, its
//! conditions from what their controllers report), on the
//! library's command line (`/metrics`, `/healthz`, `/readyz`, `/machine`, leader election or
//! shards, the admission webhook). The `operator` example runs it beside the RiskEngine.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example database -- crd | kubectl apply -f -
//! cargo run -p kube-fsm-examples --example database -- run [--namespace NS] [--leader-elect]
//! cargo run -p kube-fsm-examples --example database -- diagram [--format dot|svg]
//! ```

use std::process::ExitCode;

use kube_fsm_app::App;
use kube_fsm_examples::database;

fn main() -> ExitCode {
    App::new("kube-fsm-examples")
        .machine(|client| database::operator(client, None))
        .run()
}
