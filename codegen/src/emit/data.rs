//! `MachineData`: the checked machine as static data (phases, edges, triggers, timeouts,
//! diagrams, CEL rules) for the runtime, tools and docs.

use proc_macro2::TokenStream;
use quote::quote;

use crate::lower::{Diagrams, Lowered};
use crate::model::{Drift, Source, Trigger};
use crate::picture::Pictures;

pub fn machine_data(lowered: &Lowered<'_>) -> TokenStream {
    let machine = lowered.machine;
    let kind = lowered.kind.to_string();
    let opt_ms = |ms: Option<u64>| match ms {
        Some(ms) => quote!(::core::option::Option::Some(#ms)),
        None => quote!(::core::option::Option::None),
    };
    let phases = machine.phases.iter().map(|p| {
        let name = &p.name;
        let description = p.description.as_deref().unwrap_or("");
        let terminal = p.terminal;
        let requeue = opt_ms(p.requeue_after_ms);
        let handler_timeout = opt_ms(p.handler_timeout_ms);
        let timeout = match &p.timeout {
            Some(t) => {
                let (after, to, reason) = (t.after_ms, t.to, &t.reason);
                quote!(::core::option::Option::Some(::kube_fsm::__private::TimeoutData { after_ms: #after, to: #to, reason: #reason }))
            }
            None => quote!(::core::option::Option::None),
        };
        quote!(::kube_fsm::__private::PhaseData { name: #name, description: #description, terminal: #terminal, requeue_after_ms: #requeue, handler_timeout_ms: #handler_timeout, timeout: #timeout })
    });
    let conditions = machine.conditions.iter().map(|c| {
        let name = &c.type_name;
        let description = c.description.as_deref().unwrap_or("");
        let from = match &c.from {
            Some(derived) => {
                let child = derived.child;
                let source = source(&derived.source);
                quote!(::core::option::Option::Some(::kube_fsm::__private::DerivedData { child: #child, source: #source }))
            }
            None => quote!(::core::option::Option::None),
        };
        quote!(::kube_fsm::__private::ConditionData { name: #name, description: #description, from: #from })
    });
    let children = machine.children.iter().enumerate().map(|(i, c)| {
        let (name, type_path) = (&c.name, &c.type_path);
        let description = c.description.as_deref().unwrap_or("");
        let (phases, after) = (&c.phases, &c.after);
        let ready = source(&c.ready);
        let (delete_on_leave, once) = (c.delete_on_leave, c.once);
        // Every child that passed the checks has a lowered type.
        let ty = (lowered.children.iter())
            .find(|l| l.index == i)
            .map(|l| &l.ty);
        quote!(::kube_fsm::__private::ChildData {
            name: #name, type_path: #type_path, description: #description,
            phases: &[#(#phases),*], after: &[#(#after),*], ready: #ready,
            delete_on_leave: #delete_on_leave, once: #once,
            type_meta: ::kube_fsm::__private::type_meta::<#ty>,
        })
    });
    let events = machine.events.iter().map(|e| &e.name);
    let edges = machine.edges.iter().map(|e| {
        let (from, to) = (e.from, e.to);
        let trigger = match &e.trigger {
            Trigger::Handler => quote!(::kube_fsm::__private::TriggerData::Handler),
            Trigger::Manual => quote!(::kube_fsm::__private::TriggerData::Manual),
            Trigger::Event(ev) => quote!(::kube_fsm::__private::TriggerData::Event(#ev)),
            Trigger::When(reqs) => {
                let reqs = reqs.iter().map(
                    |(c, s)| quote!(::kube_fsm::__private::Requirement { condition: #c, status: #s }),
                );
                quote!(::kube_fsm::__private::TriggerData::When(&[#(#reqs),*]))
            }
        };
        quote!(::kube_fsm::__private::EdgeData { from: #from, to: #to, trigger: #trigger })
    });
    let initial = machine.initial;
    let finalizer = match &machine.finalizer {
        Some(f) => quote!(::core::option::Option::Some(#f)),
        None => quote!(::core::option::Option::None),
    };
    let Diagrams {
        mermaid,
        dot,
        pictures,
        cel_phase_rule,
        cel_first_phase_rule,
    } = &lowered.diagrams;
    let picture = match pictures {
        Ok(Pictures {
            plain,
            pieces,
            slots,
        }) => quote!(::core::result::Result::Ok(
            ::kube_fsm::__private::PictureData {
                plain: #plain,
                pieces: &[#(#pieces),*],
                slots: &[#(#slots),*],
            }
        )),
        Err(why) => quote!(::core::result::Result::Err(#why)),
    };
    let ready = match &machine.ready {
        Some(ready) => {
            let (phases, conditions) = (&ready.phases, &ready.conditions);
            quote!(::core::option::Option::Some(::kube_fsm::__private::ReadyData {
                phases: &[#(#phases),*],
                conditions: &[#(#conditions),*],
            }))
        }
        None => quote!(::core::option::Option::None),
    };
    let drift = match machine.drift {
        Drift::Adopt => quote!(::kube_fsm::__private::DriftPolicy::Adopt),
        Drift::Revert => quote!(::kube_fsm::__private::DriftPolicy::Revert),
    };
    let retired = machine.retired.iter().map(|r| {
        let (name, to) = (&r.name, r.to);
        quote!(::kube_fsm::__private::RetiredData { name: #name, to: #to })
    });
    let source = &lowered.source;
    quote! {
        ::kube_fsm::__private::MachineData {
            kind: #kind,
            phases: &[#(#phases),*],
            conditions: &[#(#conditions),*],
            children: &[#(#children),*],
            events: &[#(#events),*],
            edges: &[#(#edges),*],
            initial: #initial,
            finalizer: #finalizer,
            ready: #ready,
            drift: #drift,
            retired: &[#(#retired),*],
            mermaid: #mermaid,
            dot: #dot,
            picture: #picture,
            cel_phase_rule: #cel_phase_rule,
            cel_first_phase_rule: #cel_first_phase_rule,
            source: #source,
        }
    }
}

/// A child's part a condition or its readiness reads, as `SourceData`.
fn source(source: &Source) -> TokenStream {
    match source {
        Source::Ready => quote!(::kube_fsm::__private::SourceData::Ready),
        Source::Condition(c) => quote!(::kube_fsm::__private::SourceData::Condition(#c)),
    }
}
