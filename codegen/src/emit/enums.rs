//! The shape the phase, condition and event enums share (one documented variant per name,
//! `ALL`, `NAMES`, `as_str`, `Display`), and the condition and event enums.

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use crate::lower::{Lowered, Variant};

use super::doc;

/// The pieces of a name enum, for its emitter to place among its own items.
pub struct NameEnum {
    /// The enum itself.
    pub decl: TokenStream,
    /// `pub const ALL`, every variant in spec order.
    pub all: TokenStream,
    /// `const NAMES`, the string of each variant.
    pub names: TokenStream,
    /// `pub const fn as_str`.
    pub as_str: TokenStream,
    /// `impl Display`, writing `as_str`.
    pub display: TokenStream,
}

impl NameEnum {
    /// The enum with nothing but the shared items: its inherent impl holds `ALL`, `NAMES` and
    /// `as_str`, then `Display`.
    pub fn plain(self, ty: &Ident) -> TokenStream {
        let NameEnum {
            decl,
            all,
            names,
            as_str,
            display,
        } = self;
        quote! {
            #decl

            impl #ty {
                #all
                #names

                #as_str
            }

            #display
        }
    }
}

/// The shared shape of enum `ty` over `variants`; `all_doc` and `as_str_doc` are doc comments.
pub fn name_enum(
    ty: &Ident,
    enum_doc: &str,
    variants: &[&Variant],
    all_doc: TokenStream,
    as_str_doc: TokenStream,
) -> NameEnum {
    let count = variants.len();
    let enum_doc = doc(enum_doc);
    let docs = variants.iter().map(|v| doc(&v.doc));
    let idents: Vec<&Ident> = variants.iter().map(|v| &v.ident).collect();
    let names = variants.iter().map(|v| v.name.as_str());
    NameEnum {
        decl: quote! {
            #enum_doc
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub enum #ty {
                #(#docs #idents,)*
            }
        },
        all: quote! {
            #all_doc
            pub const ALL: [Self; #count] = [#(Self::#idents),*];
        },
        names: quote! {
            const NAMES: [&'static str; #count] = [#(#names),*];
        },
        as_str: quote! {
            #as_str_doc
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        },
        display: quote! {
            #[automatically_derived]
            impl ::core::fmt::Display for #ty {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.write_str(self.as_str())
                }
            }
        },
    }
}

pub fn condition_enum(lowered: &Lowered<'_>) -> TokenStream {
    let condition = &lowered.types.condition;
    let plain = name_enum(
        condition,
        &lowered.docs.condition_enum,
        &lowered.conditions.iter().collect::<Vec<_>>(),
        quote!(
            /// Every condition type, in spec order.
        ),
        quote!(
            /// The `metav1.Condition.type` string.
        ),
    )
    .plain(condition);
    quote! {
        #plain

        #[automatically_derived]
        impl ::kube_fsm::__private::ConditionType for #condition {
            fn as_str(self) -> &'static str {
                Self::as_str(self)
            }
        }
    }
}

pub fn event_enum(lowered: &Lowered<'_>) -> TokenStream {
    if lowered.events.is_empty() {
        return TokenStream::new();
    }
    let event = &lowered.types.event;
    name_enum(
        event,
        &lowered.docs.event_enum,
        &lowered.events.iter().collect::<Vec<_>>(),
        quote!(
            /// Every event, in spec order.
        ),
        quote!(
            /// The event name (the reason of the Kubernetes Event recorded for it).
        ),
    )
    .plain(event)
}
