//! Read: the spec file from disk (`load`), its YAML (`yaml`, our own reader over
//! granit-parser's events) and the document as a `spec::RawSpec` (`from_yaml`).

pub mod from_yaml;
pub mod load;
pub mod yaml;
