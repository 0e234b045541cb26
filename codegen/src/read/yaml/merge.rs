//! Merge keys, as YAML 1.1's merge type defines them: `<<: mapping` or `<<: [mapping, …]` adds
//! to a mapping the entries whose keys it does not have yet. The mapping's own keys win, then
//! the earlier merged mappings over the later ones; added entries come after the mapping's own,
//! in order, each located at the mapping it came from (what an alias copied into it stays at
//! that alias). Keys are the same when their values are (`1` and `0x1` are one key, `1` and
//! `'1'` are two), positions aside.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::anchors::relocate;
use super::{Node, Value};
use crate::diag::{Diagnostic, Pos};

/// Adds to `entries` what the merge values (the values of the `<<` keys, in order) bring.
/// `copies` holds the positions of the aliases read so far.
pub fn apply(
    entries: &mut Vec<(Node, Node)>,
    merges: Vec<Node>,
    copies: &HashSet<Pos>,
) -> Result<(), Diagnostic> {
    if merges.is_empty() {
        return Ok(());
    }
    let mut incoming = Vec::new();
    for merge in merges {
        match merge.value {
            Value::Map(merged) => incoming.extend(located(merged, merge.pos, copies)),
            Value::Seq(items) => {
                for item in items {
                    match item.value {
                        Value::Map(merged) => incoming.extend(located(merged, item.pos, copies)),
                        _ => return Err(not_mappings(&item)),
                    }
                }
            }
            _ => return Err(not_mappings(&merge)),
        }
    }
    let mut seen: HashSet<Key<'_>> = entries.iter().map(|(key, _)| Key(&key.value)).collect();
    let fresh: Vec<bool> = incoming
        .iter()
        .map(|(key, _)| seen.insert(Key(&key.value)))
        .collect();
    drop(seen);
    entries.extend(
        incoming
            .into_iter()
            .zip(fresh)
            .filter_map(|(entry, fresh)| fresh.then_some(entry)),
    );
    Ok(())
}

/// A merged mapping's entries, located at the mapping (`at`).
fn located(
    merged: Vec<(Node, Node)>,
    at: Pos,
    copies: &HashSet<Pos>,
) -> impl Iterator<Item = (Node, Node)> {
    merged.into_iter().map(move |(mut key, mut value)| {
        relocate(&mut key, at, copies);
        relocate(&mut value, at, copies);
        (key, value)
    })
}

fn not_mappings(found: &Node) -> Diagnostic {
    Diagnostic::new(
        found.pos,
        format!(
            "merge key `<<` takes a mapping or a list of mappings, found {}",
            found.value.kind()
        ),
    )
    .help("write `<<: *anchor` or `<<: [*a, *b]` naming anchored mappings, or quote `'<<'` for a plain key")
}

/// A key's value, compared without positions (floats bit for bit).
struct Key<'v>(&'v Value);

impl PartialEq for Key<'_> {
    fn eq(&self, other: &Self) -> bool {
        same(self.0, other.0)
    }
}

impl Eq for Key<'_> {}

/// Consistent with `same`; a container hashes its length only (keys are rarely containers).
impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self.0).hash(state);
        match self.0 {
            Value::Null => {}
            Value::Bool(b) => b.hash(state),
            Value::Int(i) => i.hash(state),
            Value::Float(f) => f.to_bits().hash(state),
            Value::Str(s) => s.hash(state),
            Value::Seq(items) => items.len().hash(state),
            Value::Map(entries) => entries.len().hash(state),
        }
    }
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
        (Value::Seq(a), Value::Seq(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same(&a.value, &b.value))
        }
        (Value::Map(a), Value::Map(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
                    same(&ka.value, &kb.value) && same(&va.value, &vb.value)
                })
        }
        (Value::Seq(_) | Value::Map(_) | Value::Float(_), _) => false,
        (a, b) => a == b,
    }
}
