//! Anchors and aliases. An anchored node is kept, with what it costs, once it is finished; an
//! alias is a copy of it whose every node is located at the alias (that is where the value is
//! used, and where an error in it is reported). An alias met while its anchor's node is still
//! open would be a copy of itself: that is an error.

use std::collections::{HashMap, HashSet};

use super::budget::Cost;
use super::{Node, Value};
use crate::diag::Pos;

/// The anchors of a document, by the parser's anchor id (a redefined name gets a new id, and
/// aliases name the latest).
#[derive(Debug, Default)]
pub struct Anchors {
    slots: HashMap<usize, Option<(Node, Cost)>>,
}

/// What an alias finds.
pub enum Target<'t> {
    Finished(&'t Node, Cost),
    /// The alias is inside the node it names.
    Open,
    Unknown,
}

impl Anchors {
    /// The node anchored `id` has started.
    pub fn open(&mut self, id: usize) {
        self.slots.insert(id, None);
    }

    /// The node anchored `id` is finished.
    pub fn close(&mut self, id: usize, node: &Node) {
        self.slots.insert(id, Some((node.clone(), cost(node))));
    }

    pub fn target(&self, id: usize) -> Target<'_> {
        match self.slots.get(&id) {
            Some(Some((node, cost))) => Target::Finished(node, *cost),
            Some(None) => Target::Open,
            None => Target::Unknown,
        }
    }
}

/// Nodes, text bytes and height of `node`.
fn cost(node: &Node) -> Cost {
    let children = |nodes: &mut dyn Iterator<Item = &Node>| {
        nodes.fold(Cost::default(), |total, node| {
            let child = cost(node);
            Cost {
                nodes: total.nodes + child.nodes,
                bytes: total.bytes + child.bytes,
                height: total.height.max(child.height),
            }
        })
    };
    let (inner, container) = match &node.value {
        Value::Seq(items) => (children(&mut items.iter()), true),
        Value::Map(entries) => (
            children(&mut entries.iter().flat_map(|(k, v)| [k, v])),
            true,
        ),
        Value::Str(text) => (
            Cost {
                bytes: text.len(),
                ..Cost::default()
            },
            false,
        ),
        _ => (Cost::default(), false),
    };
    Cost {
        nodes: inner.nodes + 1,
        bytes: inner.bytes,
        height: inner.height + usize::from(container),
    }
}

/// Locates `node` and the nodes in it at `pos`, but for those at a position in `except` (and
/// the nodes in them), which stay where they are.
pub fn relocate(node: &mut Node, pos: Pos, except: &HashSet<Pos>) {
    if except.contains(&node.pos) {
        return;
    }
    node.pos = pos;
    match &mut node.value {
        Value::Seq(items) => items
            .iter_mut()
            .for_each(|item| relocate(item, pos, except)),
        Value::Map(entries) => entries.iter_mut().for_each(|(key, value)| {
            relocate(key, pos, except);
            relocate(value, pos, except);
        }),
        _ => {}
    }
}
