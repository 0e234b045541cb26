//! The example machines in one operator process: the Database (`specs/database.yaml`), the
//! RiskEngine (`specs/riskengine.yaml`) and the Migration (`specs/migration.yaml`) run in one
//! Manager, sharing one watch per kind (the Database's and the RiskEngine's Secrets), one
//! Lease (or one shard set), one endpoint and one admission webhook; the library's command
//! line does the rest.
//!
//! ```text
//! cargo run -p kube-fsm-examples --example operator -- crd | kubectl apply -f -
//! cargo run -p kube-fsm-examples --example operator -- run [--namespace NS] [--leader-elect]
//! cargo run -p kube-fsm-examples --example operator -- manifests --image IMAGE --out deploy/
//! cargo run -p kube-fsm-examples --example operator -- --help
//! ```
//!
//! The RiskEngine reads its platform's allow-list from the namespace
//! `RISKENGINE_PLATFORM_NAMESPACE` (default `kube-fsm-platform`).

use std::process::ExitCode;

use kube_fsm_app::App;
use kube_fsm_examples::{database, migration, riskengine};

fn main() -> ExitCode {
    let platform = std::env::var("RISKENGINE_PLATFORM_NAMESPACE")
        .unwrap_or_else(|_| "kube-fsm-platform".to_owned());
    App::new("kube-fsm-examples")
        .machine(|client| database::operator(client, None))
        .machine(move |client| {
            riskengine::operator(client, riskengine::Handlers::new(platform.clone()))
        })
        .machine(|client| migration::operator(client, None))
        .run()
}
