//! The phase enum `{Kind}Phase`: names, bit-matrix edge lookups, `fire`, the machine's static
//! data, and its trait impls (parsing, serde, schema, `kube_fsm::Phase`).

use proc_macro2::{Ident, Literal, TokenStream};
use quote::quote;

use crate::lower::{Lowered, Variant};

use super::data::machine_data;
use super::doc;
use super::enums::{NameEnum, name_enum};

pub fn phase_enum(lowered: &Lowered<'_>) -> TokenStream {
    let phase = &lowered.types.phase;
    let count = lowered.phases.len();
    let words = lowered.words;
    let variants: Vec<&Ident> = lowered.phases.iter().map(|p| &p.variant.ident).collect();
    let initial = variants[lowered.machine.initial];
    let bits = |set: &[u64]| {
        let words = set.iter().map(|&word| Literal::u64_unsuffixed(word));
        quote!([#(#words),*])
    };
    let terminal = bits(&lowered.terminal_bits);
    let rows = lowered.edge_bits.iter().map(|row| bits(row));
    let successors = lowered.phases.iter().map(|p| {
        let targets = p.targets.iter().map(|&t| variants[t]);
        quote!(&[#(Self::#targets),*])
    });
    let fire = (!lowered.events.is_empty()).then(|| fire(lowered, &variants));
    let machine_data = machine_data(lowered);
    let unknown_doc = doc(&lowered.docs.from_str);
    let phase_variants: Vec<&Variant> = lowered.phases.iter().map(|p| &p.variant).collect();
    let NameEnum {
        decl,
        all,
        names,
        as_str,
        display,
    } = name_enum(
        phase,
        &lowered.docs.phase_enum,
        &phase_variants,
        quote!(
            /// Every phase, in spec order.
        ),
        quote!(
            /// The phase name, as stored in `status.phase`.
        ),
    );

    quote! {
        #decl

        impl #phase {
            #all
            /// The phase a new object starts in.
            pub const INITIAL: Self = Self::#initial;
            /// The machine's static data (edges, triggers, timeouts, diagrams).
            pub const MACHINE: &'static ::kube_fsm::__private::MachineData = {
                static DATA: ::kube_fsm::__private::MachineData = #machine_data;
                &DATA
            };
            #names
            const TERMINAL: [u64; #words] = #terminal;
            const EDGES: [[u64; #words]; #count] = [#(#rows),*];
            const SUCCESSORS: [&'static [Self]; #count] = [#(#successors),*];

            #as_str

            /// Whether the phase is terminal (nothing leaves it).
            #[must_use]
            pub const fn is_terminal(self) -> bool {
                let i = self as usize;
                (Self::TERMINAL[i / 64] >> (i % 64)) & 1 == 1
            }

            /// Whether the spec declares the edge `self -> to` (one bit-matrix lookup).
            #[must_use]
            pub const fn can_transition_to(self, to: Self) -> bool {
                let t = to as usize;
                (Self::EDGES[self as usize][t / 64] >> (t % 64)) & 1 == 1
            }

            /// The phases reachable in one transition, in spec order.
            #[must_use]
            pub const fn successors(self) -> &'static [Self] {
                Self::SUCCESSORS[self as usize]
            }

            #fire
        }

        #[automatically_derived]
        impl ::core::default::Default for #phase {
            fn default() -> Self {
                Self::INITIAL
            }
        }

        #display

        #[automatically_derived]
        impl ::core::str::FromStr for #phase {
            type Err = ::kube_fsm::__private::UnknownPhase;
            #unknown_doc
            fn from_str(value: &str) -> ::core::result::Result<Self, <Self as ::core::str::FromStr>::Err> {
                let mut i = 0;
                while i < #count {
                    if Self::NAMES[i].len() == value.len() && Self::NAMES[i].as_bytes() == value.as_bytes() {
                        return ::core::result::Result::Ok(Self::ALL[i]);
                    }
                    i += 1;
                }
                ::core::result::Result::Err(::kube_fsm::__private::UnknownPhase {
                    value: ::kube_fsm::__private::String::from(value),
                    valid: &Self::NAMES,
                })
            }
        }

        #[automatically_derived]
        impl ::kube_fsm::__private::serde::Serialize for #phase {
            fn serialize<S: ::kube_fsm::__private::serde::Serializer>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        #[automatically_derived]
        impl<'de> ::kube_fsm::__private::serde::Deserialize<'de> for #phase {
            fn deserialize<D: ::kube_fsm::__private::serde::Deserializer<'de>>(deserializer: D) -> ::core::result::Result<Self, D::Error> {
                let value = <::kube_fsm::__private::String as ::kube_fsm::__private::serde::Deserialize>::deserialize(deserializer)?;
                value.parse().map_err(<D::Error as ::kube_fsm::__private::serde::de::Error>::custom)
            }
        }

        #[automatically_derived]
        impl ::kube_fsm::__private::schemars::JsonSchema for #phase {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(::core::stringify!(#phase))
            }
            fn json_schema(_: &mut ::kube_fsm::__private::schemars::SchemaGenerator) -> ::kube_fsm::__private::schemars::Schema {
                ::kube_fsm::__private::string_enum_schema(&Self::NAMES)
            }
            fn inline_schema() -> bool {
                true
            }
        }

        #[automatically_derived]
        impl ::kube_fsm::__private::Phase for #phase {
            const MACHINE: &'static ::kube_fsm::__private::MachineData = Self::MACHINE;
            fn index(self) -> usize {
                self as usize
            }
            fn from_index(index: usize) -> ::core::option::Option<Self> {
                Self::ALL.get(index).copied()
            }
            fn can_transition_to(self, to: Self) -> bool {
                Self::can_transition_to(self, to)
            }
        }
    }
}

/// `fire`: the phase an event leads to from each phase that accepts it.
fn fire(lowered: &Lowered<'_>, variants: &[&Ident]) -> TokenStream {
    let event = &lowered.types.event;
    let arms = lowered.phases.iter().enumerate().flat_map(|(from, p)| {
        p.events.iter().map(move |&(ev, to)| {
            let (from, to, ev) = (variants[from], variants[to], &lowered.events[ev].ident);
            quote!((Self::#from, #event::#ev) => ::core::option::Option::Some(Self::#to),)
        })
    });
    let wildcard = (!lowered.fire_is_total).then(|| quote!(_ => ::core::option::Option::None,));
    quote! {
        /// The phase `event` leads to from this phase, or `None` if this phase does not
        /// accept it.
        #[must_use]
        pub const fn fire(self, event: #event) -> ::core::option::Option<Self> {
            match (self, event) {
                #(#arms)*
                #wildcard
            }
        }
    }
}
