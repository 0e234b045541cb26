//! What a phase handler works with: the [`crate::Context`] (client, caches, recorder), the
//! [`crate::Step`] it records its intent in (conditions, applies, deletes, Events), children
//! ([`Applied`]), the glue the macro generates ([`Dispatch`]), and (inside the crate) the plan a
//! step turns into.

pub(crate) mod children;
pub(crate) mod context;
pub(crate) mod declared;
pub(crate) mod dispatch;
pub(crate) mod step;
pub(crate) mod step_error;
pub(crate) mod step_plan;

pub use children::Applied;
pub use context::{Context, ContextError};
pub use declared::Wiring;
pub use dispatch::Dispatch;
pub use step::Step;
