//! Children of an object and what they report: whether a child is ready, by [`kstatus`]'s
//! rules for its kind (the same verdicts as kstatus itself, which kpt, Flux and Argo CD read),
//! for handlers that turn a child's state into a condition.

pub mod kstatus;

pub use kstatus::{Health, Status};
