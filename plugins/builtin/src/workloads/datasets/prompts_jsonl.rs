//! `prompts_jsonl`: one prompt per line,
//! `{"prompt": "...", "output_tokens": 128, "id": "...", "timestamp": ms, "metadata": {...}}`,
//! each sent verbatim as one request. Only `prompt` is required; `metadata` is
//! kept out of the request.

use super::{Item, Listed, bad, existing, lines, object, offsets, text_block, text_request, whole};
use batchbench_contract::plan::BlockRole;
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Config of `prompts_jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptsJsonlConfig {
    /// The JSONL file.
    pub path: PathBuf,
    /// Output tokens of a line that gives none (absent: unconstrained).
    #[serde(default)]
    pub output_tokens: Option<u32>,
    /// Replay at most this many prompts.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Builds the workload.
pub fn build(cfg: PromptsJsonlConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("prompts_jsonl", &cfg.path)?;
    let mut items = Vec::new();
    for (n, text) in lines(&path)? {
        let o = object(
            &path,
            n,
            &text,
            &["prompt", "output_tokens", "id", "timestamp", "metadata"],
        )?;
        let prompt = match o.get("prompt") {
            Some(serde_json::Value::String(p)) if !p.is_empty() => p.as_str(),
            Some(serde_json::Value::String(_)) => {
                return Err(bad(&path, n, "prompt: must not be empty"));
            }
            Some(v) => return Err(bad(&path, n, format!("prompt: {v} is not a string"))),
            None => return Err(bad(&path, n, "prompt: the prompt text is required")),
        };
        let output = whole(&path, n, &o, "output_tokens", u64::from(u32::MAX))?;
        if output == Some(0) {
            return Err(bad(&path, n, "output_tokens: must be at least 1"));
        }
        let start = match o.get("timestamp") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or_else(|| bad(&path, n, format!("timestamp: {v} is not a time in ms")))?
                    as u64,
            ),
        };
        let id = match o.get("id") {
            None | Some(serde_json::Value::Null) => format!("line-{n}"),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        // Sent as written: no tokenizer is needed, and none is loaded to count it.
        let block = text_block(format!("prompt:{n}"), prompt, 0, BlockRole::User);
        let output = output.map(|o| o as u32).or(cfg.output_tokens);
        items.push(Item {
            id,
            start_after_ms: start,
            requests: vec![text_request(vec![block], output)],
        });
    }
    offsets(&mut items);
    Listed::new("prompts_jsonl", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "prompts_jsonl",
    description: "one prompt per JSONL line ({\"prompt\", \"output_tokens\", \"id\", \"timestamp\", \"metadata\"}), sent verbatim",
    example: r#"{"path": "examples/datasets/prompts.jsonl", "output_tokens": 128}"#,
    config: PromptsJsonlConfig,
    build: build,
}
