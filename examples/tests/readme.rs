//! The README's quick start is `examples/quickstart.rs` and `specs/task.yaml` of this crate,
//! word for word, and its `main` over the library's command line ends
//! `examples/quickstart_app.rs`: CI compiles the examples (`cargo clippy --all-targets`), so
//! the README's code compiles too.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// The first fenced block of `language` after `after` in the README's quick start.
fn block(readme: &str, after: &str, language: &str) -> String {
    let quick_start = &readme[readme.find("## Quick start").expect("a quick start")..];
    let from = &quick_start[quick_start.find(after).expect(after)..];
    let fence = format!("```{language}\n");
    let start = from.find(&fence).expect("a fenced block") + fence.len();
    let end = from[start..].find("```").expect("its end") + start;
    from[start..end].to_owned()
}

#[test]
fn the_readme_quick_start_is_the_example_that_ci_compiles() {
    let readme = read("../README.md");
    let example = read("examples/quickstart.rs");
    let code = &example[example.find("use ").expect("the example's code")..];
    assert_eq!(
        block(&readme, "`src/main.rs`:", "rust"),
        code,
        "README's quick start and examples/examples/quickstart.rs differ"
    );
    assert_eq!(
        block(&readme, "`specs/task.yaml`:", "yaml"),
        read("specs/task.yaml"),
        "README's spec and examples/specs/task.yaml differ"
    );
}

#[test]
fn the_readme_main_over_the_command_line_is_the_example_that_ci_compiles() {
    let readme = read("../README.md");
    let example = read("examples/quickstart_app.rs");
    let main = block(&readme, "With `kube-fsm-app`", "rust");
    assert!(
        example.ends_with(&main),
        "README's `main` over App and the end of examples/examples/quickstart_app.rs differ"
    );
}
