//! The children's rules (`children:` and the conditions derived from them): names that make
//! builder methods, known phases, `after:` without cycles and only where its children exist,
//! and `when` rules that read a derived condition only where its child exists.

use std::collections::BTreeMap;

use crate::diag::Diagnostic;
use crate::model::{Child, Derived, Source};
use crate::names;
use crate::spec::{Name, RawChild};

use super::check::list_in_order;
use super::resolve::Resolver;

/// The handler trait's own methods: a child's builder may not take their names.
const RESERVED: &[&str] = &["cleanup", "before_transition", "after_transition"];

impl Resolver<'_, '_> {
    /// Resolves `children:`: each child's name, type, phases and settings, then every `after:`
    /// (which may name a child declared later).
    pub(super) fn children(&mut self) {
        let spec = self.spec;
        let mut first: BTreeMap<&str, &Name> = BTreeMap::new();
        let mut accepted: Vec<&RawChild> = Vec::new();
        for raw in &spec.children {
            if !self.child_name(&raw.name, first.get(raw.name.text.as_str()).copied()) {
                continue;
            }
            first.insert(&raw.name.text, &raw.name);
            let Some(child) = self.child(raw) else {
                self.broken_children.insert(raw.name.text.clone());
                continue;
            };
            self.child_index
                .insert(raw.name.text.clone(), self.machine.children.len());
            self.machine.children.push(child);
            accepted.push(raw);
        }
        for (i, raw) in accepted.iter().enumerate() {
            let after: Vec<usize> = raw
                .after
                .iter()
                .filter_map(|name| self.after(i, raw, name))
                .collect();
            self.machine.children[i].after = after;
        }
        self.after_cycles(&accepted);
    }

    /// A child's name becomes a method of the handler trait: snake_case, not a keyword, not
    /// one of the trait's own, declared once.
    fn child_name(&self, name: &Name, first: Option<&Name>) -> bool {
        let text = name.text.as_str();
        let Some(problem) = name_problem(text) else {
            return self.declared_once(name, first);
        };
        let snake = names::to_snake(text).replace('-', "_");
        let stripped = snake.trim_start_matches("on_").to_owned();
        let fix = [snake.clone(), stripped, format!("{snake}_child")]
            .into_iter()
            .find(|candidate| *candidate != text && name_problem(candidate).is_none())
            .unwrap_or_else(|| "worker".to_owned());
        self.cx.error(
            Diagnostic::new(name.loc, format!("invalid child name: {problem}")).help(format!(
                "a child's name becomes its builder method in the handler trait (and the end of its object's name): rename it, e.g. `{fix}`"
            )),
        );
        false
    }

    /// The second declaration of a child name is reported.
    fn declared_once(&self, name: &Name, first: Option<&Name>) -> bool {
        let text = name.text.as_str();
        if let Some(first) = first {
            self.cx.error(
                Diagnostic::new(name.loc, format!("child `{text}` is declared twice")).help(
                    format!(
                        "it is first declared {}; remove or rename one",
                        super::check::earlier(first.loc)
                    ),
                ),
            );
            return false;
        }
        true
    }

    fn child(&mut self, raw: &RawChild) -> Option<Child> {
        let cx = self.cx;
        let name = &raw.name.text;
        let type_path = match &raw.type_path {
            None => {
                cx.error(
                    Diagnostic::new(raw.name.loc, format!("child `{name}` has no `type`"))
                        .help("name its Rust type, any `kube::Resource`: `type: k8s_openapi::api::batch::v1::Job`"),
                );
                None
            }
            Some(path) if syn::parse_str::<syn::Type>(&path.text).is_err() => {
                cx.error(
                    Diagnostic::new(path.loc, format!("`{}` is not a Rust type", path.text))
                        .help("write a type path such as `Job` (in scope) or `k8s_openapi::api::batch::v1::Job`"),
                );
                None
            }
            Some(path) => Some(path.text.clone()),
        };
        if raw.phases.is_empty() {
            cx.error(
                Diagnostic::new(raw.name.loc, format!("child `{name}` exists in no phase")).help(
                    format!("list the phases it exists in: `phases: [Running]` under `{name}`"),
                ),
            );
        }
        let mut phases: Vec<usize> = raw
            .phases
            .iter()
            .filter_map(|p| self.phase(p, &format!("the phases of child `{name}`")))
            .collect();
        phases.sort_unstable();
        phases.dedup();
        let ready = match &raw.ready {
            None => Some(Source::Ready),
            Some(rule) if rule.text == "kstatus" => Some(Source::Ready),
            Some(rule) => match names::condition_type_problem(&rule.text) {
                None => Some(Source::Condition(rule.text.clone())),
                Some(problem) => {
                    cx.error(
                        Diagnostic::new(rule.loc, format!("invalid `ready` of child `{name}`: {problem}"))
                            .help("write `ready: kstatus` (the default: kstatus's rules for its kind) or the type of one of its conditions, e.g. `ready: Complete`"),
                    );
                    None
                }
            },
        };
        let delete_on_leave = self.choice(raw.on_leave.as_ref(), "onLeave", Child::ON_LEAVE)?;
        let apply = self.choice(raw.apply.as_ref(), "apply", Child::APPLY)?;
        // An unknown phase was reported: keep the child out rather than guess.
        if !raw
            .phases
            .iter()
            .all(|p| self.phase_index.contains_key(&p.text))
        {
            return None;
        }
        Some(Child {
            name: name.clone(),
            type_path: type_path?,
            description: raw.description.clone(),
            phases,
            after: Vec::new(),
            ready: ready?,
            delete_on_leave: delete_on_leave == 0,
            once: apply == 1,
        })
    }

    /// The index in `allowed` of a setting's value (0, the default, when unset).
    fn choice(&self, value: Option<&Name>, key: &str, allowed: &[&str]) -> Option<usize> {
        let Some(value) = value else {
            return Some(0);
        };
        if let Some(i) = allowed.iter().position(|a| *a == value.text) {
            return Some(i);
        }
        self.cx.error(
            Diagnostic::new(
                value.loc,
                format!("invalid {}: `{}`", key_names(key), value.text),
            )
            .suggest(&value.text, allowed.iter().copied())
            .help(format!(
                "`{key}` is one of {} (the first is the default)",
                list_in_order(allowed)
            )),
        );
        None
    }

    /// One name of child `i`'s `after:`: a declared child other than itself, existing in
    /// every phase child `i` does, which no terminal phase of child `i` waits on.
    fn after(&self, i: usize, raw: &RawChild, name: &Name) -> Option<usize> {
        let cx = self.cx;
        let Some(&other) = self.child_index.get(&name.text) else {
            if self.broken_children.contains(&name.text) {
                return None;
            }
            let known: Vec<&str> = self.child_index.keys().map(String::as_str).collect();
            cx.error(
                Diagnostic::new(
                    name.loc,
                    format!(
                        "unknown child `{}` in the `after` of `{}`",
                        name.text, raw.name.text
                    ),
                )
                .suggest(&name.text, known.iter().copied())
                .help(format!("declared children: {}", list_in_order(&known))),
            );
            return None;
        };
        if other == i {
            cx.error(
                Diagnostic::new(name.loc, format!("child `{}` waits for itself", name.text))
                    .help("remove it from its own `after`"),
            );
            return None;
        }
        let children = &self.machine.children;
        let phases = &self.machine.phases;
        let missing: Vec<&str> = children[i]
            .phases
            .iter()
            .filter(|p| !children[other].phases.contains(p))
            .map(|&p| phases[p].name.as_str())
            .collect();
        if !missing.is_empty() {
            cx.error(
                Diagnostic::new(
                    name.loc,
                    format!(
                        "child `{}` waits for `{}` in {}, where `{}` does not exist",
                        raw.name.text,
                        name.text,
                        list_in_order(&missing),
                        name.text
                    ),
                )
                .help(format!(
                    "it would never be applied there: add {} to the phases of `{}`, or remove {} from the phases of `{}`",
                    list_in_order(&missing),
                    name.text,
                    if missing.len() == 1 { "it" } else { "them" },
                    raw.name.text
                )),
            );
            return None;
        }
        if let Some(&terminal) = children[i].phases.iter().find(|&&p| phases[p].terminal) {
            cx.error(
                Diagnostic::new(
                    name.loc,
                    format!(
                        "child `{}` waits for `{}` in the terminal phase `{}`",
                        raw.name.text, name.text, phases[terminal].name
                    ),
                )
                .help("a terminal phase is never left and its steps do nothing else: if the child it waits on is not ready there, it waits forever; drop the terminal phase from its phases, or drop `after`"),
            );
            return None;
        }
        Some(other)
    }

    /// `after:` is a partial order: the first edge that closes a circle is reported.
    fn after_cycles(&self, raw: &[&RawChild]) {
        let children = &self.machine.children;
        // Colours of a depth-first search: 0 unseen, 1 on the path, 2 done.
        let mut colour = vec![0u8; children.len()];
        let mut path = Vec::new();
        for start in 0..children.len() {
            if colour[start] == 0
                && let Some((at, to)) = visit(children, start, &mut colour, &mut path)
            {
                let circle: Vec<&str> = path[path.iter().position(|&c| c == to).unwrap_or(0)..]
                    .iter()
                    .chain(std::iter::once(&to))
                    .map(|&c| children[c].name.as_str())
                    .collect();
                let written = raw[at]
                    .after
                    .iter()
                    .find(|n| n.text == children[to].name)
                    .map_or(raw[at].name.loc, |n| n.loc);
                self.cx.error(
                    Diagnostic::new(written, format!("`after` makes a circle: {}", circle.join(" → ")))
                        .help("each child waits only for children applied before it: remove one of these `after` entries"),
                );
                return;
            }
        }
    }

    /// A condition's `from: child.ready` or `from: child.Condition`.
    pub(super) fn derived(&self, condition: &Name, from: &Name) -> Option<Derived> {
        let cx = self.cx;
        let Some((child, source)) = from.text.split_once('.') else {
            cx.error(
                Diagnostic::new(from.loc, format!("`from: {}` names no part of a child", from.text))
                    .help(format!("write `from: {}.ready` (its readiness) or `from: {}.ConditionType` (one of its conditions)", from.text, from.text)),
            );
            return None;
        };
        let Some(&index) = self.child_index.get(child) else {
            if self.broken_children.contains(child) {
                return None;
            }
            let known: Vec<&str> = self.child_index.keys().map(String::as_str).collect();
            cx.error(
                Diagnostic::new(
                    from.loc,
                    format!(
                        "unknown child `{child}` in the `from` of condition `{}`",
                        condition.text
                    ),
                )
                .suggest(child, known.iter().copied())
                .help(if known.is_empty() {
                    format!(
                        "declare it under `children:` (`{child}: {{ type: .., phases: [..] }}`)"
                    )
                } else {
                    format!("declared children: {}", list_in_order(&known))
                }),
            );
            return None;
        };
        let source = if source == "ready" {
            Source::Ready
        } else if let Some(problem) = names::condition_type_problem(source) {
            cx.error(
                Diagnostic::new(from.loc, format!("invalid `from: {}`: {problem}", from.text))
                    .help(format!("write `{child}.ready` or `{child}.` followed by one of its condition types, e.g. `{child}.Complete`")),
            );
            return None;
        } else {
            Source::Condition(source.to_owned())
        };
        Some(Derived {
            child: index,
            source,
        })
    }

    /// A `when` rule reads a derived condition only in phases where its child exists: the
    /// engine writes it nowhere else.
    pub(super) fn derived_read_where_child_exists(&self) {
        let machine = &self.machine;
        for t in &self.spec.transitions {
            for req in &t.when {
                let Some(&c) = self.condition_index.get(&req.condition.text) else {
                    continue;
                };
                let Some(derived) = &machine.conditions[c].from else {
                    continue;
                };
                let child = &machine.children[derived.child];
                for from in &t.from {
                    let Some(&phase) = self.phase_index.get(&from.text) else {
                        continue;
                    };
                    if child.phases.contains(&phase) {
                        continue;
                    }
                    let exists: Vec<&str> = child
                        .phases
                        .iter()
                        .map(|&p| machine.phases[p].name.as_str())
                        .collect();
                    self.cx.error(
                        Diagnostic::new(
                            req.condition.loc,
                            format!(
                                "`{}` can never become {} in `{}`: child `{}` exists only in {}",
                                req.condition.text,
                                if req.status { "true" } else { "false" },
                                from.text,
                                child.name,
                                list_in_order(&exists)
                            ),
                        )
                        .help(format!(
                            "the engine derives `{}` only where `{}` exists: add `{}` to the phases of `{}`, or take `{}` out of this rule's `from`",
                            req.condition.text, child.name, from.text, child.name, from.text
                        )),
                    );
                }
            }
        }
    }
}

/// Depth-first from `at`; the first `after` edge back onto the path, as (child, waited on).
fn visit(
    children: &[Child],
    at: usize,
    colour: &mut [u8],
    path: &mut Vec<usize>,
) -> Option<(usize, usize)> {
    colour[at] = 1;
    path.push(at);
    for &next in &children[at].after {
        if colour[next] == 1 {
            return Some((at, next));
        }
        if colour[next] == 0
            && let Some(found) = visit(children, next, colour, path)
        {
            return Some(found);
        }
    }
    path.pop();
    colour[at] = 2;
    None
}

/// Why `text` cannot name a child (its builder method), or `None`.
fn name_problem(text: &str) -> Option<String> {
    if !is_snake(text) {
        Some(format!("`{text}` is not a snake_case name"))
    } else if names::is_keyword(text) {
        Some(format!("`{text}` is a Rust keyword"))
    } else if RESERVED.contains(&text) || text.starts_with("on_") {
        Some(format!(
            "`{text}` is a method the handler trait already has"
        ))
    } else {
        None
    }
}

/// A setting's key as the spec file spells it, and the attribute's spelling when it differs.
fn key_names(key: &str) -> String {
    let attribute = names::to_snake(key);
    if attribute == key {
        format!("`{key}`")
    } else {
        format!("`{key}` (`{attribute}` in the attribute)")
    }
}

fn is_snake(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !text.ends_with('_')
        && !text.contains("__")
}
