//! The RiskEngine operator of a multi-tenant platform (`specs/riskengine.yaml`, handlers in
//! `src/riskengine.rs`): each tenant's RiskEngine is validated against a version allow-list
//! the platform keeps in its own namespace (a shared ConfigMap: a change of it reconciles every
//! RiskEngine), then deployed as a rendered ConfigMap and a credentials Secret in the tenant's
//! namespace, never across tenants; lost credentials are repaired, and deletion removes both.
//! On the library's command line; the `operator` example runs it beside the Database.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example riskengine -- crd | kubectl apply -f -
//! RISKENGINE_PLATFORM_NAMESPACE=platform cargo run -p kube-fsm-examples --example riskengine -- run
//! ```

use std::process::ExitCode;

use kube_fsm_app::App;
use kube_fsm_examples::riskengine::{self, Handlers};

fn main() -> ExitCode {
    // Where the platform keeps its allow-list.
    let platform = std::env::var("RISKENGINE_PLATFORM_NAMESPACE")
        .unwrap_or_else(|_| "kube-fsm-platform".to_owned());
    App::new("riskengine-operator")
        .machine(move |client| riskengine::operator(client, Handlers::new(platform.clone())))
        .run()
}
