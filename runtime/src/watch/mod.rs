//! The connection to the API server and what it delivers: the client, `Api` construction,
//! the watch streams (selection by shard, decoding, pacing), the caches handlers read, the
//! connection's health and the pacing of requests.

pub(crate) mod cache;
pub(crate) mod client;
pub(crate) mod health;
pub(crate) mod pace;
pub(crate) mod scope;
mod stream;

pub(crate) use stream::{Lenient, cached, objects, paced, selected};
