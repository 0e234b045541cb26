//! The `#[state_machine]` attribute of kube-fsm. Depend on the `kube-fsm` crate, which
//! re-exports it; this crate only compiles specs into Rust.
//!
//! Stages, each its own module with a typed artifact between them, run in order by `expand`:
//!
//! 1. parse: `args`, `dsl` → `args::Input` (options, resource kind, an inline
//!    `spec::RawSpec` or the spec path);
//! 2. load: `load` → the spec file (`load::Loaded`);
//! 3. read: `yaml`, `from_yaml` → `spec::RawSpec`;
//! 4. validate: `validate` (`resolve` → `check` → `graph`) → `model::Machine`;
//! 5. lower: `lower` → `lower::Lowered` (every generated name, each phase's targets and
//!    events, docs, diagrams);
//! 6. emit: `emit` → tokens.
//!
//! Diagnostics are collected across stages (`diag`) and reported together; the macro never
//! panics.

mod args;
mod diag;
mod dsl;
mod emit;
mod expand;
mod from_yaml;
mod load;
mod lower;
mod model;
mod names;
#[cfg(test)]
mod properties;
mod render;
mod spec;
mod validate;
mod yaml;

use proc_macro::TokenStream;

/// Compiles a state-machine spec into typed Rust for a kube `CustomResource`.
///
/// Place it above `#[derive(CustomResource)]`:
/// `#[state_machine(spec = "specs/database.yaml")]` reads a YAML spec relative to the crate's
/// `CARGO_MANIFEST_DIR`; `#[state_machine(phases(..), conditions(..), transitions(..))]`
/// writes the same machine inline. See the kube-fsm README for the spec language and the
/// generated API.
#[proc_macro_attribute]
pub fn state_machine(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr.into(), item.into()).into()
}
