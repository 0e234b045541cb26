//! What a phase handler works with: the `Context` (client, caches, recorder), the `Step` it
//! records its intent in (conditions, applies, deletes, Events), children, the glue the macro
//! generates, and the plan a step turns into.

pub mod children;
pub mod context;
pub(crate) mod dispatch;
pub mod step;
pub mod step_plan;
