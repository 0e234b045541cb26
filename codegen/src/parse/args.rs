//! Parse stage: the attribute's arguments and the item it sits on → [`Input`]. One place for
//! every option and its default, and for the `#[kube(...)]` facts the macro reads.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Ident, ItemStruct, LitStr, Token};

use crate::diag::{Diagnostic, Diagnostics, Loc};
use crate::parse::dsl::Parsed;
use crate::spec::RawSpec;

/// What the parse stage hands on: everything later stages need from the macro's input.
#[derive(Debug)]
pub struct Input {
    pub args: Args,
    /// The resource type (`#[kube(kind = "...")]`), spanned at that string.
    pub kind: Ident,
    /// The `kind` string itself, where errors about the resource point.
    pub kind_lit: LitStr,
    /// `#[kube(status = "...")]`, if given.
    pub status: Option<LitStr>,
}

/// Where the spec comes from.
#[derive(Debug)]
pub enum SpecSource {
    /// `spec = "specs/x.yaml"`, relative to the crate's `CARGO_MANIFEST_DIR`.
    File(LitStr),
    /// The inline DSL.
    Inline(Box<RawSpec>),
}

/// Everything `#[state_machine(...)]` accepts.
#[derive(Debug)]
pub struct Args {
    pub source: SpecSource,
    /// The status struct's field holding the machine status (default `machine`).
    pub status_field: Ident,
    /// Where to report errors about the spec as a whole.
    pub span: Span,
}

/// Parses `#[state_machine(attr)] item`. On a mistake it reports it and returns `None`: without
/// the arguments or the resource kind there is nothing to generate.
pub fn parse(attr: TokenStream, item: &TokenStream, diags: &mut Diagnostics) -> Option<Input> {
    let Ok(item) = syn::parse2::<ItemStruct>(item.clone()) else {
        diags.push(
            Diagnostic::new(
                Span::call_site(),
                "#[state_machine] goes on the spec struct of a kube `CustomResource`",
            )
            .help("place it above `#[derive(CustomResource)]` on `struct FooSpec { .. }`"),
        );
        return None;
    };
    let args = Args::parse(attr, diags)?;
    let kube = match KubeAttrs::read(&item.attrs) {
        Ok(kube) => kube,
        Err(err) => {
            diags.push(err.into());
            return None;
        }
    };
    let Some(kind_lit) = kube.kind else {
        diags.push(
            Diagnostic::new(
                item.ident.span(),
                "#[state_machine] needs the resource kind from `#[kube(kind = \"...\")]`",
            )
            .help("put #[state_machine] above `#[derive(CustomResource)]` and `#[kube(group = .., version = .., kind = \"Database\", status = \"DatabaseStatus\")]`"),
        );
        return None;
    };
    // `Ident::new` panics on a non-identifier; kube's derive rejects such kinds too, but this
    // macro runs first and must answer with an error, not a panic.
    let Ok(ident) = syn::parse_str::<Ident>(&kind_lit.value()) else {
        diags.push(
            Diagnostic::new(
                kind_lit.span(),
                format!("the kind `{}` is not a Rust identifier", kind_lit.value()),
            )
            .help("kinds are UpperCamelCase names such as `Database`"),
        );
        return None;
    };
    Some(Input {
        args,
        kind: Ident::new(&ident.to_string(), kind_lit.span()),
        kind_lit,
        status: kube.status,
    })
}

impl Input {
    /// Reports a resource without `#[kube(status)]`: there is nowhere to keep the phase.
    /// (`expand` calls it after validation, so it follows the spec's own errors.)
    pub fn require_status(&self, diags: &mut Diagnostics) {
        if self.status.is_some() {
            return;
        }
        let kind = &self.kind;
        diags.push(
            Diagnostic::new(
                Loc::Span(self.kind_lit.span()),
                format!(
                    "a state machine needs a status: add `status = \"{kind}Status\"` to #[kube(...)]"
                ),
            )
            .help(format!(
                "and give `{kind}Status` (deriving Default) the field `#[serde(flatten)] pub {}: kube_fsm::MachineStatus<{kind}Phase>`",
                self.args.status_field
            )),
        );
    }
}

impl Args {
    /// Parses the attribute's arguments; on a mistake, reports it and returns `None`.
    pub fn parse(tokens: TokenStream, diags: &mut Diagnostics) -> Option<Self> {
        let span = tokens
            .clone()
            .into_iter()
            .next()
            .map_or_else(Span::call_site, |t| t.span());
        // The mistake that stopped parsing wins over syn's complaint about the tokens it left.
        let mut stopped = None;
        let parsed = (|input: ParseStream<'_>| match Self::parse_inner(input, span) {
            Ok(args) => Ok(Some(args)),
            Err(mistake) => {
                stopped = Some(mistake);
                Ok(None)
            }
        })
        .parse2(tokens);
        match (stopped, parsed) {
            (Some(mistake), _) => {
                diags.push(mistake);
                None
            }
            (None, Ok(args)) => args,
            (None, Err(err)) => {
                diags.push(err.into());
                None
            }
        }
    }

    fn parse_inner(input: ParseStream<'_>, span: Span) -> Parsed<Self> {
        let mut file: Option<LitStr> = None;
        let mut status_field = None;
        let mut inline = crate::parse::dsl::empty(span);
        let mut first_section: Option<Ident> = None;
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            match key.to_string().as_str() {
                "spec" => {
                    input.parse::<Token![=]>()?;
                    file = Some(input.parse()?);
                }
                "status_field" => {
                    input.parse::<Token![=]>()?;
                    status_field = Some(input.parse::<Ident>()?);
                }
                _ => {
                    crate::parse::dsl::parse_section(input, &mut inline, &key)?;
                    first_section.get_or_insert(key);
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        let source = match (file, first_section) {
            (Some(_), Some(section)) => {
                return Err(Diagnostic::new(
                    section.span(),
                    format!("`{section}` given inline together with `spec = \"...\"`"),
                )
                .help("write the machine either in the spec file or inline, not both"));
            }
            (Some(file), None) => SpecSource::File(file),
            (None, Some(_)) => SpecSource::Inline(Box::new(inline)),
            (None, None) => {
                return Err(Diagnostic::new(span, "#[state_machine] needs a spec")
                    .help("write `#[state_machine(spec = \"specs/machine.yaml\")]`, or the machine inline: `#[state_machine(phases(...), transitions(...))]`"));
            }
        };
        Ok(Args {
            source,
            status_field: status_field.unwrap_or_else(|| Ident::new("machine", Span::call_site())),
            span,
        })
    }
}

/// What `#[kube(...)]` says about the resource.
#[derive(Debug)]
struct KubeAttrs {
    kind: Option<LitStr>,
    status: Option<LitStr>,
}

impl KubeAttrs {
    fn read(attrs: &[Attribute]) -> syn::Result<Self> {
        let mut out = KubeAttrs {
            kind: None,
            status: None,
        };
        for attr in attrs.iter().filter(|a| a.path().is_ident("kube")) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("kind") {
                    out.kind = Some(meta.value()?.parse()?);
                } else if meta.path.is_ident("status") {
                    out.status = Some(meta.value()?.parse()?);
                } else if meta.input.peek(Token![=]) {
                    meta.value()?.parse::<syn::Expr>()?;
                } else if meta.input.peek(syn::token::Paren) {
                    let _ignored: TokenStream;
                    let content;
                    syn::parenthesized!(content in meta.input);
                    _ignored = content.parse()?;
                }
                Ok(())
            })?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn mistakes(attr: &str) -> Vec<Diagnostic> {
        let mut diags = Diagnostics::default();
        let args = Args::parse(TokenStream::from_str(attr).unwrap(), &mut diags);
        assert!(args.is_none(), "{attr} parsed");
        diags.into_vec()
    }

    #[test]
    fn a_mistake_is_one_diagnostic_with_its_help_apart() {
        let [unknown] = mistakes("phases(A(terminal)), phase(B)")
            .try_into()
            .unwrap();
        assert_eq!(
            unknown.message,
            "unknown section `phase` in #[state_machine]"
        );
        assert_eq!(unknown.help[0], "did you mean `phases`?");
        assert!(unknown.help[1].starts_with("the sections are phases, conditions,"));
        let [both] = mistakes("spec = \"a.yaml\", phases(A)").try_into().unwrap();
        assert_eq!(both.help.len(), 1, "{both:?}");
    }

    #[test]
    fn the_mistake_that_stopped_parsing_wins_over_the_tokens_left_after_it() {
        let [option] = mistakes("phases(A(bogus, initial), B)").try_into().unwrap();
        assert_eq!(option.message, "unknown phase option `bogus`");
        let [syntax] = mistakes("phases(A) B").try_into().unwrap();
        assert_eq!(syntax.message, "expected `,`");
    }
}
