//! Validate stage: [`RawSpec`] → [`Machine`], reporting every violation of the spec language
//! together. Three steps, one file each:
//!
//! - [`resolve`]: names → a [`Machine`] (indices instead of names) plus [`Locations`], the side
//!   table of where its phases and edges were written;
//! - [`check`]: the rules, one small function each, reporting into the shared [`Ctxt`]. The
//!   rules about one item run as resolve meets the item, so an item that breaks one stays out
//!   of the best-effort machine and errors come out in spec order;
//! - [`graph`]: reachability, dead ends and shadowed rules, run only when [`Resolved`] says the
//!   graph is the one the spec wrote, so one typo does not cascade into a page of follow-on
//!   errors.

mod check;
mod children;
mod duration;
mod graph;
mod resolve;

use std::cell::RefCell;

use crate::diag::{Diagnostic, Diagnostics, Loc};
use crate::model::Machine;
use crate::spec::RawSpec;

/// Checks a spec and lowers it to a [`Machine`]. With errors, the machine is a best effort made
/// of the parts that were valid (it is emitted as a skeleton beside the errors, so user code
/// that names valid phases does not add a cascade of follow-on errors).
pub fn validate(spec: &RawSpec, diags: &mut Diagnostics) -> Machine {
    validate_located(spec, diags).0
}

/// [`validate`], with the line of the spec file each edge was written on (`None` for the
/// inline DSL), in edge order: what a handler's illegal target is told to look at.
pub fn validate_located(spec: &RawSpec, diags: &mut Diagnostics) -> (Machine, Vec<Option<usize>>) {
    let cx = Ctxt::default();
    let resolved = resolve::resolve(spec, &cx);
    if resolved.graph_is_whole() {
        graph::check(&cx, &resolved.machine, &resolved.locations);
    }
    for error in cx.into_errors() {
        diags.push(error);
    }
    let lines = resolved
        .locations
        .edges
        .iter()
        .map(|loc| match loc {
            Loc::File(pos) => Some(pos.line),
            Loc::Span(_) => None,
        })
        .collect();
    (resolved.machine, lines)
}

/// Where every step reports, shared by reference (serde_derive's `Ctxt`): a rule reports and
/// validation goes on.
#[derive(Debug, Default)]
pub struct Ctxt {
    errors: RefCell<Vec<Diagnostic>>,
}

impl Ctxt {
    pub fn error(&self, diagnostic: Diagnostic) {
        self.errors.borrow_mut().push(diagnostic);
    }

    fn into_errors(self) -> Vec<Diagnostic> {
        self.errors.into_inner()
    }
}

/// What resolve hands on: the machine, where its parts were written, and whether its graph can
/// be checked.
#[derive(Debug)]
pub struct Resolved {
    pub machine: Machine,
    pub locations: Locations,
    /// The spec read completely and every transition resolved into edges without breaking a
    /// rule: the machine's edges are the ones the spec wrote.
    pub names_resolved: bool,
    /// No second phase is marked initial, so "the" initial phase means something.
    pub one_initial: bool,
}

impl Resolved {
    /// Whether graph checks on the machine would find the spec's mistakes, not echo others.
    pub fn graph_is_whole(&self) -> bool {
        self.names_resolved && self.one_initial
    }
}

/// The side table of [`Resolved`]: where the machine's items were written (the machine itself
/// carries no locations).
#[derive(Debug, Default)]
pub struct Locations {
    /// Per phase, in machine order: its name.
    pub phases: Vec<Loc>,
    /// Per edge, in machine order: the transition it came from.
    pub edges: Vec<Loc>,
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod tests_support {
    use std::str::FromStr;

    use proc_macro2::TokenStream;

    use super::{Diagnostics, Machine, validate};
    use crate::parse::args::{Args, SpecSource};

    /// The machine of inline DSL text and the messages of every error it has.
    pub fn checked(dsl: &str) -> (Machine, Vec<String>) {
        let mut diags = Diagnostics::default();
        let args = Args::parse(TokenStream::from_str(dsl).unwrap(), &mut diags).unwrap();
        let SpecSource::Inline(raw) = &args.source else {
            panic!("inline")
        };
        let machine = validate(raw, &mut diags);
        let errors = diags.into_vec().into_iter().map(|d| d.message).collect();
        (machine, errors)
    }

    /// A valid machine from inline DSL text.
    pub fn machine(dsl: &str) -> Machine {
        let (machine, errors) = checked(dsl);
        assert!(errors.is_empty(), "{errors:?}");
        machine
    }
}
