//! The built-in batchbench plugins. Each registers itself exactly as an external
//! plugin crate would, through the `register_*!` macros of `batchbench-contract`.
//!
//! | kind | name | what |
//! |---|---|---|
//! | workload | `finite_batch` | users x requests-per-user independent requests |
//! | workload | `synthetic_agents` | stateful agent loops with sampled shapes |
//! | workload | `replay_jsonl` | trajectory replay from a v1/v2 JSONL manifest |
//! | workload | `request_bodies` | caller-written request bodies, verbatim |
//! | workload | `sharegpt`, `prompts_jsonl` | recorded prompts and conversations, verbatim |
//! | workload | `mooncake`, `azure_trace`, `burstgpt` | public traces as exact synthetic requests |
//! | codec | `openai_chat` | OpenAI chat completions, JSON and SSE, `--sglang` fields |
//! | codec | `openai_completions` | OpenAI completions: the conversation as one prompt |
//! | codec | `openai_responses` | OpenAI Responses, stateless or with `previous_response_id` |
//! | codec | `anthropic_messages` | Anthropic Messages: content blocks, `tool_use`, `tool_result` |
//! | codec | `sglang_generate` | SGLang's native `/generate` |
//! | codec | `openai_embeddings` | OpenAI embeddings: each message one input |
//! | router | `user_tag` | `user` field + `X-SMG-Routing-Key`, stable per agent |
//! | router | `dp_rank` | `X-SMG-Target-Worker: slot % ranks` |
//! | reporter | `agent_events` | one JSON line per trajectory |
//! | reporter | `console_summary` | the human-readable summary on stdout |
//! | reporter | `csv` | one CSV row per run, appended |
//! | reporter | `json_summary` | the whole summary as one JSON document |
//! | reporter | `requests_jsonl` | one JSON line per request |
//! | reporter | `results_dir` | the versioned results directory of a run |
//!
//! A binary that uses these must name the crate (`use batchbench_plugins as _;`),
//! or the linker drops the registrations.

pub mod agents;
pub mod anthropic;
pub mod batch;
pub mod bodies;
pub mod completions;
pub mod csv_report;
pub mod datasets;
pub mod embeddings;
pub mod events;
pub mod json_summary;
pub mod metrics_listen;
pub mod openai;
pub mod replay;
pub mod requests_jsonl;
pub mod responses;
pub mod results_dir;
pub mod routers;
pub mod routing;
pub mod sglang;
pub mod summary;
mod wire_util;
pub use batchbench_contract::timefmt;

/// Names of every built-in plugin, by kind: the contract the registry test checks.
pub const BUILTINS: &[(&str, &str)] = &[
    ("workload", "azure_trace"),
    ("workload", "burstgpt"),
    ("workload", "finite_batch"),
    ("workload", "mooncake"),
    ("workload", "prompts_jsonl"),
    ("workload", "replay_jsonl"),
    ("workload", "request_bodies"),
    ("workload", "sharegpt"),
    ("workload", "synthetic_agents"),
    ("codec", "anthropic_messages"),
    ("codec", "openai_chat"),
    ("codec", "openai_completions"),
    ("codec", "openai_embeddings"),
    ("codec", "openai_responses"),
    ("codec", "sglang_generate"),
    ("router", "dp_rank"),
    ("router", "least_outstanding"),
    ("router", "prefix_affinity"),
    ("router", "random"),
    ("router", "round_robin"),
    ("router", "session_affinity"),
    ("router", "user_tag"),
    ("reporter", "agent_events"),
    ("reporter", "console_summary"),
    ("reporter", "csv"),
    ("reporter", "json_summary"),
    ("reporter", "metrics_listen"),
    ("reporter", "requests_jsonl"),
    ("reporter", "results_dir"),
];
