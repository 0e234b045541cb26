//! Scalars: the YAML 1.2.2 core schema (§10.3.2). A plain scalar's value is found by its
//! form; a quoted or block scalar is a string; a tag selects the type, and the text must have
//! its form.

use granit_parser::ScalarStyle;

use super::Value;
use super::tag::{Known, misfit};
use crate::diag::{Diagnostic, Pos};

/// The value of a scalar written `text` in `style`, tagged `tag`.
pub fn value(
    text: String,
    style: ScalarStyle,
    tag: Option<Known>,
    pos: Pos,
) -> Result<Value, Diagnostic> {
    let Some(tag) = tag else {
        return match style {
            ScalarStyle::Plain => plain(text, pos),
            _ => Ok(Value::Str(text)),
        };
    };
    let typed = match tag {
        Known::NonSpecific | Known::Str => return Ok(Value::Str(text)),
        Known::Null => is_null(&text).then_some(Value::Null),
        Known::Bool => boolean(&text).map(Value::Bool),
        Known::Int => integer(&text, pos)?.map(Value::Int),
        Known::Float => float(&text, pos)?.map(Value::Float),
        Known::Seq | Known::Map => None,
    };
    typed.ok_or_else(|| misfit(tag, &format!("`{}`", shown(&text)), pos))
}

/// A scalar's text as a message quotes it: its first line, cut at 40 characters.
fn shown(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if line.len() < text.trim_end().len() => format!("{line}…"),
        None => line.to_owned(),
    }
}

/// An untagged plain scalar: null, boolean, integer, float, or else a string.
fn plain(text: String, pos: Pos) -> Result<Value, Diagnostic> {
    if is_null(&text) {
        return Ok(Value::Null);
    }
    if let Some(b) = boolean(&text) {
        return Ok(Value::Bool(b));
    }
    // Numbers start with a digit, a sign or a dot; most scalars of a spec are names.
    if !text.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '+' | '-' | '.')) {
        return Ok(Value::Str(text));
    }
    if let Some(i) = integer(&text, pos)? {
        return Ok(Value::Int(i));
    }
    if let Some(f) = float(&text, pos)? {
        return Ok(Value::Float(f));
    }
    Ok(Value::Str(text))
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

fn boolean(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

fn all_digits(text: &str, radix: u32) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_digit(radix))
}

/// `[-+]?[0-9]+`, `0o[0-7]+` or `0x[0-9a-fA-F]+`: `None` for another form, an error outside
/// i64.
fn integer(text: &str, pos: Pos) -> Result<Option<i64>, Diagnostic> {
    let (digits, radix) = if let Some(hex) = text.strip_prefix("0x") {
        (hex, 16)
    } else if let Some(octal) = text.strip_prefix("0o") {
        (octal, 8)
    } else {
        (text, 10)
    };
    let unsigned = if radix == 10 {
        digits.strip_prefix(['-', '+']).unwrap_or(digits)
    } else {
        digits
    };
    if !all_digits(unsigned, radix) {
        return Ok(None);
    }
    // The form is valid, so the only error left is overflow.
    i64::from_str_radix(digits, radix)
        .map(Some)
        .map_err(|_| too_large(text, "the 64-bit integer range", pos))
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, `[-+]?.inf` or `.nan` (three
/// spellings each): `None` for another form, an error beyond f64.
fn float(text: &str, pos: Pos) -> Result<Option<f64>, Diagnostic> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") {
        let negative = text.starts_with('-');
        return Ok(Some(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }));
    }
    if matches!(text, ".nan" | ".NaN" | ".NAN") {
        return Ok(Some(f64::NAN));
    }
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, Some(exponent)),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            (whole.is_empty() || all_digits(whole, 10))
                && (fraction.is_empty() || all_digits(fraction, 10))
                && !(whole.is_empty() && fraction.is_empty())
        }
        None => all_digits(mantissa, 10),
    };
    let exponent_ok =
        exponent.is_none_or(|e| all_digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
    if !mantissa_ok || !exponent_ok {
        return Ok(None);
    }
    // Rust reads every text of this form; only the size can be wrong.
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Some(f)),
        _ => Err(too_large(text, "the 64-bit float range", pos)),
    }
}

fn too_large(text: &str, range: &str, pos: Pos) -> Diagnostic {
    Diagnostic::new(
        pos,
        format!("number too large: `{text}` is outside {range}"),
    )
    .help("write a smaller number, or quote it to keep it as text")
}
