//! The tree builder: pulls granit-parser's events and turns each node into a [`Node`] located
//! where its event starts. It recurses only into a container, after the depth check, so the
//! recursion is at most [`super::MAX_DEPTH`] deep whatever the input.

use std::collections::HashSet;

use granit_parser::{
    ErrorKind, Event, Marker, Parser, ScalarStyle, ScanError, Span, StrInput, Tag,
};

use super::anchors::{Anchors, Target, relocate};
use super::budget::{self, Budget};
use super::{Node, Value, merge, scalar, tag};
use crate::diag::{Diagnostic, Pos};

type Result<T> = std::result::Result<T, Diagnostic>;

/// The one document of `text`; an empty document, or a null one, is a null at 1:1.
pub fn document(text: &str) -> Result<Node> {
    let mut reader = Reader::new(text);
    loop {
        match reader.next()? {
            (Event::StreamStart, _) => {}
            (Event::DocumentStart(..), _) => break,
            (Event::StreamEnd, _) => return Ok(null_root()),
            (event, span) => return Err(unexpected(&event, span)),
        }
    }
    let (event, span) = reader.next()?;
    let root = reader.node(event, span, 0)?;
    loop {
        match reader.next()? {
            (Event::DocumentEnd, _) => {}
            (Event::StreamEnd, _) => break,
            (Event::DocumentStart(..), span) => return Err(second_document(span)),
            (event, span) => return Err(unexpected(&event, span)),
        }
    }
    Ok(if root.value == Value::Null {
        null_root()
    } else {
        root
    })
}

fn null_root() -> Node {
    Node {
        pos: Pos::line_col(1, 1),
        value: Value::Null,
    }
}

struct Reader<'a> {
    text: &'a str,
    events: Parser<'a, StrInput<'a>>,
    budget: Budget,
    anchors: Anchors,
    /// Where the aliases read so far are: their copies are located there.
    copies: HashSet<Pos>,
    /// Where the last event started, for an input that ends too soon.
    last: Pos,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Self {
        let mut options = granit_parser::Options::default();
        // An alias to no anchor comes to us, named, instead of as a bare parser error.
        options.emit_unresolved_aliases = true;
        // Comments are no nodes (a build may enable the parser's `comments` feature).
        options.emit_comments = false;
        Reader {
            text,
            events: Parser::new_from_str_with_options(text, options),
            budget: Budget::default(),
            anchors: Anchors::default(),
            copies: HashSet::new(),
            last: Pos::line_col(1, 1),
        }
    }

    /// The next node or structure event; presentation metadata (comments, anchor names) is
    /// skipped, whatever the parser's options and features.
    fn next(&mut self) -> Result<(Event<'a>, Span)> {
        loop {
            return match self.events.next() {
                Some(Ok((event, _))) if !event.is_node() && !is_structure(&event) => continue,
                Some(Ok((event, span))) => {
                    self.last = pos(span.start);
                    Ok((event, span))
                }
                Some(Err(err)) => Err(syntax(&err)),
                None => Err(
                    Diagnostic::new(self.last, "invalid YAML: unexpected end of input")
                        .help("fix the YAML syntax at this position"),
                ),
            };
        }
    }

    /// The node that `event` starts, inside `depth` containers.
    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Result<Node> {
        let pos = pos(span.start);
        let (anchor, value) = match event {
            Event::Scalar(text, style, anchor, tag) => {
                let tag = tag::known(tag.as_deref(), pos)?;
                let value = scalar::value(text.into_owned(), style, tag, pos)?;
                let bytes = match &value {
                    Value::Str(text) => text.len(),
                    _ => 0,
                };
                self.budget.node(bytes, pos)?;
                self.anchor(anchor, pos)?;
                (anchor, value)
            }
            Event::SequenceStart(_, anchor, tag) => {
                let items = self.container(false, tag.as_deref(), anchor, pos, depth)?;
                (anchor, items)
            }
            Event::MappingStart(_, anchor, tag) => {
                let entries = self.container(true, tag.as_deref(), anchor, pos, depth)?;
                (anchor, entries)
            }
            Event::Alias(id) => return self.alias(id, span, depth),
            Event::UnresolvedAlias(name) => return Err(unknown_anchor(&name, pos)),
            event => return Err(unexpected(&event, span)),
        };
        let node = Node { pos, value };
        if anchor != 0 {
            self.anchors.close(anchor, &node);
        }
        Ok(node)
    }

    /// A mapping or a sequence starting at `pos`, inside `depth` containers: checked, then read.
    fn container(
        &mut self,
        map: bool,
        tag: Option<&Tag>,
        anchor: usize,
        pos: Pos,
        depth: usize,
    ) -> Result<Value> {
        tag::container(tag, map, pos)?;
        budget::depth(depth + 1, pos)?;
        self.budget.node(0, pos)?;
        self.anchor(anchor, pos)?;
        if map {
            self.map(depth + 1)
        } else {
            self.seq(depth + 1)
        }
    }

    /// A node anchored `id` (0: none) starts at `pos`.
    fn anchor(&mut self, id: usize, pos: Pos) -> Result<()> {
        if id != 0 {
            self.budget.anchor(pos)?;
            self.anchors.open(id);
        }
        Ok(())
    }

    fn seq(&mut self, depth: usize) -> Result<Value> {
        let mut items = Vec::new();
        loop {
            match self.next()? {
                (Event::SequenceEnd, _) => return Ok(Value::Seq(items)),
                (event, span) => items.push(self.node(event, span, depth)?),
            }
        }
    }

    fn map(&mut self, depth: usize) -> Result<Value> {
        let mut entries = Vec::new();
        let mut merges = Vec::new();
        loop {
            let (event, span) = self.next()?;
            if matches!(event, Event::MappingEnd) {
                break;
            }
            let merge =
                matches!(&event, Event::Scalar(text, ScalarStyle::Plain, _, None) if text == "<<");
            let key = self.node(event, span, depth)?;
            let (event, span) = self.next()?;
            let value = self.node(event, span, depth)?;
            if merge {
                merges.push(value);
            } else {
                entries.push((key, value));
            }
        }
        merge::apply(&mut entries, merges, &self.copies)?;
        Ok(Value::Map(entries))
    }

    /// A copy of the anchored node, located at the alias, after its cost is charged.
    fn alias(&mut self, id: usize, span: Span, depth: usize) -> Result<Node> {
        let pos = pos(span.start);
        self.budget.alias(pos)?;
        let name = span.slice(self.text).unwrap_or("*").trim_start_matches('*');
        match self.anchors.target(id) {
            Target::Finished(node, cost) => {
                budget::depth(depth + cost.height, pos)?;
                self.budget.charge(cost, pos)?;
                let mut copy = node.clone();
                relocate(&mut copy, pos, &HashSet::new());
                self.copies.insert(pos);
                Ok(copy)
            }
            Target::Open => Err(Diagnostic::new(
                pos,
                format!("alias `*{name}` is inside the node it repeats"),
            )
            .help("an alias repeats a finished node: move it out of the anchored node")),
            Target::Unknown => Err(unknown_anchor(name, pos)),
        }
    }
}

fn is_structure(event: &Event<'_>) -> bool {
    matches!(
        event,
        Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(..)
            | Event::DocumentEnd
            | Event::SequenceEnd
            | Event::MappingEnd
    )
}

/// A 1-based position from the parser's marker (its columns count from 0).
fn pos(marker: Marker) -> Pos {
    Pos::line_col(marker.line(), marker.col() + 1)
}

fn syntax(err: &ScanError) -> Diagnostic {
    let pos = pos(*err.marker());
    // The parser scans up to a line ahead of the events it hands out, so a line of 100 000
    // `[` stops there, on its own nesting limit (255, over ours): the same breach.
    if matches!(err.kind(), ErrorKind::RecursionLimitExceeded) {
        return budget::too_deep(pos);
    }
    Diagnostic::new(pos, format!("invalid YAML: {}", err.info()))
        .help("fix the YAML syntax at this position")
}

fn unknown_anchor(name: &str, pos: Pos) -> Diagnostic {
    Diagnostic::new(pos, format!("unknown anchor in alias `*{name}`")).help(format!(
        "an alias repeats a node written before it: put `&{name}` on that node"
    ))
}

fn second_document(span: Span) -> Diagnostic {
    Diagnostic::new(pos(span.start), "spec file holds a second YAML document")
        .help("a spec is one document: remove this one, or move it to a file of its own")
}

/// An event the parser's grammar does not put here; kept as an error, never a panic.
fn unexpected(event: &Event<'_>, span: Span) -> Diagnostic {
    Diagnostic::new(
        pos(span.start),
        format!("invalid YAML: unexpected {event:?}"),
    )
    .help("fix the YAML syntax at this position")
}
