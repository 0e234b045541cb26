//! Read stage: the located YAML tree ([`crate::read::yaml`]) → [`RawSpec`], reporting every unknown
//! key and wrongly typed value (with "did you mean") instead of stopping at the first one.

use crate::diag::{Diagnostic, Diagnostics, Loc, Pos, SourceFile};
use crate::read::yaml::{Node, Value};
use crate::spec::{
    Name, RawEvent, RawPhase, RawReady, RawRequirement, RawRetired, RawSpec, RawTimeout,
    RawTransition, Section,
};

mod children;
mod shape;

const PHASE_KEYS: &[&str] = &[
    "initial",
    "terminal",
    "description",
    "requeueAfter",
    "handlerTimeout",
    "timeout",
];
const TIMEOUT_KEYS: &[&str] = &["after", "to", "reason"];
const DESCRIBED_KEYS: &[&str] = &["description"];
const TRANSITION_KEYS: &[&str] = &["from", "to", "on", "when", "manual"];
const READY_KEYS: &[&str] = &["phases", "conditions"];

/// Parses a loaded spec file and reads it; `None` when the text is not YAML.
pub fn read_file(file: &SourceFile, diags: &mut Diagnostics) -> Option<RawSpec> {
    match crate::read::yaml::parse(&file.text) {
        Ok(node) => Some(read(&node, file, diags)),
        Err(diagnostic) => {
            diags.push(diagnostic);
            None
        }
    }
}

/// Reads a parsed spec document.
pub fn read(root: &Node, file: &SourceFile, diags: &mut Diagnostics) -> RawSpec {
    let mut reader = Reader {
        file,
        diags,
        complete: true,
    };
    let mut spec = reader.spec(root);
    spec.complete = reader.complete;
    spec
}

struct Reader<'a> {
    file: &'a SourceFile,
    diags: &'a mut Diagnostics,
    /// Cleared by the first mistake: what the reader could not read is missing from the spec.
    complete: bool,
}

impl Reader<'_> {
    fn report(&mut self, diagnostic: Diagnostic) {
        self.complete = false;
        self.diags.push(diagnostic);
    }

    fn spec(&mut self, root: &Node) -> RawSpec {
        let mut spec = RawSpec::empty(Loc::File(Pos::line_col(1, 1)));
        let Some(entries) = self.fields(root, &Section::names(), "the spec") else {
            return spec;
        };
        for (key, value) in entries {
            // `fields` kept only section names.
            let Some(section) = Section::named(&key.text) else {
                continue;
            };
            spec.sections.push((section, key.loc));
            match section {
                Section::Phases => {
                    for (name, body) in self.named_entries(value, "phases") {
                        spec.phases.push(self.phase(name, body));
                    }
                }
                Section::Conditions => {
                    for (name, body) in self.named_entries(value, "conditions") {
                        spec.conditions.push(self.condition(name, body));
                    }
                }
                Section::Children => {
                    for (name, body) in self.named_entries(value, "children") {
                        spec.children.push(self.child(name, body));
                    }
                }
                Section::Events => {
                    let mut events = Vec::new();
                    for (name, body) in self.named_entries(value, "events") {
                        let description = self.description_only(body, "an event");
                        events.push(RawEvent { name, description });
                    }
                    spec.events = Some(events);
                }
                Section::Transitions => {
                    if let Some(items) = self.seq(
                        value,
                        "`transitions`",
                        "a list of `{ from, to, on | when }` entries",
                    ) {
                        spec.transitions =
                            items.iter().filter_map(|t| self.transition(t)).collect();
                    }
                }
                Section::Finalizer => spec.finalizer = self.string(value, "`finalizer`"),
                Section::Ready => spec.ready = self.ready(key.loc, value),
                Section::Drift => spec.drift = self.string(value, "`drift`"),
                Section::Retired => spec.retired = self.retired(value),
            }
        }
        spec
    }

    fn phase(&mut self, name: Name, body: &Node) -> RawPhase {
        let mut phase = RawPhase {
            name,
            initial: None,
            terminal: None,
            description: None,
            requeue_after: None,
            handler_timeout: None,
            timeout: None,
        };
        if matches!(body.value, Value::Null) {
            return phase;
        }
        let Some(entries) = self.fields(body, PHASE_KEYS, "a phase") else {
            return phase;
        };
        for (key, value) in entries {
            match key.text.as_str() {
                "initial" => phase.initial = self.flag(value, "`initial`").then_some(key.loc),
                "terminal" => phase.terminal = self.flag(value, "`terminal`").then_some(key.loc),
                "description" => {
                    phase.description = self.string(value, "`description`").map(|t| t.text)
                }
                "requeueAfter" => phase.requeue_after = self.string(value, "`requeueAfter`"),
                "handlerTimeout" => phase.handler_timeout = self.string(value, "`handlerTimeout`"),
                "timeout" => phase.timeout = self.timeout(key.loc, value),
                _ => {}
            }
        }
        phase
    }

    fn timeout(&mut self, loc: Loc, node: &Node) -> Option<RawTimeout> {
        let entries = self.fields(node, TIMEOUT_KEYS, "`timeout`")?;
        let (mut after, mut to, mut reason) = (None, None, None);
        for (key, value) in entries {
            match key.text.as_str() {
                "after" => after = self.string(value, "`timeout.after`"),
                "to" => to = self.string(value, "`timeout.to`"),
                "reason" => reason = self.string(value, "`timeout.reason`"),
                _ => {}
            }
        }
        let missing: Vec<&str> = [("after", after.is_none()), ("to", to.is_none())]
            .into_iter()
            .filter_map(|(k, m)| m.then_some(k))
            .collect();
        if !missing.is_empty() {
            self.report(
                Diagnostic::new(
                    loc,
                    format!("`timeout` is missing `{}`", missing.join("` and `")),
                )
                .help("write `timeout: { after: 10m, to: Failed, reason: TimedOut }`"),
            );
            return None;
        }
        Some(RawTimeout {
            loc,
            after: after?,
            to: to?,
            reason,
        })
    }

    /// `ready: { phases: [Running], conditions: [ServiceAvailable] }`, or `ready: Cond`.
    fn ready(&mut self, loc: Loc, node: &Node) -> Option<RawReady> {
        if !matches!(node.value, Value::Map(_)) {
            let condition = self.string(node, "`ready`")?;
            return Some(RawReady {
                loc,
                phases: Vec::new(),
                conditions: vec![condition],
            });
        }
        let entries = self.fields(node, READY_KEYS, "`ready`")?;
        let mut ready = RawReady {
            loc,
            phases: Vec::new(),
            conditions: Vec::new(),
        };
        for (key, value) in entries {
            match key.text.as_str() {
                "phases" => ready.phases = self.names(value, "`ready.phases`"),
                "conditions" => ready.conditions = self.names(value, "`ready.conditions`"),
                _ => {}
            }
        }
        Some(ready)
    }

    /// `retired: { Provisioning: Creating }`: old phase name → declared phase. Repeated names
    /// are kept for validation to report by name.
    fn retired(&mut self, node: &Node) -> Vec<RawRetired> {
        let entries = match &node.value {
            Value::Map(entries) => entries,
            Value::Null => return Vec::new(),
            _ => {
                self.wrong_type(
                    node,
                    "`retired`",
                    "a mapping from old phase names to declared phases, e.g. `Provisioning: Creating`",
                );
                return Vec::new();
            }
        };
        entries
            .iter()
            .filter_map(|(key, value)| {
                let name = self.key(key)?;
                let to = self.string(value, &format!("`retired.{}`", name.text))?;
                Some(RawRetired { name, to })
            })
            .collect()
    }

    fn transition(&mut self, node: &Node) -> Option<RawTransition> {
        let entries = self.fields(node, TRANSITION_KEYS, "a transition")?;
        let loc = Loc::File(self.flow_extent(node.pos));
        let (mut from, mut to, mut on, mut when) = (Vec::new(), None, None, Vec::new());
        let mut manual = None;
        let (mut saw_from, mut saw_to) = (false, false);
        for (key, value) in entries {
            match key.text.as_str() {
                "from" => {
                    saw_from = true;
                    from = self.names(value, "`from`");
                }
                "to" => {
                    saw_to = true;
                    to = self.string(value, "`to`");
                }
                "on" => on = self.string(value, "`on`"),
                "manual" => manual = self.flag(value, "`manual`").then_some(key.loc),
                "when" => {
                    for text in self.names(value, "`when`") {
                        when.extend(self.requirements(&text));
                    }
                }
                _ => {}
            }
        }
        if !saw_from || !saw_to {
            let missing = if saw_from {
                "`to`"
            } else if saw_to {
                "`from`"
            } else {
                "`from` and `to`"
            };
            self.report(
                Diagnostic::new(loc, format!("transition is missing {missing}"))
                    .help("every transition needs `from` and `to`: `{ from: Pending, to: Running, on: Start }`"),
            );
            return None;
        }
        Some(RawTransition {
            loc,
            from,
            to: to?,
            on,
            when,
            manual,
        })
    }

    /// Splits `A && !B` into requirements, each located at its own text.
    fn requirements(&mut self, text: &Name) -> Vec<RawRequirement> {
        let Loc::File(base) = text.loc else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut offset = 0;
        for part in text.text.split("&&") {
            let lead = part.len() - part.trim_start().len();
            let trimmed = part.trim();
            let (status, name) = match trimmed.strip_prefix('!') {
                Some(rest) => (false, rest.trim_start()),
                None => (true, trimmed),
            };
            let col = base.col
                + text.text[..offset + lead].chars().count()
                + (trimmed.len() - name.len());
            let pos = Pos::line_col(base.line, col).with_len(name.chars().count());
            if name.is_empty() {
                self.report(
                    Diagnostic::new(pos, format!("empty requirement in `when: {}`", text.text))
                        .help("write condition types joined by `&&`, each optionally negated with `!`: `PodsReady && !Degraded`"),
                );
            } else {
                out.push(RawRequirement {
                    condition: Name {
                        text: name.to_owned(),
                        loc: Loc::File(pos),
                    },
                    status,
                });
            }
            offset += part.len() + 2;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(text: &str) -> (RawSpec, Vec<Diagnostic>) {
        let file = SourceFile::new("t.yaml", text);
        let node = crate::read::yaml::parse(text).expect("valid yaml");
        let mut diags = Diagnostics::default();
        let spec = read(&node, &file, &mut diags);
        (spec, diags.into_vec())
    }

    fn pos(loc: Loc) -> (usize, usize, usize) {
        match loc {
            Loc::File(p) => (p.line, p.col, p.len),
            Loc::Span(_) => panic!("span"),
        }
    }

    #[test]
    fn reads_the_reference_shape() {
        let (spec, errors) = read_str(
            "phases:\n  Pending: { initial: true }\n  Provisioning:\n    requeueAfter: 10s\n    handlerTimeout: 1m\n    timeout: { after: 10m, to: Failed }\n  Failed: { terminal: true }\nconditions:\n  PodsReady: {}\ntransitions:\n  - { from: Pending, to: Provisioning, on: Accept }\n  - { from: [Provisioning], to: Failed, when: \"PodsReady && !Other\" }\nfinalizer: x.io/f\n",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(spec.phases.len(), 3);
        assert!(spec.phases[0].initial.is_some());
        assert_eq!(spec.phases[1].requeue_after.as_ref().unwrap().text, "10s");
        assert_eq!(spec.phases[1].handler_timeout.as_ref().unwrap().text, "1m");
        assert_eq!(spec.phases[1].timeout.as_ref().unwrap().to.text, "Failed");
        assert_eq!(spec.transitions[0].on.as_ref().unwrap().text, "Accept");
        let when = &spec.transitions[1].when;
        assert_eq!(when.len(), 2);
        assert!(when[0].status && !when[1].status);
        assert_eq!(when[1].condition.text, "Other");
        assert_eq!(pos(when[1].condition.loc), (12, 62, 5));
        assert_eq!(pos(spec.transitions[0].to.loc), (11, 26, 12));
    }

    #[test]
    fn reports_every_unknown_key_and_type_error() {
        let (_, mut errors) = read_str(
            "phases:\n  Pending: { intial: true, terminal: yes }\ntransition: []\nfinalizer: [a]\n",
        );
        errors.sort_by_key(Diagnostic::pos);
        let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert!(messages[0].contains("unknown key `intial`"));
        assert!(errors[0].help.iter().any(|h| h.contains("`initial`")));
        assert!(messages[1].contains("`terminal` must be `true` or `false`"));
        assert!(messages[2].contains("unknown key `transition`"));
        assert!(errors[2].help.iter().any(|h| h.contains("`transitions`")));
        assert!(messages[3].contains("`finalizer` must be a string, found a list"));
    }

    #[test]
    fn reads_retired_names_and_reports_their_shape() {
        let (spec, errors) = read_str(
            "phases:\n  Creating: {}\nretired:\n  Provisioning: Creating\n  Old: { to: Creating }\n  Older:\n",
        );
        assert_eq!(spec.retired.len(), 1);
        assert_eq!(spec.retired[0].name.text, "Provisioning");
        assert_eq!(pos(spec.retired[0].name.loc), (4, 3, 12));
        assert_eq!(spec.retired[0].to.text, "Creating");
        assert_eq!(pos(spec.retired[0].to.loc), (4, 17, 8));
        let messages: Vec<_> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "`retired.Old` must be a string, found a mapping",
                "`retired.Older` must be a string, found nothing (null)"
            ]
        );

        let (spec, mut errors) =
            read_str("phases: { A: {} }\nretired: [Provisioning]\nretierd: {}\n");
        errors.sort_by_key(Diagnostic::pos);
        assert!(spec.retired.is_empty());
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0]
                .message
                .starts_with("`retired` must be a mapping from old phase names to declared phases")
        );
        assert_eq!(errors[1].message, "unknown key `retierd` in the spec");
        assert!(
            errors[1]
                .help
                .iter()
                .any(|h| h == "did you mean `retired`?")
        );

        let (spec, errors) = read_str("phases: { A: {} }\nretired:\n");
        assert!(spec.retired.is_empty() && errors.is_empty(), "{errors:?}");
    }
}
