//! The previous reader, kept for tests only: serde-saphyr deserializing into the located tree
//! with the options the macro used before it read granit-parser's events itself. The
//! differential test compares the two readers' trees, and whether both fail.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Budget, DuplicateKeyPolicy, Options, Spanned};

use super::{MAX_DEPTH, MAX_SPEC_BYTES, Node, Value};
use crate::diag::{Diagnostic, Pos};

fn pos_of(location: serde_saphyr::Location) -> Pos {
    Pos::line_col(
        usize::try_from(location.line()).unwrap_or(usize::MAX),
        usize::try_from(location.column()).unwrap_or(usize::MAX),
    )
}

/// `Node` through serde: the `Spanned` wrapper's use-site location and the untyped value.
struct OracleNode(Node);

impl<'de> Deserialize<'de> for OracleNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<OracleValue>::deserialize(deserializer)?;
        Ok(OracleNode(Node {
            pos: pos_of(spanned.referenced),
            value: spanned.value.0,
        }))
    }
}

struct OracleValue(Value);

impl<'de> Deserialize<'de> for OracleValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ValueVisitor).map(OracleValue)
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
        OracleValue::deserialize(d).map(|v| v.0)
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
        while let Some(item) = seq.next_element::<OracleNode>()? {
            items.push(item.0);
        }
        Ok(Value::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<OracleNode>()? {
            let value = map.next_value::<OracleNode>()?;
            entries.push((key.0, value.0));
        }
        Ok(Value::Map(entries))
    }
}

/// The old `yaml::parse`; an error is serde-saphyr's own text at its position.
pub fn parse(text: &str) -> Result<Node, Diagnostic> {
    if text.len() > MAX_SPEC_BYTES {
        return super::parse(text);
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
    options.strict_booleans = true;
    match serde_saphyr::from_str_with_options::<Option<OracleNode>>(text, options) {
        Ok(Some(node)) => Ok(node.0),
        Ok(None) => Ok(Node {
            pos: Pos::line_col(1, 1),
            value: Value::Null,
        }),
        Err(err) => {
            let pos = err.location().map_or(Pos::line_col(1, 1), pos_of);
            Err(Diagnostic::new(pos, err.to_string()))
        }
    }
}
