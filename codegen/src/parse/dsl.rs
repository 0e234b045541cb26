//! Parse stage (inline form): the attribute DSL → [`RawSpec`], located by token spans.
//!
//! ```text
//! phases(Pending(initial), Provisioning(requeue_after = "10s", timeout = "10m" -> Failed), Failed(terminal)),
//! conditions(PodsReady, "example.com/Synced"(description = "..."), Done(from = job.Complete)),
//! children(job(type = Job, phases(Running), ready = Complete)), // optional: see `children`
//! events(Accept(description = "...")),               // optional
//! transitions(Pending -> Provisioning on Accept, [A, B] -> Failed when PodsReady && !Synced),
//! finalizer = "example.com/cleanup",
//! ready(phases(Running), conditions(PodsReady)),     // optional: what Ready means
//!                                                     // (`ready = PodsReady`: one condition)
//! drift = revert,                                     // optional: adopt (default) | revert
//! retired(Provisioning -> Creating),                  // optional: old phase name -> declared phase
//! ```
//!
//! Parsing stops at the first mistake, a syntax error of syn's or a [`Diagnostic`] of ours:
//! past it, the tokens mean nothing reliable.

use proc_macro2::Span;
use syn::parse::{ParseBuffer, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Ident, LitStr, Token, bracketed, parenthesized};

use crate::diag::{Diagnostic, Loc};
use crate::parse::children;
use crate::spec::{
    Name, RawEvent, RawPhase, RawReady, RawRequirement, RawRetired, RawSpec, RawTimeout,
    RawTransition, Section,
};

/// A parse result: the value, or the first mistake (syn's errors convert with `?`).
pub type Parsed<T> = Result<T, Diagnostic>;

/// The options a phase accepts, for "did you mean".
const PHASE_OPTIONS: [&str; 6] = [
    "initial",
    "terminal",
    "description",
    "requeue_after",
    "handler_timeout",
    "timeout",
];

pub(super) fn name(ident: &Ident) -> Name {
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

/// Parses the DSL section named `section`, which follows the attribute's options.
pub fn parse_section(input: ParseStream<'_>, spec: &mut RawSpec, section: &Ident) -> Parsed<()> {
    let written = section.to_string();
    let Some(known) = Section::named(&written) else {
        return Err(Diagnostic::new(
            section.span(),
            format!("unknown section `{written}` in #[state_machine]"),
        )
        .suggest(&written, Section::names())
        .help(format!(
            "the sections are {}, or `spec = \"specs/machine.yaml\"`",
            Section::names().join(", ")
        )));
    };
    match known {
        Section::Phases => spec.phases.extend(list(&parens(input)?, phase)?),
        Section::Conditions => spec
            .conditions
            .extend(list(&parens(input)?, children::condition)?),
        Section::Children => spec
            .children
            .extend(list(&parens(input)?, children::child)?),
        Section::Events => {
            let list = list(&parens(input)?, described)?;
            spec.events
                .get_or_insert_with(Vec::new)
                .extend(list.into_iter().map(|d| RawEvent {
                    name: d.name,
                    description: d.description,
                }));
        }
        Section::Transitions => spec.transitions.extend(list(&parens(input)?, transition)?),
        Section::Finalizer => {
            input.parse::<Token![=]>()?;
            spec.finalizer = Some(text(&input.parse()?));
        }
        Section::Ready => spec.ready = Some(ready(input, section)?),
        Section::Drift => {
            input.parse::<Token![=]>()?;
            spec.drift = Some(name(&input.parse()?));
        }
        Section::Retired => spec.retired.extend(list(&parens(input)?, retired)?),
    }
    Ok(())
}

/// An empty spec located at `span`, to be filled by [`parse_section`].
pub fn empty(span: Span) -> RawSpec {
    RawSpec::empty(Loc::Span(span))
}

/// The contents of `( .. )`.
pub(super) fn parens<'a>(input: ParseStream<'a>) -> syn::Result<ParseBuffer<'a>> {
    let content;
    parenthesized!(content in input);
    Ok(content)
}

/// `item, item, ..` up to the end of `input`, with an optional trailing comma.
pub(super) fn list<T>(
    input: ParseStream<'_>,
    item: fn(ParseStream<'_>) -> Parsed<T>,
) -> Parsed<Vec<T>> {
    let mut out = Vec::new();
    while !input.is_empty() {
        out.push(item(input)?);
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(out)
}

fn phase(input: ParseStream<'_>) -> Parsed<RawPhase> {
    let ident: Ident = input.parse()?;
    let mut phase = RawPhase {
        name: name(&ident),
        initial: None,
        terminal: None,
        description: None,
        requeue_after: None,
        handler_timeout: None,
        timeout: None,
    };
    if input.peek(syn::token::Paren) {
        let content = parens(input)?;
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
                "handler_timeout" => {
                    content.parse::<Token![=]>()?;
                    phase.handler_timeout = Some(text(&content.parse()?));
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
                    return Err(Diagnostic::new(key.span(), format!("unknown phase option `{other}`"))
                        .suggest(other, PHASE_OPTIONS)
                        .help("phase options are initial, terminal, description = \"..\", requeue_after = \"10s\", handler_timeout = \"1m\", timeout = \"10m\" -> Target [as Reason]"));
                }
            }
            if !content.is_empty() {
                content.parse::<Token![,]>()?;
            }
        }
    }
    Ok(phase)
}

/// `Name` or `"string"`, optionally followed by `(description = "...")`.
struct Described {
    name: Name,
    description: Option<String>,
}

fn described(input: ParseStream<'_>) -> Parsed<Described> {
    let name = parse_name(input)?;
    let mut description = None;
    if input.peek(syn::token::Paren) {
        let content = parens(input)?;
        let key: Ident = content.parse()?;
        if key != "description" {
            return Err(Diagnostic::new(
                key.span(),
                format!("unknown option `{key}`; the only option here is `description = \"...\"`"),
            ));
        }
        content.parse::<Token![=]>()?;
        description = Some(content.parse::<LitStr>()?.value());
        content.parse::<Option<Token![,]>>()?;
    }
    Ok(Described { name, description })
}

/// `= Cond`, or `(phases(A, B), conditions(C, D))` (either part may be left out).
fn ready(input: ParseStream<'_>, section: &Ident) -> Parsed<RawReady> {
    let mut ready = RawReady {
        loc: Loc::Span(section.span()),
        phases: Vec::new(),
        conditions: Vec::new(),
    };
    if input.parse::<Option<Token![=]>>()?.is_some() {
        ready.conditions.push(parse_name(input)?);
        return Ok(ready);
    }
    let content = parens(input)?;
    while !content.is_empty() {
        let part: Ident = content.parse()?;
        let names = list(&parens(&content)?, |i| Ok(parse_name(i)?))?;
        match part.to_string().as_str() {
            "phases" => ready.phases.extend(names),
            "conditions" => ready.conditions.extend(names),
            other => {
                return Err(Diagnostic::new(
                    part.span(),
                    format!(
                        "expected `phases(..)` or `conditions(..)` in `ready`, found `{other}`"
                    ),
                )
                .help(
                    "write `ready(phases(Running), conditions(PodsReady))`, or `ready = PodsReady`",
                ));
            }
        }
        content.parse::<Option<Token![,]>>()?;
    }
    Ok(ready)
}

pub(super) fn parse_name(input: ParseStream<'_>) -> syn::Result<Name> {
    if input.peek(LitStr) {
        Ok(text(&input.parse()?))
    } else {
        let ident = input.call(any_ident)?;
        Ok(name(&ident))
    }
}

/// Any identifier, keywords too, so that `Self` as a phase name gets our "is a Rust keyword"
/// error.
pub(super) fn any_ident(input: ParseStream<'_>) -> syn::Result<Ident> {
    syn::ext::IdentExt::parse_any(input)
}

/// `Provisioning -> Creating`: an old phase name and the declared phase it moves to.
fn retired(input: ParseStream<'_>) -> Parsed<RawRetired> {
    let old = name(&input.call(any_ident)?);
    input.parse::<Token![->]>()?;
    let to = name(&input.call(any_ident)?);
    Ok(RawRetired { name: old, to })
}

fn transition(input: ParseStream<'_>) -> Parsed<RawTransition> {
    let start = input.span();
    let from = if input.peek(syn::token::Bracket) {
        phase_list(input)?
    } else {
        vec![name(&input.call(any_ident)?)]
    };
    input.parse::<Token![->]>()?;
    let to = name(&input.call(any_ident)?);
    let mut on = None;
    let mut when = Vec::new();
    let mut manual = None;
    if !input.is_empty() && !input.peek(Token![,]) {
        let keyword: Ident = input.parse()?;
        match keyword.to_string().as_str() {
            "manual" => manual = Some(Loc::Span(keyword.span())),
            "on" => on = Some(name(&input.call(any_ident)?)),
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
                return Err(Diagnostic::new(
                    keyword.span(),
                    format!(
                        "expected `on Event`, `when Condition` or `manual` after the target, found `{other}`"
                    ),
                ));
            }
        }
    }
    let loc = Loc::Span(start.join(span_of(&to)).unwrap_or(start));
    Ok(RawTransition {
        loc,
        from,
        to,
        on,
        when,
        manual,
    })
}

/// `[A, B]`: the sources of a transition from several phases.
fn phase_list(input: ParseStream<'_>) -> syn::Result<Vec<Name>> {
    let content;
    bracketed!(content in input);
    let list = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, any_ident)?;
    Ok(list.iter().map(name).collect())
}

fn span_of(name: &Name) -> Span {
    match name.loc {
        Loc::Span(span) => span,
        Loc::File(_) => Span::call_site(),
    }
}
