//! Property tests of the spec front-end: any text — the reference specs mutated at random —
//! goes through read → validate → lower → emit without a panic, and every error it reports
//! points at a real line of the file.

use proc_macro2::{Ident, Span};
use proptest::prelude::*;

use crate::diag::{Diagnostics, Loc, SourceFile};
use crate::lower::{self, Target};
use crate::read::{from_yaml, yaml};
use crate::{emit, validate};

mod children;

const SEEDS: [&str; 3] = [
    include_str!("../../specs/database.yaml"),
    include_str!("../../specs/pipeline.yaml"),
    include_str!("../../specs/migration.yaml"),
];

/// Text fragments that spec mistakes are made of.
const FRAGMENTS: [&str; 31] = [
    ":",
    "-",
    "{",
    "}",
    "[",
    "]",
    "\n",
    "  ",
    "\t",
    "Pending",
    "Runing",
    "timeout: ",
    "to: Nowhere",
    "when: ",
    "!",
    " && ",
    "on: Go",
    "initial: true",
    "terminal: true",
    "retired: { A: B }",
    "after: 0s",
    "&anchor",
    "*anchor",
    "é",
    "children: ",
    "after: [db]",
    "from: db.ready",
    "from: ghost.Complete",
    "phases: [Nowhere]",
    "onLeave: ",
    "type: ",
];

/// One edit of the text.
#[derive(Clone, Debug)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, fragment: usize },
    DuplicateLine { line: usize },
    SwapLines { a: usize, b: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..40usize).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), 0..FRAGMENTS.len())
            .prop_map(|(at, fragment)| Edit::Insert { at, fragment }),
        any::<usize>().prop_map(|line| Edit::DuplicateLine { line }),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines { a, b }),
    ]
}

/// The nearest char boundary at or before `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, edit: &Edit) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    match *edit {
        Edit::Delete { at, len } => {
            let start = boundary(text, at);
            let end = boundary(text, (start + len).min(text.len()));
            let end = end.max(start);
            format!("{}{}", &text[..start], &text[end..])
        }
        Edit::Insert { at, fragment } => {
            let at = boundary(text, at);
            format!("{}{}{}", &text[..at], FRAGMENTS[fragment], &text[at..])
        }
        Edit::DuplicateLine { line } => {
            let line = line % lines.len();
            lines.insert(line, lines[line]);
            lines.join("\n")
        }
        Edit::SwapLines { a, b } => {
            let (a, b) = (a % lines.len(), b % lines.len());
            lines.swap(a, b);
            lines.join("\n")
        }
    }
}

fn check(text: &str) -> Result<(), TestCaseError> {
    let file = SourceFile::new("specs/mutated.yaml", text);
    let lines = text.split('\n').count();
    let mut diags = Diagnostics::default();
    match yaml::parse(&file.text) {
        Ok(node) => {
            let raw = from_yaml::read(&node, &file, &mut diags);
            let machine = validate::validate(&raw, &mut diags);
            if diags.is_empty() {
                let kind = Ident::new("Mutated", Span::call_site());
                let target = Target {
                    kind: &kind,
                    status_field: None,
                    source: "mutated",
                    edge_lines: &[],
                };
                let _ = emit::emit(&lower::lower(&machine, &target));
            }
        }
        Err(diagnostic) => diags.push(diagnostic),
    }
    for diagnostic in diags.into_vec() {
        let Loc::File(pos) = diagnostic.loc else {
            return Err(TestCaseError::fail(format!(
                "a YAML error without a file position: {}",
                diagnostic.message
            )));
        };
        prop_assert!(
            pos.line >= 1 && pos.line <= lines + 1 && pos.col >= 1,
            "{} at {}:{} (the file has {lines} lines)",
            diagnostic.message,
            pos.line,
            pos.col
        );
        let rendered = diagnostic.render(Some(&file));
        prop_assert!(rendered.contains("--> specs/mutated.yaml:"), "{rendered}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_048, ..ProptestConfig::default() })]

    #[test]
    fn mutated_specs_never_panic_and_every_error_is_located(
        seed in 0..SEEDS.len(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let text = edits.iter().fold(SEEDS[seed].to_owned(), |text, e| apply(&text, e));
        check(&text)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text)?;
    }
}
