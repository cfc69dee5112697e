#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod admission;
pub mod analysis;
pub mod audio;
mod dry_run;
mod live;
pub mod measurement;
pub mod models;
mod options;
pub mod run;
pub mod schedule;
mod scrape;
mod state;
pub mod synthesis;
pub mod telemetry;
#[cfg(test)]
mod test_http;
pub mod tokens;
pub mod transport;
