//! Load stage: the `spec = "..."` path → the spec file's text ([`SourceFile`]), read relative
//! to the user crate's `CARGO_MANIFEST_DIR`; and the spec's lock beside it, when there is one.

use std::path::{Path, PathBuf};

use crate::diag::{Diagnostic, Diagnostics, Loc, SourceFile};

/// A spec file read from disk.
#[derive(Debug)]
pub struct Loaded {
    pub file: SourceFile,
    /// The path it was read from, for `include_bytes!`: cargo rebuilds when the file changes.
    pub path: PathBuf,
}

/// Resolves and reads the spec file relative to the user crate's `CARGO_MANIFEST_DIR`.
pub fn load(lit: &syn::LitStr, diags: &mut Diagnostics) -> Option<Loaded> {
    let written = lit.value();
    let at = Loc::Span(lit.span());
    if written.trim().is_empty() {
        diags.push(
            Diagnostic::new(at, "the spec path is empty")
                .help("write `spec = \"specs/machine.yaml\"`, relative to the crate's Cargo.toml"),
        );
        return None;
    }
    if Path::new(&written).is_absolute() {
        diags.push(
            Diagnostic::new(at, format!("the spec path `{written}` is absolute"))
                .help("write the path relative to the crate's Cargo.toml (CARGO_MANIFEST_DIR), e.g. `specs/machine.yaml`, so the crate builds on other machines"),
        );
        return None;
    }
    let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR") else {
        diags.push(
            Diagnostic::new(at, "CARGO_MANIFEST_DIR is not set").help("build the crate with cargo"),
        );
        return None;
    };
    let path = PathBuf::from(manifest_dir).join(&written);
    let text = match std::fs::read(&path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                diags.push(
                    Diagnostic::new(at, format!("the spec file `{written}` is not UTF-8 text"))
                        .help("save the spec as UTF-8"),
                );
                return None;
            }
        },
        Err(err) => {
            let help = if err.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "no file at `{}`; spec paths are relative to the crate's Cargo.toml (a crate in `examples/` names `../specs/x.yaml`)",
                    path.display()
                )
            } else {
                format!("reading `{}` failed: {err}", path.display())
            };
            diags.push(
                Diagnostic::new(at, format!("cannot read the spec file `{written}`")).help(help),
            );
            return None;
        }
    };
    let display = display_path(&path, &written);
    Some(Loaded {
        file: SourceFile::new(display, text),
        path,
    })
}

/// Where the lock of the spec at `spec` is: `specs/database.yaml` → `specs/database.lock.yaml`.
pub fn lock_path(spec: &Path) -> PathBuf {
    let stem = spec
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    spec.with_file_name(format!("{stem}.lock.yaml"))
}

/// The lock of the loaded `spec`, when it has one; a lock that cannot be read is an error at
/// `at` (the spec's path).
pub fn lock(spec: &Loaded, at: Loc, diags: &mut Diagnostics) -> Option<Loaded> {
    let path = lock_path(&spec.path);
    let display = lock_path(Path::new(&spec.file.display))
        .to_string_lossy()
        .into_owned();
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(Loaded {
            file: SourceFile::new(display, text),
            path,
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            diags.push(
                Diagnostic::new(
                    at,
                    format!("cannot read the spec's lock `{display}`: {err}"),
                )
                .help("the lock must be UTF-8 text; rewrite it with `kube-fsm lock SPEC`"),
            );
            None
        }
    }
}

/// The path to print in messages: relative to the working directory cargo runs rustc in (the
/// workspace root) when possible, so terminals and editors can open `file:line:col`.
fn display_path(path: &Path, written: &str) -> String {
    let normalized = normalize(path);
    std::env::current_dir()
        .ok()
        .and_then(|cwd| {
            normalized
                .strip_prefix(normalize(&cwd))
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| written.to_owned())
}

/// Removes `.` and `..` components without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
