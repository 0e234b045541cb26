//! The resource budget: what one spec may cost the reader. Every charge is made before the
//! work it pays for (reading a container, copying an anchor for an alias), so an alias bomb or
//! a 100 000-level nesting stops after a bounded amount of work.

use crate::diag::{Diagnostic, Pos};

use super::{MAX_DEPTH, MAX_SPEC_BYTES};

/// Nodes in the tree, each alias counted as the nodes of its copy. A 150-phase spec has ~3 000.
pub const MAX_NODES: usize = 100_000;
/// Scalar text in the tree, copies included: four times the largest file.
pub const MAX_TEXT_BYTES: usize = 4 * MAX_SPEC_BYTES;
pub const MAX_ANCHORS: usize = 1_000;
pub const MAX_ALIASES: usize = 1_000;

/// What a finished node costs: its nodes, its text bytes and its height (containers on the
/// longest path down from it, itself included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub nodes: usize,
    pub bytes: usize,
    pub height: usize,
}

/// The running totals of one document.
#[derive(Debug, Default)]
pub struct Budget {
    nodes: usize,
    bytes: usize,
    anchors: usize,
    aliases: usize,
}

impl Budget {
    /// A node of its own at `pos`, with `bytes` of scalar text.
    pub fn node(&mut self, bytes: usize, pos: Pos) -> Result<(), Diagnostic> {
        self.charge(
            Cost {
                nodes: 1,
                bytes,
                height: 0,
            },
            pos,
        )
    }

    /// A copy of a node of `cost` made at `pos`.
    pub fn charge(&mut self, cost: Cost, pos: Pos) -> Result<(), Diagnostic> {
        self.nodes = self.nodes.saturating_add(cost.nodes);
        if self.nodes > MAX_NODES {
            return Err(exceeded(
                pos,
                &format!("more than {MAX_NODES} nodes, each alias counted as its copy"),
            ));
        }
        self.bytes = self.bytes.saturating_add(cost.bytes);
        if self.bytes > MAX_TEXT_BYTES {
            return Err(exceeded(
                pos,
                &format!(
                    "more than {MAX_TEXT_BYTES} bytes of text, each alias counted as its copy"
                ),
            ));
        }
        Ok(())
    }

    pub fn anchor(&mut self, pos: Pos) -> Result<(), Diagnostic> {
        self.anchors += 1;
        if self.anchors > MAX_ANCHORS {
            return Err(exceeded(pos, &format!("more than {MAX_ANCHORS} anchors")));
        }
        Ok(())
    }

    pub fn alias(&mut self, pos: Pos) -> Result<(), Diagnostic> {
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err(exceeded(pos, &format!("more than {MAX_ALIASES} aliases")));
        }
        Ok(())
    }
}

/// A container whose outermost level is at `depth` (the root's is 1), or a copy reaching it.
pub fn depth(depth: usize, pos: Pos) -> Result<(), Diagnostic> {
    if depth > MAX_DEPTH {
        return Err(too_deep(pos));
    }
    Ok(())
}

pub fn too_deep(pos: Pos) -> Diagnostic {
    exceeded(pos, &format!("more than {MAX_DEPTH} levels of nesting"))
}

fn exceeded(pos: Pos, what: &str) -> Diagnostic {
    Diagnostic::new(
        pos,
        format!("spec rejected: it exceeds the YAML parser's resource budget ({what})"),
    )
    .help(format!(
        "specs are small documents: at most {MAX_DEPTH} levels of nesting, \
         a few aliases, {MAX_SPEC_BYTES} bytes"
    ))
}
