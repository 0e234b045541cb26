//! Parse: the attribute's arguments (`args`) and the inline spec language (`dsl`) into
//! `args::Input`.

pub mod args;
mod children;
pub mod dsl;
