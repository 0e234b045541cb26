//! The inline DSL's children and derived conditions:
//!
//! ```text
//! children(migrate(type = Job, phases(Running), after(credentials), ready = Complete,
//!                  on_leave = keep, apply = once, description = "..")),
//! conditions(JobComplete(from = migrate.Complete, description = "..")),
//! ```

use quote::ToTokens;
use syn::parse::ParseStream;
use syn::{Ident, LitStr, Token};

use crate::diag::{Diagnostic, Loc};
use crate::spec::{Name, RawChild, RawCondition};

use super::dsl::{Parsed, any_ident, list, name, parens, parse_name};

const CHILD_OPTIONS: [&str; 7] = [
    "type",
    "description",
    "phases",
    "after",
    "ready",
    "on_leave",
    "apply",
];

/// `Name` or `"string"`, optionally with `(description = "..", from = child.source)`.
pub(super) fn condition(input: ParseStream<'_>) -> Parsed<RawCondition> {
    let mut condition = RawCondition {
        name: parse_name(input)?,
        description: None,
        from: None,
    };
    if !input.peek(syn::token::Paren) {
        return Ok(condition);
    }
    let content = parens(input)?;
    while !content.is_empty() {
        let key: Ident = content.parse()?;
        content.parse::<Token![=]>()?;
        match key.to_string().as_str() {
            "description" => condition.description = Some(content.parse::<LitStr>()?.value()),
            "from" => {
                let child: Ident = content.parse()?;
                content.parse::<Token![.]>()?;
                let source = content.call(any_ident)?;
                let span = child.span().join(source.span()).unwrap_or(child.span());
                condition.from = Some(Name {
                    text: format!("{child}.{source}"),
                    loc: Loc::Span(span),
                });
            }
            other => {
                return Err(Diagnostic::new(
                    key.span(),
                    format!("unknown condition option `{other}`"),
                )
                .suggest(other, ["description", "from"])
                .help("a condition's options are description = \"..\" and from = child.ready (or child.ConditionType)"));
            }
        }
        content.parse::<Option<Token![,]>>()?;
    }
    Ok(condition)
}

/// `name(type = Type, phases(A, B), after(c), ready = Cond, on_leave = keep, apply = once)`.
pub(super) fn child(input: ParseStream<'_>) -> Parsed<RawChild> {
    let ident: Ident = input.parse()?;
    let mut child = RawChild {
        name: name(&ident),
        type_path: None,
        description: None,
        phases: Vec::new(),
        after: Vec::new(),
        ready: None,
        on_leave: None,
        apply: None,
    };
    let content = parens(input)?;
    while !content.is_empty() {
        let key = content.call(any_ident)?;
        match key.to_string().as_str() {
            "type" => {
                content.parse::<Token![=]>()?;
                let ty: syn::Type = content.parse()?;
                child.type_path = Some(Name {
                    text: ty.to_token_stream().to_string(),
                    loc: Loc::Span(key.span()),
                });
            }
            "description" => {
                content.parse::<Token![=]>()?;
                child.description = Some(content.parse::<LitStr>()?.value());
            }
            "phases" => child
                .phases
                .extend(list(&parens(&content)?, |i| Ok(parse_name(i)?))?),
            "after" => child
                .after
                .extend(list(&parens(&content)?, |i| Ok(parse_name(i)?))?),
            "ready" | "on_leave" | "apply" => {
                content.parse::<Token![=]>()?;
                let value = Some(parse_name(&content)?);
                match key.to_string().as_str() {
                    "ready" => child.ready = value,
                    "on_leave" => child.on_leave = value,
                    _ => child.apply = value,
                }
            }
            other => {
                return Err(Diagnostic::new(key.span(), format!("unknown child option `{other}`"))
                    .suggest(other, CHILD_OPTIONS)
                    .help("a child's options are type = Type, phases(..), after(..), ready = kstatus | Condition, on_leave = delete | keep, apply = always | once, description = \"..\""));
            }
        }
        content.parse::<Option<Token![,]>>()?;
    }
    Ok(child)
}
