//! The example operators' machines and handlers, which the examples in `examples/` run (see
//! their `main`s) and the demo, the tests and the benchmarks reuse:
//!
//! - [`database`]: a `Database` custom resource driven by `specs/database.yaml`, one child
//!   ConfigMap each, written for API economy;
//! - [`riskengine`]: the `RiskEngine` of a multi-tenant platform driven by
//!   `specs/riskengine.yaml`: a version allow-list in the platform's namespace, children that
//!   must not leak across tenants;
//! - [`serve`]: the operator's `/metrics`, `/healthz` and `/readyz`;
//! - [`webhook`]: serving and registering the admission webhook.

pub mod database;
pub mod riskengine;
pub mod serve;
pub mod webhook;

/// The error type of the examples' `main`s and helpers.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
