//! Prompt datasets and public traces as workloads: each is read whole when the
//! run is built (a malformed line or row is bad input, named by file and
//! line, and nothing is sent), then replayed as one-request trajectories or,
//! for ShareGPT conversations, multi-turn sessions.
//!
//! | workload | file | a trajectory |
//! |---|---|---|
//! | `sharegpt` | ShareGPT JSON or JSONL conversations | a conversation's first turn, or all of its turns |
//! | `prompts_jsonl` | one prompt per line | one prompt |
//! | `mooncake` | Mooncake trace JSONL (`hash_ids` of 512-token blocks) | one request |
//! | `azure_trace` | Azure LLM inference trace CSV | one request |
//! | `burstgpt` | BurstGPT CSV | one request |
//!
//! Recorded text is sent verbatim (text blocks); a trace's token counts become
//! exact synthetic prompts. Timestamps become start offsets, honoured in an
//! open loop (`--admission open-loop`, scaled by `--time-scale`).

pub mod azure_trace;
pub mod burstgpt;
pub mod mooncake;
pub mod prompts_jsonl;
pub mod sharegpt;

use batchbench_contract::plan::{Block, BlockRole, Blocks, PlannedRequest, Trajectory};
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A bad line of `path`: the message names the file, the line and the field.
pub(crate) fn bad(path: &Path, line: usize, msg: impl std::fmt::Display) -> PluginError {
    PluginError::Plan(format!("{}: line {line}: {msg}", path.display()))
}

/// A line's JSON object, its keys checked against `known`: an error names
/// the file, the line and the key.
pub(crate) fn object(
    path: &Path,
    line: usize,
    text: &str,
    known: &[&str],
) -> Result<serde_json::Map<String, serde_json::Value>, PluginError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(path, line, e))?;
    let serde_json::Value::Object(o) = v else {
        return Err(bad(path, line, "a JSON object is expected"));
    };
    if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(bad(
            path,
            line,
            format!("{k}: unknown field (known: {})", known.join(", ")),
        ));
    }
    Ok(o)
}

/// Field `key` of a line's object as a whole number up to `max`, if present.
pub(crate) fn whole(
    path: &Path,
    line: usize,
    o: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    max: u64,
) -> Result<Option<u64>, PluginError> {
    match o.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .filter(|n| *n <= max)
            .map(Some)
            .ok_or_else(|| {
                bad(
                    path,
                    line,
                    format!("{key}: {v} is not a whole number up to {max}"),
                )
            }),
    }
}

/// The file's lines with their numbers (from 1), blank ones left out.
pub(crate) fn lines(path: &Path) -> Result<Vec<(usize, String)>, PluginError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PluginError::Plan(format!("cannot read {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect())
}

/// A user message of recorded text, as a block of its own seed.
pub(crate) fn text_block(seed: String, text: &str, tokens: u32, role: BlockRole) -> Block {
    Block {
        seed: seed.into(),
        tokens,
        role,
        live: false,
        text: Some(Arc::from(text)),
    }
}

/// One request of recorded text, as user `blocks`.
pub(crate) fn text_request(blocks: Vec<Block>, output: Option<u32>) -> PlannedRequest {
    let tokens: u32 = blocks.iter().map(|b| b.tokens).sum();
    PlannedRequest {
        prompt_tokens: (tokens > 0).then_some(tokens),
        output_tokens: output,
        blocks: Some(Blocks::from(blocks)),
        ..PlannedRequest::default()
    }
}

/// A trajectory of a dataset.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) id: String,
    pub(crate) start_after_ms: Option<u64>,
    pub(crate) requests: Vec<PlannedRequest>,
}

/// Moves timestamps (in ms) to offsets from the earliest.
pub(crate) fn offsets(items: &mut [Item]) {
    let first = items.iter().filter_map(|i| i.start_after_ms).min();
    if let Some(first) = first {
        for i in items.iter_mut() {
            i.start_after_ms = i.start_after_ms.map(|t| t - first);
        }
    }
}

/// The trajectories of a dataset read whole, yielded in file order, or in
/// start order when the run admits by start offsets: the source every
/// dataset workload builds.
pub struct Listed {
    info: WorkloadInfo,
    items: VecDeque<Item>,
    needs_tokenizer: bool,
}

impl Listed {
    /// The dataset of `mode` read from `path`: the first `limit` items (in
    /// the order they run).
    pub(crate) fn new(
        mode: &str,
        path: &Path,
        mut items: Vec<Item>,
        limit: Option<usize>,
        ctx: &batchbench_contract::registry::BuildContext,
    ) -> Result<Self, PluginError> {
        if ctx.endless {
            return Err(PluginError::Config {
                plugin: mode.into(),
                message: "a dataset is finite: replay it without --duration-secs".into(),
            });
        }
        if ctx.order_by_start {
            items.sort_by_key(|i| i.start_after_ms.unwrap_or(0));
        }
        if let Some(l) = limit {
            items.truncate(l);
        }
        if items.is_empty() {
            return Err(PluginError::Plan(format!(
                "{}: no {mode} entries to replay",
                path.display()
            )));
        }
        let requests = items.iter().map(|i| i.requests.len() as u64).sum();
        // Synthetic prompts (trace token counts) need the tokenizer; recorded
        // text alone does not.
        let needs_tokenizer = items.iter().flat_map(|i| &i.requests).any(|r| {
            r.blocks
                .as_ref()
                .is_none_or(|b| b.iter().any(|b| b.text.is_none()))
        });
        Ok(Self {
            info: WorkloadInfo {
                mode: mode.into(),
                planned_trajectories: Some(items.len() as u64),
                planned_requests: Some(requests),
                manifest_path: Some(path.display().to_string()),
                manifest_sha256: batchbench_contract::manifest::digest(path).ok(),
                ..WorkloadInfo::default()
            },
            items: items.into(),
            needs_tokenizer,
        })
    }
}

impl WorkloadSource for Listed {
    fn info(&self) -> WorkloadInfo {
        self.info.clone()
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        let i = self.items.pop_front()?;
        let mut t = Trajectory::from_vec(i.id, i.requests);
        t.start_after_ms = i.start_after_ms;
        Some(Ok(t))
    }

    fn needs_tokenizer(&self) -> bool {
        self.needs_tokenizer
    }
}

/// The path of a dataset config, checked to exist.
pub(crate) fn existing(plugin: &str, path: &Path) -> Result<PathBuf, PluginError> {
    if path.is_file() {
        Ok(path.to_path_buf())
    } else {
        Err(PluginError::Config {
            plugin: plugin.into(),
            message: format!("path: {} is not a readable file", path.display()),
        })
    }
}

/// Counts `text` with the run's tokenizer; `what` names it in an error.
pub(crate) fn count(
    ctx: &batchbench_contract::registry::BuildContext,
    text: &str,
    what: impl FnOnce() -> String,
) -> Result<u32, PluginError> {
    ctx.tokens
        .count(text)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        .map_err(|e| PluginError::Plan(format!("{}: cannot count its tokens: {e}", what())))
}

// The public traces' shared parts: token counts and times, no text. Every
// row becomes one request with an exact synthetic prompt of its input length
// and its output length, started at its timestamp in an open loop.

/// One request of an exact synthetic prompt.
pub(crate) fn synthetic(input: u32, output: u32) -> PlannedRequest {
    PlannedRequest {
        prompt_tokens: Some(input),
        output_tokens: Some(output),
        overhead_tokens: Some(0),
        ..PlannedRequest::default()
    }
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
pub(crate) fn csv_rows(
    path: &Path,
    columns: &[&str],
) -> Result<Vec<(usize, Vec<String>)>, PluginError> {
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

/// A token count of a CSV trace's column, as bad input naming the line.
pub(crate) fn tokens(path: &Path, line: usize, column: &str, v: &str) -> Result<u32, PluginError> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0 && *x <= f64::from(u32::MAX))
        .map(|x| x as u32)
        .ok_or_else(|| bad(path, line, format!("{column}: {v:?} is not a token count")))
}
