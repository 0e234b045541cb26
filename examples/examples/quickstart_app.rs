//! The README's quick start with the library's command line as its `main`: below the imports,
//! the README's block after "With `kube-fsm-app`", word for word (a test checks it), over
//! the quick start's own types.

#[path = "quickstart.rs"]
#[allow(dead_code)] // its `main` is the README's other one
mod quickstart;

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use quickstart::{Handlers, Job};

fn main() -> std::process::ExitCode {
    kube_fsm_app::App::new("job-operator") // names the Lease, ServiceAccount, roles, Deployment
        .machine(|client| {
            kube_fsm::Operator::<Job, Handlers>::new(client, Handlers)
                .owns::<Pod>(watcher::Config::default())
        })
        .run() // run | crd | manifests | monitoring | diagram | check | completions
}
