//! `sharegpt`: ShareGPT-style conversations, a JSON array or JSONL of
//! `{"id": "...", "conversations": [{"from": "human", "value": "..."},
//! {"from": "gpt", "value": "..."}, ...]}`.
//!
//! `turns: "first"` (the default) sends each conversation's first user turn as
//! one request, as vLLM's and SGLang's benchmarks do; `turns: "all"` replays
//! every user turn as a multi-turn session with the real text, each request
//! carrying the conversation so far with the model's own replies in it (the
//! recorded reply stands in when there is none). Output length: the recorded
//! reply's tokens (counted with the run's tokenizer), or `output_tokens`.

use super::{Item, Listed, count, existing, text_block};
use batchbench_contract::plan::{Block, BlockRole, Blocks, PlannedRequest};
use batchbench_contract::plugin::PluginError;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Which turns of a conversation are sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Turns {
    /// The first user turn, as one request.
    #[default]
    First,
    /// Every user turn, as a session.
    All,
}

/// Config of `sharegpt`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareGptConfig {
    /// The JSON or JSONL file.
    pub path: PathBuf,
    /// `first` or `all`.
    #[serde(default)]
    pub turns: Turns,
    /// Output tokens of every request (absent: the recorded reply's tokens).
    #[serde(default)]
    pub output_tokens: Option<u32>,
    /// Replay at most this many conversations.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One turn: its role and text.
struct Turn {
    role: BlockRole,
    text: String,
}

/// The entries of the file with the line each starts on: JSONL, or a JSON
/// array (whose entries are numbered by the line they start on too).
fn entries(path: &Path) -> Result<Vec<(usize, Value)>, PluginError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PluginError::Plan(format!("cannot read {}: {e}", path.display())))?;
    if text.trim_start().starts_with('[') {
        let mut out = Vec::new();
        let mut de = serde_json::Deserializer::from_str(&text);
        let all: Vec<Value> = serde::Deserialize::deserialize(&mut de).map_err(|e| {
            PluginError::Plan(format!("{}: line {}: {e}", path.display(), e.line()))
        })?;
        // Line numbers of the top-level entries: where each object opens.
        let mut starts = Vec::new();
        let (mut depth, mut line, mut in_str, mut esc) = (0i32, 1usize, false, false);
        for c in text.chars() {
            if c == '\n' {
                line += 1;
            }
            if in_str {
                match (esc, c) {
                    (true, _) => esc = false,
                    (false, '\\') => esc = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '"' => in_str = true,
                '[' | '{' => {
                    if depth == 1 {
                        starts.push(line);
                    }
                    depth += 1;
                }
                ']' | '}' => depth -= 1,
                _ => {}
            }
        }
        for (i, v) in all.into_iter().enumerate() {
            out.push((starts.get(i).copied().unwrap_or(1), v));
        }
        return Ok(out);
    }
    super::lines(path)?
        .into_iter()
        .map(|(n, l)| {
            serde_json::from_str(&l)
                .map(|v| (n, v))
                .map_err(|e| super::bad(path, n, e))
        })
        .collect()
}

fn role(from: &str) -> Option<BlockRole> {
    match from {
        "human" | "user" => Some(BlockRole::User),
        "gpt" | "assistant" | "chatgpt" | "bard" | "bing" | "model" => Some(BlockRole::Assistant),
        "system" => Some(BlockRole::System),
        _ => None,
    }
}

fn turns_of(path: &Path, n: usize, v: &Value) -> Result<Vec<Turn>, PluginError> {
    let list = v
        .get("conversations")
        .or_else(|| v.get("conversation"))
        .and_then(Value::as_array)
        .ok_or_else(|| super::bad(path, n, "conversations: an array of turns is required"))?;
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let from = t
                .get("from")
                .or_else(|| t.get("role"))
                .and_then(Value::as_str);
            let text = t
                .get("value")
                .or_else(|| t.get("content"))
                .and_then(Value::as_str);
            match (from.map(|f| (f, role(f))), text) {
                (Some((_, Some(role))), Some(text)) => Ok(Turn {
                    role,
                    text: text.to_owned(),
                }),
                (Some((f, None)), _) => Err(super::bad(
                    path,
                    n,
                    format!(
                        "conversations[{i}].from: unknown speaker {f:?} (human, gpt or system)"
                    ),
                )),
                (None, _) => Err(super::bad(
                    path,
                    n,
                    format!("conversations[{i}].from: a speaker is required"),
                )),
                (_, None) => Err(super::bad(
                    path,
                    n,
                    format!("conversations[{i}].value: the text is required"),
                )),
            }
        })
        .collect()
}

/// Builds the workload.
pub fn build(cfg: ShareGptConfig, ctx: &BuildContext) -> Result<Listed, PluginError> {
    let path = existing("sharegpt", &cfg.path)?;
    if cfg.output_tokens == Some(0) {
        return Err(PluginError::Config {
            plugin: "sharegpt".into(),
            message: "output_tokens must be at least 1".into(),
        });
    }
    // Read and check everything before counting a token.
    let mut convs = Vec::new();
    for (n, v) in entries(&path)? {
        let id = match v.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) if !other.is_null() => other.to_string(),
            _ => format!("line-{n}"),
        };
        convs.push((n, id, turns_of(&path, n, &v)?));
    }
    let mut items = Vec::new();
    let mut skipped = 0usize;
    for (n, id, turns) in convs {
        let Some(first_user) = turns.iter().position(|t| t.role == BlockRole::User) else {
            skipped += 1;
            continue;
        };
        if cfg.limit.is_some_and(|l| items.len() >= l) {
            break;
        }
        let where_ = |i: usize| format!("{}: line {n}: conversations[{i}]", path.display());
        let tokens = |i: usize, t: &Turn| count(ctx, &t.text, || where_(i));
        // The reply recorded after user turn `i`, as the output length.
        let output = |i: usize| -> Result<Option<u32>, PluginError> {
            if cfg.output_tokens.is_some() {
                return Ok(cfg.output_tokens);
            }
            match turns.get(i + 1).filter(|t| t.role == BlockRole::Assistant) {
                Some(reply) => tokens(i + 1, reply).map(|n| Some(n.max(1))),
                None => Ok(None),
            }
        };
        let seed = |i: usize| format!("sharegpt:{id}:{i}");
        let mut blocks: Vec<Block> = Vec::new();
        let mut requests = Vec::new();
        for (i, t) in turns.iter().enumerate() {
            let tok = if cfg.output_tokens.is_some() {
                0
            } else {
                tokens(i, t)?
            };
            let mut b = text_block(seed(i), &t.text, tok, t.role);
            // A recorded reply carries the model's own reply when there is one.
            b.live = t.role == BlockRole::Assistant && i > first_user;
            blocks.push(b);
            if t.role == BlockRole::User {
                let all: Arc<[Block]> = Arc::from(blocks.clone());
                let planned: u32 = blocks.iter().map(|b| b.tokens).sum();
                requests.push(PlannedRequest {
                    prompt_tokens: (planned > 0).then_some(planned),
                    output_tokens: output(i)?,
                    blocks: Some(Blocks::prefix(all, blocks.len())),
                    ..PlannedRequest::default()
                });
                if cfg.turns == Turns::First {
                    break;
                }
            }
        }
        items.push(Item {
            id: format!("sharegpt-{id}"),
            start_after_ms: None,
            requests,
        });
    }
    if skipped > 0 {
        eprintln!(
            "sharegpt: {}: left out {skipped} conversations with no user turn",
            path.display()
        );
    }
    Listed::new("sharegpt", &path, items, cfg.limit, ctx)
}

batchbench_contract::register_workload! {
    name: "sharegpt",
    description: "ShareGPT conversations (JSON or JSONL): the first user turn per request, or every turn as a session with the real text",
    example: r#"{"path": "examples/datasets/sharegpt.json", "turns": "all", "output_tokens": 128}"#,
    config: ShareGptConfig,
    build: build,
}
