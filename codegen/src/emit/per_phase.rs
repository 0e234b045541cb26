//! Per non-terminal phase: `{Kind}{Phase}Target` (its legal targets), `{Kind}{Phase}Event` (the
//! events it accepts) and the `{Kind}{Phase}Next` alias its handler returns.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use crate::lower::Lowered;

use super::doc;

pub fn per_phase_types(lowered: &Lowered<'_>) -> TokenStream {
    let phase_enum = &lowered.types.phase;
    let variant = |i: usize| &lowered.phases[i].variant.ident;
    let mut out = TokenStream::new();
    for phase in &lowered.phases {
        let Some(handled) = &phase.handled else {
            continue;
        };
        let (target_ty, event_ty, next_ty) =
            (&handled.target_ty, &handled.event_ty, &handled.next_ty);
        let targets: Vec<&Ident> = handled.targets.iter().map(|&t| variant(t)).collect();
        let target_docs = handled.target_docs.iter().map(|d| doc(d));
        let event_docs = handled.event_docs.iter().map(|d| doc(d));
        let event_variants: Vec<&Ident> = phase
            .events
            .iter()
            .map(|&(e, _)| &lowered.events[e].ident)
            .collect();
        let event_targets = phase.events.iter().map(|&(_, to)| variant(to));
        let event_names = phase.events.iter().map(|&(e, _)| &lowered.events[e].name);
        let illegal_names = handled.illegal.iter().map(|&(to, _)| variant(to));
        let illegal_words = handled.illegal.iter().map(|(_, words)| words);
        let target_doc = doc(&handled.target_doc);
        let event_doc = doc(&handled.event_doc);
        let next_doc = doc(&handled.next_doc);
        let event_conversion = (!lowered.events.is_empty()).then(|| {
            let global = &lowered.types.event;
            let arms = event_variants
                .iter()
                .map(|e| quote!(#event_ty::#e => #global::#e,));
            quote! {
                #[automatically_derived]
                impl ::core::convert::From<#event_ty> for #global {
                    fn from(event: #event_ty) -> Self {
                        match event {
                            #(#arms)*
                        }
                    }
                }
            }
        });
        out.extend(quote! {
            #target_doc
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum #target_ty {
                #(#target_docs #targets,)*
            }

            // Naming a phase the handler cannot move to is a type error (an `IllegalTarget` is
            // no target), and the constant's deprecation note says why and what is legal.
            #[automatically_derived]
            impl #target_ty {
                #(
                    #[doc(hidden)]
                    #[allow(non_upper_case_globals)]
                    #[deprecated(note = #illegal_words)]
                    pub const #illegal_names: ::kube_fsm::__private::IllegalTarget =
                        ::kube_fsm::__private::IllegalTarget;
                )*
            }

            #[automatically_derived]
            impl ::core::convert::From<#target_ty> for #phase_enum {
                fn from(target: #target_ty) -> Self {
                    match target {
                        #(#target_ty::#targets => Self::#targets,)*
                    }
                }
            }

            #[automatically_derived]
            impl ::core::convert::From<#target_ty> for ::kube_fsm::__private::Next<#target_ty, #event_ty> {
                fn from(target: #target_ty) -> Self {
                    Self::To(target)
                }
            }

            #event_doc
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum #event_ty {
                #(#event_docs #event_variants,)*
            }

            #[automatically_derived]
            impl ::kube_fsm::__private::PhaseEvent<#phase_enum> for #event_ty {
                fn target(self) -> #phase_enum {
                    match self {
                        #(Self::#event_variants => #phase_enum::#event_targets,)*
                    }
                }
                fn name(self) -> &'static str {
                    match self {
                        #(Self::#event_variants => #event_names,)*
                    }
                }
            }

            #[automatically_derived]
            impl ::core::convert::From<#event_ty> for ::kube_fsm::__private::Next<#target_ty, #event_ty> {
                fn from(event: #event_ty) -> Self {
                    Self::Fire(event)
                }
            }

            #event_conversion

            #next_doc
            pub type #next_ty = ::kube_fsm::__private::Next<#target_ty, #event_ty>;
        });
    }
    out
}
