//! Stage 1 (inline form): the attribute DSL → [`RawSpec`], located by token spans.
//!
//! ```text
//! phases(Pending(initial), Provisioning(requeue_after = "10s", timeout = "10m" -> Failed), Failed(terminal)),
//! conditions(PodsReady, "example.com/Synced"(description = "...")),
//! events(Accept(description = "...")),               // optional
//! transitions(Pending -> Provisioning on Accept, [A, B] -> Failed when PodsReady && !Synced),
//! finalizer = "example.com/cleanup",
//! ready = PodsReady,                                  // optional: the CRD's Ready column
//! drift = revert,                                     // optional: adopt (default) | revert
//! retired(Provisioning -> Creating),                  // optional: old phase name -> declared phase
//! ```

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitStr, Token, bracketed, parenthesized};

use crate::diag::Loc;
use crate::spec::{
    Name, RawCondition, RawEvent, RawPhase, RawRequirement, RawRetired, RawSpec, RawTimeout,
    RawTransition, Section,
};

fn name(ident: &Ident) -> Name {
    Name {
        text: ident.to_string(),
        loc: Loc::Span(ident.span()),
    }
}

fn text(lit: &LitStr) -> Name {
    Name {
        text: lit.value(),
        loc: Loc::Span(lit.span()),
    }
}

/// Parses the DSL sections that follow the attribute's options.
pub fn parse_sections(
    input: ParseStream<'_>,
    spec: &mut RawSpec,
    section: &Ident,
) -> syn::Result<()> {
    let content;
    let written = section.to_string();
    let Some(known) = Section::named(&written) else {
        let other = written.as_str();
        let mut message = format!("unknown section `{other}` in #[state_machine]");
        if let Some(best) = crate::names::closest(other, Section::names()) {
            message.push_str(&format!("\n = help: did you mean `{best}`?"));
        }
        message.push_str(&format!(
            "\n = help: the sections are {}, or `spec = \"specs/machine.yaml\"`",
            Section::names().join(", ")
        ));
        return Err(syn::Error::new(section.span(), message));
    };
    match known {
        Section::Phases => {
            parenthesized!(content in input);
            let list = Punctuated::<PhaseDef, Token![,]>::parse_terminated(&content)?;
            spec.phases.extend(list.into_iter().map(|p| p.0));
        }
        Section::Conditions => {
            parenthesized!(content in input);
            let list = Punctuated::<Described, Token![,]>::parse_terminated(&content)?;
            spec.conditions
                .extend(list.into_iter().map(|d| RawCondition {
                    name: d.name,
                    description: d.description,
                }));
        }
        Section::Events => {
            parenthesized!(content in input);
            let list = Punctuated::<Described, Token![,]>::parse_terminated(&content)?;
            spec.events
                .get_or_insert_with(Vec::new)
                .extend(list.into_iter().map(|d| RawEvent {
                    name: d.name,
                    description: d.description,
                }));
        }
        Section::Transitions => {
            parenthesized!(content in input);
            let list = Punctuated::<TransitionDef, Token![,]>::parse_terminated(&content)?;
            spec.transitions.extend(list.into_iter().map(|t| t.0));
        }
        Section::Finalizer => {
            input.parse::<Token![=]>()?;
            spec.finalizer = Some(text(&input.parse()?));
        }
        Section::Ready => {
            input.parse::<Token![=]>()?;
            spec.ready = Some(parse_name(input)?);
        }
        Section::Drift => {
            input.parse::<Token![=]>()?;
            spec.drift = Some(name(&input.parse()?));
        }
        Section::Retired => {
            parenthesized!(content in input);
            let list = Punctuated::<RetiredDef, Token![,]>::parse_terminated(&content)?;
            spec.retired.extend(list.into_iter().map(|r| r.0));
        }
    }
    Ok(())
}

/// An empty spec located at `span`, to be filled by [`parse_sections`].
pub fn empty(span: Span) -> RawSpec {
    RawSpec::empty(Loc::Span(span))
}

struct PhaseDef(RawPhase);

impl Parse for PhaseDef {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let ident: Ident = input.parse()?;
        let mut phase = RawPhase {
            name: name(&ident),
            initial: None,
            terminal: None,
            description: None,
            requeue_after: None,
            timeout: None,
        };
        if input.peek(syn::token::Paren) {
            let content;
            parenthesized!(content in input);
            while !content.is_empty() {
                let key: Ident = content.parse()?;
                match key.to_string().as_str() {
                    "initial" => phase.initial = Some(Loc::Span(key.span())),
                    "terminal" => phase.terminal = Some(Loc::Span(key.span())),
                    "description" => {
                        content.parse::<Token![=]>()?;
                        phase.description = Some(content.parse::<LitStr>()?.value());
                    }
                    "requeue_after" => {
                        content.parse::<Token![=]>()?;
                        phase.requeue_after = Some(text(&content.parse()?));
                    }
                    "timeout" => {
                        content.parse::<Token![=]>()?;
                        let after = text(&content.parse()?);
                        content.parse::<Token![->]>()?;
                        let to = name(&content.parse()?);
                        let reason = if content.peek(Token![as]) {
                            content.parse::<Token![as]>()?;
                            Some(name(&content.parse()?))
                        } else {
                            None
                        };
                        phase.timeout = Some(RawTimeout {
                            loc: Loc::Span(key.span()),
                            after,
                            to,
                            reason,
                        });
                    }
                    other => {
                        let options = [
                            "initial",
                            "terminal",
                            "description",
                            "requeue_after",
                            "timeout",
                        ];
                        let mut message = format!("unknown phase option `{other}`");
                        if let Some(best) = crate::names::closest(other, options) {
                            message.push_str(&format!("\n = help: did you mean `{best}`?"));
                        }
                        message.push_str("\n = help: phase options are initial, terminal, description = \"..\", requeue_after = \"10s\", timeout = \"10m\" -> Target [as Reason]");
                        return Err(syn::Error::new(key.span(), message));
                    }
                }
                if !content.is_empty() {
                    content.parse::<Token![,]>()?;
                }
            }
        }
        Ok(PhaseDef(phase))
    }
}

/// `Name` or `"string"`, optionally followed by `(description = "...")`.
struct Described {
    name: Name,
    description: Option<String>,
}

impl Parse for Described {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let name = parse_name(input)?;
        let mut description = None;
        if input.peek(syn::token::Paren) {
            let content;
            parenthesized!(content in input);
            let key: Ident = content.parse()?;
            if key != "description" {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown option `{key}`; the only option here is `description = \"...\"`"
                    ),
                ));
            }
            content.parse::<Token![=]>()?;
            description = Some(content.parse::<LitStr>()?.value());
            content.parse::<Option<Token![,]>>()?;
        }
        Ok(Described { name, description })
    }
}

fn parse_name(input: ParseStream<'_>) -> syn::Result<Name> {
    if input.peek(LitStr) {
        Ok(text(&input.parse()?))
    } else {
        let ident = input.call(Ident::parse_any_ident)?;
        Ok(name(&ident))
    }
}

trait ParseAnyIdent {
    fn parse_any_ident(input: ParseStream<'_>) -> syn::Result<Ident>;
}

impl ParseAnyIdent for Ident {
    /// Keywords too, so that `Self` as a phase name gets our "is a Rust keyword" error.
    fn parse_any_ident(input: ParseStream<'_>) -> syn::Result<Ident> {
        syn::ext::IdentExt::parse_any(input)
    }
}

/// `Provisioning -> Creating`: an old phase name and the declared phase it moves to.
struct RetiredDef(RawRetired);

impl Parse for RetiredDef {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let old = name(&input.call(Ident::parse_any_ident)?);
        input.parse::<Token![->]>()?;
        let to = name(&input.call(Ident::parse_any_ident)?);
        Ok(RetiredDef(RawRetired { name: old, to }))
    }
}

struct TransitionDef(RawTransition);

impl Parse for TransitionDef {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let start = input.span();
        let from = if input.peek(syn::token::Bracket) {
            let content;
            bracketed!(content in input);
            let list = Punctuated::<Ident, Token![,]>::parse_terminated_with(
                &content,
                Ident::parse_any_ident,
            )?;
            list.iter().map(name).collect()
        } else {
            vec![name(&input.call(Ident::parse_any_ident)?)]
        };
        input.parse::<Token![->]>()?;
        let to = name(&input.call(Ident::parse_any_ident)?);
        let mut on = None;
        let mut when = Vec::new();
        if !input.is_empty() && !input.peek(Token![,]) {
            let keyword: Ident = input.parse()?;
            match keyword.to_string().as_str() {
                "on" => on = Some(name(&input.call(Ident::parse_any_ident)?)),
                "when" => loop {
                    let negated = input.parse::<Option<Token![!]>>()?.is_some();
                    when.push(RawRequirement {
                        condition: parse_name(input)?,
                        status: !negated,
                    });
                    if input.parse::<Option<Token![&&]>>()?.is_none() {
                        break;
                    }
                },
                other => {
                    return Err(syn::Error::new(
                        keyword.span(),
                        format!(
                            "expected `on Event` or `when Condition` after the target, found `{other}`"
                        ),
                    ));
                }
            }
        }
        let loc = Loc::Span(start.join(span_of(&to)).unwrap_or(start));
        Ok(TransitionDef(RawTransition {
            loc,
            from,
            to,
            on,
            when,
        }))
    }
}

fn span_of(name: &Name) -> Span {
    match name.loc {
        Loc::Span(span) => span,
        Loc::File(_) => Span::call_site(),
    }
}
