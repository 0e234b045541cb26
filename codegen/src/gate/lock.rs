//! The lock: what the last released spec let stored objects carry — its phases (which was
//! initial, which terminal), its retired names and its condition types — kept beside the spec
//! as `NAME.lock.yaml` (`read::load::lock_path`). It is a spec in form (the same reader reads it), cut down to what the
//! gate compares (other sections are ignored); `kube-fsm lock` writes it from the current
//! spec.

use std::fmt::Write as _;

use crate::diag::{Diagnostic, Diagnostics, Loc, SourceFile};
use crate::model::Machine;
use crate::read::from_yaml;
use crate::spec::Name;

/// A lock file, read.
#[derive(Debug)]
pub struct Lock {
    /// The lock's path, as messages show it.
    pub display: String,
    pub phases: Vec<LockedPhase>,
    pub retired: Vec<Name>,
    pub conditions: Vec<Name>,
}

/// One phase of the released spec.
#[derive(Debug)]
pub struct LockedPhase {
    pub name: Name,
    pub initial: bool,
    pub terminal: bool,
}

impl Lock {
    /// Reads the lock in `file`; its mistakes, rendered against it.
    pub fn read(file: &SourceFile) -> Result<Lock, Vec<String>> {
        let mut diags = Diagnostics::default();
        let raw = from_yaml::read_file(file, &mut diags);
        let mut errors = diags.into_vec();
        match raw {
            Some(raw) if errors.is_empty() => Ok(Lock {
                phases: raw
                    .phases
                    .into_iter()
                    .map(|p| LockedPhase {
                        initial: p.initial.is_some(),
                        terminal: p.terminal.is_some(),
                        name: p.name,
                    })
                    .collect(),
                retired: raw.retired.into_iter().map(|r| r.name).collect(),
                conditions: raw.conditions.into_iter().map(|c| c.name).collect(),
                display: file.display.clone(),
            }),
            _ => {
                errors.sort_by_key(Diagnostic::pos);
                Err(errors.iter().map(|d| d.render(Some(file))).collect())
            }
        }
    }

    /// Where `name` is written in the lock, as `file:line:col`.
    pub fn at(&self, name: &Name) -> String {
        match name.loc {
            Loc::File(pos) => format!("{}:{}:{}", self.display, pos.line, pos.col),
            Loc::Span(_) => self.display.clone(),
        }
    }
}

/// The error of a lock that does not read, at `at`: `error` is one of its mistakes, rendered
/// against the lock; `spec` is the spec's path, for the command that rewrites it.
pub fn invalid(at: impl Into<Loc>, error: &str, spec: &str) -> Diagnostic {
    Diagnostic::new(at, format!("the spec's lock is not valid: {error}"))
        .help(format!("rewrite it with `kube-fsm lock {spec}`"))
}

/// The lock of `machine`, the checked spec at `spec` (as the command was given it).
pub fn render(machine: &Machine, spec: &str) -> String {
    let mut out = format!(
        "# The released state machine of {spec}:\n\
         # the phases, retired phase names and condition types stored objects may carry.\n\
         # #[state_machine] refuses a spec that would strand them. Rewrite this file with\n\
         # `kube-fsm lock {spec}` when a release changes them on purpose.\nphases:\n"
    );
    for (i, phase) in machine.phases.iter().enumerate() {
        let mut flags = Vec::new();
        if i == machine.initial {
            flags.push("initial: true");
        }
        if phase.terminal {
            flags.push("terminal: true");
        }
        if flags.is_empty() {
            let _ = writeln!(out, "  {}: {{}}", phase.name);
        } else {
            let _ = writeln!(out, "  {}: {{ {} }}", phase.name, flags.join(", "));
        }
    }
    if !machine.retired.is_empty() {
        out.push_str("retired:\n");
        for retired in &machine.retired {
            let _ = writeln!(
                out,
                "  {}: {}",
                retired.name, machine.phases[retired.to].name
            );
        }
    }
    if !machine.conditions.is_empty() {
        out.push_str("conditions:\n");
        for condition in &machine.conditions {
            let _ = writeln!(out, "  {}: {{}}", condition.type_name);
        }
    }
    out
}
