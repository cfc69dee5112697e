#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod admission;
pub mod analysis;
pub mod arrivals;
pub mod blocks;
pub mod converge;
pub mod cpu;
mod dry_run;
pub mod endpoints;
pub mod gguf;
pub mod gpu;
pub mod images;
pub mod interval;
mod latency;
mod live;
mod load;
pub mod metrics;
mod options;
pub mod pacer;
pub mod prefix;
pub mod run;
mod scrape;
pub mod server_metrics;
pub mod shard;
pub mod slo;
mod state;
mod steady;
mod summary;
mod synth;
#[cfg(test)]
mod test_http;
pub mod tokens;
pub mod transport;
mod turn;
