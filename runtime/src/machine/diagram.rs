//! A machine's diagram in each form a tool shows it — Mermaid, DOT or an SVG picture — with,
//! optionally, the number of objects in each phase in its label (`kubectl fsm diagram --live`,
//! the examples' `/machine` page).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::machine::description::Description;

/// The form of a diagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagramFormat {
    /// Mermaid `stateDiagram-v2` text.
    Mermaid,
    /// Graphviz DOT text.
    Dot,
    /// An SVG picture (laid out in pure Rust; no Graphviz needed): manual edges blue, timeouts
    /// dashed and orange, terminal phases filled.
    Svg,
}

impl DiagramFormat {
    /// Every form, as `FromStr` names them.
    pub const NAMES: [&'static str; 3] = ["mermaid", "dot", "svg"];
}

impl FromStr for DiagramFormat {
    type Err = DiagramError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mermaid" => Ok(Self::Mermaid),
            "dot" => Ok(Self::Dot),
            "svg" => Ok(Self::Svg),
            other => Err(DiagramError(format!(
                "no diagram format {other:?}: expected one of {}",
                Self::NAMES.join(", ")
            ))),
        }
    }
}

impl fmt::Display for DiagramFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Mermaid => "mermaid",
            Self::Dot => "dot",
            Self::Svg => "svg",
        })
    }
}

/// A diagram that could not be made: an unknown format, or a picture the macro could not draw
/// (or a description read from JSON, which carries none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DiagramError(String);

impl Description {
    /// The machine's diagram in `format`; with `counts` (objects per phase name), each phase's
    /// label carries its number of objects (0 for a phase missing from `counts`).
    ///
    /// # Errors
    ///
    /// Only for [`DiagramFormat::Svg`], when the machine has no picture: too large for the
    /// macro to lay out, or a description read from JSON (draw its DOT text instead).
    pub fn diagram(
        &self,
        format: DiagramFormat,
        counts: Option<&BTreeMap<String, usize>>,
    ) -> Result<String, DiagramError> {
        match format {
            DiagramFormat::Mermaid => Ok(self.counted(&self.mermaid, false, counts)),
            DiagramFormat::Dot => Ok(self.counted(&self.dot, true, counts)),
            DiagramFormat::Svg => {
                let picture = self.picture.map_err(|why| DiagramError(why.to_owned()))?;
                Ok(match counts {
                    None => picture.plain.to_owned(),
                    Some(counts) => picture.counted(|i| {
                        let phase = self.phases.get(i).map(|p| p.name.as_str());
                        phase
                            .and_then(|name| counts.get(name))
                            .copied()
                            .unwrap_or(0)
                    }),
                })
            }
        }
    }

    /// `text` with a label per phase naming its count: a DOT node statement before the closing
    /// brace (DOT merges a node's attributes), or a Mermaid state declaration after the header.
    fn counted(&self, text: &str, dot: bool, counts: Option<&BTreeMap<String, usize>>) -> String {
        let Some(counts) = counts else {
            return text.to_owned();
        };
        let labels = self.phases.iter().map(|p| {
            let n = counts.get(&p.name).copied().unwrap_or(0);
            if dot {
                format!("    {} [label=\"{}\\n{n}\"];", p.name, p.name)
            } else {
                format!("    state \"{} ({n})\" as {}", p.name, p.name)
            }
        });
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let at = if dot {
            lines
                .iter()
                .rposition(|l| l.trim() == "}")
                .unwrap_or(lines.len())
        } else {
            1.min(lines.len())
        };
        lines.splice(at..at, labels);
        let mut out = lines.join("\n");
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::DiagramFormat;
    use crate::machine::description::Description;
    use crate::test_machines::DatabasePhase;

    fn description() -> Description {
        Description::of(DatabasePhase::MACHINE)
    }

    #[test]
    fn every_format_parses_from_its_name_and_others_are_refused() {
        for name in DiagramFormat::NAMES {
            assert_eq!(name.parse::<DiagramFormat>().unwrap().to_string(), name);
        }
        let err = "png".parse::<DiagramFormat>().unwrap_err().to_string();
        assert!(err.contains("mermaid, dot, svg"), "{err}");
    }

    #[test]
    fn without_counts_the_texts_are_the_machines() {
        let d = description();
        assert_eq!(d.diagram(DiagramFormat::Mermaid, None).unwrap(), d.mermaid);
        assert_eq!(d.diagram(DiagramFormat::Dot, None).unwrap(), d.dot);
    }

    #[test]
    fn counts_label_every_phase_in_each_format() {
        let d = description();
        let first = d.phases[0].name.clone();
        let counts = BTreeMap::from([(first.clone(), 7)]);
        let mermaid = d.diagram(DiagramFormat::Mermaid, Some(&counts)).unwrap();
        let dot = d.diagram(DiagramFormat::Dot, Some(&counts)).unwrap();
        let svg = d.diagram(DiagramFormat::Svg, Some(&counts)).unwrap();
        assert!(
            mermaid.contains(&format!("state \"{first} (7)\" as {first}")),
            "{mermaid}"
        );
        assert!(
            dot.contains(&format!("{first} [label=\"{first}\\n7\"];")),
            "{dot}"
        );
        assert!(dot.trim_end().ends_with('}'), "{dot}");
        assert!(svg.starts_with("<svg "), "{svg}");
        for p in &d.phases {
            let n = if p.name == first { 7 } else { 0 };
            assert!(
                mermaid.contains(&format!("\"{} ({n})\"", p.name)),
                "{mermaid}"
            );
            assert!(
                svg.contains(&format!(">{}<", p.name)),
                "{} in {svg}",
                p.name
            );
        }
        assert!(svg.contains(">7<"), "{svg}");
        assert!(!svg.contains(">#0"), "a slot left unfilled: {svg}");
    }

    #[test]
    fn the_picture_is_the_macros_and_a_description_from_json_has_none() {
        let d = description();
        let plain = d.diagram(DiagramFormat::Svg, None).unwrap();
        assert_eq!(plain, d.picture.unwrap().plain);
        assert!(
            plain.starts_with("<svg ") && !plain.contains(">0<"),
            "{plain}"
        );
        let read: Description = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        let err = read
            .diagram(DiagramFormat::Svg, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("draw its DOT text"), "{err}");
    }
}
