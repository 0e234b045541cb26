//! Resolve step: [`RawSpec`] → [`Resolved`]: names become indices, durations milliseconds, and
//! transitions expand into edges, with [`Locations`] recording where each phase and edge was
//! written.
//!
//! It walks the spec in order: phases, conditions, events, transitions, then the phases'
//! timeouts (which need the edges), the settings, the retired names and the initial phase. It
//! reports unknown names itself and applies each rule of [`check`] as it meets the item the
//! rule is about: an item that breaks one stays out of the best-effort machine.

use std::collections::{BTreeMap, BTreeSet};

use crate::diag::{Diagnostic, Loc};
use crate::model::{
    Condition, Drift, Edge, Event, Machine, Phase, Ready, Retired, Timeout, Trigger,
};
use crate::names;
use crate::spec::{Name, RawSpec, RawTimeout, RawTransition};

use super::check::{self, list_in_order};
use super::duration::parse_duration;
use super::{Ctxt, Locations, Resolved};

/// Resolves `spec`, reporting into `cx`.
pub fn resolve(spec: &RawSpec, cx: &Ctxt) -> Resolved {
    let mut r = Resolver {
        spec,
        cx,
        machine: Machine {
            phases: Vec::new(),
            conditions: Vec::new(),
            children: Vec::new(),
            events: Vec::new(),
            edges: Vec::new(),
            initial: 0,
            finalizer: None,
            ready: None,
            drift: Drift::default(),
            retired: Vec::new(),
        },
        locations: Locations::default(),
        phase_index: BTreeMap::new(),
        condition_index: BTreeMap::new(),
        child_index: BTreeMap::new(),
        broken_children: BTreeSet::new(),
        timeouts: Vec::new(),
    };
    r.phases();
    r.children();
    r.conditions();
    let events_declared = r.declared_events();
    let transitions_resolved = r.transitions(events_declared);
    r.derived_read_where_child_exists();
    r.timeouts();
    r.machine.finalizer = spec.finalizer.as_ref().map(|f| {
        check::finalizer(cx, f);
        f.text.clone()
    });
    r.machine.ready = r.ready();
    r.machine.drift = r.drift();
    r.machine.retired = r.retired();
    let one_initial = check::one_initial(cx, spec);
    r.machine.initial = spec
        .phases
        .iter()
        .find(|p| p.initial.is_some())
        .and_then(|p| r.phase_index.get(&p.name.text).copied())
        .unwrap_or(0);
    Resolved {
        machine: r.machine,
        locations: r.locations,
        names_resolved: spec.complete && transitions_resolved,
        one_initial,
    }
}

pub(super) struct Resolver<'a, 'c> {
    pub(super) spec: &'a RawSpec,
    pub(super) cx: &'c Ctxt,
    /// The machine so far.
    pub(super) machine: Machine,
    locations: Locations,
    pub(super) phase_index: BTreeMap<String, usize>,
    pub(super) condition_index: BTreeMap<String, usize>,
    pub(super) child_index: BTreeMap<String, usize>,
    /// Children declared with a valid name but refused for another error (already reported):
    /// naming them in `after:` or `from:` is not reported again.
    pub(super) broken_children: BTreeSet<String>,
    /// Phases with a timeout, waiting for the edges (a timeout follows a declared transition).
    timeouts: Vec<(usize, &'a RawTimeout)>,
}

impl<'a> Resolver<'a, '_> {
    fn phases(&mut self) {
        let (spec, cx) = (self.spec, self.cx);
        check::has_phases(cx, spec);
        let mut methods: BTreeMap<String, &Name> = BTreeMap::new();
        for raw in &spec.phases {
            let name = &raw.name;
            let first = self
                .phase_index
                .get(&name.text)
                .map(|&i| self.locations.phases[i]);
            let method = names::to_snake(&name.text);
            let accepted = check::variant_name(cx, "phase", name)
                && check::declared_once(cx, "phase", name, first, "remove or rename one")
                && check::distinct_method(cx, name, &method, methods.get(&method).copied());
            if !accepted {
                continue;
            }
            methods.insert(method, name);
            let index = self.machine.phases.len();
            self.phase_index.insert(name.text.clone(), index);
            self.locations.phases.push(name.loc);
            let requeue_after_ms = raw
                .requeue_after
                .as_ref()
                .and_then(|d| self.duration(d, "requeueAfter"));
            let handler_timeout_ms = raw
                .handler_timeout
                .as_ref()
                .and_then(|d| self.duration(d, "handlerTimeout"));
            check::terminal_without_requeue(cx, raw);
            check::terminal_without_handler_timeout(cx, raw);
            check::terminal_without_timeout(cx, raw);
            if let Some(timeout) = &raw.timeout {
                self.timeouts.push((index, timeout));
            }
            self.machine.phases.push(Phase {
                name: name.text.clone(),
                description: raw.description.clone(),
                terminal: raw.terminal.is_some(),
                requeue_after_ms,
                handler_timeout_ms,
                timeout: None,
            });
        }
    }

    fn conditions(&mut self) {
        let (spec, cx) = (self.spec, self.cx);
        let mut variants: BTreeMap<String, String> = BTreeMap::new();
        // Where each accepted condition was declared (a rejected one before it does not count).
        let mut declared: BTreeMap<&str, Loc> = BTreeMap::new();
        for raw in &spec.conditions {
            let name = &raw.name;
            let first = declared.get(name.text.as_str()).copied();
            let variant = names::condition_variant(&name.text);
            // An engine condition is refused but still declared: rules naming it say nothing
            // more.
            check::not_engine_condition(cx, name);
            let accepted = check::condition_type(cx, name)
                && check::declared_once(cx, "condition", name, first, "remove one")
                && check::distinct_variant(
                    cx,
                    name,
                    &variant,
                    variants.get(&variant).map(String::as_str),
                );
            if !accepted {
                continue;
            }
            // A `from:` in error (reported) leaves the condition declared, as if handler-set,
            // so the rules that read it are not reported again.
            let from = raw.from.as_ref().and_then(|from| self.derived(name, from));
            variants.insert(variant.clone(), name.text.clone());
            declared.insert(&name.text, name.loc);
            self.condition_index
                .insert(name.text.clone(), self.machine.conditions.len());
            self.machine.conditions.push(Condition {
                type_name: name.text.clone(),
                variant,
                description: raw.description.clone(),
                from,
            });
        }
    }

    /// Events from the optional `events:` section; returns whether the section exists.
    fn declared_events(&mut self) -> bool {
        let Some(raw) = &self.spec.events else {
            return false;
        };
        let cx = self.cx;
        let mut first_locs: Vec<Loc> = Vec::new();
        for event in raw {
            let first = self
                .machine
                .events
                .iter()
                .position(|e| e.name == event.name.text)
                .map(|i| first_locs[i]);
            if check::variant_name(cx, "event", &event.name)
                && check::declared_once(cx, "event", &event.name, first, "remove one")
            {
                first_locs.push(event.name.loc);
                self.machine.events.push(Event {
                    name: event.name.text.clone(),
                    description: event.description.clone(),
                });
            }
        }
        true
    }

    /// Resolves every transition into edges, in spec order; returns whether all of them
    /// resolved without an error.
    fn transitions(&mut self, events_declared: bool) -> bool {
        let (spec, cx) = (self.spec, self.cx);
        let mut clean = true;
        for t in &spec.transitions {
            clean &= check::has_sources(cx, t);
            let froms: Vec<Option<usize>> =
                t.from.iter().map(|f| self.phase(f, "`from`")).collect();
            let to = self.phase(&t.to, "`to`");
            let trigger = self.trigger(t, events_declared);
            clean &= froms.iter().all(Option::is_some);
            let (Some(to), Some(trigger)) = (to, trigger) else {
                clean = false;
                continue;
            };
            for (written, from) in t.from.iter().zip(froms) {
                let Some(from) = from else { continue };
                let edge = Edge {
                    from,
                    to,
                    trigger: trigger.clone(),
                };
                // Every rule reports; an edge that breaks one stays out of the best-effort
                // machine, so the skeleton emitted beside the error adds no errors of its own.
                let phases = &self.machine.phases;
                let leaves = check::not_from_terminal(cx, phases, &edge, written);
                let settles = check::no_when_self_loop(cx, phases, &edge, t);
                let new = check::edge_is_new(cx, &self.machine, &self.locations, &edge, t);
                if leaves && settles && new {
                    self.machine.edges.push(edge);
                    self.locations.edges.push(t.loc);
                } else {
                    clean = false;
                }
            }
        }
        clean
    }

    fn trigger(&mut self, t: &RawTransition, events_declared: bool) -> Option<Trigger> {
        if !check::on_or_when(self.cx, t) || !check::manual_alone(self.cx, t) {
            return None;
        }
        if t.manual.is_some() {
            return Some(Trigger::Manual);
        }
        if let Some(on) = &t.on {
            return self.event(on, events_declared).map(Trigger::Event);
        }
        if t.when.is_empty() {
            return Some(Trigger::Handler);
        }
        let mut requirements: Vec<(usize, bool)> = Vec::new();
        let mut ok = true;
        for req in &t.when {
            let Some(c) = self.condition(&req.condition, "in `when`") else {
                ok = false;
                continue;
            };
            let before = requirements
                .iter()
                .find(|(other, _)| *other == c)
                .map(|&(_, status)| status);
            if !check::required_once(self.cx, req, before) {
                ok = false;
                continue;
            }
            requirements.push((c, req.status));
        }
        ok.then_some(Trigger::When(requirements))
    }

    /// Resolves each phase's timeout now that the edges are known.
    fn timeouts(&mut self) {
        let cx = self.cx;
        for (phase, t) in std::mem::take(&mut self.timeouts) {
            let after = self.duration(&t.after, "timeout.after");
            let to = self.phase(&t.to, "`timeout.to`");
            check::timeout_reason(cx, t);
            if let Some(to) = to
                && !self.machine.phases[phase].terminal
            {
                check::timeout_along_edge(cx, &self.machine, phase, to, t);
            }
            let reason = t.reason.as_ref().map_or_else(
                || format!("{}TimedOut", self.machine.phases[phase].name),
                |r| r.text.clone(),
            );
            if let (Some(after_ms), Some(to)) = (after, to) {
                self.machine.phases[phase].timeout = Some(Timeout {
                    after_ms,
                    to,
                    reason,
                });
            }
        }
    }

    /// What Ready means (`ready:`), its names resolved. The engine then writes `Ready`, so the
    /// spec may not declare a condition of that name.
    fn ready(&mut self) -> Option<Ready> {
        let spec = self.spec;
        let raw = spec.ready.as_ref()?;
        if raw.phases.is_empty() && raw.conditions.is_empty() {
            self.cx.error(
                Diagnostic::new(raw.loc, "`ready` names no phase and no condition")
                    .help("write `ready: { phases: [Running], conditions: [PodsReady] }` (either list may be left out), or drop `ready`"),
            );
        }
        if let Some(own) = spec.conditions.iter().find(|c| c.name.text == "Ready") {
            self.cx.error(
                Diagnostic::new(own.name.loc, "condition `Ready` is kube-fsm's own when the spec has `ready`")
                    .help("the engine writes `Ready` from `ready`; rename this condition (e.g. `Available`) and list it under `ready.conditions`, or drop `ready` to set `Ready` in your handlers"),
            );
        }
        let phases = raw
            .phases
            .iter()
            .filter_map(|p| self.phase(p, "`ready.phases`"))
            .collect();
        let conditions = raw
            .conditions
            .iter()
            .filter_map(|c| self.condition(c, "in `ready`"))
            .collect();
        Some(Ready { phases, conditions })
    }

    fn drift(&mut self) -> Drift {
        let Some(policy) = &self.spec.drift else {
            return Drift::default();
        };
        match policy.text.as_str() {
            "adopt" => Drift::Adopt,
            "revert" => Drift::Revert,
            other => {
                self.cx.error(
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
        let (spec, cx) = (self.spec, self.cx);
        let mut out = Vec::new();
        let mut first_of: BTreeMap<&str, Loc> = BTreeMap::new();
        for raw in &spec.retired {
            let old = &raw.name;
            if !check::retired_once(cx, old, first_of.get(old.text.as_str()).copied()) {
                continue;
            }
            first_of.insert(&old.text, old.loc);
            let valid = check::retired_not_declared(cx, spec, old) && check::retired_name(cx, old);
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
                cx.error(self.unknown_phase(&raw.to, "`retired`", hint));
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

    // ---- names and values ------------------------------------------------------------------

    pub(super) fn phase(&mut self, name: &Name, role: &str) -> Option<usize> {
        if let Some(&i) = self.phase_index.get(&name.text) {
            return Some(i);
        }
        self.cx.error(self.unknown_phase(name, role, None));
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
        let declared: Vec<&str> = self
            .spec
            .phases
            .iter()
            .map(|p| p.name.text.as_str())
            .collect();
        d.help(format!("declared phases: {}", list_in_order(&declared)))
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
        let d = Diagnostic::new(
            name.loc,
            format!("unknown condition `{}` {role}", name.text),
        )
        .suggest(&name.text, declared.iter().copied());
        self.cx.error(if declared.is_empty() {
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
        });
        None
    }

    /// An event named in `on`: a declared one, or, without an `events:` section, a new one.
    fn event(&mut self, name: &Name, declared: bool) -> Option<usize> {
        let events = &mut self.machine.events;
        if let Some(i) = events.iter().position(|e| e.name == name.text) {
            return Some(i);
        }
        if declared {
            let known: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
            self.cx.error(
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
        if !check::variant_name(self.cx, "event", name) {
            return None;
        }
        events.push(Event {
            name: name.text.clone(),
            description: None,
        });
        Some(events.len() - 1)
    }

    fn duration(&self, text: &Name, key: &str) -> Option<u64> {
        match parse_duration(&text.text) {
            Ok(ms) => Some(ms),
            Err(problem) => {
                self.cx.error(
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
