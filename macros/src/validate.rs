//! Stage 2: [`RawSpec`] → [`Machine`], checking every rule of the spec language and reporting
//! all violations together. Graph checks (reachability, dead ends, shadowed rules) run only
//! when names resolved cleanly, so one typo does not cascade into a page of follow-on errors.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::diag::{Diagnostic, Diagnostics, Loc};
use crate::model::{Condition, Drift, Edge, Event, Machine, Phase, Retired, Timeout, Trigger};
use crate::names;
use crate::spec::{Name, RawSpec, RawTransition};

/// Checks a spec and lowers it to a [`Machine`]. With errors, the machine is a best effort made
/// of the parts that were valid (it is emitted as a skeleton beside the errors, so user code
/// that names valid phases does not add a cascade of follow-on errors).
pub fn validate(spec: &RawSpec, diags: &mut Diagnostics) -> Machine {
    // A spec that did not even read cleanly (unknown keys, wrong types) is incomplete: graph
    // checks on it would only echo the first error.
    let read_cleanly = diags.is_empty();
    let mut v = Validator {
        spec,
        diags,
        phase_index: BTreeMap::new(),
        condition_index: BTreeMap::new(),
        raw_of: Vec::new(),
    };
    let phases = v.phases();
    let conditions = v.conditions();
    let (mut events, declared_events) = v.declared_events();
    let resolved_before = v.diags.len();
    let edges = v.edges(&phases, &mut events, declared_events);
    let names_resolved = read_cleanly && v.diags.len() == resolved_before;
    let timeouts = v.timeouts(&phases, &edges);
    let finalizer = v.finalizer();
    let ready = v.ready();
    let drift = v.drift();
    let retired = v.retired();
    let errors_before_initial = v.diags.len();
    let initial = v.initial();
    // With two initial phases, reachability from "the" initial phase is meaningless.
    let one_initial = v.diags.len() == errors_before_initial;
    if names_resolved && one_initial {
        v.graph(&phases, &edges, initial);
    }
    let phases = phases
        .into_iter()
        .zip(timeouts)
        .map(|(p, timeout)| Phase { timeout, ..p })
        .collect();
    Machine {
        phases,
        conditions,
        events,
        edges: edges.into_iter().map(|(edge, _)| edge).collect(),
        initial,
        finalizer,
        ready,
        drift,
        retired,
    }
}

struct Validator<'a> {
    spec: &'a RawSpec,
    diags: &'a mut Diagnostics,
    phase_index: BTreeMap<String, usize>,
    condition_index: BTreeMap<String, usize>,
    /// For each model phase, the index of the raw phase it came from.
    raw_of: Vec<usize>,
}

/// How to refer to an earlier location in a message.
fn earlier(loc: Loc) -> String {
    match loc {
        Loc::File(pos) => format!("on line {}", pos.line),
        Loc::Span(_) => "earlier in this attribute".to_owned(),
    }
}

impl<'a> Validator<'a> {
    fn phases(&mut self) -> Vec<Phase> {
        if self.spec.phases.is_empty() {
            self.diags.push(
                Diagnostic::new(self.spec.loc, "the spec declares no phases")
                    .help("a machine needs at least one phase: `phases: { Pending: { initial: true }, Done: { terminal: true } }`"),
            );
        }
        let mut methods: BTreeMap<String, &Name> = BTreeMap::new();
        let mut out = Vec::new();
        for (raw_index, raw) in self.spec.phases.iter().enumerate() {
            let name = &raw.name;
            if let Some(problem) = names::camel_ident_problem(&name.text) {
                self.diags.push(
                    Diagnostic::new(name.loc, format!("invalid phase name: {problem}")).help(
                        format!(
                            "phases become Rust enum variants; rename it, e.g. `{}`",
                            suggest_camel(&name.text)
                        ),
                    ),
                );
                continue;
            }
            if let Some(&first) = self.phase_index.get(&name.text) {
                let first_loc = self.spec.phases[self.raw_of[first]].name.loc;
                self.diags.push(
                    Diagnostic::new(name.loc, format!("phase `{}` is declared twice", name.text))
                        .help(format!(
                            "it is first declared {}; remove or rename one",
                            earlier(first_loc)
                        )),
                );
                continue;
            }
            let method = names::to_snake(&name.text);
            if let Some(other) = methods.get(&method) {
                self.diags.push(
                    Diagnostic::new(
                        name.loc,
                        format!(
                            "phases `{}` and `{}` both map to the handler method `on_{method}`",
                            other.text, name.text
                        ),
                    )
                    .help("rename one of them so their snake_case spellings differ"),
                );
                continue;
            }
            methods.insert(method, name);
            self.phase_index.insert(name.text.clone(), out.len());
            self.raw_of.push(raw_index);
            let requeue_after_ms = raw
                .requeue_after
                .as_ref()
                .and_then(|d| self.duration(d, "requeueAfter"));
            if raw.terminal.is_some() {
                if let Some(requeue) = &raw.requeue_after {
                    self.diags.push(
                        Diagnostic::new(requeue.loc, format!("terminal phase `{}` has `requeueAfter`", name.text))
                            .help("a terminal phase is never reconciled again; remove `requeueAfter` or make the phase non-terminal"),
                    );
                }
                if let Some(timeout) = &raw.timeout {
                    self.diags.push(
                        Diagnostic::new(timeout.loc, format!("terminal phase `{}` has a `timeout`", name.text))
                            .help("nothing leaves a terminal phase; remove the timeout or make the phase non-terminal"),
                    );
                }
            }
            out.push(Phase {
                name: name.text.clone(),
                description: raw.description.clone(),
                terminal: raw.terminal.is_some(),
                requeue_after_ms,
                timeout: None,
            });
        }
        out
    }

    fn initial(&mut self) -> usize {
        let marked: Vec<usize> = (0..self.spec.phases.len())
            .filter(|&i| self.spec.phases[i].initial.is_some())
            .collect();
        if let [first, rest @ ..] = marked.as_slice() {
            for &extra in rest {
                let loc = self.spec.phases[extra]
                    .initial
                    .unwrap_or(self.spec.phases[extra].name.loc);
                self.diags.push(
                    Diagnostic::new(
                        loc,
                        format!(
                            "more than one initial phase: `{}` and `{}`",
                            self.spec.phases[*first].name.text, self.spec.phases[extra].name.text
                        ),
                    )
                    .help("exactly one phase is initial; remove `initial` from all but one"),
                );
            }
            let name = &self.spec.phases[*first].name.text;
            return self.phase_index.get(name).copied().unwrap_or(0);
        }
        0
    }

    fn conditions(&mut self) -> Vec<Condition> {
        let mut variants: BTreeMap<String, String> = BTreeMap::new();
        let mut out = Vec::new();
        for raw in &self.spec.conditions {
            let name = &raw.name;
            if let Some(problem) = names::condition_type_problem(&name.text) {
                self.diags.push(
                    Diagnostic::new(name.loc, format!("invalid condition type: {problem}"))
                        .help("condition types are metav1.Condition types such as `Ready` or `example.com/PodsReady`"),
                );
                continue;
            }
            if let Some(&first) = self.condition_index.get(&name.text) {
                let first_loc = self.spec.conditions[first].name.loc;
                self.diags.push(
                    Diagnostic::new(
                        name.loc,
                        format!("condition `{}` is declared twice", name.text),
                    )
                    .help(format!(
                        "it is first declared {}; remove one",
                        earlier(first_loc)
                    )),
                );
                continue;
            }
            let variant = names::condition_variant(&name.text);
            if let Some(other) = variants.get(&variant) {
                self.diags.push(
                    Diagnostic::new(name.loc, format!(
                        "conditions `{other}` and `{}` both become the Rust variant `{variant}`",
                        name.text
                    ))
                    .help("rename one of them"),
                );
                continue;
            }
            variants.insert(variant.clone(), name.text.clone());
            self.condition_index.insert(name.text.clone(), out.len());
            out.push(Condition {
                type_name: name.text.clone(),
                variant,
                description: raw.description.clone(),
            });
        }
        out
    }

    /// Events from the optional `events:` section; returns whether the section exists.
    fn declared_events(&mut self) -> (Vec<Event>, bool) {
        let Some(raw) = &self.spec.events else {
            return (Vec::new(), false);
        };
        let mut out: Vec<Event> = Vec::new();
        let mut first_locs: Vec<Loc> = Vec::new();
        for event in raw {
            if let Some(problem) = names::camel_ident_problem(&event.name.text) {
                self.diags.push(
                    Diagnostic::new(event.name.loc, format!("invalid event name: {problem}")).help(
                        format!(
                            "events become Rust enum variants; rename it, e.g. `{}`",
                            suggest_camel(&event.name.text)
                        ),
                    ),
                );
            } else if let Some(i) = out.iter().position(|e| e.name == event.name.text) {
                self.diags.push(
                    Diagnostic::new(
                        event.name.loc,
                        format!("event `{}` is declared twice", event.name.text),
                    )
                    .help(format!(
                        "it is first declared {}; remove one",
                        earlier(first_locs[i])
                    )),
                );
            } else {
                first_locs.push(event.name.loc);
                out.push(Event {
                    name: event.name.text.clone(),
                    description: event.description.clone(),
                });
            }
        }
        (out, true)
    }

    fn phase(&mut self, name: &Name, role: &str) -> Option<usize> {
        if let Some(&i) = self.phase_index.get(&name.text) {
            return Some(i);
        }
        let unknown = self.unknown_phase(name, role, None);
        self.diags.push(unknown);
        None
    }

    /// "unknown phase `X` in {role}", with "did you mean", the `hint` if any, and the declared
    /// phases.
    fn unknown_phase(&self, name: &Name, role: &str, hint: Option<String>) -> Diagnostic {
        let known: Vec<&str> = self.phase_index.keys().map(String::as_str).collect();
        let mut d = Diagnostic::new(name.loc, format!("unknown phase `{}` in {role}", name.text))
            .suggest(&name.text, known.iter().copied());
        if let Some(hint) = hint {
            d = d.help(hint);
        }
        d.help(format!(
            "declared phases: {}",
            list_in_order(
                &self
                    .spec
                    .phases
                    .iter()
                    .map(|p| p.name.text.as_str())
                    .collect::<Vec<_>>()
            )
        ))
    }

    fn condition(&mut self, name: &Name, role: &str) -> Option<usize> {
        if let Some(&i) = self.condition_index.get(&name.text) {
            return Some(i);
        }
        let declared: Vec<&str> = self
            .spec
            .conditions
            .iter()
            .map(|c| c.name.text.as_str())
            .collect();
        let mut d = Diagnostic::new(
            name.loc,
            format!("unknown condition `{}` {role}", name.text),
        )
        .suggest(&name.text, declared.iter().copied());
        d = if declared.is_empty() {
            d.help(format!(
                "declare it under `conditions:` (`{}: {{}}`)",
                name.text
            ))
        } else {
            d.help(format!(
                "declared conditions: {}; or declare `{}` under `conditions:`",
                list_in_order(&declared),
                name.text
            ))
        };
        self.diags.push(d);
        None
    }

    fn event(&mut self, name: &Name, events: &mut Vec<Event>, declared: bool) -> Option<usize> {
        if let Some(i) = events.iter().position(|e| e.name == name.text) {
            return Some(i);
        }
        if declared {
            let known: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
            self.diags.push(
                Diagnostic::new(name.loc, format!("unknown event `{}` in `on`", name.text))
                    .suggest(&name.text, known.iter().copied())
                    .help(format!(
                        "declared events: {}; or add `{}` under `events:`",
                        list_in_order(&known),
                        name.text
                    )),
            );
            return None;
        }
        if let Some(problem) = names::camel_ident_problem(&name.text) {
            self.diags.push(
                Diagnostic::new(name.loc, format!("invalid event name: {problem}")).help(format!(
                    "events become Rust enum variants; rename it, e.g. `{}`",
                    suggest_camel(&name.text)
                )),
            );
            return None;
        }
        events.push(Event {
            name: name.text.clone(),
            description: None,
        });
        Some(events.len() - 1)
    }

    /// Resolves transitions into edges, each paired with the transition it came from.
    fn edges(
        &mut self,
        phases: &[Phase],
        events: &mut Vec<Event>,
        declared: bool,
    ) -> Vec<(Edge, &'a RawTransition)> {
        let spec: &'a RawSpec = self.spec;
        let mut edges: Vec<(Edge, &'a RawTransition)> = Vec::new();
        for t in &spec.transitions {
            if t.from.is_empty() {
                self.diags.push(
                    Diagnostic::new(t.loc, "transition has an empty `from` list")
                        .help("name at least one source phase: `from: [Provisioning, Running]`"),
                );
            }
            let froms: Vec<Option<usize>> =
                t.from.iter().map(|f| self.phase(f, "`from`")).collect();
            let to = self.phase(&t.to, "`to`");
            let trigger = self.trigger(t, events, declared);
            let (Some(to), Some(trigger)) = (to, trigger) else {
                continue;
            };
            for (from_name, from) in t.from.iter().zip(froms) {
                let Some(from) = from else { continue };
                let edge = Edge {
                    from,
                    to,
                    trigger: trigger.clone(),
                };
                // An edge that breaks a rule stays out of the best-effort machine, so the
                // skeleton emitted beside the error does not add errors of its own.
                if self.check_edge(phases, &edges, &edge, from_name, t) {
                    edges.push((edge, t));
                }
            }
        }
        edges
    }

    fn trigger(
        &mut self,
        t: &RawTransition,
        events: &mut Vec<Event>,
        declared: bool,
    ) -> Option<Trigger> {
        if let (Some(on), false) = (&t.on, t.when.is_empty()) {
            self.diags.push(
                Diagnostic::new(on.loc, "a transition has either `on` (an event) or `when` (a rule), not both")
                    .help("split it into two transitions between the same phases, one with `on` and one with `when`"),
            );
            return None;
        }
        if let Some(on) = &t.on {
            return self.event(on, events, declared).map(Trigger::Event);
        }
        if t.when.is_empty() {
            return Some(Trigger::Manual);
        }
        let mut requirements: Vec<(usize, bool)> = Vec::new();
        let mut ok = true;
        for req in &t.when {
            let Some(c) = self.condition(&req.condition, "in `when`") else {
                ok = false;
                continue;
            };
            if let Some(&(_, status)) = requirements.iter().find(|(other, _)| *other == c) {
                let message = if status == req.status {
                    format!(
                        "`{}` is required twice in this `when` rule",
                        req.condition.text
                    )
                } else {
                    format!(
                        "contradictory `when` rule: `{0}` and `!{0}` can never hold together",
                        req.condition.text
                    )
                };
                self.diags.push(
                    Diagnostic::new(req.condition.loc, message)
                        .help("keep one requirement per condition"),
                );
                ok = false;
                continue;
            }
            requirements.push((c, req.status));
        }
        ok.then_some(Trigger::When(requirements))
    }

    /// Checks one edge against the ones before it; `false` when it breaks a rule.
    fn check_edge(
        &mut self,
        phases: &[Phase],
        edges: &[(Edge, &RawTransition)],
        edge: &Edge,
        from_name: &Name,
        t: &RawTransition,
    ) -> bool {
        let before = self.diags.len();
        let (from, to) = (&phases[edge.from].name, &phases[edge.to].name);
        if phases[edge.from].terminal {
            self.diags.push(
                Diagnostic::new(from_name.loc, format!("transition out of terminal phase `{from}`"))
                    .help(format!("nothing leaves a terminal phase; remove this transition or drop `terminal` from `{from}`")),
            );
        }
        if edge.from == edge.to && matches!(edge.trigger, Trigger::When(_)) {
            self.diags.push(
                Diagnostic::new(t.loc, format!("`when` rule from `{from}` back to `{from}` would fire on every reconcile"))
                    .help("a self-transition re-enters the phase; trigger it with an event (`on`) or from the handler"),
            );
        }
        for (other, other_t) in edges {
            if other.from != edge.from {
                continue;
            }
            if other.to == edge.to
                && (other.trigger == edge.trigger
                    || other.trigger == Trigger::Manual
                    || edge.trigger == Trigger::Manual)
            {
                self.diags.push(
                    Diagnostic::new(t.loc, format!("duplicate transition `{from} -> {to}`"))
                        .help(format!("it is already declared {}; an edge with `on` or `when` can also be taken by the handler, so list it once", earlier(other_t.loc))),
                );
                return false;
            }
            if let (Trigger::Event(a), Trigger::Event(b)) = (&other.trigger, &edge.trigger)
                && a == b
                && other.to != edge.to
            {
                {
                    let event = t.on.as_ref().map_or("", |n| n.text.as_str());
                    self.diags.push(
                        Diagnostic::new(t.on.as_ref().map_or(t.loc, |n| n.loc), format!(
                            "event `{event}` leads from `{from}` to both `{}` and `{to}`",
                            phases[other.to].name
                        ))
                        .help("an event must have one target per phase; use a different event name for one of them"),
                    );
                    return false;
                }
            }
        }
        self.diags.len() == before
    }

    fn timeouts(
        &mut self,
        phases: &[Phase],
        edges: &[(Edge, &RawTransition)],
    ) -> Vec<Option<Timeout>> {
        let mut out = Vec::with_capacity(phases.len());
        for i in 0..phases.len() {
            let raw = &self.spec.phases[self.raw_of[i]];
            let Some(t) = &raw.timeout else {
                out.push(None);
                continue;
            };
            let after = self.duration(&t.after, "timeout.after");
            let to = self.phase(&t.to, "`timeout.to`");
            if let Some(reason) = &t.reason
                && let Some(problem) = names::camel_ident_problem(&reason.text)
            {
                {
                    self.diags.push(
                        Diagnostic::new(reason.loc, format!("invalid timeout reason: {problem}"))
                            .help(format!(
                                "reasons are UpperCamelCase words, e.g. `{}`",
                                suggest_camel(&reason.text)
                            )),
                    );
                }
            }
            if let Some(to) = to
                && raw.terminal.is_none()
                && !edges.iter().any(|(e, _)| e.from == i && e.to == to)
            {
                {
                    let (from, target) = (&phases[i].name, &phases[to].name);
                    self.diags.push(
                        Diagnostic::new(t.to.loc, format!("timeout from `{from}` goes to `{target}`, but `{from} -> {target}` is not a declared transition"))
                            .help(format!("add `- {{ from: {from}, to: {target} }}` to `transitions`, or time out to a declared target")),
                    );
                }
            }
            let reason = t
                .reason
                .as_ref()
                .map_or_else(|| format!("{}TimedOut", raw.name.text), |r| r.text.clone());
            out.push(match (after, to) {
                (Some(after_ms), Some(to)) => Some(Timeout {
                    after_ms,
                    to,
                    reason,
                }),
                _ => None,
            });
        }
        out
    }

    fn finalizer(&mut self) -> Option<String> {
        let f = self.spec.finalizer.as_ref()?;
        let valid = f.text.split_once('/').is_some_and(|(domain, name)| {
            names::condition_type_problem(&format!("{domain}/X")).is_none()
                && !name.is_empty()
                && name.len() <= 63
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
        if !valid {
            self.diags.push(
                Diagnostic::new(f.loc, format!("invalid finalizer `{}`", f.text))
                    .help("finalizers are domain-qualified names such as `example.com/cleanup`"),
            );
        }
        Some(f.text.clone())
    }

    /// The Ready column's condition: the one `ready:` names, else a condition named `Ready`.
    fn ready(&mut self) -> Option<usize> {
        match &self.spec.ready {
            Some(name) => self.condition(name, "in `ready`"),
            None => self.condition_index.get("Ready").copied(),
        }
    }

    fn drift(&mut self) -> Drift {
        let Some(policy) = &self.spec.drift else {
            return Drift::default();
        };
        match policy.text.as_str() {
            "adopt" => Drift::Adopt,
            "revert" => Drift::Revert,
            other => {
                self.diags.push(
                    Diagnostic::new(policy.loc, format!("unknown drift policy `{other}`"))
                        .suggest(other, Drift::NAMES.iter().copied())
                        .help(
                            "`drift` is `adopt` (continue from the phase found, the default) \
                             or `revert` (write back the phase the controller last wrote)",
                        ),
                );
                Drift::default()
            }
        }
    }

    /// The `retired:` map: every old name a valid phase name that is no longer declared and is
    /// listed once; every target a declared phase.
    fn retired(&mut self) -> Vec<Retired> {
        let spec: &'a RawSpec = self.spec;
        let mut out = Vec::new();
        let mut first_of: BTreeMap<&str, Loc> = BTreeMap::new();
        for raw in &spec.retired {
            let old = &raw.name;
            if let Some(&first) = first_of.get(old.text.as_str()) {
                self.diags.push(
                    Diagnostic::new(old.loc, format!("retired phase `{}` is listed twice", old.text))
                        .help(format!(
                            "it is first listed {}; an object stored in `{}` moves to one phase, so keep one entry",
                            earlier(first),
                            old.text
                        )),
                );
                continue;
            }
            first_of.insert(&old.text, old.loc);
            let mut valid = true;
            if let Some(declared) = spec.phases.iter().find(|p| p.name.text == old.text) {
                let at = match declared.name.loc {
                    Loc::File(pos) => format!("on line {}", pos.line),
                    Loc::Span(_) => "in `phases(..)`".to_owned(),
                };
                self.diags.push(
                    Diagnostic::new(old.loc, format!("retired phase `{}` is still declared", old.text))
                        .help(format!(
                            "it is declared {at}; a retired name is a phase this spec no longer has: remove `{}` from `retired`, or rename the declared phase",
                            old.text
                        )),
                );
                valid = false;
            } else if let Some(problem) = names::camel_ident_problem(&old.text) {
                self.diags.push(
                    Diagnostic::new(old.loc, format!("invalid retired phase name: {problem}"))
                        .help(format!(
                            "a retired name is a phase of an older spec and follows the same rule as phases, e.g. `{}`",
                            suggest_camel(&old.text)
                        )),
                );
                valid = false;
            }
            let to = self.phase_index.get(&raw.to.text).copied();
            if to.is_none() {
                // `Old: Older` where `Older` is retired too: say where `Older` leads.
                let hint = spec
                    .retired
                    .iter()
                    .find(|r| r.name.text == raw.to.text)
                    .map(|next| {
                        let (older, old) = (&raw.to.text, &old.text);
                        if self.phase_index.contains_key(&next.to.text) {
                            format!(
                                "`{older}` is itself retired; map `{old}` straight to `{}`, the phase `{older}` moves to",
                                next.to.text
                            )
                        } else {
                            format!("`{older}` is itself retired; map `{old}` to a declared phase")
                        }
                    });
                let unknown = self.unknown_phase(&raw.to, "`retired`", hint);
                self.diags.push(unknown);
            }
            if let (true, Some(to)) = (valid, to) {
                out.push(Retired {
                    name: old.text.clone(),
                    to,
                });
            }
        }
        out
    }

    fn graph(&mut self, phases: &[Phase], edges: &[(Edge, &RawTransition)], initial: usize) {
        if phases.is_empty() {
            return;
        }
        let mut seen = vec![false; phases.len()];
        let mut queue = VecDeque::from([initial]);
        seen[initial] = true;
        while let Some(p) = queue.pop_front() {
            for (e, _) in edges.iter().filter(|(e, _)| e.from == p) {
                if !seen[e.to] {
                    seen[e.to] = true;
                    queue.push_back(e.to);
                }
            }
        }
        let initial_name = phases[initial].name.clone();
        for (i, phase) in phases.iter().enumerate() {
            let loc = self.spec.phases[self.raw_of[i]].name.loc;
            if !seen[i] {
                self.diags.push(
                    Diagnostic::new(
                        loc,
                        format!(
                            "phase `{}` is unreachable from the initial phase `{initial_name}`",
                            phase.name
                        ),
                    )
                    .help(format!(
                        "add a transition into `{}` from a reachable phase, or remove it",
                        phase.name
                    )),
                );
            }
            if !phase.terminal && !edges.iter().any(|(e, _)| e.from == i) {
                self.diags.push(
                    Diagnostic::new(
                        loc,
                        format!(
                            "phase `{}` is not terminal and has no transition out",
                            phase.name
                        ),
                    )
                    .help(format!(
                        "mark it `terminal: true`, or add a transition from `{}`",
                        phase.name
                    )),
                );
            }
        }
        self.shadowed_rules(phases, edges);
    }

    /// A rule is dead when an earlier rule from the same phase requires a subset of its
    /// conditions: whenever it holds, the earlier one holds too and wins.
    fn shadowed_rules(&mut self, phases: &[Phase], edges: &[(Edge, &RawTransition)]) {
        for (j, (later, later_t)) in edges.iter().enumerate() {
            let Trigger::When(later_reqs) = &later.trigger else {
                continue;
            };
            let later_set: BTreeSet<&(usize, bool)> = later_reqs.iter().collect();
            let shadow = edges[..j].iter().find(|(earlier, _)| {
                earlier.from == later.from
                    && matches!(&earlier.trigger, Trigger::When(reqs) if reqs.iter().all(|r| later_set.contains(r)))
            });
            if let Some((earlier_edge, earlier_t)) = shadow {
                let from = &phases[later.from].name;
                self.diags.push(
                    Diagnostic::new(later_t.loc, format!(
                        "this `when` rule from `{from}` to `{}` can never fire",
                        phases[later.to].name
                    ))
                    .help(format!(
                        "the earlier rule `{from} -> {}` ({}) holds whenever this one does and is tried first; put the more specific rule first or remove one",
                        phases[earlier_edge.to].name,
                        earlier(earlier_t.loc)
                    )),
                );
            }
        }
    }

    fn duration(&mut self, text: &Name, key: &str) -> Option<u64> {
        match parse_duration(&text.text) {
            Ok(ms) => Some(ms),
            Err(problem) => {
                self.diags.push(
                    Diagnostic::new(
                        text.loc,
                        format!("invalid duration `{}` in `{key}`: {problem}", text.text),
                    )
                    .help("write a positive duration such as `500ms`, `30s`, `10m` or `1h30m`"),
                );
                None
            }
        }
    }
}

/// Parses `1h30m`, `10s`, `500ms` into milliseconds (units `ms`, `s`, `m`, `h`, `d`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("it is empty".into());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "number too large".to_owned())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{number}` has no unit")),
            other => return Err(format!("unknown unit `{other}`")),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "duration too large".to_owned())?;
    }
    if total == 0 {
        return Err("it must be greater than zero".into());
    }
    Ok(total)
}

fn suggest_camel(name: &str) -> String {
    let camel = names::to_upper_camel(name);
    if camel.is_empty() || names::camel_ident_problem(&camel).is_some() {
        format!("{camel}Phase")
    } else {
        camel
    }
}

fn list_in_order(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(10_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten minutes").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use std::str::FromStr;

    use proc_macro2::TokenStream;

    use super::{Diagnostics, Machine, validate};
    use crate::args::{Args, SpecSource};

    /// A valid machine from inline DSL text.
    pub fn machine(dsl: &str) -> Machine {
        let mut diags = Diagnostics::default();
        let args = Args::parse(TokenStream::from_str(dsl).unwrap(), &mut diags).unwrap();
        let SpecSource::Inline(raw) = &args.source else {
            panic!("inline")
        };
        let machine = validate(raw, &mut diags);
        assert!(diags.is_empty(), "{:?}", diags.into_vec());
        machine
    }
}

#[cfg(test)]
mod machine_tests {
    use std::str::FromStr;

    use proc_macro2::TokenStream;

    use super::*;
    use crate::args::{Args, SpecSource};

    fn check(dsl: &str) -> (Machine, Vec<String>) {
        let mut diags = Diagnostics::default();
        let args = Args::parse(TokenStream::from_str(dsl).unwrap(), &mut diags).unwrap();
        let SpecSource::Inline(raw) = &args.source else {
            panic!("inline")
        };
        let machine = validate(raw, &mut diags);
        (
            machine,
            diags.into_vec().into_iter().map(|d| d.message).collect(),
        )
    }

    #[test]
    fn lowers_edges_in_spec_order_with_lists_expanded() {
        let (m, errors) = check(
            "phases(A(initial), B, C(terminal)), conditions(Ok), \
             transitions(A -> B on Go, [A, B] -> C when Ok, B -> A)",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let edges: Vec<(usize, usize)> = m.edges.iter().map(|e| (e.from, e.to)).collect();
        assert_eq!(edges, [(0, 1), (0, 2), (1, 2), (1, 0)]);
        assert_eq!(m.edges[0].trigger, Trigger::Event(0));
        assert_eq!(m.edges[1].trigger, Trigger::When(vec![(0, true)]));
        assert_eq!(m.edges[3].trigger, Trigger::Manual);
        assert_eq!(m.targets(1), [0, 2]);
        assert_eq!(m.events_from(0), [(0, 1)]);
        assert_eq!(m.initial, 0);
    }

    #[test]
    fn reports_every_error_and_keeps_a_consistent_best_effort_machine() {
        let (m, errors) = check(
            "phases(A(initial), A, b, C(terminal)), \
             transitions(A -> C on Go, A -> C on Go, A -> Cee, C -> A, A -> C on Stop)",
        );
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].contains("phase `A` is declared twice"));
        assert!(errors[1].contains("invalid phase name"));
        assert!(errors[2].contains("duplicate transition `A -> C`"));
        assert!(errors[3].contains("unknown phase `Cee`"));
        assert!(errors[4].contains("transition out of terminal phase `C`"));
        // The skeleton keeps what was valid, and only that: no duplicate variants or edges.
        let names: Vec<&str> = m.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["A", "C"]);
        assert_eq!(m.edges.len(), 2, "A -> C on Go and A -> C on Stop");
        assert_eq!(
            m.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["Go", "Stop"]
        );
    }

    #[test]
    fn graph_checks_wait_for_names_to_resolve() {
        // A typo in a target must not also report the phase it was meant to reach as unreachable.
        let (_, errors) = check("phases(A(initial), B(terminal)), transitions(A -> Bee)");
        assert_eq!(errors.len(), 1, "{errors:?}");
        let (_, errors) = check("phases(A(initial), B, C(terminal)), transitions(A -> C)");
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("unreachable") && errors[1].contains("no transition out"));
    }

    #[test]
    fn ready_defaults_to_a_condition_named_ready_and_must_be_declared() {
        let machine = |dsl| check(dsl).0;
        assert_eq!(
            machine("phases(A(initial), B(terminal)), conditions(X, Ready), transitions(A -> B)")
                .ready,
            Some(1)
        );
        let (m, errors) = check(
            "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), \
             ready = Sinced, drift = revrt",
        );
        assert_eq!(m.ready, None);
        assert_eq!(m.drift, Drift::Adopt);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("unknown condition `Sinced` in `ready`"));
        assert!(errors[1].contains("unknown drift policy `revrt`"));
        let (m, errors) = check(
            "phases(A(initial), B(terminal)), conditions(Synced), transitions(A -> B), \
             ready = Synced, drift = revert",
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((m.ready, m.drift), (Some(0), Drift::Revert));
    }

    #[test]
    fn retired_names_are_undeclared_valid_names_listed_once_that_map_to_declared_phases() {
        let (m, errors) = check(
            "phases(A(initial), B(terminal)), transitions(A -> B), retired(Old -> B, Older -> A)",
        );
        assert!(errors.is_empty(), "{errors:?}");
        let retired = |name: &str, to| Retired {
            name: name.to_owned(),
            to,
        };
        assert_eq!(m.retired, [retired("Old", 1), retired("Older", 0)]);

        let (m, errors) = check(
            "phases(A(initial), B(terminal)), transitions(A -> B), \
             retired(A -> B, Old -> Bee, Old -> A, Self -> A, Gone -> Older, Older -> B)",
        );
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert_eq!(errors[0], "retired phase `A` is still declared");
        assert_eq!(errors[1], "unknown phase `Bee` in `retired`");
        assert_eq!(errors[2], "retired phase `Old` is listed twice");
        assert_eq!(
            errors[3],
            "invalid retired phase name: `Self` is a Rust keyword"
        );
        assert_eq!(errors[4], "unknown phase `Older` in `retired`");
        // Only the valid entry reaches the best-effort machine.
        assert_eq!(m.retired, [retired("Older", 1)]);
    }
}
