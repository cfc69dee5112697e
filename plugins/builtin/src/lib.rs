//! The built-in batchbench plugins. Each registers itself exactly as an external
//! plugin crate would, through the `register_*!` macros of `batchbench-contract`.
//!
//! The crate is laid out by kind, a file per plugin named as users name it:
//! `workloads/` (recorded datasets and traces in `workloads/datasets/`),
//! `codecs/` (with `wire.rs`, what they share), `routers/` (decorators and
//! routing policies) and `reporters/`.
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
//! | codec | `rerank` | rerank (`/v1/rerank`, `/v2/rerank`) and score (`/v1/score`): a query and documents |
//! | codec | `openai_transcriptions` | speech to text (`/v1/audio/transcriptions`, `/v1/audio/translations`): a form upload |
//! | router | `user_tag` | `user` field + `X-SMG-Routing-Key`, stable per agent |
//! | router | `dp_rank` | `X-SMG-Target-Worker: slot % ranks` |
//! | router | `request_ids` | a seeded `X-Request-Id` and W3C `traceparent` per request |
//! | router | `body_fields` | fixed fields in every request body (a server's own parameters) |
//! | router | `round_robin` | routing policy: each request to the next endpoint |
//! | router | `random` | routing policy: a seeded random endpoint per request |
//! | router | `least_outstanding` | routing policy: the fewest requests in flight |
//! | router | `session_affinity` | routing policy: a conversation stays on one endpoint |
//! | router | `prefix_affinity` | routing policy: a shared prompt prefix to one endpoint |
//! | reporter | `agent_events` | one JSON line per trajectory |
//! | reporter | `console_summary` | the human-readable summary on stdout |
//! | reporter | `csv` | one CSV row per run, appended |
//! | reporter | `json_summary` | the whole summary as one JSON document |
//! | reporter | `metrics_listen` | the client's own metrics, a Prometheus page |
//! | reporter | `requests_jsonl` | one JSON line per request |
//! | reporter | `results_dir` | the versioned results directory of a run |
//!
//! A binary that uses these must name the crate (`use batchbench_plugins as _;`),
//! or the linker drops the registrations.

pub mod codecs;
pub mod reporters;
pub mod routers;
pub mod workloads;
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
    ("codec", "openai_transcriptions"),
    ("codec", "rerank"),
    ("codec", "sglang_generate"),
    ("router", "body_fields"),
    ("router", "dp_rank"),
    ("router", "least_outstanding"),
    ("router", "prefix_affinity"),
    ("router", "random"),
    ("router", "request_ids"),
    ("router", "round_robin"),
    ("router", "session_affinity"),
    ("router", "user_tag"),
    ("reporter", "agent_events"),
    ("reporter", "console_summary"),
    ("reporter", "csv"),
    ("reporter", "json_summary"),
    ("reporter", "metrics_listen"),
    ("reporter", "otlp_spans"),
    ("reporter", "requests_jsonl"),
    ("reporter", "results_dir"),
];

#[cfg(test)]
mod tests {
    /// Every built-in lives in its kind's folder, in a file named as users
    /// name it (a recorded dataset or trace under `workloads/datasets/`): a
    /// newcomer finds any plugin from its name alone.
    #[test]
    fn every_builtin_is_a_file_named_after_it_in_its_kinds_folder() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for (kind, name) in super::BUILTINS {
            let dir = src.join(format!("{kind}s"));
            let file = format!("{name}.rs");
            let found = dir.join(&file).is_file() || dir.join("datasets").join(&file).is_file();
            assert!(found, "the {kind} {name} is not in {kind}s/{file}");
        }
    }
}
