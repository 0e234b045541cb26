//! The `#[state_machine]` attribute of kube-fsm. Depend on the `kube-fsm` crate, which
//! re-exports it. This crate is the proc-macro entry only: the spec is read, checked, lowered
//! and emitted by `kube-fsm-codegen`.

use proc_macro::TokenStream;

/// Compiles a state-machine spec into typed Rust for a kube `CustomResource`.
///
/// Place it above `#[derive(CustomResource)]`:
/// `#[state_machine(spec = "specs/database.yaml")]` reads a YAML spec relative to the crate's
/// `CARGO_MANIFEST_DIR`; `#[state_machine(phases(..), conditions(..), transitions(..))]`
/// writes the same machine inline. See the kube-fsm book (its chapters "The spec language" and
/// "What is generated") for the spec language and the generated API.
#[proc_macro_attribute]
pub fn state_machine(attr: TokenStream, item: TokenStream) -> TokenStream {
    kube_fsm_codegen::expand(attr.into(), item.into()).into()
}
