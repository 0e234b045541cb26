//! Diagnostics: every error the macro reports, with where it points and how to fix it.
//!
//! Errors are collected, never thrown: each stage pushes into [`Diagnostics`] and goes on, so a
//! build shows every mistake of a spec at once. A position is either a place in the YAML file
//! (rendered as `--> file:line:col` plus the quoted line, because a proc-macro cannot point a
//! span into a non-Rust file on stable) or a Rust token span (the inline DSL).

use std::fmt::Write as _;

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;

/// A 1-based position in a spec file, with the length of the text to underline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
    pub len: usize,
}

impl Pos {
    pub fn line_col(line: usize, col: usize) -> Self {
        Pos { line, col, len: 1 }
    }
    pub fn with_len(self, len: usize) -> Self {
        Pos {
            len: len.max(1),
            ..self
        }
    }
}

/// Where a model item came from.
#[derive(Clone, Copy, Debug)]
pub enum Loc {
    /// A position in the YAML spec file.
    File(Pos),
    /// A token of the inline DSL.
    Span(Span),
}

impl From<Pos> for Loc {
    fn from(pos: Pos) -> Self {
        Loc::File(pos)
    }
}

impl From<Span> for Loc {
    fn from(span: Span) -> Self {
        Loc::Span(span)
    }
}

/// One error: what is wrong, where, and how to fix it.
#[derive(Clone, Debug)]
pub struct Diagnostic {
    pub loc: Loc,
    pub message: String,
    /// Context (`= note:`), shown before the fixes.
    pub notes: Vec<String>,
    pub help: Vec<String>,
}

impl Diagnostic {
    pub fn new(loc: impl Into<Loc>, message: impl Into<String>) -> Self {
        Diagnostic {
            loc: loc.into(),
            message: message.into(),
            notes: Vec::new(),
            help: Vec::new(),
        }
    }

    /// The position in the spec file (DSL tokens sort first, at 0:0).
    pub fn pos(&self) -> Pos {
        match self.loc {
            Loc::File(pos) => pos,
            Loc::Span(_) => Pos::line_col(0, 0),
        }
    }

    #[must_use]
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// Adds "did you mean `x`?" when a candidate is close to `wrong`.
    #[must_use]
    pub fn suggest<'a>(self, wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Self {
        match closest(wrong, candidates) {
            Some(best) => self.help(format!("did you mean `{best}`?")),
            None => self,
        }
    }

    /// Renders the message the compiler shows. `file` is the spec file for YAML positions.
    pub fn render(&self, file: Option<&SourceFile>) -> String {
        let mut out = self.message.clone();
        if let (Loc::File(pos), Some(file)) = (self.loc, file) {
            let number = pos.line.to_string();
            let pad = " ".repeat(number.len());
            let _ = write!(out, "\n{pad}--> {}:{}:{}", file.display, pos.line, pos.col);
            if let Some(text) = file.line(pos.line) {
                let caret_pad = " ".repeat(pos.col.saturating_sub(1));
                let carets = "^".repeat(pos.len);
                let _ = write!(
                    out,
                    "\n{pad} |\n{number} | {text}\n{pad} | {caret_pad}{carets}"
                );
            }
        }
        for note in &self.notes {
            let _ = write!(out, "\n = note: {note}");
        }
        for help in &self.help {
            let _ = write!(out, "\n = help: {help}");
        }
        out
    }
}

/// A syntax error of syn's, at its span, without help. (The errors syn's parser makes carry one
/// message each.)
impl From<syn::Error> for Diagnostic {
    fn from(err: syn::Error) -> Self {
        Diagnostic::new(err.span(), err.to_string())
    }
}

/// The spec file being compiled: its name as shown in messages and its text.
#[derive(Debug)]
pub struct SourceFile {
    pub display: String,
    pub text: String,
    /// Byte offset of each line's start: every located name looks its line up, so this must
    /// not rescan the text (a 150-phase spec makes ~1 500 lookups).
    line_starts: Vec<usize>,
}

impl SourceFile {
    pub fn new(display: impl Into<String>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        SourceFile {
            display: display.into(),
            text,
            line_starts,
        }
    }

    /// The text of 1-based `line`, without its line ending.
    pub fn line(&self, line: usize) -> Option<&str> {
        let start = *self.line_starts.get(line.checked_sub(1)?)?;
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |next| next - 1);
        self.text.get(start..end).map(str::trim_end)
    }
}

/// The error accumulator shared by all stages.
#[derive(Debug, Default)]
pub struct Diagnostics {
    errors: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.errors.push(diagnostic);
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn into_vec(self) -> Vec<Diagnostic> {
        self.errors
    }

    /// One `compile_error!` per diagnostic, in file order. YAML positions are reported at
    /// `spec_span` (the `spec = "..."` literal); DSL positions at their own tokens.
    pub fn to_compile_errors(
        mut errors: Vec<Diagnostic>,
        file: Option<&SourceFile>,
        spec_span: Span,
    ) -> TokenStream {
        errors.sort_by_key(Diagnostic::pos);
        errors
            .iter()
            .map(|d| {
                let span = match d.loc {
                    Loc::File(_) => spec_span,
                    Loc::Span(span) => span,
                };
                let message = d.render(file);
                quote_spanned!(span=> ::core::compile_error! { #message })
            })
            .collect()
    }
}

/// The candidate nearest to `wrong` if it is close enough to be a likely typo.
pub fn closest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wrong_lower = wrong.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != wrong)
        .map(|c| (distance(&wrong_lower, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (wrong.len().max(c.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_file_position_with_quoted_line_and_caret() {
        let file = SourceFile::new("specs/db.yaml", "phases:\n  Pending: {}\n  Runing: {}\n");
        assert_eq!(file.line(1), Some("phases:"));
        assert_eq!(file.line(4), Some(""));
        assert_eq!(file.line(5), None);
        assert_eq!(file.line(0), None);
        let d = Diagnostic::new(Pos::line_col(3, 3).with_len(6), "unknown phase `Runing`")
            .help("did you mean `Running`?");
        assert_eq!(
            d.render(Some(&file)),
            "unknown phase `Runing`\n --> specs/db.yaml:3:3\n  |\n3 |   Runing: {}\n  |   ^^^^^^\n = help: did you mean `Running`?"
        );
    }

    #[test]
    fn suggestions() {
        let names = ["Pending", "Provisioning", "Running"];
        assert_eq!(closest("Provisionig", names), Some("Provisioning"));
        assert_eq!(closest("runing", names), Some("Running"));
        assert_eq!(closest("Xyz", names), None);
    }
}
