//! A workload plugin as a WebAssembly component: replays a Mooncake-style trace.
//!
//! Each line of the trace is one request:
//! `{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [..]}`.
//! The prompt is a sequence of blocks of `block_tokens` tokens (512 in Mooncake
//! traces), one per hash id, the last one holding the remainder; a block's text is
//! generated from its hash id alone, so requests that share leading hash ids share
//! a byte-identical prompt prefix, and a server's prefix cache sees what the
//! production cluster saw. Each request becomes a one-request trajectory started
//! at its timestamp (use `--admission open-loop` to honour it). Each block is sent
//! as its own user message, so a server counts a few template tokens per block on
//! top of `input_length` (the planned prompt tokens).
//!
//! The trace is read through the sandbox: grant it in the config,
//! `{"path": "/abs/trace.jsonl", "sandbox": {"allow_read": ["/abs/trace.jsonl"]}}`.

#![allow(unsafe_code)] // the generated bindings export the component's functions
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

wit_bindgen::generate!({ path: "../../../framework/wit", world: "workload-plugin" });

use exports::batchbench::plugin::{meta, workload};
use serde::Deserialize;
use serde_json::json;
use std::cell::RefCell;
use std::io::BufRead;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The trace file (an absolute path, granted in `sandbox.allow_read`).
    path: String,
    /// Tokens per hash block.
    #[serde(default = "default_block_tokens")]
    block_tokens: u32,
    /// Replay at most this many requests.
    #[serde(default)]
    limit: Option<usize>,
}

fn default_block_tokens() -> u32 {
    512
}

#[derive(Deserialize)]
struct Row {
    timestamp: u64,
    input_length: u32,
    output_length: u32,
    hash_ids: Vec<u64>,
}

struct State {
    path: String,
    rows: Vec<(usize, Row)>,
    next: usize,
    block_tokens: u32,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

struct Mooncake;

impl meta::Guest for Mooncake {
    fn describe() -> meta::PluginInfo {
        meta::PluginInfo {
            name: "mooncake_trace".into(),
            description: "replays a Mooncake-style trace (timestamp, input_length, output_length, hash_ids of 512-token blocks); shared hash ids become shared prompt prefixes".into(),
            example_config: r#"{"path": "/data/trace.jsonl", "sandbox": {"allow_read": ["/data/trace.jsonl"]}}"#.into(),
        }
    }
}

fn load(c: &Config) -> Result<Vec<(usize, Row)>, String> {
    let file = std::fs::File::open(&c.path).map_err(|e| {
        format!(
            "cannot open {}: {e} (grant it, by absolute path, in sandbox.allow_read)",
            c.path
        )
    })?;
    let mut rows = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| format!("{}: line {n}: {e}", c.path))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: Row =
            serde_json::from_str(&line).map_err(|e| format!("{}: line {n}: {e}", c.path))?;
        if row.input_length == 0 {
            return Err(format!(
                "{}: line {n}: input_length must be at least 1",
                c.path
            ));
        }
        let capacity = row.hash_ids.len() as u64 * u64::from(c.block_tokens);
        let needed = u64::from(row.input_length).div_ceil(u64::from(c.block_tokens));
        if u64::from(row.input_length) > capacity || (row.hash_ids.len() as u64) > needed {
            return Err(format!(
                "{}: line {n}: hash_ids: {} blocks of {} tokens do not make input_length {}",
                c.path,
                row.hash_ids.len(),
                c.block_tokens,
                row.input_length
            ));
        }
        rows.push((n, row));
    }
    Ok(rows)
}

impl workload::Guest for Mooncake {
    fn init(config: String, context: String) -> Result<(), String> {
        let c: Config = serde_json::from_str(&config).map_err(|e| e.to_string())?;
        if c.block_tokens == 0 {
            return Err("block_tokens must be at least 1".into());
        }
        let ctx: serde_json::Value = serde_json::from_str(&context).map_err(|e| e.to_string())?;
        let mut rows = load(&c)?;
        if ctx["order_by_start"].as_bool() == Some(true) {
            rows.sort_by_key(|(_, r)| r.timestamp);
        }
        // The first `limit` requests in replay order.
        if let Some(l) = c.limit {
            rows.truncate(l);
        }
        STATE.with(|s| {
            *s.borrow_mut() = Some(State {
                path: c.path,
                rows,
                next: 0,
                block_tokens: c.block_tokens,
            })
        });
        Ok(())
    }

    fn info() -> String {
        STATE.with(|s| {
            let s = s.borrow();
            let (path, n) = s
                .as_ref()
                .map_or(("", 0), |s| (s.path.as_str(), s.rows.len()));
            json!({
                "mode": "mooncake_trace",
                "planned_trajectories": n,
                "planned_requests": n,
                "manifest_path": path,
            })
            .to_string()
        })
    }

    fn next_trajectory() -> Result<Option<String>, String> {
        STATE.with(|s| {
            let mut s = s.borrow_mut();
            let s = s.as_mut().ok_or("next_trajectory before init")?;
            let Some((line, row)) = s.rows.get(s.next) else {
                return Ok(None);
            };
            s.next += 1;
            let mut left = row.input_length;
            let blocks: Vec<_> = row
                .hash_ids
                .iter()
                .map(|h| {
                    let tokens = left.min(s.block_tokens);
                    left -= tokens;
                    json!({"seed": format!("mooncake-{h}"), "tokens": tokens, "role": "user"})
                })
                .collect();
            Ok(Some(
                json!({
                    "id": format!("line-{line}"),
                    "start_after_ms": row.timestamp,
                    "requests": [{
                        "prompt_tokens": row.input_length,
                        "output_tokens": row.output_length,
                        "blocks": blocks,
                    }],
                })
                .to_string(),
            ))
        })
    }
}

// Only a wasm build exports the component's functions (a host build, as in
// `cargo test --workspace`, compiles the code and exports nothing).
#[cfg(target_arch = "wasm32")]
export!(Mooncake);
