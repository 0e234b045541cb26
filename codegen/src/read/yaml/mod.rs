//! Read stage, first half: YAML text → a located node tree.
//!
//! granit-parser scans the text into events; this module builds the tree from them with rules
//! of its own, written from the YAML 1.2.2 specification for what a spec needs:
//!
//! - **Scalars** (`scalar.rs`) follow the core schema (spec §10.3.2). A plain scalar is null
//!   (`null`, `Null`, `NULL`, `~`, empty), a boolean (`true`/`True`/`TRUE`, `false`/…: `on` and
//!   `yes` stay strings), an integer (`[-+]?[0-9]+`, `0o[0-7]+`, `0x[0-9a-fA-F]+`; outside i64
//!   "number too large"), a float (`[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`,
//!   `[-+]?.inf`, `.nan` in three spellings each; a decimal beyond f64 is "number too large"),
//!   or else a string. Quoted and block scalars are strings.
//! - **Tags** (`tag.rs`): a spec needs none. `!` makes a scalar a string; the core tags `!!str`,
//!   `!!int`, `!!float`, `!!bool`, `!!null`, `!!seq` and `!!map` select their type and must fit
//!   the node; any other tag is an error.
//! - **Anchors and aliases** (`anchors.rs`): an alias is a copy of its anchor's finished node,
//!   every node of the copy located at the alias. An alias inside the node it names is an error.
//! - **Merge keys** (`merge.rs`, YAML 1.1's merge type): `<<: mapping` or `<<: [mappings]` adds
//!   the entries whose keys the mapping lacks, after its own; earlier mappings win over later
//!   ones. Keys are compared by value, and merged entries are located at the mapping they came
//!   from (what an alias copied into it stays at the alias).
//! - **Duplicate keys** are kept in document order, so validation can name both.
//! - **Budget** (`budget.rs`): at most [`MAX_SPEC_BYTES`], [`MAX_DEPTH`] levels of nesting,
//!   and bounds on nodes and text (each alias counted as the copy it makes), anchors and aliases,
//!   checked before the work they bound; one document per file. The builder (`read.rs`) recurses
//!   only into containers, after the depth check, so no input reaches deep recursion.
//!
//! Errors are diagnostics at the offending node; a syntax error is granit-parser's message at
//! its position. An empty document, or a null root, is a null at 1:1.
//!
//! Until 0.1 the tree came from serde-saphyr, which stays a dev-dependency: the differential
//! test (`differential.rs`) holds both readers to the same trees on every spec of the
//! repository and on generated documents inside the rules above. Where we chose differently,
//! on purpose (each has a unit test in `tests.rs`):
//!
//! - `007`, `-007` are the integer 7 and -7 (serde-saphyr: the float 7.0);
//! - `0b101`, `-0x10`, `+0o17`, `1_000` are strings (serde-saphyr: integers);
//! - `.inf`, `-.inf`, `.nan`, also tagged `!!float`, are floats (serde-saphyr: errors);
//! - an integer beyond u64 or below i64 is "number too large" (serde-saphyr: a float, or a
//!   string for `0x…`);
//! - tags other than `!` and the core ones are errors (serde-saphyr: `!custom 5` is 5,
//!   `!!binary` is decoded, `!!merge`, `!!set` and `%TAG` tags are read);
//! - a core tag reads the scalar's exact text and must fit it: `!!null x`, `!!float -.nan`,
//!   `!!bool ' true'` are errors (serde-saphyr: null, NaN, true);
//! - a merge value must be a mapping or a list of mappings: `<<: ~` and nested lists are errors
//!   (serde-saphyr: nothing merged; flattened);
//! - merge keys compare keys by value: `~` and `null` are one key, `true` and `'true'` two
//!   (serde-saphyr compares spellings, integers aside);
//! - every node is read, overridden merged entries too: `{a: 1, <<: {a: 1e400}}` is an error
//!   (serde-saphyr skips the overridden value);
//! - the budget's limits and texts are ours: alias copies count as the nodes they make, and
//!   aliases may outnumber anchors (serde-saphyr's own limits and ratio rule);
//! - error texts and help lines are ours, except for syntax errors.

mod anchors;
mod budget;
mod merge;
mod read;
mod scalar;
mod tag;

#[cfg(test)]
mod differential;
#[cfg(test)]
mod oracle;
#[cfg(test)]
mod tests;

use crate::diag::{Diagnostic, Pos};

/// Largest spec file we accept. Real specs are a few KiB; a 150-phase machine is ~40 KiB.
pub const MAX_SPEC_BYTES: usize = 1 << 20;
/// Deepest nesting we accept. A spec needs 4 levels; the margin is for flow style.
pub const MAX_DEPTH: usize = 16;

/// A YAML node with the position it was written at.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

/// The shapes a spec can contain.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order; duplicates are kept so that validation can name both.
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// The word used in "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

/// Parses a spec document. Errors carry the position of what is wrong.
pub fn parse(text: &str) -> Result<Node, Diagnostic> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(Diagnostic::new(
            Pos::line_col(1, 1),
            format!(
                "spec file is {} bytes, over the {MAX_SPEC_BYTES}-byte limit",
                text.len()
            ),
        )
        .help("a spec describes one machine; split very large generated specs or trim them"));
    }
    read::document(text)
}
