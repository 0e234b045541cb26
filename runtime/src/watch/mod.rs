//! The connection to the API server and what it delivers: the client, `Api` construction,
//! the watch streams (selection by shard, decoding, pacing), the caches handlers read, the
//! connection's health, the pacing of requests, and the watches several machines share.

pub(crate) mod cache;
pub(crate) mod client;
pub(crate) mod health;
pub(crate) mod pace;
pub(crate) mod scope;
pub(crate) mod shared;
mod stream;

pub(crate) use stream::{Lenient, cached, objects, paced, selected};
