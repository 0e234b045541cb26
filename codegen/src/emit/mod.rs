//! Emit stage: [`Lowered`] → Rust tokens, one file per generated item family. It only splices
//! what lowering computed. Output depends only on that (no hash-map iteration, no spans that
//! vary), so expansions are byte-identical from run to run and incremental builds stay warm.

mod data;
mod enums;
mod handler;
mod per_phase;
mod phase;

use proc_macro2::TokenStream;
use quote::quote;

use crate::lower::Lowered;

/// Emits everything the machine generates.
pub fn emit(lowered: &Lowered<'_>) -> TokenStream {
    let phase_enum = phase::phase_enum(lowered);
    let condition_enum = enums::condition_enum(lowered);
    let event_enum = enums::event_enum(lowered);
    let per_phase = per_phase::per_phase_types(lowered);
    let handler = lowered
        .status_field
        .is_some()
        .then(|| handler::handler_trait(lowered));
    let glue = handler::glue(lowered);
    quote! {
        #phase_enum
        #condition_enum
        #event_enum
        #per_phase
        #handler
        #glue
    }
}

fn doc(text: &str) -> TokenStream {
    quote!(#[doc = #text])
}
