//! The pipeline: arguments → spec (file or inline) → validated machine → tokens, with every
//! diagnostic collected on the way and emitted next to a best-effort expansion.

use std::path::{Path, PathBuf};

use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;
use syn::ItemStruct;

use crate::args::{Args, KubeAttrs, SpecSource};
use crate::diag::{Diagnostic, Diagnostics, Loc, SourceFile};
use crate::emit::{self, Target};
use crate::{from_yaml, validate, yaml};

/// Expands `#[state_machine(attr)] item`. Never panics: every failure becomes a compile error.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item_struct: ItemStruct = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(_) => {
            let err = syn::Error::new(
                Span::call_site(),
                "#[state_machine] goes on the spec struct of a kube `CustomResource`\n = help: place it above `#[derive(CustomResource)]` on `struct FooSpec { .. }`",
            );
            return with_errors(&item, err.to_compile_error());
        }
    };
    let args = match Args::parse(attr) {
        Ok(args) => args,
        Err(err) => return with_errors(&item, err.to_compile_error()),
    };
    let kube = match KubeAttrs::read(&item_struct.attrs) {
        Ok(kube) => kube,
        Err(err) => return with_errors(&item, err.to_compile_error()),
    };
    let Some(kind_lit) = kube.kind else {
        let err = syn::Error::new(
            item_struct.ident.span(),
            "#[state_machine] needs the resource kind from `#[kube(kind = \"...\")]`\n = help: put #[state_machine] above `#[derive(CustomResource)]` and `#[kube(group = .., version = .., kind = \"Database\", status = \"DatabaseStatus\")]`",
        );
        return with_errors(&item, err.to_compile_error());
    };
    // `Ident::new` panics on a non-identifier; kube's derive rejects such kinds too, but this
    // macro runs first and must answer with an error, not a panic.
    let kind = match syn::parse_str::<Ident>(&kind_lit.value()) {
        Ok(ident) => Ident::new(&ident.to_string(), kind_lit.span()),
        Err(_) => {
            let err = syn::Error::new(
                kind_lit.span(),
                format!(
                    "the kind `{}` is not a Rust identifier\n = help: kinds are UpperCamelCase names such as `Database`",
                    kind_lit.value()
                ),
            );
            return with_errors(&item, err.to_compile_error());
        }
    };

    let mut diags = Diagnostics::default();
    let mut file = None;
    let mut tracked = None;
    let mut from_file = None;
    if let SpecSource::File(lit) = &args.source
        && let Some((source, path)) = load(lit, &mut diags)
    {
        {
            match yaml::parse(&source.text) {
                Ok(node) => from_file = Some(from_yaml::read(&node, &source, &mut diags)),
                Err(d) => diags.push(d),
            }
            tracked = Some(path);
            file = Some(source);
        }
    }
    let (raw, source_name) = match &args.source {
        SpecSource::Inline(raw) => (Some(raw.as_ref()), "inline".to_owned()),
        SpecSource::File(lit) => (from_file.as_ref(), lit.value()),
    };
    let machine = raw.map(|raw| validate::validate(raw, &mut diags));
    if kube.status.is_none() {
        diags.push(Diagnostic::new(
            Loc::Span(kind_lit.span()),
            format!("a state machine needs a status: add `status = \"{kind}Status\"` to #[kube(...)]"),
        )
        .help(format!(
            "and give `{kind}Status` (deriving Default) the field `#[serde(flatten)] pub {}: kube_fsm::MachineStatus<{kind}Phase>`",
            args.status_field
        )));
    }

    // Without a status there is nowhere to keep the phase: emit the enums only (the handler
    // trait and glue need `StateMachine`), so the one error above is the only one.
    let status_span = kube.status.as_ref().map(syn::LitStr::span);
    let generated = match &machine {
        Some(machine) if !machine.phases.is_empty() => emit::emit(
            machine,
            &Target {
                kind: &kind,
                status_field: status_span.map(|span| (&args.status_field, span)),
                source: &source_name,
            },
        ),
        _ => TokenStream::new(),
    };
    let track = tracked.map(|path| {
        let path = path.to_string_lossy().into_owned();
        quote!(
            const _: &[u8] = ::core::include_bytes!(#path);
        )
    });
    let file_span = match &args.source {
        SpecSource::File(lit) => lit.span(),
        SpecSource::Inline(_) => args.span,
    };
    let errors = Diagnostics::to_compile_errors(diags.into_vec(), file.as_ref(), file_span);
    quote! {
        #item
        #generated
        #track
        #errors
    }
}

fn with_errors(item: &TokenStream, errors: TokenStream) -> TokenStream {
    quote!(#item #errors)
}

/// Resolves and reads the spec file relative to the user crate's `CARGO_MANIFEST_DIR`.
fn load(lit: &syn::LitStr, diags: &mut Diagnostics) -> Option<(SourceFile, PathBuf)> {
    let written = lit.value();
    let at = Loc::Span(lit.span());
    if written.trim().is_empty() {
        diags.push(
            Diagnostic::new(at, "the spec path is empty")
                .help("write `spec = \"specs/machine.yaml\"`, relative to the crate's Cargo.toml"),
        );
        return None;
    }
    if Path::new(&written).is_absolute() {
        diags.push(
            Diagnostic::new(at, format!("the spec path `{written}` is absolute"))
                .help("write the path relative to the crate's Cargo.toml (CARGO_MANIFEST_DIR), e.g. `specs/machine.yaml`, so the crate builds on other machines"),
        );
        return None;
    }
    let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR") else {
        diags.push(
            Diagnostic::new(at, "CARGO_MANIFEST_DIR is not set").help("build the crate with cargo"),
        );
        return None;
    };
    let path = PathBuf::from(manifest_dir).join(&written);
    let text = match std::fs::read(&path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                diags.push(
                    Diagnostic::new(at, format!("the spec file `{written}` is not UTF-8 text"))
                        .help("save the spec as UTF-8"),
                );
                return None;
            }
        },
        Err(err) => {
            let help = if err.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "no file at `{}`; spec paths are relative to the crate's Cargo.toml (a crate in `examples/` names `../specs/x.yaml`)",
                    path.display()
                )
            } else {
                format!("reading `{}` failed: {err}", path.display())
            };
            diags.push(
                Diagnostic::new(at, format!("cannot read the spec file `{written}`")).help(help),
            );
            return None;
        }
    };
    let display = display_path(&path, &written);
    Some((SourceFile::new(display, text), path))
}

/// The path to print in messages: relative to the working directory cargo runs rustc in (the
/// workspace root) when possible, so terminals and editors can open `file:line:col`.
fn display_path(path: &Path, written: &str) -> String {
    let normalized = normalize(path);
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            normalized
                .strip_prefix(normalize(&cwd))
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| written.to_owned())
}

/// Removes `.` and `..` components without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    const REFERENCE_DSL: &str = r#"
        phases(
            Pending(initial, description = "Accepted, waiting to be provisioned."),
            Provisioning(description = "Child resources are being created.", requeue_after = "10s",
                         timeout = "10m" -> Failed),
            Running(description = "Serving."),
            Degraded(description = "Serving, but not every part is healthy.", requeue_after = "30s"),
            Failed(description = "Gave up; needs a human.", terminal),
        ),
        conditions(
            PodsReady(description = "All database pods are ready."),
            ServiceAvailable(description = "The service answers."),
        ),
        transitions(
            Pending -> Provisioning on Accept,
            Provisioning -> Running when PodsReady,
            Running -> Degraded when !ServiceAvailable,
            Degraded -> Running when ServiceAvailable && PodsReady,
            [Provisioning, Running, Degraded] -> Failed on Fail,
        ),
        finalizer = "example.com/cleanup",
        ready = ServiceAvailable,
    "#;

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
        assert_eq!(diags.len(), 0, "{:?}", diags.into_vec());
        machine
    }

    fn machine_from_dsl(dsl: &str) -> crate::model::Machine {
        let args = Args::parse(TokenStream::from_str(dsl).unwrap()).unwrap();
        let SpecSource::Inline(raw) = &args.source else {
            panic!("not inline")
        };
        let mut diags = Diagnostics::default();
        let machine = validate::validate(raw, &mut diags);
        assert_eq!(diags.len(), 0, "{:?}", diags.into_vec());
        machine
    }

    fn emitted(machine: &crate::model::Machine) -> String {
        let kind = Ident::new("Database", Span::call_site());
        let field = Ident::new("machine", Span::call_site());
        let target = Target {
            kind: &kind,
            status_field: Some((&field, Span::call_site())),
            source: "same",
        };
        emit::emit(machine, &target).to_string()
    }

    #[test]
    fn yaml_and_dsl_forms_generate_identical_code() {
        let yaml = machine_from_yaml("../specs/database.yaml");
        let dsl = machine_from_dsl(REFERENCE_DSL);
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
        let dsl = machine_from_dsl(
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
        let attr = TokenStream::from_str(REFERENCE_DSL).unwrap();
        let first = expand(attr.clone(), item.clone()).to_string();
        for _ in 0..5 {
            assert_eq!(expand(attr.clone(), item.clone()).to_string(), first);
        }
        assert!(!first.contains("compile_error"), "{first}");
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
