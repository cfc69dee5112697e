//! Public request traces: token counts and times, no text. Every row becomes
//! one request with an exact synthetic prompt of its input length and its
//! output length, started at its timestamp in an open loop.
//!
//! - `mooncake`: Mooncake's JSONL (`timestamp` ms, `input_length`,
//!   `output_length`, `hash_ids`): each hash id is a block of `block_tokens`
//!   (512) exact tokens made from the id alone, so requests that share leading
//!   ids share a byte-identical prefix, as the production cluster's did.
//! - `azure_trace`: the Azure LLM inference trace CSV (`TIMESTAMP`,
//!   `ContextTokens`, `GeneratedTokens`).
//! - `burstgpt`: the BurstGPT CSV (`Timestamp` in seconds, `Model`, `Request
//!   tokens`, `Response tokens`, `Total tokens`, `Log Type`).

use super::{Item, Listed, bad, existing, lines, offsets};
use batchbench_contract::plan::{Block, BlockRole, Blocks, PlannedRequest};
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One request of an exact synthetic prompt.
fn synthetic(input: u32, output: u32) -> PlannedRequest {
    PlannedRequest {
        prompt_tokens: Some(input),
        output_tokens: Some(output),
        overhead_tokens: Some(0),
        ..PlannedRequest::default()
    }
}

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

/// Config of `azure_trace` and `burstgpt`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvTraceConfig {
    /// The trace (CSV with its header row).
    pub path: PathBuf,
    /// Replay at most this many requests.
    #[serde(default)]
    pub limit: Option<usize>,
    /// BurstGPT: only the rows of these models (`ChatGPT`, `GPT-4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    /// BurstGPT: keep the rows of failed requests (0 response tokens), sent
    /// with one output token.
    #[serde(default)]
    pub keep_failed: bool,
}

/// The rows of a CSV trace with their line numbers, as named columns.
fn csv_rows(path: &Path, columns: &[&str]) -> Result<Vec<(usize, Vec<String>)>, PluginError> {
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|e| PluginError::Plan(format!("cannot read {}: {e}", path.display())))?;
    let header = r
        .headers()
        .map_err(|e| bad(path, 1, e))?
        .iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let at: Vec<usize> = columns
        .iter()
        .map(|c| {
            header
                .iter()
                .position(|h| h.eq_ignore_ascii_case(c))
                .ok_or_else(|| {
                    bad(
                        path,
                        1,
                        format!("the header has no column {c:?} (it has {header:?})"),
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            bad(path, line, e)
        })?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        out.push((
            line,
            at.iter()
                .map(|&i| rec.get(i).unwrap_or("").to_owned())
                .collect(),
        ));
    }
    Ok(out)
}

fn tokens(path: &Path, line: usize, column: &str, v: &str) -> Result<u32, PluginError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0 && *x <= f64::from(u32::MAX))
        .map(|x| x as u32)
        .ok_or_else(|| bad(path, line, format!("{column}: {v:?} is not a token count")))
}

/// Builds `azure_trace`.
pub fn azure(cfg: CsvTraceConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("azure_trace", &cfg.path)?;
    if cfg.models.is_some() || cfg.keep_failed {
        return Err(PluginError::Config {
            plugin: "azure_trace".into(),
            message: "models and keep_failed are options of burstgpt".into(),
        });
    }
    let cols = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];
    let mut items = Vec::new();
    for (n, row) in csv_rows(&path, &cols)? {
        let ms = batchbench_contract::timefmt::parse_ms(&row[0])
            .map_err(|e| bad(&path, n, format!("TIMESTAMP: {e}")))?;
        let input = tokens(&path, n, cols[1], &row[1])?;
        let output = tokens(&path, n, cols[2], &row[2])?;
        if input == 0 || output == 0 {
            return Err(bad(
                &path,
                n,
                "ContextTokens and GeneratedTokens must be at least 1",
            ));
        }
        items.push(Item {
            id: format!("line-{n}"),
            start_after_ms: Some(u64::try_from(ms).unwrap_or(0)),
            requests: vec![synthetic(input, output)],
        });
    }
    offsets(&mut items);
    Listed::new("azure_trace", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "azure_trace",
    description: "the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens) as exact synthetic requests at their times",
    example: r#"{"path": "examples/datasets/azure.csv"}"#,
    config: CsvTraceConfig,
    build: azure,
}

/// Builds `burstgpt`.
pub fn burstgpt(cfg: CsvTraceConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("burstgpt", &cfg.path)?;
    let cols = ["Timestamp", "Model", "Request tokens", "Response tokens"];
    let mut items = Vec::new();
    let mut failed = 0usize;
    for (n, row) in csv_rows(&path, &cols)? {
        let secs = row[0]
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| bad(&path, n, format!("Timestamp: {:?} is not seconds", row[0])))?;
        if cfg
            .models
            .as_ref()
            .is_some_and(|m| !m.iter().any(|m| m == &row[1]))
        {
            continue;
        }
        let input = tokens(&path, n, cols[2], &row[2])?;
        let mut output = tokens(&path, n, cols[3], &row[3])?;
        if input == 0 {
            return Err(bad(&path, n, "Request tokens must be at least 1"));
        }
        if output == 0 {
            // A request that failed in production.
            if !cfg.keep_failed {
                failed += 1;
                continue;
            }
            output = 1;
        }
        items.push(Item {
            id: format!("line-{n}"),
            start_after_ms: Some((secs * 1000.0).round() as u64),
            requests: vec![synthetic(input, output)],
        });
    }
    if failed > 0 {
        eprintln!(
            "burstgpt: {}: left out {failed} failed requests (0 response tokens; keep them with \"keep_failed\": true)",
            path.display()
        );
    }
    offsets(&mut items);
    Listed::new("burstgpt", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "burstgpt",
    description: "the BurstGPT CSV (Timestamp, Model, Request tokens, Response tokens) as exact synthetic requests at their times",
    example: r#"{"path": "examples/datasets/burstgpt.csv", "models": ["ChatGPT"]}"#,
    config: CsvTraceConfig,
    build: burstgpt,
}
