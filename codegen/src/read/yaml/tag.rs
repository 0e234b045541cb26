//! Tags. A spec needs none; we accept the non-specific `!` and the seven core tags, matched by
//! the tag they resolve to (so `!<tag:yaml.org,2002:str>` is `!!str`), and reject the rest.

use granit_parser::Tag;

use crate::diag::{Diagnostic, Pos};

/// A tag the reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// `!`: the scalar is a string.
    NonSpecific,
    Str,
    Int,
    Float,
    Bool,
    Null,
    Seq,
    Map,
}

impl Known {
    /// The tag as written in a spec.
    pub fn name(self) -> &'static str {
        match self {
            Known::NonSpecific => "!",
            Known::Str => "!!str",
            Known::Int => "!!int",
            Known::Float => "!!float",
            Known::Bool => "!!bool",
            Known::Null => "!!null",
            Known::Seq => "!!seq",
            Known::Map => "!!map",
        }
    }
}

/// What a node's tag means, or why it is not read.
pub fn known(tag: Option<&Tag>, pos: Pos) -> Result<Option<Known>, Diagnostic> {
    let Some(tag) = tag else {
        return Ok(None);
    };
    if tag.handle().is_empty() && tag.suffix() == "!" {
        return Ok(Some(Known::NonSpecific));
    }
    let known = match tag.core_suffix() {
        Some("str") => Known::Str,
        Some("int") => Known::Int,
        Some("float") => Known::Float,
        Some("bool") => Known::Bool,
        Some("null") => Known::Null,
        Some("seq") => Known::Seq,
        Some("map") => Known::Map,
        _ => {
            return Err(
                Diagnostic::new(pos, format!("unsupported tag `{}`", tag.original())).help(
                    "specs use plain YAML: remove the tag (only `!`, `!!str`, `!!int`, \
                     `!!float`, `!!bool`, `!!null`, `!!seq` and `!!map` are read)",
                ),
            );
        }
    };
    Ok(Some(known))
}

/// A container's tag: none, `!`, or the one for its kind.
pub fn container(tag: Option<&Tag>, map: bool, pos: Pos) -> Result<(), Diagnostic> {
    let expected = if map { Known::Map } else { Known::Seq };
    match known(tag, pos)? {
        None | Some(Known::NonSpecific) => Ok(()),
        Some(tag) if tag == expected => Ok(()),
        Some(tag) => Err(misfit(tag, if map { "a mapping" } else { "a list" }, pos)),
    }
}

/// A core tag on a node it does not fit; `what` names the node ("a list", "`abc`").
pub fn misfit(tag: Known, what: &str, pos: Pos) -> Diagnostic {
    Diagnostic::new(pos, format!("tag `{}` does not fit {what}", tag.name()))
        .help("remove the tag: specs use plain YAML, whose values need no tags")
}
