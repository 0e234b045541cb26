//! The shapes a spec's YAML is made of, for the reader: mappings with known keys, named
//! entries, lists, strings located at their characters, flags. Each reports a wrongly shaped
//! node and yields what it could read.

use crate::diag::{Diagnostic, Loc, Pos};
use crate::read::yaml::{Node, Value};
use crate::spec::Name;

use super::{DESCRIBED_KEYS, Reader};

impl Reader<'_> {
    /// A mapping with string keys drawn from `allowed`; reports unknown and repeated keys.
    pub(super) fn fields<'n>(
        &mut self,
        node: &'n Node,
        allowed: &[&str],
        what: &str,
    ) -> Option<Vec<(Name, &'n Node)>> {
        let Value::Map(entries) = &node.value else {
            self.wrong_type(node, what, "a mapping");
            return None;
        };
        let mut out: Vec<(Name, &Node)> = Vec::new();
        for (key, value) in entries {
            let Some(name) = self.key(key) else { continue };
            if !allowed.contains(&name.text.as_str()) {
                self.report(
                    Diagnostic::new(name.loc, format!("unknown key `{}` in {what}", name.text))
                        .suggest(&name.text, allowed.iter().copied())
                        .help(format!("the keys of {what} are: {}", allowed.join(", "))),
                );
                continue;
            }
            if let Some((first, _)) = out.iter().find(|(k, _)| k.text == name.text) {
                let first_line = match first.loc {
                    Loc::File(p) => p.line,
                    Loc::Span(_) => 0,
                };
                self.report(
                    Diagnostic::new(
                        name.loc,
                        format!("key `{}` is repeated in {what}", name.text),
                    )
                    .help(format!(
                        "it was already set on line {first_line}; keep one of them"
                    )),
                );
                continue;
            }
            out.push((name, value));
        }
        Some(out)
    }

    /// A mapping from names to bodies (phases, conditions, events); duplicates are kept for
    /// validation to report by name.
    pub(super) fn named_entries<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
    ) -> Vec<(Name, &'n Node)> {
        match &node.value {
            Value::Map(entries) => entries
                .iter()
                .filter_map(|(k, v)| Some((self.key(k)?, v)))
                .collect(),
            Value::Null => Vec::new(),
            _ => {
                self.wrong_type(
                    node,
                    &format!("`{what}`"),
                    "a mapping from names to settings, e.g. `Pending: {}`",
                );
                Vec::new()
            }
        }
    }

    pub(super) fn description_only(&mut self, body: &Node, what: &str) -> Option<String> {
        if matches!(body.value, Value::Null) {
            return None;
        }
        let entries = self.fields(body, DESCRIBED_KEYS, what)?;
        entries
            .into_iter()
            .find_map(|(_, v)| self.string(v, "`description`"))
            .map(|t| t.text)
    }

    pub(super) fn seq<'n>(
        &mut self,
        node: &'n Node,
        what: &str,
        expected: &str,
    ) -> Option<&'n [Node]> {
        match &node.value {
            Value::Seq(items) => Some(items),
            Value::Null => Some(&[]),
            _ => {
                self.wrong_type(node, what, expected);
                None
            }
        }
    }

    /// One name, or a list of names.
    pub(super) fn names(&mut self, node: &Node, what: &str) -> Vec<Name> {
        match &node.value {
            Value::Seq(items) => items
                .iter()
                .filter_map(|item| self.string(item, what))
                .collect(),
            _ => self.string(node, what).into_iter().collect(),
        }
    }

    pub(super) fn key(&mut self, node: &Node) -> Option<Name> {
        self.string(node, "a key")
    }

    /// A scalar as text, located exactly at its characters on the line.
    pub(super) fn string(&mut self, node: &Node, what: &str) -> Option<Name> {
        let text = match &node.value {
            Value::Str(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            _ => {
                self.wrong_type(node, what, "a string");
                return None;
            }
        };
        let pos = self.locate(node.pos, &text);
        Some(Name {
            text,
            loc: Loc::File(pos),
        })
    }

    pub(super) fn flag(&mut self, node: &Node, what: &str) -> bool {
        match node.value {
            Value::Bool(b) => b,
            _ => {
                self.wrong_type(node, what, "`true` or `false`");
                false
            }
        }
    }

    pub(super) fn wrong_type(&mut self, node: &Node, what: &str, expected: &str) {
        let found = node.value.kind();
        self.report(
            Diagnostic::new(
                node.pos,
                format!("{what} must be {expected}, found {found}"),
            )
            .help(format!("write {what} as {expected}")),
        );
    }

    /// A flow mapping written on one line (`{ from: A, to: B }`) underlined to its end.
    pub(super) fn flow_extent(&self, pos: Pos) -> Pos {
        let Some(line) = self.file.line(pos.line) else {
            return pos;
        };
        let rest: String = line.chars().skip(pos.col.saturating_sub(1)).collect();
        match (rest.starts_with('{'), rest.find('}')) {
            (true, Some(end)) => pos.with_len(rest[..=end].chars().count()),
            _ => pos,
        }
    }

    /// The parser gives the start of a node (a quote, for quoted scalars); find the text itself.
    pub(super) fn locate(&self, pos: Pos, text: &str) -> Pos {
        let len = text.chars().count();
        let Some(line) = self.file.line(pos.line) else {
            return pos.with_len(len);
        };
        let rest: String = line.chars().skip(pos.col.saturating_sub(1)).collect();
        match rest.find(text) {
            Some(byte) if !text.is_empty() => {
                Pos::line_col(pos.line, pos.col + rest[..byte].chars().count()).with_len(len)
            }
            _ => pos.with_len(len),
        }
    }
}
