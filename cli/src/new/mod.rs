//! `kube-fsm new`: a new operator crate that builds and passes its own tests as written — a
//! spec and its lock, the resource and its handlers, their unit tests, a cluster test, the
//! binary over the library's `App`, a Dockerfile, a CI workflow and a README.

mod files;
mod names;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use names::Names;

/// Writes the operator `names` describe into `dir` (a new or empty directory).
pub fn new(names: &Names, dir: &Path) -> ExitCode {
    let mut problems = names.problems();
    if let Some(problem) = occupied(dir) {
        problems.push(problem);
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("error: {problem}");
        }
        eprintln!("kube-fsm new: nothing written");
        return ExitCode::FAILURE;
    }
    match write(names, dir) {
        Ok(written) => {
            for path in &written {
                println!("created {}", dir.join(path).display());
            }
            println!("\nNext (the README says more):\n  cd {}", dir.display());
            println!(
                "  cargo test                               # the handlers, then the operator on a real API server"
            );
            println!(
                "  cargo run -- crd | kubectl apply -f -    # then `cargo run -- run` against your cluster"
            );
            println!(
                "  docker build -t {}:dev .   # then `cargo run -- manifests --image ...`",
                names.name
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Why `dir` cannot take a new crate: it is a file, or a directory with something in it.
fn occupied(dir: &Path) -> Option<String> {
    let display = dir.display();
    if dir.is_file() {
        return Some(format!("`{display}` is a file"));
    }
    let mut entries = std::fs::read_dir(dir).ok()?;
    entries.next().is_some().then(|| {
        format!("`{display}` is not empty: kube-fsm new overwrites nothing; choose a new directory (--path)")
    })
}

/// Writes the files, then the spec's lock; the paths written, relative to `dir`.
fn write(names: &Names, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for (path, text) in files::files(names) {
        let target = dir.join(&path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|err| format!("cannot create `{}`: {err}", parent.display()))?;
        }
        std::fs::write(&target, text)
            .map_err(|err| format!("cannot write `{}`: {err}", target.display()))?;
        written.push(path);
    }
    let spec = files::spec_path(names);
    let text = std::fs::read_to_string(dir.join(&spec)).map_err(|err| err.to_string())?;
    let lock = kube_fsm_codegen::lock(&spec.display().to_string(), &text).map_err(|errors| {
        format!(
            "the scaffold's spec does not compile: {}",
            errors.join("\n")
        )
    })?;
    let lock_path = kube_fsm_codegen::lock_path(&spec);
    std::fs::write(dir.join(&lock_path), lock)
        .map_err(|err| format!("cannot write `{}`: {err}", lock_path.display()))?;
    written.push(lock_path);
    format(dir, &written);
    Ok(written)
}

/// Formats the Rust files as `cargo fmt` would (the names change the line lengths); without
/// rustfmt they stay as written, which compiles the same.
fn format(dir: &Path, written: &[PathBuf]) {
    let rust: Vec<PathBuf> = written
        .iter()
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| dir.join(path))
        .collect();
    let formatted = std::process::Command::new("rustfmt")
        .args(["--edition", "2024"])
        .args(&rust)
        .status();
    if !formatted.is_ok_and(|status| status.success()) {
        eprintln!("note: rustfmt did not run; `cargo fmt` formats the new files");
    }
}
