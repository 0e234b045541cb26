//! The machine as a picture: its DOT text (see `lower::render::dot`) laid out and drawn as SVG
//! by layout-rs, in pure Rust (no Graphviz binary). The macro puts the picture in the phase
//! enum's rustdoc; tools draw it again with live counts in the phase labels.

use std::panic::{AssertUnwindSafe, catch_unwind};

use layout::backends::svg::SVGWriter;
use layout::gv::{DotParser, GraphBuilder};

/// The largest machine drawn: the layout's cost grows much faster than the graph (a quarter
/// of a second at 30 phases and 60 edges in a debug build, seconds beyond), and the macro
/// draws at every build. Larger machines keep their DOT text, for Graphviz.
pub const MAX_PHASES: usize = 30;
/// The most edges (timeouts included) of a machine drawn; see [`MAX_PHASES`].
pub const MAX_EDGES: usize = 64;

/// Draws the DOT text `dot` as a self-contained SVG document: no script, no external
/// reference, no blank line (so it can be inlined in Markdown or HTML as is).
///
/// # Errors
///
/// The DOT text does not parse, the graph is larger than [`MAX_PHASES`] or [`MAX_EDGES`], or
/// the layout failed on it; the message says which.
pub fn svg(dot: &str) -> Result<String, String> {
    let graph = DotParser::new(dot)
        .process()
        .map_err(|e| format!("the diagram's DOT text does not parse: {e}"))?;
    // The layout crate asserts its invariants; a graph it cannot lay out must not take the
    // compiler or an operator down with it.
    catch_unwind(AssertUnwindSafe(|| {
        let mut builder = GraphBuilder::new();
        builder.visit_graph(&graph);
        let mut visual = builder.get();
        let nodes = visual.num_nodes();
        let edges: usize = visual.iter_nodes().map(|n| visual.succ(n).len()).sum();
        if nodes > MAX_PHASES || edges > MAX_EDGES {
            return Err(format!(
                "the machine is too large to draw ({nodes} phases, {edges} edges; pictures go up \
                 to {MAX_PHASES} phases and {MAX_EDGES} edges): draw its DOT text with Graphviz"
            ));
        }
        let mut writer = SVGWriter::new();
        visual.do_it(false, false, false, &mut writer);
        Ok(compact(&writer.finalize()))
    }))
    .unwrap_or_else(|_| Err("the diagram could not be laid out".to_owned()))
}

/// The machine drawn twice from its DOT text, as the operator's binary carries it (so that it
/// links no layout engine).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pictures {
    /// The machine as it is.
    pub plain: String,
    /// The machine with a second line under each phase name for its number of objects, cut
    /// where those numbers go: `pieces[0]`, the count of phase `slots[0]`, `pieces[1]`, …, and
    /// the last piece (one more piece than slots).
    pub pieces: Vec<String>,
    /// The index (in the spec's order) of the phase whose count goes after each piece but the
    /// last.
    pub slots: Vec<usize>,
}

/// The machine's [`Pictures`] from its DOT text and its phases in the spec's order, each as
/// its name and its DOT label (the count goes on a line below the label).
///
/// # Errors
///
/// As [`svg`].
pub fn pictures(dot: &str, phases: &[(&str, String)]) -> Result<Pictures, String> {
    let plain = svg(dot)?;
    let at = dot.rfind('}').unwrap_or(dot.len());
    let mut counted = dot[..at].to_owned();
    for (i, (name, label)) in phases.iter().enumerate() {
        counted.push_str(&format!(
            "    {name} [label=\"{label}\\n{}\"];\n",
            count_slot(i)
        ));
    }
    counted.push_str(&dot[at..]);
    let (pieces, slots) = cut(&svg(&counted)?);
    Ok(Pictures {
        plain,
        pieces,
        slots,
    })
}

/// The text standing for the count of the `index`-th phase while the counted picture is laid
/// out: six characters wide, as wide as a count below a million.
fn count_slot(index: usize) -> String {
    format!("#{index:05}")
}

/// `svg` cut at each count slot (a text element holding only `#NNNNN`): the pieces around
/// them, and the phase index each slot stood for.
fn cut(svg: &str) -> (Vec<String>, Vec<usize>) {
    let (mut pieces, mut slots, mut piece) = (Vec::new(), Vec::new(), String::new());
    let mut rest = svg;
    while let Some(at) = rest.find(">#") {
        let (before, after) = rest.split_at(at + 1);
        piece.push_str(before);
        let digits = after.get(1..6).filter(|digits| {
            digits.bytes().all(|b| b.is_ascii_digit()) && after[6..].starts_with('<')
        });
        match digits.and_then(|digits| digits.parse().ok()) {
            Some(index) => {
                pieces.push(std::mem::take(&mut piece));
                slots.push(index);
                rest = &after[6..];
            }
            // `>#` in other text: part of the piece.
            None => {
                piece.push('#');
                rest = &after[1..];
            }
        }
    }
    piece.push_str(rest);
    pieces.push(piece);
    (pieces, slots)
}

/// The SVG without its XML declaration, scaled down to a narrower page (its own size is the
/// most it takes), each line trimmed and blank lines dropped: the same drawing, and a single
/// HTML block for Markdown.
fn compact(svg: &str) -> String {
    let Some(start) = svg.find("<svg ") else {
        return svg.to_owned();
    };
    let body = &svg[start + "<svg ".len()..];
    let mut out = String::with_capacity(body.len() + 64);
    out.push_str("<svg style=\"max-width: 100%; height: auto\" ");
    let mut lines = body.lines().map(str::trim).filter(|l| !l.is_empty());
    while let Some(line) = lines.next() {
        out.push_str(line);
        out.push('\n');
        if line.ends_with("<style>") {
            // The writer keeps its font classes in a hash map: sorted, the same graph is the
            // same text at every build.
            let mut classes: Vec<&str> = lines.by_ref().take_while(|l| *l != "</style>").collect();
            classes.sort_unstable();
            for class in classes {
                out.push_str(class);
                out.push('\n');
            }
            out.push_str("</style>\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::svg;

    const DOT: &str = r##"digraph Demo {
    rankdir=LR;
    node [shape=box, style=rounded];
    Pending [penwidth=2];
    Ready [label="Ready\n3"];
    Gone [peripheries=2, style="rounded,filled", fillcolor="#e6e6e6"];
    Pending -> Ready [label="when A && !B"];
    Ready -> Ready [label="Resync"];
    Ready -> Pending [label="manual", style=dotted, color="#1f6feb"];
    Pending -> Gone [label="after 10m", style=dashed, color="#d4760a"];
}
"##;

    #[test]
    fn draws_every_phase_edge_label_and_style() {
        let svg = svg(DOT).unwrap();
        assert!(svg.starts_with("<svg "), "{svg}");
        for text in [
            ">Pending<",
            ">Ready<",
            ">3<",
            ">Gone<",
            "when A &amp;&amp; !B",
            ">Resync<",
        ] {
            assert!(svg.contains(text), "{text} missing from {svg}");
        }
        assert!(
            svg.contains("stroke-dasharray"),
            "the timeout edge is dashed"
        );
        assert!(svg.contains("#d4760aff"), "the timeout edge is orange");
        assert!(svg.contains("#1f6febff"), "the manual edge is blue");
        assert!(svg.contains("#e6e6e6ff"), "the terminal phase is filled");
        assert!(!svg.contains("<script"));
        assert!(!svg.lines().any(|l| l.trim().is_empty()));
    }

    #[test]
    fn the_same_graph_is_the_same_text() {
        // Two font sizes (the graph's label and the rest): the writer's classes come from a
        // hash map, in a different order from one process to the next.
        let dot = DOT.replace("rankdir=LR;", "rankdir=LR; label=\"Demo\"; fontsize=15;");
        let first = svg(&dot).unwrap();
        for _ in 0..20 {
            assert_eq!(svg(&dot).unwrap(), first);
        }
        let style = first
            .split("<style>\n")
            .nth(1)
            .unwrap()
            .split("</style>")
            .next()
            .unwrap();
        let mut sorted: Vec<&str> = style.lines().collect();
        sorted.sort_unstable();
        assert_eq!(style.lines().collect::<Vec<_>>(), sorted, "{style}");
    }

    #[test]
    fn the_counted_picture_has_a_slot_under_each_phase() {
        let phases = ["Pending", "Ready", "Gone"].map(|p| (p, p.to_owned()));
        let pictures = super::pictures(DOT, &phases).unwrap();
        assert_eq!(pictures.plain, svg(DOT).unwrap());
        let mut slots = pictures.slots.clone();
        slots.sort_unstable();
        assert_eq!(slots, [0, 1, 2], "one slot per phase");
        assert_eq!(pictures.pieces.len(), 4);
        assert!(pictures.pieces.iter().all(|p| !p.contains(">#0000")));
        assert!(pictures.pieces[..3].iter().all(|p| p.ends_with('>')));
        assert!(pictures.pieces[1..].iter().all(|p| p.starts_with('<')));
        assert!(!pictures.plain.contains(">#0000"), "{}", pictures.plain);
    }

    #[test]
    fn a_machine_too_large_to_lay_out_quickly_is_refused_at_once() {
        let mut dot = String::from("digraph Big {\n");
        for i in 0..=super::MAX_PHASES {
            dot.push_str(&format!("    P{i} -> P{};\n", i + 1));
        }
        dot.push('}');
        let err = svg(&dot).unwrap_err();
        assert!(err.contains("too large to draw"), "{err}");
    }

    #[test]
    fn a_broken_text_is_an_error_not_a_panic() {
        let err = svg("digraph { a -> ; }").unwrap_err();
        assert!(err.contains("does not parse"), "{err}");
    }
}
