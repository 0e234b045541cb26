//! Generated documents: random trees of scalars (from a list of tricky ones), sequences,
//! mappings (merge keys included), anchors, aliases and the tags both readers accept, written
//! in block or flow style, then sometimes broken by a few random edits.

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};

use super::{Outcome, compare};

/// A random document's shape; `render` writes it in block or flow style.
#[derive(Clone, Debug)]
enum Doc {
    Scalar(&'static str),
    Seq(Vec<Doc>, bool),
    Map(Vec<(Doc, Doc)>, bool),
    /// `&name`, `!tag` or both before a node.
    Props(&'static str, Box<Doc>),
    Alias(&'static str),
}

/// Scalars of every form that both readers read alike.
const SCALARS: &[&str] = &[
    "a",
    "b",
    "x y",
    "on",
    "yes",
    "No",
    "true",
    "True",
    "FALSE",
    "null",
    "~",
    "''",
    "\"\"",
    "0",
    "-0",
    "-1",
    "+2",
    "0x1F",
    "0xff",
    "0o17",
    "0o8",
    "0x",
    "1.5",
    "-.5",
    "1.",
    "1e3",
    "2E-2",
    "+.nan",
    "nan",
    "inf",
    "9223372036854775807",
    "-9223372036854775808",
    "'1'",
    "\"a\\tb\"",
    "'it''s'",
    "\"\\u00e9\"",
    "<<",
    "'<<'",
    "Phase001",
    "example.com/x",
    "10m",
];
/// Scalars that are errors as values, and fragments that break the syntax around them.
const JUNK: &[&str] = &[
    "1e400",
    "9223372036854775808",
    "18446744073709551615",
    "0x8000000000000000",
    "|\n  block\n",
    ">-\n  folded\n",
    "k: v",
    "- x",
    "a #c",
    "\"x",
    "[",
    "]",
    "{",
    "}",
    ",",
    "?",
    ":",
    "-",
    "@",
    "%",
    "\t",
];

/// Anchors and the tags both readers accept.
const PROPS: &[&str] = &[
    "&a", "&b", "&c", "!!str", "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq", "!",
    "&a !!str", "!!int &b",
];

fn doc() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        30 => prop::sample::select(SCALARS).prop_map(Doc::Scalar),
        1 => prop::sample::select(JUNK).prop_map(Doc::Scalar),
        8 => prop::sample::select(&["a", "b", "c"][..]).prop_map(Doc::Alias),
        1 => Just(Doc::Alias("nope")),
    ];
    leaf.prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            3 => (prop::collection::vec(inner.clone(), 0..5), any::<bool>())
                .prop_map(|(items, flow)| Doc::Seq(items, flow)),
            4 => (
                prop::collection::vec(
                    (
                        prop_oneof![
                            8 => prop::sample::select(SCALARS).prop_map(Doc::Scalar),
                            2 => Just(Doc::Scalar("<<")),
                            1 => inner.clone(),
                        ],
                        inner.clone(),
                    ),
                    0..5
                ),
                any::<bool>()
            )
                .prop_map(|(entries, flow)| Doc::Map(entries, flow)),
            2 => (prop::sample::select(PROPS), inner)
                .prop_map(|(props, node)| Doc::Props(props, Box::new(node))),
        ]
    })
}

fn is_block(doc: &Doc) -> bool {
    match doc {
        Doc::Seq(items, flow) => !flow && !items.is_empty(),
        Doc::Map(entries, flow) => !flow && !entries.is_empty(),
        Doc::Props(_, node) => is_block(node),
        _ => false,
    }
}

fn flow(doc: &Doc, out: &mut String) {
    match doc {
        Doc::Scalar(s) => out.push_str(s),
        Doc::Alias(name) => {
            out.push('*');
            out.push_str(name);
        }
        Doc::Props(props, node) => {
            out.push_str(props);
            out.push(' ');
            flow(node, out);
        }
        Doc::Seq(items, _) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(item, out);
            }
            out.push(']');
        }
        Doc::Map(entries, _) => {
            out.push('{');
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flow(key, out);
                out.push_str(": ");
                flow(value, out);
            }
            out.push('}');
        }
    }
}

/// Writes `doc` as a block node at `indent`, after whatever the line already holds.
fn block(doc: &Doc, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match doc {
        Doc::Props(props, node) if is_block(node) => {
            out.push_str(props);
            out.push('\n');
            out.push_str(&pad);
            block(node, indent, out);
        }
        Doc::Seq(items, false) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&pad);
                }
                out.push_str("- ");
                if is_block(item) {
                    block(item, indent + 2, out);
                } else {
                    flow(item, out);
                    out.push('\n');
                }
            }
        }
        Doc::Map(entries, false) if !entries.is_empty() => {
            for (i, (key, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(&pad);
                }
                if matches!(key, Doc::Scalar(_)) {
                    flow(key, out);
                    out.push(':');
                } else {
                    out.push_str("? ");
                    flow(key, out);
                    out.push('\n');
                    out.push_str(&pad);
                    out.push(':');
                }
                if is_block(value) {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent + 2));
                    block(value, indent + 2, out);
                } else {
                    out.push(' ');
                    flow(value, out);
                    out.push('\n');
                }
            }
        }
        _ => {
            flow(doc, out);
            out.push('\n');
        }
    }
}

const EDITS: &[&str] = &[
    "", ":", "-", "[", "]", "{", "}", ",", "\t", "#", "&a ", "*a", "!!str ", "'", "\"", "\n", " ",
    "\r\n", "---\n", "...\n", "? ", "|\n", "\u{feff}",
];

/// One generated document: anchors defined first (so that most aliases resolve), then the tree,
/// then a few random edits.
fn document() -> impl Strategy<Value = String> {
    (
        prop::option::of(prop::collection::vec(doc(), 1..4)),
        doc(),
        prop::sample::select(&["", "---\n", "--- ", "%YAML 1.2\n---\n"][..]),
        prop::sample::select(&["", "...\n", "--- x\n", "---\n", "# end\n"][..]),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                prop::sample::select(EDITS),
                any::<bool>(),
            ),
            0..3,
        ),
    )
        .prop_map(|(defs, tree, prefix, suffix, edits)| {
            let mut text = String::from(prefix);
            if let Some(defs) = defs {
                text.push_str("defs: [");
                for (def, name) in defs.iter().zip(["&a ", "&b ", "&c "]) {
                    text.push_str(name);
                    flow(def, &mut text);
                    text.push_str(", ");
                }
                text.push_str("]\ndoc:\n  ");
                block(&tree, 2, &mut text);
            } else {
                block(&tree, 0, &mut text);
            }
            text.push_str(suffix);
            for (at, insert, delete) in edits {
                let mut i = at.index(text.len() + 1);
                while !text.is_char_boundary(i) {
                    i -= 1;
                }
                if delete && i < text.len() {
                    text.remove(i);
                }
                text.insert_str(i, insert);
            }
            text
        })
}

#[test]
fn generated_documents() {
    let compared = AtomicUsize::new(0);
    let mut runner = TestRunner::new(ProptestConfig::with_cases(10_000));
    let result = runner.run(&document(), |text| {
        match compare(&text) {
            Outcome::Differ(diff) => return Err(TestCaseError::fail(diff)),
            Outcome::Agree => {
                compared.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::Outside => {}
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    // Random edits and merge values put some documents outside the shared rules.
    let compared = compared.into_inner();
    assert!(
        compared >= 8_000,
        "only {compared} of 10 000 documents compared"
    );
}
