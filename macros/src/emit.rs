//! Stage 3: [`Machine`] → Rust tokens. Output depends only on the machine and the names passed
//! in (no hash-map iteration, no spans that vary), so expansions are byte-identical from run
//! to run and incremental builds stay warm.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};

use crate::model::{Drift, Machine, Trigger};
use crate::names::to_snake;
use crate::render;

/// What the emitter needs besides the machine.
pub struct Target<'a> {
    /// The resource type (`#[kube(kind)]`), e.g. `Database`.
    pub kind: &'a Ident,
    /// The status struct's field holding the machine status, spanned at `#[kube(status)]`.
    pub status_field: Option<(&'a Ident, Span)>,
    /// Shown in `MachineData::source`.
    pub source: &'a str,
}

struct Names {
    phase: Ident,
    condition: Ident,
    event: Ident,
    handler: Ident,
}

fn doc(text: &str) -> TokenStream {
    quote!(#[doc = #text])
}

fn variant(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

/// Emits everything the machine generates.
pub fn emit(machine: &Machine, target: &Target<'_>) -> TokenStream {
    let kind = target.kind;
    let names = Names {
        phase: format_ident!("{kind}Phase"),
        condition: format_ident!("{kind}Condition"),
        event: format_ident!("{kind}Event"),
        handler: format_ident!("{kind}Handler"),
    };
    let phase_enum = phase_enum(machine, target, &names);
    let condition_enum = condition_enum(machine, target, &names);
    let event_enum = event_enum(machine, target, &names);
    let per_phase = per_phase_types(machine, target, &names);
    let handler = target
        .status_field
        .is_some()
        .then(|| handler_trait(machine, target, &names));
    let glue = glue(machine, target, &names);
    quote! {
        #phase_enum
        #condition_enum
        #event_enum
        #per_phase
        #handler
        #glue
    }
}

fn phase_enum(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    let kind = target.kind;
    let phase = &names.phase;
    let count = machine.phases.len();
    let words = count.div_ceil(64).max(1);
    let variants: Vec<Ident> = machine.phases.iter().map(|p| variant(&p.name)).collect();
    let phase_names: Vec<&str> = machine.phases.iter().map(|p| p.name.as_str()).collect();
    let variant_docs = machine.phases.iter().map(|p| {
        let mut text = format!("Phase `{}`", p.name);
        if let Some(d) = &p.description {
            text = format!("{text}: {d}");
        }
        if p.terminal {
            text.push_str(" (terminal)");
        }
        doc(&text)
    });
    let initial = &variants[machine.initial];

    let bits = |set: &dyn Fn(usize) -> bool| -> TokenStream {
        let words = (0..words).map(|w| {
            let mut word = 0u64;
            for bit in 0..64 {
                if w * 64 + bit < count && set(w * 64 + bit) {
                    word |= 1 << bit;
                }
            }
            Literal::u64_unsuffixed(word)
        });
        quote!([#(#words),*])
    };
    let terminal = bits(&|i| machine.phases[i].terminal);
    let rows = (0..count).map(|from| {
        let targets = machine.targets(from);
        bits(&|to| targets.contains(&to))
    });
    let successors = (0..count).map(|from| {
        let targets = machine.targets(from).into_iter().map(|t| &variants[t]);
        quote!(&[#(Self::#targets),*])
    });

    let fire = (!machine.events.is_empty()).then(|| {
        let event = &names.event;
        let mut arms = Vec::new();
        for from in 0..count {
            for (ev, to) in machine.events_from(from) {
                let (from, to, ev) = (
                    &variants[from],
                    &variants[to],
                    variant(&machine.events[ev].name),
                );
                arms.push(
                    quote!((Self::#from, #event::#ev) => ::core::option::Option::Some(Self::#to),),
                );
            }
        }
        let wildcard = (arms.len() < count * machine.events.len())
            .then(|| quote!(_ => ::core::option::Option::None,));
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
    });

    let mut enum_doc = format!("Phases of [`{kind}`], generated from its state-machine spec.\n\n");
    enum_doc.push_str("```mermaid\n");
    enum_doc.push_str(&render::mermaid(machine));
    enum_doc.push_str("```");
    let enum_doc = doc(&enum_doc);
    let machine_data = machine_data(machine, target);
    let list = phase_names.join(", ");
    let unknown_doc = doc(&format!(
        "Parses a phase name; the error lists the valid phases ({list})."
    ));

    quote! {
        #enum_doc
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum #phase {
            #(#variant_docs #variants,)*
        }

        impl #phase {
            /// Every phase, in spec order.
            pub const ALL: [Self; #count] = [#(Self::#variants),*];
            /// The phase a new object starts in.
            pub const INITIAL: Self = Self::#initial;
            /// The machine's static data (edges, triggers, timeouts, diagrams).
            pub const MACHINE: &'static ::kube_fsm::MachineData = {
                static DATA: ::kube_fsm::MachineData = #machine_data;
                &DATA
            };
            const NAMES: [&'static str; #count] = [#(#phase_names),*];
            const TERMINAL: [u64; #words] = #terminal;
            const EDGES: [[u64; #words]; #count] = [#(#rows),*];
            const SUCCESSORS: [&'static [Self]; #count] = [#(#successors),*];

            /// The phase name, as stored in `status.phase`.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                Self::NAMES[self as usize]
            }

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

        impl ::core::default::Default for #phase {
            fn default() -> Self {
                Self::INITIAL
            }
        }

        impl ::core::fmt::Display for #phase {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::core::str::FromStr for #phase {
            type Err = ::kube_fsm::UnknownPhase;
            #unknown_doc
            fn from_str(value: &str) -> ::core::result::Result<Self, <Self as ::core::str::FromStr>::Err> {
                let mut i = 0;
                while i < #count {
                    if Self::NAMES[i].len() == value.len() && Self::NAMES[i].as_bytes() == value.as_bytes() {
                        return ::core::result::Result::Ok(Self::ALL[i]);
                    }
                    i += 1;
                }
                ::core::result::Result::Err(::kube_fsm::UnknownPhase {
                    value: ::kube_fsm::__private::String::from(value),
                    valid: &Self::NAMES,
                })
            }
        }

        impl ::kube_fsm::__private::serde::Serialize for #phase {
            fn serialize<S: ::kube_fsm::__private::serde::Serializer>(&self, serializer: S) -> ::core::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::kube_fsm::__private::serde::Deserialize<'de> for #phase {
            fn deserialize<D: ::kube_fsm::__private::serde::Deserializer<'de>>(deserializer: D) -> ::core::result::Result<Self, D::Error> {
                let value = <::kube_fsm::__private::String as ::kube_fsm::__private::serde::Deserialize>::deserialize(deserializer)?;
                value.parse().map_err(<D::Error as ::kube_fsm::__private::serde::de::Error>::custom)
            }
        }

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

        impl ::kube_fsm::Phase for #phase {
            const MACHINE: &'static ::kube_fsm::MachineData = Self::MACHINE;
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

fn machine_data(machine: &Machine, target: &Target<'_>) -> TokenStream {
    let kind = target.kind.to_string();
    let opt_ms = |ms: Option<u64>| match ms {
        Some(ms) => quote!(::core::option::Option::Some(#ms)),
        None => quote!(::core::option::Option::None),
    };
    let phases = machine.phases.iter().map(|p| {
        let name = &p.name;
        let description = p.description.as_deref().unwrap_or("");
        let terminal = p.terminal;
        let requeue = opt_ms(p.requeue_after_ms);
        let timeout = match &p.timeout {
            Some(t) => {
                let (after, to, reason) = (t.after_ms, t.to, &t.reason);
                quote!(::core::option::Option::Some(::kube_fsm::machine::TimeoutData { after_ms: #after, to: #to, reason: #reason }))
            }
            None => quote!(::core::option::Option::None),
        };
        quote!(::kube_fsm::machine::PhaseData { name: #name, description: #description, terminal: #terminal, requeue_after_ms: #requeue, timeout: #timeout })
    });
    let conditions = machine.conditions.iter().map(|c| {
        let name = &c.type_name;
        let description = c.description.as_deref().unwrap_or("");
        quote!(::kube_fsm::machine::ConditionData { name: #name, description: #description })
    });
    let events = machine.events.iter().map(|e| &e.name);
    let edges = machine.edges.iter().map(|e| {
        let (from, to) = (e.from, e.to);
        let trigger = match &e.trigger {
            Trigger::Manual => quote!(::kube_fsm::machine::TriggerData::Manual),
            Trigger::Event(ev) => quote!(::kube_fsm::machine::TriggerData::Event(#ev)),
            Trigger::When(reqs) => {
                let reqs = reqs.iter().map(
                    |(c, s)| quote!(::kube_fsm::machine::Requirement { condition: #c, status: #s }),
                );
                quote!(::kube_fsm::machine::TriggerData::When(&[#(#reqs),*]))
            }
        };
        quote!(::kube_fsm::machine::EdgeData { from: #from, to: #to, trigger: #trigger })
    });
    let initial = machine.initial;
    let finalizer = match &machine.finalizer {
        Some(f) => quote!(::core::option::Option::Some(#f)),
        None => quote!(::core::option::Option::None),
    };
    let mermaid = render::mermaid(machine);
    let dot = render::dot(machine, &kind);
    let ready = match machine.ready {
        Some(i) => quote!(::core::option::Option::Some(#i)),
        None => quote!(::core::option::Option::None),
    };
    let drift = match machine.drift {
        Drift::Adopt => quote!(::kube_fsm::machine::DriftPolicy::Adopt),
        Drift::Revert => quote!(::kube_fsm::machine::DriftPolicy::Revert),
    };
    let retired = machine.retired.iter().map(|r| {
        let (name, to) = (&r.name, r.to);
        quote!(::kube_fsm::machine::RetiredData { name: #name, to: #to })
    });
    let cel_phase_rule = render::cel_transition_rule(machine);
    let cel_first_phase_rule = render::cel_first_phase_rule(machine);
    let source = target.source;
    quote! {
        ::kube_fsm::MachineData {
            kind: #kind,
            phases: &[#(#phases),*],
            conditions: &[#(#conditions),*],
            events: &[#(#events),*],
            edges: &[#(#edges),*],
            initial: #initial,
            finalizer: #finalizer,
            ready: #ready,
            drift: #drift,
            retired: &[#(#retired),*],
            mermaid: #mermaid,
            dot: #dot,
            cel_phase_rule: #cel_phase_rule,
            cel_first_phase_rule: #cel_first_phase_rule,
            source: #source,
        }
    }
}

fn condition_enum(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    let kind = target.kind;
    let condition = &names.condition;
    let count = machine.conditions.len();
    let variants: Vec<Ident> = machine
        .conditions
        .iter()
        .map(|c| variant(&c.variant))
        .collect();
    let types: Vec<&str> = machine
        .conditions
        .iter()
        .map(|c| c.type_name.as_str())
        .collect();
    let docs = machine.conditions.iter().map(|c| {
        doc(&match &c.description {
            Some(d) => format!("Condition type `{}`: {d}", c.type_name),
            None => format!("Condition type `{}`.", c.type_name),
        })
    });
    let enum_doc = doc(&format!("Condition types the [`{kind}`] controller owns."));
    quote! {
        #enum_doc
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum #condition {
            #(#docs #variants,)*
        }

        impl #condition {
            /// Every condition type, in spec order.
            pub const ALL: [Self; #count] = [#(Self::#variants),*];
            const NAMES: [&'static str; #count] = [#(#types),*];

            /// The `metav1.Condition.type` string.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }

        impl ::core::fmt::Display for #condition {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::kube_fsm::ConditionType for #condition {
            fn as_str(self) -> &'static str {
                Self::as_str(self)
            }
        }
    }
}

fn event_enum(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    if machine.events.is_empty() {
        return TokenStream::new();
    }
    let kind = target.kind;
    let event = &names.event;
    let count = machine.events.len();
    let variants: Vec<Ident> = machine.events.iter().map(|e| variant(&e.name)).collect();
    let event_names: Vec<&str> = machine.events.iter().map(|e| e.name.as_str()).collect();
    let docs = machine.events.iter().map(|e| {
        doc(&match &e.description {
            Some(d) => format!("Event `{}`: {d}", e.name),
            None => format!("Event `{}`.", e.name),
        })
    });
    let enum_doc = doc(&format!(
        "Events that move a [`{kind}`] along its machine's edges."
    ));
    quote! {
        #enum_doc
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum #event {
            #(#docs #variants,)*
        }

        impl #event {
            /// Every event, in spec order.
            pub const ALL: [Self; #count] = [#(Self::#variants),*];
            const NAMES: [&'static str; #count] = [#(#event_names),*];

            /// The event name (the reason of the Kubernetes Event recorded for it).
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }

        impl ::core::fmt::Display for #event {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    }
}

/// Per non-terminal phase: `{Kind}{Phase}Target` (its legal targets), `{Kind}{Phase}Event`
/// (the events it accepts) and the `{Kind}{Phase}Next` alias the handler returns.
fn per_phase_types(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    let kind = target.kind;
    let phase_enum = &names.phase;
    let mut out = TokenStream::new();
    for (i, phase) in machine
        .phases
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.terminal)
    {
        let (target_ty, event_ty, next_ty) = per_phase_names(kind, &phase.name);
        let targets: Vec<Ident> = machine
            .targets(i)
            .into_iter()
            .map(|t| variant(&machine.phases[t].name))
            .collect();
        let events: Vec<(Ident, Ident)> = machine
            .events_from(i)
            .into_iter()
            .map(|(e, to)| {
                (
                    variant(&machine.events[e].name),
                    variant(&machine.phases[to].name),
                )
            })
            .collect();
        let target_docs = targets
            .iter()
            .map(|t| doc(&format!("Move from `{}` to `{t}`.", phase.name)));
        let event_docs = events
            .iter()
            .map(|(e, to)| doc(&format!("Fire `{e}`: `{}` → `{to}`.", phase.name)));
        let event_variants: Vec<&Ident> = events.iter().map(|(e, _)| e).collect();
        let event_targets = events.iter().map(|(_, to)| to);
        let event_names = events.iter().map(|(e, _)| e.to_string());
        let target_doc = doc(&format!(
            "The legal targets of [`{kind}`] phase `{}`.",
            phase.name
        ));
        let event_doc = doc(&format!(
            "The events [`{kind}`] phase `{}` accepts.",
            phase.name
        ));
        let next_doc = doc(&format!(
            "What the handler of [`{kind}`] phase `{}` returns.",
            phase.name
        ));
        let event_conversion = (!machine.events.is_empty()).then(|| {
            let global = &names.event;
            let arms = event_variants
                .iter()
                .map(|e| quote!(#event_ty::#e => #global::#e,));
            quote! {
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

            impl ::core::convert::From<#target_ty> for #phase_enum {
                fn from(target: #target_ty) -> Self {
                    match target {
                        #(#target_ty::#targets => Self::#targets,)*
                    }
                }
            }

            impl ::core::convert::From<#target_ty> for ::kube_fsm::Next<#target_ty, #event_ty> {
                fn from(target: #target_ty) -> Self {
                    Self::To(target)
                }
            }

            #event_doc
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum #event_ty {
                #(#event_docs #event_variants,)*
            }

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

            impl ::core::convert::From<#event_ty> for ::kube_fsm::Next<#target_ty, #event_ty> {
                fn from(event: #event_ty) -> Self {
                    Self::Fire(event)
                }
            }

            #event_conversion

            #next_doc
            pub type #next_ty = ::kube_fsm::Next<#target_ty, #event_ty>;
        });
    }
    out
}

fn per_phase_names(kind: &Ident, phase: &str) -> (Ident, Ident, Ident) {
    (
        format_ident!("{kind}{phase}Target"),
        format_ident!("{kind}{phase}Event"),
        format_ident!("{kind}{phase}Next"),
    )
}

fn handler_method(phase: &str) -> Ident {
    format_ident!("on_{}", to_snake(phase))
}

fn handler_trait(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    let kind = target.kind;
    let (handler, phase_enum) = (&names.handler, &names.phase);
    let methods = machine.phases.iter().enumerate().filter(|(_, p)| !p.terminal).map(|(i, p)| {
        let method = handler_method(&p.name);
        let (_, _, next_ty) = per_phase_names(kind, &p.name);
        let moves: Vec<String> = machine
            .targets(i)
            .into_iter()
            .map(|t| {
                let triggers: Vec<String> = machine
                    .edges
                    .iter()
                    .filter(|e| e.from == i && e.to == t)
                    .filter_map(|e| match &e.trigger {
                        Trigger::Manual => None,
                        Trigger::Event(ev) => Some(format!("on `{}`", machine.events[*ev].name)),
                        Trigger::When(_) => Some("by a `when` rule".to_owned()),
                    })
                    .collect();
                let name = &machine.phases[t].name;
                if triggers.is_empty() { format!("`{name}`") } else { format!("`{name}` ({})", triggers.join(", ")) }
            })
            .collect();
        let mut text = format!("Handles an object in phase `{}`", p.name);
        if let Some(d) = &p.description {
            text.push_str(&format!(" ({d})"));
        }
        text.push_str(&format!(". It may move to {}.", moves.join(", ")));
        let method_doc = doc(&text);
        quote! {
            #method_doc
            fn #method(&self, object: &#kind, step: &mut ::kube_fsm::Step<#kind>)
                -> impl ::core::future::Future<Output = ::core::result::Result<#next_ty, Self::Error>> + ::core::marker::Send;
        }
    });
    let cleanup = machine.finalizer.as_ref().map(|f| {
        let cleanup_doc = doc(&format!(
            "Cleans up before deletion. The finalizer `{f}` is removed once this returns `Cleanup::Done`."
        ));
        quote! {
            #cleanup_doc
            fn cleanup(&self, object: &#kind)
                -> impl ::core::future::Future<Output = ::core::result::Result<::kube_fsm::Cleanup, Self::Error>> + ::core::marker::Send;
        }
    });
    let trait_doc = doc(&format!(
        "The phase handlers of [`{kind}`]: one method per non-terminal phase, each able to return only that phase's legal moves."
    ));
    quote! {
        #trait_doc
        pub trait #handler: ::core::marker::Send + ::core::marker::Sync + 'static {
            /// The handlers' error type.
            type Error: ::std::error::Error + ::core::marker::Send + ::core::marker::Sync + 'static;

            #(#methods)*

            #cleanup

            /// Called before a transition is written; return `Verdict::Veto` to refuse it.
            fn before_transition(&self, _object: &#kind, _from: #phase_enum, _to: #phase_enum)
                -> impl ::core::future::Future<Output = ::core::result::Result<::kube_fsm::Verdict, Self::Error>> + ::core::marker::Send {
                ::core::future::ready(::core::result::Result::Ok(::kube_fsm::Verdict::Allow))
            }

            /// Called after a transition was written.
            fn after_transition(&self, _object: &#kind, _from: #phase_enum, _to: #phase_enum)
                -> impl ::core::future::Future<Output = ::core::result::Result<(), Self::Error>> + ::core::marker::Send {
                ::core::future::ready(::core::result::Result::Ok(()))
            }
        }
    }
}

fn glue(machine: &Machine, target: &Target<'_>, names: &Names) -> TokenStream {
    let kind = target.kind;
    let (handler, phase_enum, condition) = (&names.handler, &names.phase, &names.condition);
    let arms = machine.phases.iter().map(|p| {
        let v = variant(&p.name);
        if p.terminal {
            quote!(#phase_enum::#v => ::core::result::Result::Ok(::kube_fsm::Choice::Stay),)
        } else {
            let method = handler_method(&p.name);
            quote!(#phase_enum::#v => handler.#method(object, step).await.map(::kube_fsm::__private::choice),)
        }
    });
    let cleanup = if machine.finalizer.is_some() {
        quote!(::std::boxed::Box::pin(handler.cleanup(object)))
    } else {
        quote!(::std::boxed::Box::pin(::core::future::ready(
            ::core::result::Result::Ok(::kube_fsm::Cleanup::Done)
        )))
    };
    let status_impl = target.status_field.map(|(field, span)| {
        // Spanned at `#[kube(status = "...")]`, so a status without the field is reported there.
        let field = Ident::new(&field.to_string(), span);
        let get = quote_spanned!(span=> status.#field);
        quote! {
            impl ::kube_fsm::StateMachine for #kind {
                type Phase = #phase_enum;
                type Condition = #condition;
                type Status = <#kind as ::kube_fsm::__private::HasStatus>::Status;
                fn status_of(&self) -> ::core::option::Option<&Self::Status> {
                    self.status.as_ref()
                }
                fn status_of_mut(&mut self) -> &mut Self::Status {
                    self.status.get_or_insert_with(::core::default::Default::default)
                }
                fn machine_in(status: &Self::Status) -> &::kube_fsm::MachineStatus<#phase_enum> {
                    &#get
                }
                fn machine_in_mut(status: &mut Self::Status) -> &mut ::kube_fsm::MachineStatus<#phase_enum> {
                    &mut #get
                }
            }

            impl<H: #handler> ::kube_fsm::Dispatch<H> for #kind {
                type Error = H::Error;

                #[allow(unused_variables)]
                fn handle<'a>(
                    handler: &'a H,
                    phase: #phase_enum,
                    object: &'a Self,
                    step: &'a mut ::kube_fsm::Step<Self>,
                ) -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::Choice<#phase_enum>, H::Error>> {
                    ::std::boxed::Box::pin(async move {
                        match phase {
                            #(#arms)*
                        }
                    })
                }

                #[allow(unused_variables)]
                fn cleanup<'a>(handler: &'a H, object: &'a Self)
                    -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::Cleanup, H::Error>> {
                    #cleanup
                }

                fn before_transition<'a>(handler: &'a H, object: &'a Self, from: #phase_enum, to: #phase_enum)
                    -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::Verdict, H::Error>> {
                    ::std::boxed::Box::pin(handler.before_transition(object, from, to))
                }

                fn after_transition<'a>(handler: &'a H, object: &'a Self, from: #phase_enum, to: #phase_enum)
                    -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<(), H::Error>> {
                    ::std::boxed::Box::pin(handler.after_transition(object, from, to))
                }
            }
        }
    });
    quote!(#status_impl)
}
