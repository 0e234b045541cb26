//! Our reader against its oracle, the serde-saphyr path it replaced (`oracle.rs`), on the
//! documents inside the rules both share (`subset.rs`): the same tree, values and positions,
//! or both fail. Documents: every spec of the repository, hand-written ones that exercise each
//! rule (`tricky.rs`) and generated ones (`generated.rs`).

use std::path::{Path, PathBuf};

use super::{oracle, parse};

mod generated;
mod subset;
mod tricky;

/// How the readers compare on one document.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Outside the shared rules: not compared.
    Outside,
    Agree,
    Differ(String),
}

fn compare(doc: &str) -> Outcome {
    // Read every document, so that none makes the reader panic.
    let ours = parse(doc);
    if !subset::inside(doc) {
        return Outcome::Outside;
    }
    let theirs = oracle::parse(doc);
    let agree = match (&ours, &theirs) {
        // Debug text: NaN is equal to itself there.
        (Ok(ours), Ok(theirs)) => format!("{ours:?}") == format!("{theirs:?}"),
        (Err(_), Err(_)) => true,
        _ => false,
    };
    if agree {
        Outcome::Agree
    } else {
        Outcome::Differ(format!(
            "document {doc:?}\n--- ours\n{ours:#?}\n--- serde-saphyr\n{theirs:#?}"
        ))
    }
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn every_spec_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["specs", "tests/ui", "benches/specs", "examples"] {
        yaml_files(&root.join(dir), &mut files);
    }
    assert!(files.len() >= 30, "found only {files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        // A file that is not UTF-8 is rejected before it is parsed.
        if let Ok(text) = std::str::from_utf8(&bytes) {
            let outcome = compare(text);
            assert_eq!(outcome, Outcome::Agree, "{}", file.display());
        }
    }
}
