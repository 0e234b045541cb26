//! Unit tests of the reader: each rule of `mod.rs`, the resource budget, and each deliberate
//! difference from serde-saphyr (the `differs_*` tests, which also check that the oracle does
//! read the document otherwise).

use super::*;

fn ok(doc: &str) -> Node {
    parse(doc).unwrap_or_else(|err| panic!("{doc:?}: {err:?}"))
}

fn fails(doc: &str) -> Diagnostic {
    match parse(doc) {
        Ok(node) => panic!("{doc:?} read as {node:?}"),
        Err(err) => err,
    }
}

/// The values of a one-line flow sequence's items.
fn items(doc: &str) -> Vec<Value> {
    match ok(doc).value {
        Value::Seq(items) => items.into_iter().map(|item| item.value).collect(),
        other => panic!("{doc:?} read as {other:?}"),
    }
}

fn entries(node: &Node) -> &[(Node, Node)] {
    match &node.value {
        Value::Map(entries) => entries,
        other => panic!("not a mapping: {other:?}"),
    }
}

fn at(line: usize, col: usize) -> Pos {
    Pos::line_col(line, col)
}

fn str(text: &str) -> Value {
    Value::Str(text.to_owned())
}

/// The oracle reads `doc` otherwise than we do.
fn oracle_differs(doc: &str) {
    let ours = format!("{:?}", parse(doc).map_err(|e| e.message));
    let theirs = format!("{:?}", oracle::parse(doc).map_err(|e| e.message));
    assert_ne!(ours, theirs, "{doc:?}: no longer a difference");
}

#[test]
fn keeps_positions_and_order_and_duplicates() {
    let node = ok("a: 1\nb:\n  - x\n  - {c: true}\na: 2\n");
    let keys: Vec<_> = entries(&node)
        .iter()
        .map(|(k, _)| (k.value.clone(), k.pos.line))
        .collect();
    assert_eq!(keys, vec![(str("a"), 1), (str("b"), 2), (str("a"), 5)]);
    let Value::Seq(items) = &entries(&node)[1].1.value else {
        panic!("not a seq")
    };
    assert_eq!(items[0].pos, at(3, 5));
    assert_eq!(items[1].pos.line, 4);
}

#[test]
fn empty_and_null_documents_are_a_null_at_the_start() {
    for doc in ["", "# only a comment\n", "---\n", "\n\n  ~\n", "null"] {
        assert_eq!(
            ok(doc),
            Node {
                pos: at(1, 1),
                value: Value::Null
            },
            "{doc:?}"
        );
    }
}

#[test]
fn plain_scalars_follow_the_core_schema() {
    assert_eq!(
        items("[~, null, Null, NULL, nULL]"),
        [
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            str("nULL")
        ]
    );
    assert_eq!(entries(&ok("a:"))[0].1.value, Value::Null);
    assert_eq!(
        items("[true, True, TRUE, false, False, FALSE, tRUE, on, yes, y, off]"),
        [
            Value::Bool(true),
            Value::Bool(true),
            Value::Bool(true),
            Value::Bool(false),
            Value::Bool(false),
            Value::Bool(false),
            str("tRUE"),
            str("on"),
            str("yes"),
            str("y"),
            str("off"),
        ]
    );
    assert_eq!(
        items("[0, -1, +2, 0o17, 0x1F, 0xff, 0o8, 0x, 9223372036854775807, -9223372036854775808]"),
        [
            Value::Int(0),
            Value::Int(-1),
            Value::Int(2),
            Value::Int(15),
            Value::Int(31),
            Value::Int(255),
            str("0o8"),
            str("0x"),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
        ]
    );
    assert_eq!(
        items("[1.5, -.5, +1., 1e3, 2E-2, 01.5, 1e, ., 1.2.3, inf, nan, 10m]"),
        [
            Value::Float(1.5),
            Value::Float(-0.5),
            Value::Float(1.0),
            Value::Float(1000.0),
            Value::Float(0.02),
            Value::Float(1.5),
            str("1e"),
            str("."),
            str("1.2.3"),
            str("inf"),
            str("nan"),
            str("10m"),
        ]
    );
    assert_eq!(
        items("[.inf, -.inf, +.INF, +.nan]"),
        [
            Value::Float(f64::INFINITY),
            Value::Float(f64::NEG_INFINITY),
            Value::Float(f64::INFINITY),
            str("+.nan"),
        ]
    );
    assert!(matches!(items("[.NaN]")[..], [Value::Float(f)] if f.is_nan()));
}

#[test]
fn quoted_and_block_scalars_are_strings() {
    assert_eq!(
        items("- '1'\n- \"true\"\n- '~'\n- ''\n- \"0x10\"\n- |\n  null\n"),
        [
            str("1"),
            str("true"),
            str("~"),
            str(""),
            str("0x10"),
            str("null\n")
        ]
    );
}

#[test]
fn numbers_out_of_range_are_errors_at_the_number() {
    for (doc, col) in [
        ("a: 9223372036854775808", 4),
        ("a: -9223372036854775809", 4),
        ("a: [0x8000000000000000]", 5),
        ("a: 1e400", 4),
        ("a: !!int '99999999999999999999'", 10),
    ] {
        let err = fails(doc);
        assert!(
            err.message.starts_with("number too large: `"),
            "{}",
            err.message
        );
        assert_eq!(err.pos(), at(1, col), "{doc}");
    }
}

#[test]
fn tags_select_the_core_types() {
    assert_eq!(
        items("[! 5, ! null, !!str 1, !!str true, !!int '2', !!int 0x10, !!float 3, !!float '.5']"),
        [
            str("5"),
            str("null"),
            str("1"),
            str("true"),
            Value::Int(2),
            Value::Int(16),
            Value::Float(3.0),
            Value::Float(0.5),
        ]
    );
    assert_eq!(
        items(
            "[!!bool 'True', !!null '', !!null ~, !<tag:yaml.org,2002:str> 5, !!seq [a], !!map {}]"
        ),
        [
            Value::Bool(true),
            Value::Null,
            Value::Null,
            str("5"),
            Value::Seq(vec![Node {
                pos: at(1, 73),
                value: str("a")
            }]),
            Value::Map(Vec::new()),
        ]
    );
    assert_eq!(
        ok("%TAG !y! tag:yaml.org,2002:\n---\n!y!int '7'").value,
        Value::Int(7)
    );
    assert_eq!(items("! [a]"), [str("a")]);
}

#[test]
fn a_core_tag_must_fit_its_node() {
    // Located at the node's content, after the tag.
    for (doc, message, pos) in [
        ("a: !!int abc", "tag `!!int` does not fit `abc`", at(1, 10)),
        (
            "a: !!float 0x10",
            "tag `!!float` does not fit `0x10`",
            at(1, 12),
        ),
        (
            "a: !!bool yes",
            "tag `!!bool` does not fit `yes`",
            at(1, 11),
        ),
        ("a: !!seq x", "tag `!!seq` does not fit `x`", at(1, 10)),
        ("a: !!str [x]", "tag `!!str` does not fit a list", at(1, 10)),
        (
            "a: !!seq {x: 1}",
            "tag `!!seq` does not fit a mapping",
            at(1, 10),
        ),
        (
            "a: !!int |\n  12345\n  6\n",
            "tag `!!int` does not fit `12345…`",
            at(2, 3),
        ),
    ] {
        let err = fails(doc);
        assert_eq!(err.message, message);
        assert_eq!(err.pos(), pos, "{doc}");
    }
}

#[test]
fn other_tags_are_errors_with_help() {
    for (doc, tag) in [
        ("a: !custom 5", "!custom"),
        ("a: !!binary aGk=", "!!binary"),
        ("a: !<tag:example.com:x> 5", "!<tag:example.com:x>"),
        ("a: !!merge {}", "!!merge"),
    ] {
        let err = fails(doc);
        assert_eq!(err.message, format!("unsupported tag `{tag}`"));
        assert!(
            err.help[0].starts_with("specs use plain YAML: remove the tag"),
            "{:?}",
            err.help
        );
    }
}

#[test]
fn an_alias_is_a_copy_located_at_the_alias() {
    let node = ok("a: &x [1, {k: v}]\nb: *x\n");
    let copy = &entries(&node)[1].1;
    let expected = ok("[1, {k: v}]");
    let mut relocated = expected.clone();
    anchors::relocate(&mut relocated, at(2, 4), &std::collections::HashSet::new());
    assert_eq!(copy, &relocated);
    // A redefined anchor: aliases name the latest definition.
    let node = ok("a: &x 1\nb: &x 2\nc: *x\n");
    assert_eq!(entries(&node)[2].1.value, Value::Int(2));
}

#[test]
fn recursive_and_unknown_aliases_are_errors() {
    let err = fails("a: &r {b: [*r]}");
    assert_eq!(err.message, "alias `*r` is inside the node it repeats");
    assert_eq!(err.pos(), at(1, 12));
    let err = fails("a: 1\nb: *nope\n");
    assert_eq!(err.message, "unknown anchor in alias `*nope`");
    assert_eq!(err.pos(), at(2, 4));
}

#[test]
fn merge_keys_add_missing_entries_after_the_own_ones() {
    let node = ok("b: &b {x: 1, y: 2}\nm:\n  y: 3\n  <<: [*b, {z: 4, x: 5}]\n  <<: {w: 6, z: 7}\n");
    let merged: Vec<_> = entries(&entries(&node)[1].1)
        .iter()
        .map(|(k, v)| (k.value.clone(), v.value.clone(), k.pos))
        .collect();
    assert_eq!(
        merged,
        [
            (str("y"), Value::Int(3), at(3, 3)),
            (str("x"), Value::Int(1), at(4, 8)),
            (str("z"), Value::Int(4), at(4, 12)),
            (str("w"), Value::Int(6), at(5, 7)),
        ]
    );
    // Keys compare by value; an alias in a merged mapping stays at the alias.
    let node = ok("n: &n [1]\nm: {1: a, <<: {0x1: b, '1': c, k: *n}}\n");
    let merged = entries(&entries(&node)[1].1);
    assert_eq!(merged.len(), 3);
    assert_eq!(
        (merged[1].0.value.clone(), merged[1].0.pos),
        (str("1"), at(2, 15))
    );
    assert_eq!(merged[2].1.pos, at(2, 35));
}

#[test]
fn a_merge_value_is_a_mapping_or_a_list_of_mappings() {
    for (doc, found, pos) in [
        ("m: {<<: 5}", "a number", at(1, 9)),
        ("m: {<<: [{a: 1}, x]}", "a string", at(1, 18)),
        ("m: {<<: ~}", "nothing (null)", at(1, 9)),
    ] {
        let err = fails(doc);
        assert_eq!(
            err.message,
            format!("merge key `<<` takes a mapping or a list of mappings, found {found}")
        );
        assert_eq!(err.pos(), pos, "{doc}");
    }
    // Quoted, `<<` is a plain key.
    assert_eq!(entries(&ok("'<<': 5")).len(), 1);
}

#[test]
fn one_document_per_file() {
    let err = fails("a: 1\n---\nb: 2\n");
    assert_eq!(err.message, "spec file holds a second YAML document");
    assert_eq!(err.pos(), at(2, 1));
    assert!(parse("---\na: 1\n...\n").is_ok());
}

#[test]
fn syntax_errors_are_the_parsers_at_its_position() {
    let err = fails("phases:\n  A: {x: 1\n  B: 2\n");
    assert_eq!(
        err.message,
        "invalid YAML: while parsing a flow mapping, did not find expected ',' or '}'"
    );
    assert_eq!(err.pos(), at(3, 4));
    assert_eq!(err.help, ["fix the YAML syntax at this position"]);
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
    let err = fails(&doc);
    assert!(start.elapsed().as_secs() < 5);
    assert!(
        err.message.contains("more than 100000 nodes"),
        "{}",
        err.message
    );
    // The alias whose copy passes the bound: the 8th of line 5.
    assert_eq!(err.pos(), at(5, 45));
}

#[test]
fn deep_nesting_is_rejected_without_overflow() {
    let doc = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let err = fails(&doc);
    assert!(
        err.message.contains("more than 16 levels of nesting"),
        "{}",
        err.message
    );
    let block = |levels| -> String {
        (0..levels)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect()
    };
    // 12 MB: over the size limit.
    assert!(parse(&block(5_000)).is_err());
    let err = fails(&block(1_000));
    assert!(
        err.message.contains("more than 16 levels of nesting"),
        "{}",
        err.message
    );
    // At the limit, and past it through an alias.
    let deepest = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(parse(&deepest).is_ok());
    let err = fails("a: &x [[[[[[[[[[[[[[1]]]]]]]]]]]]]]\nb: [[*x]]\n");
    assert!(err.message.contains("more than 16 levels of nesting"));
    assert_eq!(err.pos(), at(2, 6));
}

#[test]
fn anchors_aliases_and_copied_text_are_bounded() {
    let anchors: String = (0..=budget::MAX_ANCHORS)
        .map(|i| format!("- &a{i} x\n"))
        .collect();
    assert!(fails(&anchors).message.contains("more than 1000 anchors"));
    let aliases = format!("- &a x\n{}", "- *a\n".repeat(budget::MAX_ALIASES + 1));
    assert!(fails(&aliases).message.contains("more than 1000 aliases"));
    let text = format!("- &a '{}'\n{}", "x".repeat(900_000), "- *a\n".repeat(5));
    let err = fails(&text);
    assert!(err.message.contains("bytes of text"), "{}", err.message);
    assert_eq!(err.pos(), at(5, 3));
}

#[test]
fn huge_input_is_rejected() {
    let doc = "# padding\n".repeat(MAX_SPEC_BYTES / 10 + 1);
    let err = fails(&doc);
    assert!(err.message.contains("limit"), "{}", err.message);
}

#[test]
fn differs_leading_zeros_are_decimal_integers() {
    assert_eq!(
        items("[007, -007, 00]"),
        [Value::Int(7), Value::Int(-7), Value::Int(0)]
    );
    oracle_differs("[007]");
}

#[test]
fn differs_other_integer_spellings_are_strings() {
    for text in ["0b101", "-0x10", "+0x10", "-0o10", "1_000"] {
        assert_eq!(items(&format!("[{text}]")), [str(text)]);
        oracle_differs(&format!("[{text}]"));
    }
}

#[test]
fn differs_infinity_and_nan_are_floats() {
    assert_eq!(
        items("[.inf, -.inf]"),
        [Value::Float(f64::INFINITY), Value::Float(f64::NEG_INFINITY)]
    );
    assert_eq!(items("[!!float .inf]"), [Value::Float(f64::INFINITY)]);
    for doc in ["[.inf]", "[-.inf]", "[.nan]", "[!!float .inf]"] {
        oracle_differs(doc);
    }
}

#[test]
fn differs_integers_beyond_i64_are_errors() {
    for doc in [
        "[18446744073709551616]",
        "[-9223372036854775809]",
        "[0xFFFFFFFFFFFFFFFFF]",
    ] {
        assert!(fails(doc).message.starts_with("number too large"), "{doc}");
        oracle_differs(doc);
    }
}

#[test]
fn differs_other_tags_are_errors() {
    for doc in [
        "[!custom 5]",
        "[!!binary aGk=]",
        "[!!set {a}]",
        "%TAG !e! tag:e.com:\n---\n[!e!x 5]",
    ] {
        assert!(fails(doc).message.starts_with("unsupported tag"), "{doc}");
        oracle_differs(doc);
    }
}

#[test]
fn differs_a_core_tag_reads_the_exact_text() {
    for doc in [
        "[!!null x]",
        "[!!float -.nan]",
        "[!!bool ' true']",
        "[!!int ' 5']",
    ] {
        assert!(fails(doc).message.contains("does not fit"), "{doc}");
        oracle_differs(doc);
    }
}

#[test]
fn differs_merge_values_null_or_nested_are_errors() {
    for doc in [
        "m: {<<: ~}",
        "m: {<<: }",
        "m: {<<: [~, {a: 1}]}",
        "m: {<<: [[{a: 1}]]}",
    ] {
        assert!(
            fails(doc).message.starts_with("merge key `<<` takes"),
            "{doc}"
        );
        oracle_differs(doc);
    }
}

#[test]
fn differs_merge_keys_compare_values_not_spellings() {
    // `~` is `null`; `true` is not `'true'`.
    assert_eq!(
        entries(&entries(&ok("m: {null: 1, <<: {~: 2}}"))[0].1).len(),
        1
    );
    assert_eq!(
        entries(&entries(&ok("m: {true: 1, <<: {'true': 2}}"))[0].1).len(),
        2
    );
    oracle_differs("m: {null: 1, <<: {~: 2}}");
    oracle_differs("m: {true: 1, <<: {'true': 2}}");
}

#[test]
fn differs_overridden_merged_entries_are_read_too() {
    assert!(
        fails("m: {a: 1, <<: {a: 1e400}}")
            .message
            .starts_with("number too large")
    );
    assert!(
        fails("m: &m {a: 1, <<: {a: *m}}")
            .message
            .contains("inside the node")
    );
    oracle_differs("m: {a: 1, <<: {a: 1e400}}");
    oracle_differs("m: &m {a: 1, <<: {a: *m}}");
}

#[test]
fn differs_aliases_may_outnumber_anchors() {
    let doc = format!("- &a x\n{}", "- *a\n".repeat(150));
    assert!(parse(&doc).is_ok());
    oracle_differs(&doc);
}

#[test]
fn differs_error_texts_are_ours_but_for_syntax_errors() {
    let ours = fails("a: &r [*r]");
    let theirs = oracle::parse("a: &r [*r]").unwrap_err();
    assert_eq!(ours.pos(), theirs.pos());
    assert_ne!(ours.message, theirs.message);
    // A syntax error: granit-parser's message and position in both.
    let (ours, theirs) = (fails("a: [1\n"), oracle::parse("a: [1\n").unwrap_err());
    assert_eq!(ours.pos(), theirs.pos());
    let message = ours.message.strip_prefix("invalid YAML: ").unwrap();
    assert!(theirs.message.starts_with(message), "{}", theirs.message);
}
