//! The pipeline, stage by stage: parse (`args`, `dsl`) → load (`load`) → read (`yaml`,
//! `from_yaml`) → validate (`validate`) → lower (`lower`) → emit (`emit`), with every
//! diagnostic collected on the way and emitted next to a best-effort expansion.

use proc_macro2::{Span, TokenStream};
use quote::quote;

use crate::diag::{Diagnostics, Loc};
use crate::gate;
use crate::lower::{self, Target};
use crate::parse::args::{self, SpecSource};
use crate::read::{from_yaml, load};
use crate::{emit, validate};

/// Expands `#[state_machine(attr)] item`. Never panics: every failure becomes a compile error.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut diags = Diagnostics::default();
    let Some(input) = args::parse(attr, &item, &mut diags) else {
        let errors = Diagnostics::to_compile_errors(diags.into_vec(), None, Span::call_site());
        return quote!(#item #errors);
    };
    let args = &input.args;
    let loaded = match &args.source {
        SpecSource::File(lit) => load::load(lit, &mut diags),
        SpecSource::Inline(_) => None,
    };
    let read = loaded
        .as_ref()
        .and_then(|loaded| from_yaml::read_file(&loaded.file, &mut diags));
    // YAML positions are reported at the `spec = "..."` literal.
    let (raw, source, spec_span) = match &args.source {
        SpecSource::Inline(raw) => (Some(raw.as_ref()), "inline".to_owned(), args.span),
        SpecSource::File(lit) => (read.as_ref(), lit.value(), lit.span()),
    };
    let located = raw.map(|raw| validate::validate_located(raw, &mut diags));
    let (machine, edge_lines) = match located {
        Some((machine, lines)) => (Some(machine), lines),
        None => (None, Vec::new()),
    };
    // The gate: a valid spec against its lock (a spec with errors would only echo them).
    let lock_file = match &args.source {
        SpecSource::File(lit) => loaded
            .as_ref()
            .and_then(|loaded| load::lock(loaded, Loc::Span(lit.span()), &mut diags)),
        SpecSource::Inline(_) => None,
    };
    if let (Some(raw), Some(machine), Some(lock_file), Some(loaded)) =
        (raw, &machine, &lock_file, &loaded)
        && diags.is_empty()
    {
        let at = Loc::Span(spec_span);
        gate::apply(
            raw,
            machine,
            &lock_file.file,
            &loaded.file.display,
            at,
            &mut diags,
        );
    }
    input.require_status(&mut diags);

    // Without a status there is nowhere to keep the phase: emit the enums only (the handler
    // trait and glue need `StateMachine`), so the one error above is the only one.
    let target = Target {
        kind: &input.kind,
        status_field: input
            .status
            .as_ref()
            .map(|status| (&args.status_field, status.span())),
        source: &source,
        edge_lines: &edge_lines,
    };
    let generated = machine
        .filter(|machine| !machine.phases.is_empty())
        .map(|machine| emit::emit(&lower::lower(&machine, &target)));
    // cargo rebuilds when the spec or its lock changes.
    let track: TokenStream = loaded
        .iter()
        .chain(lock_file.iter())
        .map(|loaded| {
            let path = loaded.path.to_string_lossy().into_owned();
            quote!(
                const _: &[u8] = ::core::include_bytes!(#path);
            )
        })
        .collect();
    let file = loaded.as_ref().map(|loaded| &loaded.file);
    let errors = Diagnostics::to_compile_errors(diags.into_vec(), file, spec_span);
    quote! {
        #item
        #generated
        #track
        #errors
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::str::FromStr;

    use proc_macro2::Ident;

    use super::*;
    use crate::diag::SourceFile;
    use crate::read::yaml;

    /// The reference machine written inline: the `#[state_machine(...)]` arguments of the
    /// test kit's `InlineDatabase` (testkit/src/lib.rs), which the workspace compiles for real,
    /// read from there so that the machine is written inline once.
    fn reference_dsl() -> String {
        fn find(items: &[syn::Item]) -> Option<String> {
            items.iter().find_map(|item| match item {
                syn::Item::Mod(module) => find(&module.content.as_ref()?.1),
                syn::Item::Struct(item) if item.ident == "InlineDatabaseSpec" => {
                    let attr = item
                        .attrs
                        .iter()
                        .find(|a| a.path().is_ident("state_machine"))?;
                    Some(attr.meta.require_list().ok()?.tokens.to_string())
                }
                _ => None,
            })
        }
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testkit/src/lib.rs");
        let file = syn::parse_file(&std::fs::read_to_string(path).unwrap()).unwrap();
        find(&file.items).expect("InlineDatabaseSpec's #[state_machine(...)] in testkit/src/lib.rs")
    }

    fn machine_from_yaml(path: &str) -> crate::model::Machine {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
        machine_from_yaml_text(path, text)
    }

    fn machine_from_yaml_text(path: &str, text: impl Into<String>) -> crate::model::Machine {
        let file = SourceFile::new(path, text);
        let node = yaml::parse(&file.text).unwrap();
        let mut diags = Diagnostics::default();
        let raw = from_yaml::read(&node, &file, &mut diags);
        let machine = validate::validate(&raw, &mut diags);
        assert!(diags.is_empty(), "{:?}", diags.into_vec());
        machine
    }

    fn emitted(machine: &crate::model::Machine) -> String {
        let kind = Ident::new("Database", Span::call_site());
        let field = Ident::new("machine", Span::call_site());
        let target = Target {
            kind: &kind,
            status_field: Some((&field, Span::call_site())),
            source: "same",
            edge_lines: &[],
        };
        emit::emit(&lower::lower(machine, &target)).to_string()
    }

    #[test]
    fn generated_code_names_the_runtime_through_its_private_module_only() {
        let code = emitted(&machine_from_yaml("../specs/database.yaml"));
        let paths = code.matches(":: kube_fsm ::").count();
        assert!(paths > 20, "{code}");
        let outside: Vec<String> = code
            .match_indices(":: kube_fsm ::")
            .map(|(at, _)| code[at..].chars().take(60).collect::<String>())
            .filter(|path| !path.starts_with(":: kube_fsm :: __private ::"))
            .collect();
        assert!(
            outside.is_empty(),
            "generated paths outside ::kube_fsm::__private: {outside:#?}"
        );
    }

    #[test]
    fn yaml_and_dsl_forms_generate_identical_code() {
        let yaml = machine_from_yaml("../specs/stand-in.yaml");
        let dsl = crate::validate::tests_support::machine(&reference_dsl());
        assert_eq!(yaml, dsl);
        assert_eq!(emitted(&yaml), emitted(&dsl));
    }

    #[test]
    fn retired_names_in_yaml_and_dsl_generate_identical_code() {
        let yaml = machine_from_yaml_text(
            "retired.yaml",
            "phases:\n  Pending: { initial: true }\n  Creating: {}\n  Running: {}\n  Done: { terminal: true }\n\
             transitions:\n  - { from: Pending, to: Creating }\n  - { from: Creating, to: Running }\n  - { from: Running, to: Done }\n\
             retired:\n  Provisioning: Creating\n  Starting: Running\n",
        );
        let dsl = crate::validate::tests_support::machine(
            "phases(Pending(initial), Creating, Running, Done(terminal)), \
             transitions(Pending -> Creating, Creating -> Running, Running -> Done), \
             retired(Provisioning -> Creating, Starting -> Running)",
        );
        assert_eq!(yaml, dsl);
        assert_eq!(yaml.retired.len(), 2);
        let code = emitted(&yaml);
        assert_eq!(code, emitted(&dsl));
        assert!(code.contains("RetiredData"), "{code}");
    }

    #[test]
    fn expansion_is_byte_identical_across_runs() {
        let item = quote! {
            #[kube(group = "example.com", version = "v1", kind = "Database", status = "DatabaseStatus")]
            pub struct DatabaseSpec {}
        };
        let attr = TokenStream::from_str(&reference_dsl()).unwrap();
        let first = expand(attr.clone(), item.clone()).to_string();
        for _ in 0..5 {
            assert_eq!(expand(attr.clone(), item.clone()).to_string(), first);
        }
        assert!(!first.contains("compile_error"), "{first}");
    }

    #[test]
    fn every_generated_trait_impl_is_automatically_derived() {
        let item = quote! {
            #[kube(group = "example.com", version = "v1", kind = "Database", status = "DatabaseStatus")]
            pub struct DatabaseSpec {}
        };
        let out = expand(TokenStream::from_str(&reference_dsl()).unwrap(), item);
        let file: syn::File = syn::parse2(out).unwrap();
        let impls: Vec<&syn::ItemImpl> = file
            .items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Impl(i) if i.trait_.is_some() => Some(i),
                _ => None,
            })
            .collect();
        assert_eq!(impls.len(), 32);
        for i in impls {
            assert!(
                i.attrs
                    .iter()
                    .any(|a| a.path().is_ident("automatically_derived")),
                "{}",
                quote!(#i)
            );
        }
    }

    #[test]
    fn a_kind_that_is_not_an_identifier_is_an_error_not_a_panic() {
        let item = quote! {
            #[kube(kind = "My-Kind", status = "S")]
            pub struct XSpec {}
        };
        let out = expand(TokenStream::from_str("phases(A(terminal))").unwrap(), item).to_string();
        assert!(out.contains("is not a Rust identifier"), "{out}");
    }

    #[test]
    fn hostile_attribute_input_reports_errors_without_panicking() {
        let item = quote! {
            #[kube(kind = "X", status = "XStatus")]
            pub struct XSpec {}
        };
        for attr in [
            "",
            "phases()",
            "phases(A(timeout = \"1m\" -> ))",
            "transitions(A -> B when)",
            "nonsense = 1",
            "spec = \"/etc/passwd\"",
            "spec = \"does/not/exist.yaml\"",
            "phases(A, A), transitions(A -> A when X && !X)",
            "phases(A(terminal)), retired(A -> A, B -> B, B -> C, self -> A)",
            "phases(A(terminal)), retired(B ->)",
            "phases(A(terminal)), retired(B -> A -> A)",
        ] {
            let out = expand(TokenStream::from_str(attr).unwrap(), item.clone()).to_string();
            assert!(out.contains("compile_error"), "{attr}: {out}");
        }
    }
}
