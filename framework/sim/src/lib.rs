//! `batchbench-sim`: an OpenAI-compatible server that behaves like an LLM server.
//!
//! - `POST /v1/chat/completions`: honours `max_tokens` / `max_completion_tokens`,
//!   `min_tokens`, SGLang's `min_new_tokens` / `max_new_tokens`, and `ignore_eos`
//!   (without it, a request stops at a seeded length between its minimum and
//!   maximum); JSON or SSE (`stream`, with `stream_options.include_usage`).
//! - The same model behind `POST /v1/completions`, `/v1/responses` (stateless,
//!   or continuing a stored response with `previous_response_id`),
//!   `/v1/messages` (Anthropic: `tool_use` answered by `tool_result`, checked)
//!   SGLang's `/generate` and `/v1/embeddings`, each in its own request,
//!   response and stream format (see [`apis`]).
//! - Reasoning (`--reasoning-tokens`): each reply reasons before its answer,
//!   in each API's own shape, moved by the request's reasoning effort,
//!   thinking switch and budget (see [`apis::Thinking`]).
//! - Prompt tokens are counted with the real tokenizer: every message's content and
//!   tool calls, the `tools` array, plus a per-message and a per-request template
//!   overhead; a plain prompt (completions, `/generate`) is its tokens alone.
//! - Latency, in one of two models. Per request (the default): TTFT = base +
//!   per-uncached-prompt-token prefill, then one decode interval per output
//!   token, whatever the load. Continuous batching (`--max-running N`): per
//!   worker, at most N sequences decode together in steps whose time grows with
//!   the batch, prefill is chunked, the rest queue, and KV pressure preempts; so
//!   the server saturates like a real one (see the `batch` module for the model
//!   and its saturation rate).
//! - A prefix cache per worker (hashed token blocks, LRU, capacity in tokens), the
//!   worker picked by `X-SMG-Target-Worker` or a hash of `X-SMG-Routing-Key`;
//!   reported as `usage.prompt_tokens_details.cached_tokens`.
//! - Seeded fault injection: HTTP status codes, connection resets, stalls,
//!   truncated streams, malformed JSON.
//! - `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus text), and
//!   `GET /sim/requests` (the request log, when `--record-requests` is on).

pub mod apis;
pub mod audio;
mod batch;
mod cache;
pub mod cli;
mod server;

pub use batch::Gauges;
pub use server::{RequestLog, Sim, SimStats, WorkerStats};

use clap::Parser;

/// Fault kinds the simulator can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// An error status from `--fault-status`.
    Status,
    /// The connection is dropped mid-response.
    Reset,
    /// No answer for `--stall-secs` (past the client's timeout).
    Stall,
    /// The response ends early (no finish chunk, no `[DONE]`; half a JSON body).
    Truncate,
    /// The body is not valid JSON.
    Malformed,
    /// A correct response whose every byte is its own chunk (SSE events split
    /// at every byte boundary).
    Split,
    /// A correct response, one byte every `--drip-ms` (a slow drip that outlasts
    /// a short timeout).
    Drip,
    /// A correct stream with SSE comments and keep-alive lines between events,
    /// and CRLF line ends.
    Comments,
    /// HTTP 200 whose body (or first event) is an error object.
    Error200,
    /// HTTP 200 with an HTML page (a wrong content type).
    Html,
    /// A response of `--oversize-bytes` (a correct one padded).
    Oversized,
    /// The connection closes before the response's headers.
    Close,
}

impl FaultKind {
    /// The name used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Reset => "reset",
            Self::Stall => "stall",
            Self::Truncate => "truncate",
            Self::Malformed => "malformed",
            Self::Split => "split",
            Self::Drip => "drip",
            Self::Comments => "comments",
            Self::Error200 => "error200",
            Self::Html => "html",
            Self::Oversized => "oversized",
            Self::Close => "close",
        }
    }
}

/// How the simulator behaves. Every field is also a flag of `batchbench-sim` and a
/// query parameter of `--host sim://?key=value&...` (dashes or underscores).
#[derive(Debug, Clone, Parser, serde::Serialize)]
pub struct SimConfig {
    /// Model names listed by /v1/models (any name is accepted in requests,
    /// unless --strict-models).
    #[arg(
        long = "served-model",
        value_delimiter = ',',
        default_value = "batchbench-sim"
    )]
    pub served_models: Vec<String>,
    /// Answer 404, as vLLM does, to a request whose `model` is neither a
    /// served model nor a LoRA adapter (a gateway's per-model pools are
    /// tested with it).
    #[arg(long)]
    pub strict_models: bool,
    /// A served model's own latency, NAME=FACTOR (comma separated): every
    /// time of the per-request latency model (TTFT, prefill, decode, audio)
    /// of a request whose `model` is NAME is multiplied by FACTOR; other
    /// models take 1. `big=4,small=1`: a larger model beside a smaller one.
    #[arg(long, value_delimiter = ',', value_name = "NAME=FACTOR")]
    pub model_slowdown: Vec<String>,
    /// Template tokens added once per request (the assistant turn header).
    #[arg(long, default_value_t = 3)]
    pub template_overhead_tokens: u32,
    /// Template tokens added per message (role header and end markers).
    #[arg(long, default_value_t = 5)]
    pub message_overhead_tokens: u32,
    /// Fixed part of the time to first token, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub ttft_base_ms: f64,
    /// Prefill time per uncached prompt token, in microseconds.
    #[arg(long, default_value_t = 0.0)]
    pub prefill_us_per_token: f64,
    /// Decode interval per output token, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub decode_ms_per_token: f64,
    /// Continuous batching: sequences in a worker's batch at once (0: off, each
    /// request's latency is its own whatever the load).
    #[arg(long, default_value_t = 0)]
    pub max_running: u32,
    /// Continuous batching: the fixed time of one step, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub step_base_ms: f64,
    /// Continuous batching: step time per sequence in the batch, in milliseconds.
    #[arg(long, default_value_t = 0.0)]
    pub step_ms_per_seq: f64,
    /// Continuous batching: prompt tokens prefilled per step, shared by the batch.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    pub prefill_chunk_tokens: u64,
    /// Continuous batching: KV capacity per worker, in tokens (0: no limit);
    /// beyond it the sequence that joined the batch last is preempted.
    #[arg(long, default_value_t = 0)]
    pub kv_capacity_tokens: u64,
    /// Output tokens per streamed content chunk.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub tokens_per_chunk: u32,
    /// Output cap when a request gives none.
    #[arg(long, default_value_t = 128)]
    pub default_max_tokens: u32,
    /// Reasoning tokens each reply makes before its answer (0: none, a model
    /// that does not reason). They come in each API's own shape (chat
    /// `reasoning_content`, Responses reasoning items, Anthropic thinking
    /// blocks, `<think>` tags in the text of completions and `/generate`), at
    /// the decode pace of the answer, and count in the output cap and the
    /// usage's completion tokens. A request's knobs move them: reasoning
    /// effort scales them (low 0.5x, medium 1x, high 2x), thinking turned off
    /// makes none, a thinking budget caps them.
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens: u32,
    /// With a value above `reasoning-tokens`: each reply's reasoning count is
    /// drawn between the two, uniformly and seeded by the request.
    #[arg(long, default_value_t = 0)]
    pub reasoning_tokens_max: u32,
    /// Leave the reasoning count out of the usage (as servers without a
    /// `reasoning_tokens` detail do): the client counts the reasoning text.
    #[arg(long)]
    pub omit_reasoning_usage: bool,
    /// Structured outputs (a request's `response_format` or `text.format`):
    /// the share of answers that are not JSON (an object never closed),
    /// drawn per request, seeded by its arrival. The others are instances of
    /// the request's schema, as a grammar-constrained decoder makes them.
    #[arg(long, default_value_t = 0.0)]
    pub invalid_json_rate: f64,
    /// LoRA adapters it serves, by name (comma separated): a request names
    /// one by its `model` (vLLM), `lora_path` (SGLang) or `lora` list of ids
    /// (llama.cpp; the ids are places in this list).
    #[arg(long, value_delimiter = ',')]
    pub lora_adapters: Vec<String>,
    /// LoRA adapters resident on a worker at once (vLLM's `--max-loras`); a
    /// request for another evicts the least recently used.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_loras: u32,
    /// What loading an adapter that is not resident costs, in milliseconds,
    /// before the request's first token.
    #[arg(long, default_value_t = 0.0)]
    pub lora_load_ms: f64,
    /// Audio: the encoder's time per second of audio a request carries
    /// (chat `input_audio` parts, a transcription's file), in milliseconds,
    /// before its first token (per-request model). 20: a minute of audio
    /// answered in 1.2 s plus its decode.
    #[arg(long, default_value_t = 0.0)]
    pub audio_ms_per_second: f64,
    /// Audio: prompt tokens per second of audio (Qwen2-Audio's and
    /// Whisper's encoders: 25, one per 40 ms).
    #[arg(long, default_value_t = 25.0)]
    pub audio_tokens_per_second: f64,
    /// Transcriptions: tokens of transcript per second of audio (speech at
    /// 150 words a minute is about 3.3), capped by max_completion_tokens.
    #[arg(long, default_value_t = 3.0)]
    pub transcript_tokens_per_second: f64,
    /// Reject prompts longer than this with HTTP 400 (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_context_tokens: u32,
    /// Data-parallel workers, each with its own prefix cache.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,
    /// Replicas: a fleet of this many servers, each on its own port with its
    /// own prefix cache and batch. Unlike `workers` (where the simulator
    /// places requests), the client's routing picks a replica.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub replicas: u32,
    /// How much slower each replica is than configured, one factor per
    /// replica in order (comma separated; missing ones are 1): every time of
    /// the latency model (TTFT, prefill, decode, step) is multiplied by it.
    /// `1,1,1,3`: the fourth of four replicas takes three times as long.
    #[arg(long, value_delimiter = ',')]
    pub replica_slowdown: Vec<f64>,
    /// Prefix-cache capacity per worker, in tokens.
    #[arg(long, default_value_t = 1_000_000)]
    pub cache_capacity_tokens: u64,
    /// Prefix-cache block size, in tokens.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub cache_block_tokens: u32,
    /// Seed of output lengths, output text and fault injection.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fraction of requests that get a fault.
    #[arg(long, default_value_t = 0.0)]
    pub fault_rate: f64,
    /// Which faults to inject, chosen uniformly per faulty request.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "status")]
    pub fault_kinds: Vec<FaultKind>,
    /// Status codes of `status` faults, chosen uniformly.
    #[arg(long, value_delimiter = ',', default_value = "503")]
    pub fault_status: Vec<u16>,
    /// How long a `stall` fault waits before answering, in seconds.
    #[arg(long, default_value_t = 600.0)]
    pub stall_secs: f64,
    /// Milliseconds between the bytes of a `drip` fault.
    #[arg(long, default_value_t = 5.0)]
    pub drip_ms: f64,
    /// The size of an `oversized` response, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub oversize_bytes: u64,
    /// Keep a log of every request (GET /sim/requests), up to a million entries.
    #[arg(long)]
    pub record_requests: bool,
    /// Stamp each request on the simulator's clock: when it arrived and when
    /// each chunk of its response was written, in the request log (with
    /// --record-requests), and the server's own timings in the response, as
    /// real servers report them (llama.cpp's `timings` for chat and
    /// completions, SGLang's `e2e_latency` for /generate).
    #[arg(long)]
    pub stamps: bool,
    /// Answer every request with an `X-Request-Id` header, as vLLM does with
    /// `--enable-request-id-headers`: the id the client sent, else the
    /// simulator's own (`sim-req-N`).
    #[arg(long)]
    pub request_id_headers: bool,
    /// Answer at once without reading the prompt: no tokenizer, no prefix
    /// cache, no latency model, and 0 prompt tokens in `usage`. For measuring
    /// the client, not the server (bench/load.sh).
    #[arg(long)]
    pub instant: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        // Parsing no arguments cannot fail: every field has a default.
        Self::try_parse_from(["sim"]).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl SimConfig {
    /// The config of replica `i` of a fleet: one server's (`replicas` 1), its
    /// times scaled by its `replica_slowdown`, its seed its own.
    pub fn replica(&self, i: u32) -> Self {
        let k = self
            .replica_slowdown
            .get(i as usize)
            .copied()
            .unwrap_or(1.0);
        let mut c = self.clone();
        c.replicas = 1;
        c.replica_slowdown = Vec::new();
        c.seed = self.seed.wrapping_add(u64::from(i));
        for v in [
            &mut c.ttft_base_ms,
            &mut c.prefill_us_per_token,
            &mut c.decode_ms_per_token,
            &mut c.step_base_ms,
            &mut c.step_ms_per_seq,
            &mut c.audio_ms_per_second,
        ] {
            *v *= k;
        }
        c
    }

    /// `model_slowdown`, parsed: each model's factor.
    pub fn model_factors(&self) -> Result<Vec<(String, f64)>, String> {
        let mut out: Vec<(String, f64)> = Vec::new();
        for pair in &self.model_slowdown {
            let (name, k) = pair
                .split_once('=')
                .ok_or_else(|| format!("model-slowdown: '{pair}' is not NAME=FACTOR"))?;
            let name = name.trim();
            let k: f64 = k
                .trim()
                .parse()
                .map_err(|_| format!("model-slowdown: '{pair}': the factor is not a number"))?;
            if name.is_empty() || !(k.is_finite() && k > 0.0) {
                return Err(format!(
                    "model-slowdown: '{pair}' needs a model name and a positive factor"
                ));
            }
            if out.iter().any(|(n, _)| n == name) {
                return Err(format!("model-slowdown: model '{name}' is named twice"));
            }
            out.push((name.to_owned(), k));
        }
        Ok(out)
    }

    /// The continuous-batching model, when `max_running` turns it on.
    pub(crate) fn batch_model(&self) -> Option<batch::BatchModel> {
        let ms = |v: f64| std::time::Duration::from_secs_f64(v.max(0.0) / 1000.0);
        (self.max_running > 0).then(|| batch::BatchModel {
            max_running: self.max_running as usize,
            step_base: ms(self.step_base_ms),
            step_per_seq: ms(self.step_ms_per_seq),
            prefill_per_token: ms(self.prefill_us_per_token / 1000.0),
            prefill_chunk_tokens: self.prefill_chunk_tokens,
            kv_capacity_tokens: self.kv_capacity_tokens,
        })
    }

    /// Parses `key=value&key=value` (the query of a `sim://` URL).
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut args = vec!["sim".to_owned()];
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k = k.replace('_', "-");
            if v.is_empty() {
                args.push(format!("--{k}"));
            } else {
                args.push(format!("--{k}={v}"));
            }
        }
        Self::try_parse_from(args).map_err(|e| {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_owned();
            format!("sim:// option: {first}")
        })
    }

    /// Checks ranges clap cannot express.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.fault_rate) {
            return Err(format!(
                "fault-rate must be between 0 and 1, got {}",
                self.fault_rate
            ));
        }
        for (name, v) in [
            ("ttft-base-ms", self.ttft_base_ms),
            ("prefill-us-per-token", self.prefill_us_per_token),
            ("decode-ms-per-token", self.decode_ms_per_token),
            ("stall-secs", self.stall_secs),
            ("drip-ms", self.drip_ms),
            ("step-base-ms", self.step_base_ms),
            ("step-ms-per-seq", self.step_ms_per_seq),
            ("lora-load-ms", self.lora_load_ms),
            ("audio-ms-per-second", self.audio_ms_per_second),
            ("audio-tokens-per-second", self.audio_tokens_per_second),
            (
                "transcript-tokens-per-second",
                self.transcript_tokens_per_second,
            ),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{name} must be a finite number >= 0, got {v}"));
            }
        }
        if self.replica_slowdown.len() > self.replicas as usize {
            return Err(format!(
                "replica-slowdown gives {} factors for {} replica(s)",
                self.replica_slowdown.len(),
                self.replicas
            ));
        }
        if let Some(k) = self
            .replica_slowdown
            .iter()
            .find(|k| !(k.is_finite() && **k > 0.0))
        {
            return Err(format!(
                "replica-slowdown factors must be positive numbers, got {k}"
            ));
        }
        if self.instant
            && (self.max_running > 0
                || self.ttft_base_ms > 0.0
                || self.prefill_us_per_token > 0.0
                || self.decode_ms_per_token > 0.0
                || self.max_context_tokens > 0)
        {
            return Err("instant answers at once without reading the prompt: it takes no latency model (ttft-base-ms, prefill-us-per-token, decode-ms-per-token, max-running) or context limit (max-context-tokens)".into());
        }
        let factors = self.model_factors()?;
        if self.max_running > 0 && !factors.is_empty() {
            return Err("model-slowdown scales the per-request latency model; a batch of the continuous-batching model (max-running) is one model's, as on a real server: run a simulator per model behind the run's hosts".into());
        }
        if self.max_running > 0 {
            if self.ttft_base_ms > 0.0 || self.decode_ms_per_token > 0.0 {
                return Err("ttft-base-ms and decode-ms-per-token belong to the per-request latency model; with max-running the batch's step time (step-base-ms + step-ms-per-seq x batch + prefill-us-per-token x prefilled tokens) sets the latency".into());
            }
        } else if self.step_base_ms > 0.0
            || self.step_ms_per_seq > 0.0
            || self.kv_capacity_tokens > 0
        {
            return Err("step-base-ms, step-ms-per-seq and kv-capacity-tokens need max-running (the continuous-batching model)".into());
        }
        if self.reasoning_tokens_max > 0 && self.reasoning_tokens_max < self.reasoning_tokens {
            return Err(format!(
                "reasoning-tokens-max ({}) is below reasoning-tokens ({})",
                self.reasoning_tokens_max, self.reasoning_tokens
            ));
        }
        if self.instant && (self.reasoning_tokens > 0 || self.reasoning_tokens_max > 0) {
            return Err("instant answers at once: it makes no reasoning (reasoning-tokens)".into());
        }
        if self.fault_status.iter().any(|s| !(100..=599).contains(s)) {
            return Err("fault-status codes must be between 100 and 599".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parses_with_either_separator() {
        let c =
            SimConfig::from_query("fault_rate=0.5&fault-status=503,429&workers=4&record_requests")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.fault_rate, 0.5);
        assert_eq!(c.fault_status, vec![503, 429]);
        assert_eq!(c.workers, 4);
        assert!(c.record_requests);
        let e = SimConfig::from_query("nope=1").unwrap_err();
        assert!(e.contains("--nope"), "{e}");
        assert!(
            SimConfig::from_query("fault_rate=2")
                .and_then(|c| c.validate())
                .is_err()
        );
    }
}
