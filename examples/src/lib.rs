//! The example operators' machines and handlers, which the examples in `examples/` run (see
//! their `main`s) and the demo, the tests and the benchmarks reuse:
//!
//! - [`database`]: a `Database` custom resource driven by `specs/database.yaml`, run as a
//!   StatefulSet with its headless Service and credentials; its conditions come from what the
//!   StatefulSet and EndpointSlice controllers report;
//! - [`stand_in`]: the same machine with one ConfigMap standing in for the workload, written
//!   for API economy: the benchmarks' operator, and the tests' on a bare API server;
//! - [`riskengine`]: the `RiskEngine` of a multi-tenant platform driven by
//!   `specs/riskengine.yaml`: a version allow-list in the platform's namespace, children that
//!   must not leak across tenants;
//! - [`migration`]: a schema `Migration` driven by `specs/migration.yaml`, run as a Job: it
//!   waits for a person's approval and ends as the Job's own status says.
//!
//! The examples' `main`s run them on the library's command line (`kube_fsm_app::App`).

pub mod database;
pub mod migration;
pub mod riskengine;
pub mod stand_in;

/// The book's chapters (`book/src`): their Rust snippets compile as this crate's doctests.
#[cfg(doctest)]
pub mod book {
    macro_rules! chapters {
        ($($name:ident = $path:literal,)*) => {$(
            #[doc = include_str!(concat!("../../book/src/", $path))]
            pub struct $name;
        )*};
    }
    chapters! {
        Introduction = "introduction.md",
        Tutorial = "tutorial.md",
        Testing = "testing.md",
        SpecLanguage = "concepts/spec-language.md",
        Generated = "concepts/generated.md",
        Runtime = "concepts/runtime.md",
        Deploy = "operations/deploy.md",
        Operate = "operations/operate.md",
        Observe = "operations/observe.md",
        Evolve = "operations/evolve.md",
        Cli = "reference/cli.md",
        Metrics = "reference/metrics.md",
        Annotations = "reference/annotations.md",
        Contributing = "contributing.md",
    }
}

/// The label every child of the example operators carries (key, value), and the platform's
/// RiskEngine allow-list: both machines watch only the ConfigMaps and Secrets with it, so that
/// in one process they share one watch of each kind.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kube-fsm-examples");

/// The label selector of the children ([`MANAGED_BY`]).
#[must_use]
pub fn child_selector() -> String {
    format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)
}

/// The error type of the examples' `main`s and helpers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Logs to stderr, filtered by `RUST_LOG` (default: `default`, e.g. `info`).
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// `bytes` random bytes from the operating system's CSPRNG, as hex (credentials).
pub(crate) fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer)?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}
