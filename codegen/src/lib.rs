//! The compiler behind kube-fsm's `#[state_machine]`: `kube-fsm-macros` is a thin proc-macro
//! entry over [`expand`], and `kube-fsm check` runs [`check`] on spec files without a build.
//!
//! Stages, each its own module with a typed artifact between them, run in order by `expand`:
//!
//! 1. parse: `parse` (`args`, `dsl`) → `args::Input` (options, resource kind, an inline
//!    `spec::RawSpec` or the spec path);
//! 2. read: `read` (`load` → the spec file, `load::Loaded`; `yaml`, `from_yaml` →
//!    `spec::RawSpec`);
//! 3. validate: `validate` (`resolve` → `check` → `graph`) → `model::Machine`, then `gate`:
//!    the machine against the spec's lock (`gate::lock::Lock`, the last released spec), when
//!    it has one;
//! 4. lower: `lower` (with `render`, the docs and diagrams) → `lower::Lowered` (every
//!    generated name, each phase's targets and events);
//! 5. emit: `emit` → tokens.
//!
//! [`picture`] draws a machine's DOT text as SVG, for the phase enum's rustdoc here and for
//! tools that draw it with live counts.
//!
//! Diagnostics are collected across stages (`diag`) and reported together; nothing here
//! panics on any input.
#![deny(missing_docs)]

mod diag;
mod emit;
mod expand;
mod gate;
mod lower;
mod model;
pub mod names;
mod parse;
pub mod picture;
#[cfg(test)]
mod properties;
mod read;
mod spec;
mod validate;

use std::time::{Duration, Instant};

use proc_macro2::{Ident, Span, TokenStream};

use crate::diag::{Diagnostics, SourceFile};

/// Expands `#[state_machine(attr)] item` (the attribute's arguments and the item it is on):
/// the item, the generated code, and one `compile_error!` per diagnostic. Never panics.
pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(attr, item)
}

/// What [`check`] found in a spec file that has no error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The phases declared, in spec order.
    pub phases: Vec<String>,
    /// The retired phase names (objects stored with one move to a declared phase).
    pub retired: Vec<String>,
    /// The legal edges (list forms such as `from: [A, B]` counted once per phase).
    pub transitions: usize,
    /// The initial phase.
    pub initial: String,
    /// Every legal edge, list forms expanded, in spec order.
    pub edges: Vec<Edge>,
    /// The CEL rule the CRD puts on `status.phase` (`self` the new value, `oldSelf` the
    /// stored one): stay, an edge, a retired name to its phase, or out of an undeclared value.
    pub cel_phase_rule: String,
    /// The CEL rule the CRD puts on the object: the first phase written is the initial phase
    /// or one of its successors by an edge the engine takes.
    pub cel_first_phase_rule: String,
}

/// One legal edge of a checked spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The phase it leaves.
    pub from: String,
    /// The phase it enters.
    pub to: String,
    /// Only people take it (`manual: true`).
    pub manual: bool,
}

/// Reads and checks the spec `text` (shown as `display` in messages) as `#[state_machine]`
/// does, against its lock when `lock` gives one (the lock's path as shown, and its text): the
/// diagnostics, each rendered exactly as the compiler would show it (message,
/// `--> display:line:col`, the offending line, help), in file order; or what it declares.
pub fn check(
    display: &str,
    text: &str,
    lock: Option<(&str, &str)>,
) -> Result<Checked, Vec<String>> {
    let file = SourceFile::new(display, text);
    let mut diags = Diagnostics::default();
    let raw = read::from_yaml::read_file(&file, &mut diags);
    let machine = raw.as_ref().map(|raw| validate::validate(raw, &mut diags));
    if let (Some(raw), Some(machine), Some((lock_display, lock_text))) = (&raw, &machine, lock)
        && diags.is_empty()
    {
        let lock = SourceFile::new(lock_display, lock_text);
        let at = diag::Loc::Span(Span::call_site());
        gate::apply(raw, machine, &lock, display, at, &mut diags);
    }
    let mut errors = diags.into_vec();
    match machine {
        Some(machine) if errors.is_empty() => {
            let name = |i: usize| machine.phases[i].name.clone();
            Ok(Checked {
                initial: name(machine.initial),
                edges: machine
                    .edges
                    .iter()
                    .map(|e| Edge {
                        from: name(e.from),
                        to: name(e.to),
                        manual: e.trigger == model::Trigger::Manual,
                    })
                    .collect(),
                cel_phase_rule: lower::render::cel_transition_rule(&machine),
                cel_first_phase_rule: lower::render::cel_first_phase_rule(&machine),
                transitions: machine.edges.len(),
                phases: machine.phases.into_iter().map(|p| p.name).collect(),
                retired: machine.retired.into_iter().map(|r| r.name).collect(),
            })
        }
        _ => Err(rendered(&mut errors, &file)),
    }
}

/// The lock of the spec `text` (shown as `display`): the phases, retired names and condition
/// types objects stored under it may carry, as the text of `NAME.lock.yaml`, which
/// `#[state_machine]` then holds later specs to. Refused, with the diagnostics of [`check`],
/// when the spec has an error.
pub fn lock(display: &str, text: &str) -> Result<String, Vec<String>> {
    let file = SourceFile::new(display, text);
    let mut diags = Diagnostics::default();
    let machine = read::from_yaml::read_file(&file, &mut diags)
        .map(|raw| validate::validate(&raw, &mut diags));
    let mut errors = diags.into_vec();
    match machine {
        Some(machine) if errors.is_empty() => Ok(gate::lock::render(&machine, display)),
        _ => Err(rendered(&mut errors, &file)),
    }
}

/// Where the lock of the spec at `spec` is: `specs/database.yaml` → `specs/database.lock.yaml`.
#[must_use]
pub fn lock_path(spec: &std::path::Path) -> std::path::PathBuf {
    read::load::lock_path(spec)
}

/// `errors` in file order, each rendered as the compiler shows it.
fn rendered(errors: &mut [diag::Diagnostic], file: &SourceFile) -> Vec<String> {
    errors.sort_by_key(diag::Diagnostic::pos);
    errors.iter().map(|d| d.render(Some(file))).collect()
}

/// How long each stage took on one spec (see [`timed`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stages {
    /// YAML to a document tree.
    pub parse: Duration,
    /// The document to a `RawSpec`.
    pub read: Duration,
    /// Names resolved, rules checked, the graph walked.
    pub validate: Duration,
    /// Every generated name, docs and diagrams.
    pub lower: Duration,
    /// Tokens.
    pub emit: Duration,
}

/// Runs the pipeline on the spec `text` (named `source` in the generated `MachineData`) for a
/// resource of kind `kind` whose status keeps the machine in `status_field`, timing each
/// stage: what `#[state_machine(spec = "…")]` emits besides the item itself, or the
/// diagnostics. For benchmarks and for writing the expansion out as plain source.
pub fn timed(
    source: &str,
    text: &str,
    kind: &str,
    status_field: &str,
) -> Result<(TokenStream, Stages), Vec<String>> {
    let mut stages = Stages::default();
    let started = Instant::now();
    let file = SourceFile::new(source, text);
    let node = read::yaml::parse(&file.text).map_err(|d| rendered(&mut [d], &file))?;
    let parsed = Instant::now();
    stages.parse = parsed - started;
    let mut diags = Diagnostics::default();
    let raw = read::from_yaml::read(&node, &file, &mut diags);
    let read = Instant::now();
    stages.read = read - parsed;
    let machine = validate::validate(&raw, &mut diags);
    let validated = Instant::now();
    stages.validate = validated - read;
    let mut errors = diags.into_vec();
    if !errors.is_empty() {
        return Err(rendered(&mut errors, &file));
    }
    let kind = Ident::new(kind, Span::call_site());
    let field = Ident::new(status_field, Span::call_site());
    let target = lower::Target {
        kind: &kind,
        status_field: Some((&field, Span::call_site())),
        source,
        edge_lines: &[],
    };
    let lowered = lower::lower(&machine, &target);
    let lowered_at = Instant::now();
    stages.lower = lowered_at - validated;
    let tokens = emit::emit(&lowered);
    stages.emit = lowered_at.elapsed();
    Ok((tokens, stages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reports_what_the_macro_reports_in_the_same_words() {
        let text = "phases:\n  Pending: { initial: true }\n  Done: { terminal: true }\ntransitions:\n  - { from: Pending, to: Don }\n";
        let errors = check("specs/x.yaml", text, None).expect_err("an unknown phase");
        let file = SourceFile::new("specs/x.yaml", text);
        let mut diags = Diagnostics::default();
        let raw = read::from_yaml::read_file(&file, &mut diags).expect("YAML");
        validate::validate(&raw, &mut diags);
        let rendered: Vec<String> = diags
            .into_vec()
            .iter()
            .map(|d| d.render(Some(&file)))
            .collect();
        assert_eq!(errors, rendered);
        assert!(errors[0].contains("--> specs/x.yaml:5:"), "{}", errors[0]);
        assert!(errors[0].contains("did you mean `Done`?"), "{}", errors[0]);
    }

    #[test]
    fn check_counts_a_valid_spec() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../specs/database.yaml"
        ))
        .expect("the reference spec");
        let checked = check("specs/database.yaml", &text, None).expect("valid");
        assert!(checked.phases.len() >= 5 && checked.transitions >= checked.phases.len() - 1);
    }

    #[test]
    fn a_file_that_is_not_yaml_is_one_located_error() {
        let errors = check("x.yaml", "phases: [\n", None).expect_err("not YAML");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("x.yaml:"), "{}", errors[0]);
    }
}
