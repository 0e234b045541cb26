//! Read stage, first half: YAML text → a located node tree.
//!
//! serde-saphyr parses under a resource budget (alias bombs, deep nesting and huge inputs are
//! rejected by the parser, not by our stack) and hands us every node with its line and column.
//! We keep the tree untyped so the next stage can report *all* unknown keys and wrong types at
//! once, which a derived `Deserialize` cannot do.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, Options, Spanned};

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

fn pos_of(location: serde_saphyr::Location) -> Pos {
    Pos::line_col(
        usize::try_from(location.line()).unwrap_or(usize::MAX),
        usize::try_from(location.column()).unwrap_or(usize::MAX),
    )
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Value>::deserialize(deserializer)?;
        Ok(Node {
            pos: pos_of(spanned.referenced),
            value: spanned.value,
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        i64::try_from(v)
            .map(Value::Int)
            .map_err(|_| E::custom("number too large"))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Node>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key, value));
        }
        Ok(Value::Map(entries))
    }
}

/// Parses a spec document. Errors carry the parser's position when it knows one.
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
    let mut budget = Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.max_aliases = 1_000;
    budget.max_anchors = 1_000;
    budget.max_events = 200_000;
    budget.max_nodes = 100_000;
    budget.max_documents = 1;
    budget.max_recorded_anchor_events = 20_000;
    let mut options = Options::default();
    options.budget = Some(budget);
    options.duplicate_keys = DuplicateKeyPolicy::PassThrough;
    options.with_snippet = false;
    // YAML 1.2 booleans only: `on:` is a transition key here, not `true`.
    options.strict_booleans = true;
    match serde_saphyr::from_str_with_options::<Option<Node>>(text, options) {
        Ok(Some(node)) => Ok(node),
        Ok(None) => Ok(Node {
            pos: Pos::line_col(1, 1),
            value: Value::Null,
        }),
        Err(err) => {
            let pos = err.location().map_or(Pos::line_col(1, 1), pos_of);
            let message = first_line(&err.to_string());
            let over_budget = message.contains("budget") || message.contains("limit");
            let diag = if over_budget {
                Diagnostic::new(
                    pos,
                    format!(
                        "spec rejected: it exceeds the YAML parser's resource budget ({message})"
                    ),
                )
            } else {
                Diagnostic::new(pos, format!("invalid YAML: {message}"))
            };
            Err(if over_budget {
                diag.help(format!(
                    "specs are small documents: at most {MAX_DEPTH} levels of nesting, \
                     a few aliases, {MAX_SPEC_BYTES} bytes"
                ))
            } else {
                diag.help("fix the YAML syntax at this position")
            })
        }
    }
}

fn first_line(message: &str) -> String {
    // The parser's message may end with its own " at line X, column Y ..."; we print the
    // position ourselves, so keep what comes before it, on the first line.
    let line = message.lines().next().unwrap_or(message);
    let line = line.split(" at line ").next().unwrap_or(line);
    line.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_positions_and_order_and_duplicates() {
        let node = parse("a: 1\nb:\n  - x\n  - {c: true}\na: 2\n").unwrap();
        let Value::Map(entries) = node.value else {
            panic!("not a map")
        };
        let keys: Vec<_> = entries
            .iter()
            .map(|(k, _)| (k.value.clone(), k.pos.line))
            .collect();
        assert_eq!(
            keys,
            vec![
                (Value::Str("a".into()), 1),
                (Value::Str("b".into()), 2),
                (Value::Str("a".into()), 5)
            ]
        );
        let Value::Seq(items) = &entries[1].1.value else {
            panic!("not a seq")
        };
        assert_eq!((items[0].pos.line, items[0].pos.col), (3, 5));
        assert_eq!(items[1].pos.line, 4);
    }

    #[test]
    fn syntax_error_has_position() {
        let err = parse("phases:\n  A: {x: 1\n").unwrap_err();
        assert!(err.message.starts_with("invalid YAML"), "{}", err.message);
        assert!(err.pos().line >= 2, "{:?}", err.pos());
    }

    #[test]
    fn alias_bomb_is_rejected_quickly() {
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = i - 1;
            doc.push_str(&format!(
                "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let start = std::time::Instant::now();
        assert!(parse(&doc).is_err());
        assert!(start.elapsed().as_secs() < 5);
    }

    #[test]
    fn deep_nesting_is_rejected_without_overflow() {
        let doc = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("budget"), "{}", err.message);
        let block: String = (0..5_000)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        assert!(parse(&block).is_err());
    }

    #[test]
    fn huge_input_is_rejected() {
        let doc = "# padding\n".repeat(MAX_SPEC_BYTES / 10 + 1);
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("limit"), "{}", err.message);
    }
}
