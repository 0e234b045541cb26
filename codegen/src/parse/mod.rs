//! Parse: the attribute's arguments (`args`) and the inline spec language (`dsl`) into
//! `args::Input`.

pub mod args;
pub mod dsl;
