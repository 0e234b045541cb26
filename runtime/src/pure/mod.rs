//! The pure decisions: what the next move is, drift, resourceVersion order, merge patches,
//! backoff, label selectors, what a cache keeps. No client, no I/O, no clock but the one
//! passed in; imports only the model.

pub mod backoff;
pub mod decide;
pub mod drift;
pub mod merge_patch;
pub(crate) mod selection;
pub(crate) mod slim;
pub(crate) mod version;
