//! Property tests of `children:`: random machines with children that are valid by
//! construction compile, and their lowered order keeps every `after:`; the same machines with
//! one mistake injected are refused, every error located with a fix, one on the mistake's line.

use proptest::prelude::*;

use crate::diag::{Diagnostic, Diagnostics, Loc, SourceFile};
use crate::lower;
use crate::model::Machine;
use crate::read::{from_yaml, yaml};
use crate::validate;

/// The phases: `P0` initial, `P3` terminal, a chain of handler edges.
const PHASES: [&str; 4] = ["P0", "P1", "P2", "P3"];

/// One child: its type, the phases it exists in, the earlier children it waits for.
#[derive(Clone, Debug)]
struct Child {
    ty: &'static str,
    phases: Vec<usize>,
    after: Vec<usize>,
}

/// A valid machine: children whose `after:` name earlier children existing in every phase of
/// theirs (so no circle and nothing waited for is missing), conditions derived from them, and
/// a rule on `P1 -> P2` reading one whose child exists in `P1`.
#[derive(Clone, Debug)]
struct Spec {
    children: Vec<Child>,
    /// Per derived condition `D{i}`: its child and whether it reads `.ready` (else `.Complete`).
    derived: Vec<(usize, bool)>,
    /// The derived condition `P1 -> P2` waits for.
    rule: Option<usize>,
}

/// One mistake, and the child (or condition) whose line it is on.
#[derive(Clone, Copy, Debug)]
enum Fault {
    UnknownPhase(usize),
    AfterItself(usize),
    AfterUnknown(usize),
    NotAType(usize),
    FromUnknownChild(usize),
    /// `P0 -> P1` waits for `D{i}`, whose child does not exist in `P0`.
    ReadWhereAbsent(usize),
    /// The child waits for another in the terminal phase.
    AfterInTerminal(usize),
}

fn spec() -> impl Strategy<Value = Spec> {
    let phases = prop::sample::subsequence(vec![0usize, 1, 2], 1..=3);
    let child = (
        prop::sample::select(vec!["Secret", "Job", "k8s::Custom<T>"]),
        phases,
    );
    prop::collection::vec(child, 1..5)
        .prop_flat_map(|children| {
            let n = children.len();
            let wants = prop::collection::vec(prop::collection::vec(0..n, 0..3), n);
            let derived = prop::collection::vec((0..n, any::<bool>()), 0..4);
            (Just(children), wants, derived, any::<prop::sample::Index>())
        })
        .prop_map(|(children, wants, derived, pick)| {
            let mut built: Vec<Child> = Vec::new();
            for ((ty, phases), wants) in children.into_iter().zip(wants) {
                let mut after: Vec<usize> = (wants.into_iter())
                    .filter(|&j| j < built.len())
                    .filter(|&j| phases.iter().all(|p| built[j].phases.contains(p)))
                    .collect();
                after.sort_unstable();
                after.dedup();
                built.push(Child { ty, phases, after });
            }
            let readable: Vec<usize> = (0..derived.len())
                .filter(|&d| built[derived[d].0].phases.contains(&1))
                .collect();
            let rule = (!readable.is_empty()).then(|| readable[pick.index(readable.len())]);
            Spec {
                children: built,
                derived,
                rule,
            }
        })
}

fn fault(spec: &Spec, kind: u8, at: prop::sample::Index) -> Option<Fault> {
    let child = at.index(spec.children.len());
    Some(match kind % 7 {
        0 => Fault::UnknownPhase(child),
        1 => Fault::AfterItself(child),
        2 => Fault::AfterUnknown(child),
        3 => Fault::NotAType(child),
        4 => Fault::FromUnknownChild(at.index(spec.derived.len().max(1))),
        5 => {
            let absent = (0..spec.derived.len())
                .find(|&d| !spec.children[spec.derived[d].0].phases.contains(&0))?;
            Fault::ReadWhereAbsent(absent)
        }
        _ => Fault::AfterInTerminal(child),
    })
}

/// The spec's YAML with `fault` injected, and the 1-based line of the mistake.
fn text(spec: &Spec, fault: Option<Fault>) -> (String, usize) {
    let mut out = String::from(
        "phases:\n  P0: { initial: true }\n  P1: {}\n  P2: {}\n  P3: { terminal: true }\nchildren:\n",
    );
    let mut lines = 6;
    let mut fault_line = 0;
    let names = |ids: &[usize]| ids.iter().map(|i| format!("c{i}")).collect::<Vec<_>>();
    for (i, child) in spec.children.iter().enumerate() {
        let mut phases: Vec<String> = child.phases.iter().map(|&p| PHASES[p].to_owned()).collect();
        let mut after = names(&child.after);
        let mut ty = child.ty;
        match fault {
            Some(Fault::UnknownPhase(c)) if c == i => phases.push("Nowhere".into()),
            Some(Fault::AfterItself(c)) if c == i => after.push(format!("c{i}")),
            Some(Fault::AfterUnknown(c)) if c == i => after.push("ghost".into()),
            Some(Fault::NotAType(c)) if c == i => ty = "not a type!",
            Some(Fault::AfterInTerminal(c)) if c == i => {
                phases = vec!["P3".into()];
                after = vec!["other".into()];
            }
            _ => {}
        }
        lines += 1;
        if matches!(fault, Some(
            Fault::UnknownPhase(c) | Fault::AfterItself(c) | Fault::AfterUnknown(c)
            | Fault::NotAType(c) | Fault::AfterInTerminal(c)) if c == i)
        {
            fault_line = lines;
        }
        out.push_str(&format!(
            "  c{i}: {{ type: \"{ty}\", phases: [{}], after: [{}] }}\n",
            phases.join(", "),
            after.join(", ")
        ));
    }
    if matches!(fault, Some(Fault::AfterInTerminal(_))) {
        // The child it waits for, there too: the only mistake is waiting in a terminal phase.
        out.push_str("  other: { type: Secret, phases: [P3] }\n");
        lines += 1;
    }
    out.push_str("conditions:\n  Plain: {}\n");
    lines += 2;
    for (d, &(child, ready)) in spec.derived.iter().enumerate() {
        let source = if ready { "ready" } else { "Complete" };
        let from = match fault {
            Some(Fault::FromUnknownChild(f)) if f == d => "ghost".to_owned(),
            _ => format!("c{child}"),
        };
        lines += 1;
        if matches!(fault, Some(Fault::FromUnknownChild(f)) if f == d) {
            fault_line = lines;
        }
        out.push_str(&format!("  D{d}: {{ from: {from}.{source} }}\n"));
    }
    out.push_str("transitions:\n");
    lines += 1;
    let entry = match fault {
        Some(Fault::ReadWhereAbsent(d)) => format!(", when: D{d}"),
        _ => String::new(),
    };
    lines += 1;
    if matches!(fault, Some(Fault::ReadWhereAbsent(_))) {
        fault_line = lines;
    }
    out.push_str(&format!("  - {{ from: P0, to: P1{entry} }}\n"));
    let rule = spec
        .rule
        .map(|d| format!(", when: D{d}"))
        .unwrap_or_default();
    out.push_str(&format!("  - {{ from: P1, to: P2{rule} }}\n"));
    out.push_str("  - { from: P2, to: P3, when: Plain }\n");
    (out, fault_line)
}

/// The machine and the errors of `text`.
fn compile(text: &str) -> (Machine, Vec<Diagnostic>, SourceFile) {
    let file = SourceFile::new("specs/children.yaml", text);
    let mut diags = Diagnostics::default();
    let node = yaml::parse(&file.text).expect("the generated YAML parses");
    let raw = from_yaml::read(&node, &file, &mut diags);
    let machine = validate::validate(&raw, &mut diags);
    (machine, diags.into_vec(), file)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn valid_children_compile_and_are_applied_after_what_they_wait_for(spec in spec()) {
        let (text, _) = text(&spec, None);
        let (machine, errors, file) = compile(&text);
        let rendered: Vec<String> = errors.iter().map(|d| d.render(Some(&file))).collect();
        prop_assert!(errors.is_empty(), "{text}\n{}", rendered.join("\n"));
        let order: Vec<usize> = lower::children::children(&machine).iter().map(|c| c.index).collect();
        prop_assert_eq!(order.len(), spec.children.len(), "every child is lowered");
        for (i, child) in spec.children.iter().enumerate() {
            let at = order.iter().position(|&c| c == i).unwrap();
            for &a in &child.after {
                let waited = order.iter().position(|&c| c == a).unwrap();
                prop_assert!(waited < at, "c{a} before c{i}: {order:?}\n{text}");
            }
        }
    }

    #[test]
    fn one_mistake_is_refused_at_its_line_with_a_fix(
        spec in spec(),
        kind in any::<u8>(),
        at in any::<prop::sample::Index>(),
    ) {
        let Some(fault) = fault(&spec, kind, at) else {
            return Ok(());
        };
        if matches!(fault, Fault::FromUnknownChild(_)) && spec.derived.is_empty() {
            return Ok(());
        }
        let (text, line) = text(&spec, Some(fault));
        let (_, errors, file) = compile(&text);
        prop_assert!(!errors.is_empty(), "{fault:?} is refused:\n{text}");
        let mut on_line = false;
        for error in &errors {
            let rendered = error.render(Some(&file));
            let Loc::File(pos) = error.loc else {
                return Err(TestCaseError::fail(format!("not located: {rendered}")));
            };
            prop_assert!(!error.help.is_empty(), "a fix for: {rendered}");
            on_line |= pos.line == line;
        }
        let rendered: Vec<String> = errors.iter().map(|d| d.render(Some(&file))).collect();
        prop_assert!(on_line, "{fault:?} at line {line}:\n{text}\n{}", rendered.join("\n"));
    }
}
