#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod abi;
pub mod analysis;
pub mod audio;
pub mod conversation;
pub mod dist;
pub mod manifest;
pub mod models;
mod names;
pub mod plan;
pub mod plugin;
pub mod prefix;
pub mod record;
pub mod registry;
pub mod results;
pub mod rng;
pub mod shard;
pub mod slo;
pub mod spec;
pub mod timefmt;
pub mod wire;

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
