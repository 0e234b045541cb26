//! What a phase handler works with: the `Context` (client, caches, recorder), the `Step` it
//! records its intent in (conditions, applies, deletes, Events), children, the glue the macro
//! generates, and the plan a step turns into.

pub(crate) mod children;
pub(crate) mod context;
pub(crate) mod dispatch;
pub(crate) mod step;
pub(crate) mod step_plan;
