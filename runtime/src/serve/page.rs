//! The `/machine` page: each machine drawn (the SVG of `Description::diagram`, every phase
//! labelled with its number of objects) above a table of the same counts. Static HTML, no
//! script; it reloads itself every few seconds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::machine::description::Description;
use crate::machine::diagram::DiagramFormat;

/// How often the page reloads itself, in seconds.
pub(crate) const REFRESH_SECONDS: u32 = 5;

/// One machine as the page shows it: its description and objects per phase label.
#[derive(Debug)]
pub(crate) struct Shown<'a> {
    /// The machine.
    pub(crate) machine: &'a Description,
    /// Objects per phase label (`""`: no phase yet; `Unknown`: a value the spec does not
    /// declare), as `Metrics::objects` gives them.
    pub(crate) counts: BTreeMap<String, usize>,
}

/// The page, one section per machine.
#[must_use]
pub(crate) fn page(machines: &[Shown<'_>]) -> String {
    let kinds: Vec<&str> = machines.iter().map(|m| m.machine.kind.as_str()).collect();
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>{} — kube-fsm</title>\n<style>{STYLE}</style></head><body>\n",
        escape(&kinds.join(", "))
    );
    for shown in machines {
        section(&mut html, shown);
    }
    if machines.is_empty() {
        html.push_str("<p>No machine is served here.</p>\n");
    }
    html.push_str("</body></html>\n");
    html
}

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em}\
figure{margin:0;overflow-x:auto}table{border-collapse:collapse;margin-top:1em}\
td,th{border:1px solid #ccc;padding:.3em .8em;text-align:left}td.n{text-align:right}\
.key span{margin-right:1.5em}";

fn section(html: &mut String, shown: &Shown<'_>) {
    let machine = shown.machine;
    let kind = escape(&machine.kind);
    let total: usize = shown.counts.values().sum();
    let _ = write!(
        html,
        "<section id=\"{kind}\"><h1>{kind}</h1>\n<p>{total} objects in this operator's cache, \
         by phase.</p>\n<figure>\n"
    );
    match machine.diagram(DiagramFormat::Svg, Some(&shown.counts)) {
        Ok(svg) => html.push_str(&svg),
        Err(err) => {
            let _ = write!(
                html,
                "<p>The diagram could not be drawn: {}</p>",
                escape(&err.to_string())
            );
        }
    }
    html.push_str(
        "</figure>\n<p class=\"key\"><span>black: the engine's edges</span>\
         <span>blue: manual (people's) edges</span><span>dashed orange: timeouts</span>\
         <span>grey: terminal phases</span></p>\n",
    );
    html.push_str("<table><tr><th>Phase</th><th>Objects</th><th>Meaning</th></tr>\n");
    let declared = machine
        .phases
        .iter()
        .map(|p| (p.name.as_str(), p.name.as_str(), p.description.as_str()));
    let others = [
        ("", "(no phase yet)", ""),
        (
            "Unknown",
            "(undeclared phase)",
            "a value the spec does not declare",
        ),
    ]
    .into_iter()
    .filter(|(label, _, _)| shown.counts.get(*label).is_some_and(|n| *n > 0));
    for (label, name, meaning) in declared.chain(others) {
        let n = shown.counts.get(label).copied().unwrap_or(0);
        let _ = writeln!(
            html,
            "<tr data-phase=\"{}\"><td>{}</td><td class=\"n\">{n}</td><td>{}</td></tr>",
            escape(label),
            escape(name),
            escape(meaning)
        );
    }
    html.push_str("</table></section>\n");
}

/// `text` safe in HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{Shown, page};
    use crate::machine::description::Description;
    use crate::test_machines::DatabasePhase;

    #[test]
    fn the_page_draws_the_machine_and_tables_its_counts() {
        let machine = Description::of(DatabasePhase::MACHINE);
        let counts = BTreeMap::from([
            ("Pending".to_owned(), 2),
            ("Running".to_owned(), 5),
            (String::new(), 1),
            ("Unknown".to_owned(), 0),
        ]);
        let html = page(&[Shown {
            machine: &machine,
            counts,
        }]);
        assert!(html.contains("<svg "), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("8 objects"), "{html}");
        assert!(
            html.contains("<tr data-phase=\"Running\"><td>Running</td><td class=\"n\">5</td>"),
            "{html}"
        );
        assert!(
            html.contains("<tr data-phase=\"Failed\"><td>Failed</td><td class=\"n\">0</td>"),
            "{html}"
        );
        assert!(html.contains("(no phase yet)"), "{html}");
        assert!(
            !html.contains("(undeclared phase)"),
            "an empty row of undeclared phases: {html}"
        );
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            super::escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
