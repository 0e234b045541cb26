//! The handler trait `{Kind}Handler` (one method per non-terminal phase, each returning only
//! that phase's legal moves) and the glue that makes the resource a `StateMachine` driven by
//! it (`Dispatch`). Both need the status field, so neither exists without one.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

use crate::lower::Lowered;

use super::doc;

pub fn handler_trait(lowered: &Lowered<'_>) -> TokenStream {
    let kind = &lowered.kind;
    let (handler, phase_enum) = (&lowered.types.handler, &lowered.types.phase);
    let methods = lowered.phases.iter().filter_map(|p| p.handled.as_ref()).map(|handled| {
        let (method, next_ty) = (&handled.method, &handled.next_ty);
        let method_doc = doc(&handled.method_doc);
        quote! {
            #method_doc
            fn #method(&self, object: &#kind, step: &mut ::kube_fsm::__private::Step<#kind>)
                -> impl ::core::future::Future<Output = ::core::result::Result<#next_ty, Self::Error>> + ::core::marker::Send;
        }
    });
    let cleanup = lowered.docs.cleanup.as_ref().map(|cleanup_doc| {
        let cleanup_doc = doc(cleanup_doc);
        quote! {
            #cleanup_doc
            fn cleanup(&self, object: &#kind, context: &::kube_fsm::__private::Context)
                -> impl ::core::future::Future<Output = ::core::result::Result<::kube_fsm::__private::Cleanup, Self::Error>> + ::core::marker::Send;
        }
    });
    let builders = lowered.children.iter().map(|child| {
        let (method, ty) = (&child.method, &child.ty);
        let builder_doc = doc(&child.doc);
        quote! {
            #builder_doc
            fn #method(&self, object: &#kind, step: &::kube_fsm::__private::Step<#kind>)
                -> impl ::core::future::Future<Output = ::core::result::Result<#ty, Self::Error>> + ::core::marker::Send;
        }
    });
    let trait_doc = doc(&lowered.docs.handler);
    quote! {
        #trait_doc
        pub trait #handler: ::core::marker::Send + ::core::marker::Sync + 'static {
            /// The handlers' error type.
            type Error: ::std::error::Error + ::core::marker::Send + ::core::marker::Sync + 'static;

            #(#methods)*

            #(#builders)*

            #cleanup

            /// Called before a transition is written; return `Verdict::Veto` to refuse it.
            fn before_transition(&self, _object: &#kind, _from: #phase_enum, _to: #phase_enum)
                -> impl ::core::future::Future<Output = ::core::result::Result<::kube_fsm::__private::Verdict, Self::Error>> + ::core::marker::Send {
                ::core::future::ready(::core::result::Result::Ok(::kube_fsm::__private::Verdict::Allow))
            }

            /// Called after a transition was written.
            fn after_transition(&self, _object: &#kind, _from: #phase_enum, _to: #phase_enum)
                -> impl ::core::future::Future<Output = ::core::result::Result<(), Self::Error>> + ::core::marker::Send {
                ::core::future::ready(::core::result::Result::Ok(()))
            }
        }
    }
}

pub fn glue(lowered: &Lowered<'_>) -> TokenStream {
    let kind = &lowered.kind;
    let types = &lowered.types;
    let (handler, phase_enum, condition) = (&types.handler, &types.phase, &types.condition);
    let arms = lowered.phases.iter().map(|p| {
        let v = &p.variant.ident;
        match &p.handled {
            None => {
                quote!(#phase_enum::#v => ::core::result::Result::Ok(::kube_fsm::__private::Choice::Stay),)
            }
            Some(handled) => {
                let method = &handled.method;
                quote!(#phase_enum::#v => handler.#method(object, step).await.map(::kube_fsm::__private::choice),)
            }
        }
    });
    let cleanup = if lowered.docs.cleanup.is_some() {
        quote!(::std::boxed::Box::pin(handler.cleanup(object, context)))
    } else {
        quote!(::std::boxed::Box::pin(::core::future::ready(
            ::core::result::Result::Ok(::kube_fsm::__private::Cleanup::Done)
        )))
    };
    let children = declared_children(lowered);
    let status_impl = lowered.status_field.as_ref().map(|(field, span)| {
        // Spanned at `#[kube(status = "...")]`, so a status without the field is reported there.
        let get = quote_spanned!(*span=> status.#field);
        quote! {
            #[automatically_derived]
            impl ::kube_fsm::__private::StateMachine for #kind {
                type Phase = #phase_enum;
                type Condition = #condition;
                type Status = <#kind as ::kube_fsm::__private::HasStatus>::Status;
                fn status_of(&self) -> ::core::option::Option<&Self::Status> {
                    self.status.as_ref()
                }
                fn status_of_mut(&mut self) -> &mut Self::Status {
                    self.status.get_or_insert_with(::core::default::Default::default)
                }
                fn machine_in(status: &Self::Status) -> &::kube_fsm::__private::MachineStatus<#phase_enum> {
                    &#get
                }
                fn machine_in_mut(status: &mut Self::Status) -> &mut ::kube_fsm::__private::MachineStatus<#phase_enum> {
                    &mut #get
                }
            }

            #[automatically_derived]
            impl<H: #handler> ::kube_fsm::__private::Dispatch<H> for #kind {
                type Error = H::Error;

                #[allow(unused_variables)]
                fn handle<'a>(
                    handler: &'a H,
                    phase: #phase_enum,
                    object: &'a Self,
                    step: &'a mut ::kube_fsm::__private::Step<Self>,
                ) -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::__private::Choice<#phase_enum>, H::Error>> {
                    ::std::boxed::Box::pin(async move {
                        match phase {
                            #(#arms)*
                        }
                    })
                }

                #[allow(unused_variables)]
                fn cleanup<'a>(handler: &'a H, object: &'a Self, context: &'a ::kube_fsm::__private::Context)
                    -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::__private::Cleanup, H::Error>> {
                    #cleanup
                }

                #children

                fn before_transition<'a>(handler: &'a H, object: &'a Self, from: #phase_enum, to: #phase_enum)
                    -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<::kube_fsm::__private::Verdict, H::Error>> {
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

/// `Dispatch::children`, `remove_children` and `wire_children` of a machine with `children:`
/// (the defaults do nothing): in a step each child, in `after:` order, is asked of the engine,
/// built by the handler when the engine says so, and applied; on deletion the ordered ones are
/// removed in reverse order; each child type's watch is wired once.
fn declared_children(lowered: &Lowered<'_>) -> Option<TokenStream> {
    if lowered.children.is_empty() {
        return None;
    }
    let phase_enum = &lowered.types.phase;
    let steps = lowered.children.iter().map(|child| {
        let (method, ty, name) = (&child.method, &child.ty, &child.name);
        let index = child.index;
        quote! {
            if step.declared::<#ty>(#index, phase).await.map_err(::kube_fsm::__private::StepError::child(#name))? {
                let built = handler.#method(object, step).await.map_err(::kube_fsm::__private::StepError::Handler)?;
                step.apply_declared::<#ty>(#index, built).await.map_err(::kube_fsm::__private::StepError::child(#name))?;
            }
        }
    });
    let removals = lowered.children.iter().rev().filter(|c| c.ordered).map(|child| {
        let (ty, name, index) = (&child.ty, &child.name, child.index);
        quote! {
            if !step.remove_declared::<#ty>(#index).await.map_err(::kube_fsm::__private::StepError::child(#name))? {
                return ::core::result::Result::Ok(false);
            }
        }
    });
    let mut types: Vec<String> = Vec::new();
    let mut wires: Vec<TokenStream> = Vec::new();
    for ty in lowered.children.iter().map(|c| &c.ty) {
        let key = quote!(#ty).to_string();
        if !types.contains(&key) {
            types.push(key);
            wires.push(quote!(wiring.owns::<#ty>();));
        }
    }
    Some(quote! {
        fn children<'a>(handler: &'a H, object: &'a Self, step: &'a mut ::kube_fsm::__private::Step<Self>, phase: #phase_enum)
            -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<(), ::kube_fsm::__private::StepError<H::Error>>> {
            ::std::boxed::Box::pin(async move {
                #(#steps)*
                ::core::result::Result::Ok(())
            })
        }

        fn remove_children<'a>(step: &'a ::kube_fsm::__private::Step<Self>)
            -> ::kube_fsm::__private::BoxFuture<'a, ::core::result::Result<bool, ::kube_fsm::__private::StepError<H::Error>>> {
            ::std::boxed::Box::pin(async move {
                #(#removals)*
                ::core::result::Result::Ok(true)
            })
        }

        fn wire_children<W: ::kube_fsm::__private::Wiring>(wiring: &mut W) {
            #(#wires)*
        }
    })
}
