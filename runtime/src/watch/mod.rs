//! The connection to the API server and what it delivers: the client ([`crate::client`]),
//! scoped `Api`s ([`Scoped`], [`ScopedApi`]), the caches handlers read ([`Cache`]), the
//! connection's [`Health`]; inside the crate, the watch streams (selection by shard, decoding,
//! pacing), the pacing of requests, and the watches several machines share.

pub(crate) mod cache;
pub(crate) mod client;
pub(crate) mod gate;
pub(crate) mod health;
pub(crate) mod pace;
pub(crate) mod scope;
pub(crate) mod shared;
mod stream;

pub use cache::{Cache, Cached, Watched};
pub use client::client;
pub(crate) use health::Watch;
pub use health::{Connection, Health};
pub use scope::{Scoped, ScopedApi};
pub(crate) use stream::{Lenient, bounded, cached, objects, paced, selected};
