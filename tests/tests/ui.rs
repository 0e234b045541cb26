//! Compile-time guarantees: `ui/pass` must compile, `ui/fail` must fail with the reviewed
//! messages in the `.stderr` snapshots (every spec-error class, every illegal transition).

use std::path::{Path, PathBuf};

/// trybuild compiles the fixtures in its own crate under the target directory, so
/// `CARGO_MANIFEST_DIR` points there; link `ui/` into it so `spec = "ui/..."` resolves.
fn link_fixture_specs() {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let project: PathBuf = target.join("tests/trybuild").join(env!("CARGO_PKG_NAME"));
    std::fs::create_dir_all(&project).expect("create trybuild project dir");
    let link = project.join("ui");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
    if std::fs::read_link(&link).ok().as_deref() != Some(source.as_path()) {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&source, &link).expect("link ui/ into the trybuild project");
    }
}

#[test]
fn ui() {
    link_fixture_specs();
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    cases.compile_fail("ui/fail/*.rs");
}
