//! The README's quick start with the library's command line as its `main`: below the imports,
//! the README's block after "With `kube-fsm-app`", word for word (a test checks it), over
//! the quick start's own types.

#[path = "quickstart.rs"]
#[allow(dead_code)] // its `main` is the README's other one
mod quickstart;

use quickstart::{Handlers, Task};

fn main() -> std::process::ExitCode {
    kube_fsm_app::App::new("task-operator") // names the Lease, ServiceAccount, roles, Deployment
        .machine(|client| kube_fsm::Operator::<Task, Handlers>::new(client, Handlers))
        .run() // run | crd | manifests | monitoring | diagram | check | completions
}
