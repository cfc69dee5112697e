//! `replay_jsonl`: trajectory replay from a JSONL manifest (schema versions 1 and 2,
//! mixed freely). The manifest model and its parser are part of the contract
//! ([`batchbench_contract::manifest`]), so other plugins (ClickHouse) reuse them.

pub use batchbench_contract::manifest::{Manifest, Replay, ReplayConfig, digest, load};

batchbench_contract::register_workload! {
    name: "replay_jsonl",
    description: "trajectory replay from a JSONL manifest (schema versions 1 and 2: token shapes, shared-prefix blocks, think times, start offsets)",
    example: r#"{"path": "examples/trajectory-replay/plans-v2.jsonl", "order_by_start": true}"#,
    config: ReplayConfig,
    build: Replay::new,
}
