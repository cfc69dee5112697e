//! From intent to a running engine, once for every front end.
//!
//! Flags (`batchbench`, `batchbench-agent`), a `--config` file or a Python dict
//! resolve into one typed [`RunSpec`](batchbench_contract::spec::RunSpec); then
//! [`assemble::execute`] builds the plugins, the target, the transport and the
//! engine from it and runs it. No front end builds any of these itself.
//!
//! | module | what |
//! |---|---|
//! | [`flags`] | the flags both commands share and their resolution into a spec |
//! | [`commands`] | the two commands: their own flags, CSV columns and report view |
//! | [`view`] | flat configuration views and the CSV columns they declare |
//! | [`config`] | reading and printing run-spec files |
//! | [`assemble`] | the one assembly: spec in, summary out |
//! | [`series`] | `sweep` and `capacity`: runs over one load dimension |
//! | [`report`] | `batchbench report`: the HTML report of results directories |
//! | [`merge`] | `batchbench merge`: a sharded run's results joined exactly |
//! | [`exit`] | exit codes |

pub mod analyze;
pub mod assemble;
pub mod commands;
pub mod config;
pub mod exit;
pub mod flags;
pub mod merge;
pub mod plugins;
pub mod progress;
pub mod report;
pub mod series;
pub mod view;

// The built-in plugins register themselves; naming the crates keeps them linked.
use batchbench_clickhouse as _;
use batchbench_plugins as _;
