#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod abi;
pub mod blocks;
pub mod conversation;
pub mod dist;
pub mod engine;
pub mod gguf;
pub mod metrics;
pub mod plan;
pub mod plugin;
pub mod registry;
pub mod rng;
pub mod tokens;
pub mod transport;
pub mod wire;

#[doc(hidden)]
pub mod __private {
    pub use inventory;
}
