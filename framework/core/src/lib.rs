#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod abi;
#[cfg(feature = "engine")]
pub mod analysis;
pub mod arrivals;
#[cfg(feature = "engine")]
pub mod blocks;
pub mod conversation;
#[cfg(feature = "engine")]
pub mod cpu;
pub mod dist;
#[cfg(feature = "engine")]
pub mod engine;
#[cfg(feature = "engine")]
pub mod gguf;
#[cfg(feature = "engine")]
pub mod images;
pub mod manifest;
#[cfg(feature = "engine")]
pub mod metrics;
#[cfg(feature = "engine")]
pub mod pacer;
pub mod plan;
pub mod plugin;
pub mod prefix;
pub mod record;
pub mod registry;
pub mod results;
pub mod rng;
#[cfg(feature = "engine")]
pub mod server_metrics;
pub mod shard;
pub mod slo;
pub mod spec;
#[cfg(all(test, feature = "engine"))]
mod test_http;
pub mod timefmt;
#[cfg(feature = "engine")]
pub mod tokens;
#[cfg(feature = "engine")]
pub mod transport;
pub mod wire;

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
