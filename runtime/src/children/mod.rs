//! Children declared in the spec (`children:`): what the engine knows of each after a step
//! applied or looked it up, whether it is ready ([`kstatus`]'s rules, or one of its
//! conditions), and the conditions the spec derives from it (`from: child.ready`). Pure: the
//! requests are the handler layer's (`handler::declared`).

pub mod kstatus;
mod observed;

pub use kstatus::{Health, Status};
pub use observed::{ChildCondition, Derived, Observed, Seen, derived};

/// The label the engine puts on every declared child: its name in the spec, so that a child
/// is found (and pruned) without calling its builder.
pub const CHILD_LABEL: &str = "kube-fsm.dev/child";
