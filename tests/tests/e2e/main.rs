//! End-to-end tests: one binary, a module per feature.

mod agents;
mod analyze;
mod batch;
mod bodies;
mod book;
mod codecs;
mod contract;
mod converge;
mod datasets;
mod energy;
mod faults;
mod fleet;
mod live;
mod load;
mod reasoning;
mod replay;
mod results;
mod series;
mod shard;
mod sim;
mod slo;
mod snapshots;
mod spans;
mod spec;
mod tokens;
mod warmup;
