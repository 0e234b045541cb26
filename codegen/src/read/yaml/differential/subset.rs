//! Which documents the differential test compares: those inside the rules both readers share,
//! that is without any form listed as a deliberate difference in `yaml/mod.rs` (each of those
//! has its own unit test instead). The check reads granit-parser's events into a small tree of
//! its own; what comes after a syntax error is not looked at (both readers must fail there).

use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle, Tag};

/// A node as this check sees it.
#[derive(Clone, Debug)]
enum Shape {
    /// `tag`: the core tag's suffix, or `!`.
    Scalar {
        text: String,
        plain: bool,
        tag: Option<String>,
    },
    Seq(Vec<Shape>),
    /// Keys and values, alternating.
    Map(Vec<Shape>),
    Alias(usize),
}

/// From this many aliases on, the readers' budgets differ.
const MAX_ALIASES: usize = 100;

pub fn inside(doc: &str) -> bool {
    let mut anchors = HashMap::new();
    let mut aliases = 0;
    let mut recursive = false;
    let mut open: Vec<(Shape, usize)> = Vec::new();
    let mut roots = Vec::new();
    for item in Parser::new_from_str(doc) {
        let Ok((event, _)) = item else {
            break;
        };
        let (shape, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                let Some(tag) = accepted(tag.as_deref()) else {
                    return false;
                };
                let text = text.into_owned();
                let plain = style == ScalarStyle::Plain;
                (Shape::Scalar { text, plain, tag }, anchor)
            }
            Event::SequenceStart(_, anchor, tag) => {
                if accepted(tag.as_deref()).is_none() {
                    return false;
                }
                open.push((Shape::Seq(Vec::new()), anchor));
                continue;
            }
            Event::MappingStart(_, anchor, tag) => {
                if accepted(tag.as_deref()).is_none() {
                    return false;
                }
                open.push((Shape::Map(Vec::new()), anchor));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match open.pop() {
                Some(done) => done,
                None => break,
            },
            Event::Alias(id) => {
                aliases += 1;
                // An alias to a node still open.
                recursive |= !anchors.contains_key(&id);
                (Shape::Alias(id), 0)
            }
            _ => continue,
        };
        if anchor != 0 {
            anchors.insert(anchor, shape.clone());
        }
        match open.last_mut() {
            Some((Shape::Seq(children) | Shape::Map(children), _)) => children.push(shape),
            _ => roots.push(shape),
        }
    }
    let check = Check { anchors: &anchors };
    aliases < MAX_ALIASES
        && roots.iter().all(|root| check.node(root))
        && !(check.has_merges(&roots) && (recursive || check.loose(&roots)))
}

/// The tag as this check keeps it if both readers accept it (`!` or a core tag); `Some(None)`
/// for no tag.
fn accepted(tag: Option<&Tag>) -> Option<Option<String>> {
    let Some(tag) = tag else {
        return Some(None);
    };
    if tag.handle().is_empty() && tag.suffix() == "!" {
        return Some(Some("!".to_owned()));
    }
    tag.core_suffix().map(|core| Some(core.to_owned()))
}

struct Check<'a> {
    anchors: &'a HashMap<usize, Shape>,
}

impl Check<'_> {
    fn resolve<'s>(&'s self, shape: &'s Shape) -> Option<&'s Shape> {
        match shape {
            Shape::Alias(id) => self.anchors.get(id),
            shape => Some(shape),
        }
    }

    fn node(&self, shape: &Shape) -> bool {
        match shape {
            Shape::Scalar { text, plain, tag } => scalar_inside(text, *plain, tag.as_deref()),
            Shape::Seq(items) => items.iter().all(|item| self.node(item)),
            Shape::Map(children) => {
                children.iter().all(|child| self.node(child))
                    && children.chunks(2).all(|entry| match entry {
                        [key, value] if is_merge_key(key) => self.merge_inside(value),
                        _ => true,
                    })
            }
            Shape::Alias(_) => true,
        }
    }

    /// A merge value both readers treat alike: not null, and no null or list in a list.
    fn merge_inside(&self, value: &Shape) -> bool {
        match self.resolve(value) {
            Some(Shape::Seq(items)) => items.iter().all(|item| {
                !self.is_null(item) && !matches!(self.resolve(item), Some(Shape::Seq(_)))
            }),
            _ => !self.is_null(value),
        }
    }

    fn is_null(&self, shape: &Shape) -> bool {
        match self.resolve(shape) {
            Some(Shape::Scalar {
                text,
                plain,
                tag: None,
            }) => *plain && is_null(text),
            Some(Shape::Scalar { tag: Some(tag), .. }) => tag == "null",
            _ => false,
        }
    }

    fn has_merges(&self, roots: &[Shape]) -> bool {
        keys(roots).into_iter().any(is_merge_key)
    }

    /// With merge keys, serde-saphyr reads an overridden entry's key and value only to
    /// compare keys, we read them as any node: documents where that matters are left out, with
    /// a margin. They hold a key compared differently (a value of several spellings: null,
    /// booleans, floats; a tagged or complex key), or a node that can fail in an overridden
    /// entry only (a tag, a number out of range).
    fn loose(&self, roots: &[Shape]) -> bool {
        let loose_key = keys(roots).into_iter().any(|key| match key {
            Shape::Scalar {
                text,
                plain: true,
                tag: None,
            } => {
                is_null(text)
                    || matches!(
                        text.as_str(),
                        "true" | "True" | "TRUE" | "false" | "False" | "FALSE"
                    )
                    || is_float(text)
            }
            Shape::Scalar { tag, .. } => tag.is_some(),
            _ => true,
        });
        loose_key
            || nodes(roots).into_iter().any(|node| match node {
                Shape::Scalar { tag: Some(_), .. } => true,
                Shape::Scalar {
                    text,
                    plain: true,
                    tag: None,
                } => out_of_range(text),
                _ => false,
            })
    }
}

/// Every node of the trees, aliases not followed.
fn nodes(roots: &[Shape]) -> Vec<&Shape> {
    let mut all = Vec::new();
    let mut stack: Vec<&Shape> = roots.iter().collect();
    while let Some(shape) = stack.pop() {
        all.push(shape);
        if let Shape::Seq(children) | Shape::Map(children) = shape {
            stack.extend(children);
        }
    }
    all
}

/// Every mapping key of the trees.
fn keys(roots: &[Shape]) -> Vec<&Shape> {
    nodes(roots)
        .into_iter()
        .filter_map(|shape| match shape {
            Shape::Map(children) => Some(children.iter().step_by(2)),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A plain number our reader rejects as too large.
fn out_of_range(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let digits = |radix| !unsigned.is_empty() && unsigned.chars().all(|c: char| c.is_digit(radix));
    if digits(10) {
        return text.parse::<i64>().is_err();
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8)] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return !rest.is_empty()
                && rest.chars().all(|c| c.is_digit(radix))
                && i64::from_str_radix(rest, radix).is_err();
        }
    }
    is_float(text) && text.parse::<f64>().is_ok_and(f64::is_infinite)
}

fn is_merge_key(key: &Shape) -> bool {
    matches!(key, Shape::Scalar { text, plain: true, tag: None } if text == "<<")
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A number that is not an integer, as either reader may read it.
fn is_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && !unsigned.bytes().all(|b| b.is_ascii_digit())
        && unsigned.parse::<f64>().is_ok()
}

/// Whether both readers read a scalar alike, by the list of differences.
fn scalar_inside(text: &str, plain: bool, tag: Option<&str>) -> bool {
    match tag {
        None if !plain => true,
        None => !number_differs(text, false),
        Some("!" | "str" | "seq" | "map") => true,
        Some(_) if text.trim() != text => false,
        Some("null") => is_null(text),
        Some(tag) => !number_differs(text, tag == "float"),
    }
}

/// Number forms the readers read differently (see the list in `yaml/mod.rs`).
fn number_differs(text: &str, float_tag: bool) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let signed = unsigned.len() != text.len();
    let digits = !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit());
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") {
        return true;
    }
    if matches!(unsigned, ".nan" | ".NaN" | ".NAN") {
        // untagged `.nan` and `!!float +.nan` differ; `+.nan` and `!!float .nan` do not
        return signed == float_tag;
    }
    if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return false;
    }
    let leading_zero = digits && unsigned.len() > 1 && unsigned.starts_with('0');
    let prefixed = unsigned.starts_with("0b")
        || signed && ["0x", "0o"].iter().any(|p| unsigned.starts_with(p));
    let beyond = if digits {
        text.parse::<i128>().map_or(true, |v| {
            v < i128::from(i64::MIN) || v > i128::from(u64::MAX)
        })
    } else if let Some(hex) = unsigned.strip_prefix("0x") {
        beyond_u64(hex, 16)
    } else if let Some(octal) = unsigned.strip_prefix("0o") {
        beyond_u64(octal, 8)
    } else {
        false
    };
    leading_zero || prefixed || beyond || text.contains('_')
}

fn beyond_u64(digits: &str, radix: u32) -> bool {
    !digits.is_empty()
        && digits.chars().all(|c| c.is_digit(radix))
        && u64::from_str_radix(digits, radix).is_err()
}
