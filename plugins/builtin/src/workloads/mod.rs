//! Workload sources: where a run's trajectories come from. One file per
//! plugin, named as users name it (`--workload NAME`); recorded datasets and
//! public traces, which share their readers, under [`datasets`].

pub mod datasets;
pub mod finite_batch;
pub mod replay_jsonl;
pub mod request_bodies;
pub mod synthetic_agents;
