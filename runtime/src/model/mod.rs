//! The model: what `#[state_machine]` emits and the engine reads — the machine's static data,
//! its phases and conditions, the status, what a handler returns, the CRD. Plain data and
//! traits; imports no other layer.

pub(crate) mod conditions;
pub(crate) mod crd;
pub(crate) mod description;
pub(crate) mod diagram;
pub(crate) mod machine;
pub(crate) mod next;
pub(crate) mod state_machine;
pub(crate) mod status;
pub(crate) mod versions;
