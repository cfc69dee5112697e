//! `mooncake`: Mooncake's trace JSONL (`timestamp` ms, `input_length`,
//! `output_length`, `hash_ids`): each hash id is a block of `block_tokens`
//! (512) exact tokens made from the id alone, so requests that share leading
//! ids share a byte-identical prefix, as the production cluster's did.

use super::{Item, Listed, bad, existing, lines, offsets, synthetic};
use batchbench_contract::plan::{Block, BlockRole, Blocks, PlannedRequest};
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Config of `mooncake`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MooncakeConfig {
    /// The trace (JSONL).
    pub path: PathBuf,
    /// Tokens per hash block.
    #[serde(default = "default_block_tokens")]
    pub block_tokens: u32,
    /// Replay at most this many requests.
    #[serde(default)]
    pub limit: Option<usize>,
}

fn default_block_tokens() -> u32 {
    512
}

struct MooncakeRow {
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u64>,
}

fn mooncake_row(path: &Path, n: usize, text: &str) -> Result<MooncakeRow, PluginError> {
    let keys = ["timestamp", "input_length", "output_length", "hash_ids"];
    let o = super::object(path, n, text, &keys)?;
    let need = |k: &str, max: u64| {
        super::whole(path, n, &o, k, max)?
            .ok_or_else(|| bad(path, n, format!("{k}: the field is required")))
    };
    let hash_ids = match o.get("hash_ids") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, h)| {
                h.as_u64().ok_or_else(|| {
                    bad(path, n, format!("hash_ids[{i}]: {h} is not a whole number"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(bad(path, n, format!("hash_ids: {v} is not an array"))),
    };
    Ok(MooncakeRow {
        timestamp: need("timestamp", u64::MAX)?,
        input_length: need("input_length", u64::from(u32::MAX))? as u32,
        output_length: need("output_length", u64::from(u32::MAX))? as u32,
        hash_ids,
    })
}

/// Builds `mooncake`.
pub fn mooncake(cfg: MooncakeConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("mooncake", &cfg.path)?;
    if cfg.block_tokens == 0 {
        return Err(PluginError::Config {
            plugin: "mooncake".into(),
            message: "block_tokens must be at least 1".into(),
        });
    }
    let bt = cfg.block_tokens;
    let mut items = Vec::new();
    for (n, text) in lines(&path)? {
        let r = mooncake_row(&path, n, &text)?;
        if r.input_length == 0 || r.output_length == 0 {
            return Err(bad(
                &path,
                n,
                "input_length and output_length must be at least 1",
            ));
        }
        let blocks = u64::from(r.input_length).div_ceil(u64::from(bt));
        if !r.hash_ids.is_empty() && r.hash_ids.len() as u64 != blocks {
            return Err(bad(
                &path,
                n,
                format!(
                    "hash_ids: {} blocks of {bt} tokens do not make input_length {} ({blocks} blocks)",
                    r.hash_ids.len(),
                    r.input_length
                ),
            ));
        }
        let request = if r.hash_ids.is_empty() {
            synthetic(r.input_length, r.output_length)
        } else {
            // One block per hash id, the last holding the remainder; each a
            // user message whose text is made from its id alone.
            let list: Vec<Block> = r
                .hash_ids
                .iter()
                .enumerate()
                .map(|(i, h)| Block {
                    seed: format!("mooncake:{h}").into(),
                    tokens: if i + 1 == r.hash_ids.len() {
                        r.input_length - bt * (r.hash_ids.len() as u32 - 1)
                    } else {
                        bt
                    },
                    role: BlockRole::User,
                    live: false,
                    text: None,
                })
                .collect();
            PlannedRequest {
                prompt_tokens: Some(r.input_length),
                output_tokens: Some(r.output_length),
                blocks: Some(Blocks::from(list)),
                ..PlannedRequest::default()
            }
        };
        items.push(Item {
            id: format!("line-{n}"),
            start_after_ms: Some(r.timestamp),
            requests: vec![request],
        });
    }
    offsets(&mut items);
    Listed::new("mooncake", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "mooncake",
    description: "a Mooncake trace (timestamp, input_length, output_length, hash_ids of 512-token blocks): shared hash ids become shared prompt prefixes",
    example: r#"{"path": "examples/datasets/mooncake.jsonl", "block_tokens": 512}"#,
    config: MooncakeConfig,
    build: mooncake,
}
