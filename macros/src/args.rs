//! The attribute's arguments and the `#[kube(...)]` facts the macro reads from the item: one
//! place for every option and its default.

use proc_macro2::{Span, TokenStream};
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, Ident, LitStr, Token};

use crate::spec::RawSpec;

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

impl Args {
    pub fn parse(tokens: TokenStream) -> syn::Result<Self> {
        let span = tokens
            .clone()
            .into_iter()
            .next()
            .map_or_else(Span::call_site, |t| t.span());
        (|input: ParseStream<'_>| Self::parse_inner(input, span)).parse2(tokens)
    }

    fn parse_inner(input: ParseStream<'_>, span: Span) -> syn::Result<Self> {
        let mut file: Option<LitStr> = None;
        let mut status_field = None;
        let mut inline = crate::dsl::empty(span);
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
                    crate::dsl::parse_sections(input, &mut inline, &key)?;
                    first_section.get_or_insert(key);
                }
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        let source = match (file, first_section) {
            (Some(_), Some(section)) => {
                return Err(syn::Error::new(
                    section.span(),
                    format!(
                        "`{section}` given inline together with `spec = \"...\"`\n = help: write the machine either in the spec file or inline, not both"
                    ),
                ));
            }
            (Some(file), None) => SpecSource::File(file),
            (None, Some(_)) => SpecSource::Inline(Box::new(inline)),
            (None, None) => {
                return Err(syn::Error::new(
                    span,
                    "#[state_machine] needs a spec\n = help: write `#[state_machine(spec = \"specs/machine.yaml\")]`, or the machine inline: `#[state_machine(phases(...), transitions(...))]`",
                ));
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
pub struct KubeAttrs {
    pub kind: Option<LitStr>,
    pub status: Option<LitStr>,
}

impl KubeAttrs {
    pub fn read(attrs: &[Attribute]) -> syn::Result<Self> {
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
