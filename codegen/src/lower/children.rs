//! The declared children as the generated code spells them: one builder method per child
//! (named as the child), its Rust type and doc, in `after:` order (every child after those
//! it waits for), which is the order a step applies them in.

use proc_macro2::Ident;
use quote::format_ident;

use crate::model::{Child, Machine};

/// One declared child.
#[derive(Debug)]
pub struct LoweredChild {
    /// Its index in the spec (and in `MachineData::children`).
    pub index: usize,
    /// Its name in the spec, as the generated code's string.
    pub name: String,
    /// The builder method.
    pub method: Ident,
    /// Its Rust type.
    pub ty: syn::Type,
    /// Whether it takes part in an `after:` order (waits for a child, or is waited for): on
    /// the object's deletion such children are removed in reverse order.
    pub ordered: bool,
    pub doc: String,
}

/// The machine's children in `after:` order (spec order among those that do not wait on one
/// another). The checks have refused `after:` circles and types that do not parse; a child
/// that slipped through either is left out rather than panicking.
pub fn children(machine: &Machine) -> Vec<LoweredChild> {
    let mut order: Vec<usize> = Vec::new();
    while order.len() < machine.children.len() {
        let next = (0..machine.children.len()).find(|i| {
            !order.contains(i) && machine.children[*i].after.iter().all(|a| order.contains(a))
        });
        match next {
            Some(i) => order.push(i),
            None => break,
        }
    }
    order
        .into_iter()
        .filter_map(|index| {
            let child = &machine.children[index];
            Some(LoweredChild {
                index,
                name: child.name.clone(),
                method: format_ident!("{}", child.name),
                ty: syn::parse_str(&child.type_path).ok()?,
                ordered: !child.after.is_empty()
                    || machine.children.iter().any(|c| c.after.contains(&index)),
                doc: doc(machine, child),
            })
        })
        .collect()
}

fn doc(machine: &Machine, child: &Child) -> String {
    let phases: Vec<String> = (child.phases.iter())
        .map(|&p| format!("`{}`", machine.phases[p].name))
        .collect();
    let mut doc = format!(
        "Builds the child `{}` (a `{}`), which the engine applies in {} by server-side apply",
        child.name,
        child.type_path,
        phases.join(", ")
    );
    if !child.after.is_empty() {
        let after: Vec<String> = (child.after.iter())
            .map(|&a| format!("`{}`", machine.children[a].name))
            .collect();
        doc.push_str(&format!(
            " once {} {} ready",
            after.join(" and "),
            if after.len() == 1 { "is" } else { "are" }
        ));
    }
    doc.push_str(if child.once {
        ", creating it when it is missing and never updating it"
    } else {
        ", on every step (no request when it is unchanged)"
    });
    doc.push_str(if child.delete_on_leave {
        "; it is deleted in the other phases."
    } else {
        "; it is kept in the other phases."
    });
    doc.push_str(&format!(
        "\n\nReturn what it should look like, nothing else: the engine names it `{{object}}-{}` unless you set a name, and adds the namespace, the owner reference and the label `kube-fsm.dev/child: {}`.",
        child.name.replace('_', "-"),
        child.name
    ));
    if let Some(description) = &child.description {
        doc.push_str("\n\n");
        doc.push_str(description);
    }
    doc
}
