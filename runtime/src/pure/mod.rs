//! The pure decisions: what the next move is, drift, resourceVersion order, merge patches,
//! backoff, pausing, the status a failed step still keeps, the ecosystem's conditions (Ready,
//! Reconciling, Stalled), errors as sentences people read, label
//! selectors, what a cache keeps, who wrote the phase, names made DNS labels. No client, no I/O, no clock but the one
//! passed in; imports only the model.

pub(crate) mod backoff;
pub(crate) mod bookkeeping;
pub(crate) mod decide;
pub(crate) mod drift;
pub(crate) mod merge_patch;
pub(crate) mod message;
pub(crate) mod pause;
pub(crate) mod readiness;
pub(crate) mod rebase;
pub(crate) mod refusal;
pub(crate) mod selection;
pub(crate) mod slim;
pub(crate) mod version;
pub(crate) mod writer;
