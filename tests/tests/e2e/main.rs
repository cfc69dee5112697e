//! End-to-end tests: one binary, a module per feature.

mod agents;
mod batch;
mod contract;
mod replay;
mod sim;
mod tokens;
