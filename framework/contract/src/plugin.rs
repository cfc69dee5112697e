//! The four plugin traits: the seams of batchbench.
//!
//! | trait | job |
//! |---|---|
//! | [`WorkloadSource`] | yield trajectories, describe itself for the report |
//! | [`RequestCodec`] | conversation + plan → HTTP body; response → [`Reply`] |
//! | [`Router`] | add per-request identity: headers and body fields |
//! | [`Reporter`] | observe run events and write results |
//!
//! Hot-path methods are synchronous and take plain inputs; async is for real I/O only.

use crate::conversation::{Conversation, Message};
use crate::plan::Trajectory;
use crate::record::Summary;
pub use crate::record::WorkloadInfo;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// An error raised by a plugin, with the plugin's name for context.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The plugin's configuration is invalid (bad input: exit 2, nothing sent).
    #[error("{plugin}: invalid configuration: {message}")]
    Config {
        /// Plugin name.
        plugin: String,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The plan is invalid (bad input: exit 2, nothing sent).
    #[error("{0}")]
    Plan(String),
    /// No plugin of that kind has that name.
    #[error("no {kind} plugin named '{name}' (registered: {known})")]
    Unknown {
        /// Plugin kind.
        kind: &'static str,
        /// Requested name.
        name: String,
        /// Registered names, comma separated.
        known: String,
    },
    /// Anything else (I/O, a failing external plugin).
    #[error("{plugin}: {message}")]
    Failed {
        /// Plugin name.
        plugin: String,
        /// What happened.
        message: String,
    },
}

/// Yields trajectories in admission order; may be infinite.
pub trait WorkloadSource: Send {
    /// Describes the workload for the report.
    fn info(&self) -> WorkloadInfo;
    /// The next trajectory, `None` when the workload is exhausted.
    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>>;
    /// Describes the workload for the final report. A source that completes part of
    /// its description in the background (a manifest digest, computed while the run
    /// goes on so that it does not delay the first request) finishes it here; the
    /// default is [`WorkloadSource::info`].
    fn final_info(&mut self) -> WorkloadInfo {
        self.info()
    }
    /// Whether the engine needs a tokenizer to make this workload's prompts
    /// (exact token counts); a source of fixed or verbatim bodies says `false`,
    /// and no tokenizer is loaded unless the user names one.
    fn needs_tokenizer(&self) -> bool {
        true
    }
}

/// What a codec needs to build one request body.
#[derive(Debug)]
pub struct EncodeRequest<'a> {
    /// The `model` field.
    pub model: &'a str,
    /// The conversation to send, whole.
    pub conversation: &'a Conversation,
    /// `(min, max)` output tokens, if constrained.
    pub output: Option<(u32, u32)>,
    /// Whether to stream.
    pub stream: bool,
    /// Body fields added by routers.
    pub extra_fields: &'a [(String, serde_json::Value)],
    /// A verbatim body to send instead of one built from the conversation (which
    /// is then empty); the fields above still apply on top of it.
    pub raw_body: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// Token usage reported by the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.completion_tokens`.
    pub completion_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens`, when reported.
    pub cached_tokens: Option<u64>,
    /// Reasoning tokens, part of `completion_tokens`, when the API reports
    /// them apart (`completion_tokens_details.reasoning_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Inputs answered one output each (embeddings), when the API has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<u64>,
}

/// What a server reported of its own time on one request, on its own clock:
/// llama.cpp's `timings`, SGLang's `meta_info`. Beside the client's figures it
/// tells the server's work from the queueing and network around it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTiming {
    /// Prompt processing (prefill), in milliseconds (llama.cpp
    /// `timings.prompt_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<f64>,
    /// Generation (decode), in milliseconds (llama.cpp
    /// `timings.predicted_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_ms: Option<f64>,
    /// The request from arrival to its last token, in milliseconds (SGLang
    /// `meta_info.e2e_latency`; prompt plus generation where only those are
    /// given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ms: Option<f64>,
    /// Prompt tokens the server took from its cache (llama.cpp
    /// `timings.cache_n`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

impl ServerTiming {
    /// The server's whole time on the request: `total_ms`, else prompt plus
    /// generation.
    pub fn server_ms(&self) -> Option<f64> {
        self.total_ms.or(match (self.prompt_ms, self.predicted_ms) {
            (Some(p), Some(g)) => Some(p + g),
            _ => None,
        })
    }
}

/// A decoded model response.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Assistant content.
    pub content: String,
    /// Reasoning output (`reasoning_content` or `reasoning`).
    pub reasoning: Option<String>,
    /// The server's signature of the reasoning, where its API signs it
    /// (Anthropic's thinking blocks).
    pub reasoning_signature: Option<String>,
    /// Reasoning the server sent encrypted (Anthropic's `redacted_thinking`
    /// blocks' `data`), in order: none of it is readable or counted, and it
    /// goes back unchanged with the rest of the reasoning.
    pub redacted_reasoning: Vec<String>,
    /// Usage, when the server reported it.
    pub usage: Option<Usage>,
    /// `finish_reason` of the first choice.
    pub finish_reason: Option<String>,
    /// Streaming: arrival of the first content or reasoning token.
    pub first_token_at: Option<Instant>,
    /// Streaming: arrival of the first reasoning token, where the API tells
    /// reasoning from content.
    pub first_reasoning_at: Option<Instant>,
    /// Streaming: arrival of the first answer token (content, not reasoning).
    /// A codec that leaves it out gets the first token when no reasoning came
    /// (the engine fills it in), and none when reasoning came.
    pub first_answer_at: Option<Instant>,
    /// Streaming: arrival and byte length of each content-bearing chunk.
    pub chunks: Vec<(Instant, u32)>,
    /// The server's id of this response, where it keeps conversation state
    /// under it (the Responses API's `previous_response_id`).
    pub response_id: Option<String>,
    /// The response's own id as its body gave it (`id`), for the record.
    pub id: Option<String>,
    /// The server's id of the request from the response's request-id header
    /// (the engine fills it in).
    pub server_request_id: Option<String>,
    /// The server's own timings of the request, where it reports them.
    pub server_timing: Option<ServerTiming>,
}

impl Reply {
    /// The model's turn this reply is: an assistant message of its content
    /// and reasoning, under the id the server keeps the conversation by.
    pub fn into_message(self) -> Message {
        let mut m =
            crate::conversation::turn::assistant(self.content, self.reasoning.map(Into::into));
        m.reasoning_signature = self.reasoning_signature.map(Into::into);
        m.redacted_reasoning = self
            .redacted_reasoning
            .into_iter()
            .map(Into::into)
            .collect();
        m.response_id = self.response_id.map(Into::into);
        m
    }

    /// Sends none of the reply's reasoning back in the turns that follow
    /// ([`ReasoningHistory::Drop`](crate::spec::ReasoningHistory::Drop)).
    pub fn drop_reasoning(&mut self) {
        self.reasoning = None;
        self.reasoning_signature = None;
        self.redacted_reasoning.clear();
    }
}

/// A codec failure: the response could not be understood.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(pub String);

/// Incremental decoder of one streamed (SSE) response.
pub trait StreamDecoder: Send {
    /// Feeds the next bytes of the body, received at `now`.
    fn feed(&mut self, bytes: &[u8], now: Instant) -> Result<(), CodecError>;
    /// Ends the stream; fails when it was cut short.
    fn finish(&mut self) -> Result<Reply, CodecError>;
}

/// A request body under construction: bytes written now, and shared immutable
/// chunks (such as a conversation's cached prefix) sent as they are, uncopied.
#[derive(Debug, Default)]
pub struct BodyWriter {
    parts: Vec<bytes::Bytes>,
    /// Written bytes not yet cut into a part. The parts cut from it share its
    /// allocation: a body's written pieces cost one allocation, not one each.
    buf: bytes::BytesMut,
    len: usize,
}

impl BodyWriter {
    /// What the first write reserves: a chat request's own bytes around its
    /// shared messages fit.
    const FIRST_RESERVE: usize = 512;

    /// Appends bytes.
    pub fn write(&mut self, b: &[u8]) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(b.len().max(Self::FIRST_RESERVE));
        }
        self.buf.extend_from_slice(b);
        self.len += b.len();
    }

    /// Appends a shared chunk without copying it.
    pub fn push_shared(&mut self, chunk: bytes::Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.flush();
        self.len += chunk.len();
        self.parts.push(chunk);
    }

    fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.parts.push(self.buf.split().freeze());
        }
    }

    /// Total length so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body's chunks, in order.
    pub fn finish(mut self) -> Vec<bytes::Bytes> {
        self.flush();
        self.parts
    }
}

impl std::io::Write for BodyWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        BodyWriter::write(self, b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Turns conversations into request bodies and responses into replies.
pub trait RequestCodec: Send + Sync {
    /// The request path of this API, used when the run names no endpoint.
    fn endpoint(&self) -> &str {
        "/v1/chat/completions"
    }
    /// The header that carries the API key, verbatim (`x-api-key`); `None`,
    /// the default: `Authorization: Bearer KEY`.
    fn api_key_header(&self) -> Option<&str> {
        None
    }
    /// Headers this API needs on every request (a version header); the run's
    /// own `--header`s win over them.
    fn headers(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Whether the codec sends a message's images (`--images-per-request`); a
    /// run with images and a codec that cannot carry them is refused.
    fn supports_images(&self) -> bool {
        false
    }
    /// Whether the codec sends a message's audio clips (`--audio-ms`,
    /// `--audio-files`); a run with audio and a codec that cannot carry it
    /// is refused.
    fn supports_audio(&self) -> bool {
        false
    }
    /// Whether every request of this API needs an audio clip (speech to
    /// text); a run without audio is then refused before anything is sent.
    fn requires_audio(&self) -> bool {
        false
    }
    /// How many inputs a request of `messages` messages asks the server to
    /// answer one by one, where the API answers per input (a reranker's
    /// documents after its query, an embedding batch's inputs); `None`, the
    /// default: the API answers the conversation as a whole. `analyze`
    /// reports the inputs per request from it.
    fn inputs_per_request(&self, messages: u64) -> Option<u64> {
        let _ = messages;
        None
    }
    /// The media type of the bodies `encode` writes (the `Content-Type`
    /// header): JSON unless the API takes another (a multipart upload names
    /// its boundary here).
    fn content_type(&self) -> &str {
        "application/json"
    }
    /// The top-level body fields that carry the run's reasoning `knobs` in
    /// this API, added to every request; or why the API cannot carry one of
    /// them (the run is refused before anything is sent, naming the flag).
    /// The default carries none: any knob is refused.
    fn reasoning_fields(
        &self,
        knobs: &crate::spec::ReasoningKnobs,
    ) -> Result<Vec<(String, serde_json::Value)>, String> {
        if knobs.has_fields() {
            Err("this API has no field for reasoning knobs".into())
        } else {
            Ok(Vec::new())
        }
    }
    /// The top-level body fields that ask this API for an answer of
    /// `format` (structured outputs), or why it cannot (the run is refused
    /// before anything is sent, naming the flag). The default has none.
    fn response_format_fields(
        &self,
        format: &crate::spec::ResponseFormat,
    ) -> Result<Vec<(String, serde_json::Value)>, String> {
        let _ = format;
        Err(
            "this API carries no structured outputs here (openai_chat, openai_responses and sglang_generate do)"
                .into(),
        )
    }
    /// What this API sends back of earlier reasoning when the run asks
    /// `asked` (absent: the API's own default, which must be `Ok`), or why it
    /// cannot (the run is refused before anything is sent). The engine drops
    /// a reply's reasoning from the conversation under
    /// [`ReasoningHistory::Drop`](crate::spec::ReasoningHistory::Drop), so
    /// `encode` sends whatever reasoning a message still has. The default:
    /// nothing goes back, and `keep` is refused.
    fn reasoning_history(
        &self,
        asked: Option<crate::spec::ReasoningHistory>,
    ) -> Result<crate::spec::ReasoningHistory, String> {
        match asked {
            None | Some(crate::spec::ReasoningHistory::Drop) => {
                Ok(crate::spec::ReasoningHistory::Drop)
            }
            Some(crate::spec::ReasoningHistory::Keep) => {
                Err("this API has no place for earlier reasoning in a request".into())
            }
        }
    }
    /// Writes the JSON body of a request to `out`.
    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError>;
    /// Decodes a complete (non-streamed) response body.
    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError>;
    /// A decoder for a streamed response.
    fn stream_decoder(&self) -> Box<dyn StreamDecoder>;
}

/// Who a request belongs to, as routers see it.
#[derive(Debug, Clone, Copy)]
pub struct RouteContext<'a> {
    /// The run seed (identities derived from it are reproducible).
    pub seed: u64,
    /// Agent index in admission order.
    pub agent_id: u64,
    /// Reusable scheduler slot; a replacement inherits its predecessor's.
    pub routing_slot: u64,
    /// The trajectory.
    pub trajectory_id: &'a str,
    /// Index of the request within the trajectory.
    pub request_index: u64,
}

/// What routers add to a request.
#[derive(Debug, Clone, Default)]
pub struct RouteExtras {
    /// HTTP headers.
    pub headers: Vec<(String, String)>,
    /// Top-level JSON body fields.
    pub body_fields: Vec<(String, serde_json::Value)>,
}

/// What a router that picks endpoints sees when a request is about to go out
/// (after its due time and its concurrency permit): who it belongs to, this
/// client's load on each endpoint, and the prompt's blocks.
#[derive(Debug, Clone, Copy)]
pub struct EndpointContext<'a> {
    /// Who the request belongs to.
    pub route: RouteContext<'a>,
    /// This client's requests in flight on each endpoint the router picks
    /// among, by index: the run's hosts in order, or, against a fleet whose
    /// model map gives the request's model to some endpoints alone, those
    /// endpoints in host order (the run then keeps an instance of the policy
    /// per such pool, and maps the index back). Its length is their number.
    pub in_flight: &'a [u32],
    /// Hashes of the prompt's full blocks, in order; each covers the prompt
    /// from its start to the end of its block (chained), so equal hashes at
    /// index `i` mean equal first `i + 1` blocks.
    pub block_hashes: &'a [u64],
    /// Tokens per block of `block_hashes` (the run's cache block size).
    pub block_tokens: u32,
}

/// The run as it stands, for live views ([`Reporter::on_live`]): counters
/// since the clock start, warmup included, and the latency distributions of
/// the measured requests so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveStats {
    /// Seconds since the clock start.
    pub elapsed_secs: f64,
    /// Requests sent.
    pub sent: u64,
    /// Requests that ended (warmup included).
    pub completed: u64,
    /// Measured successes.
    pub ok: u64,
    /// Measured failures by kind (`http_503`, `timeout`, ...).
    pub failed_by_kind: std::collections::BTreeMap<String, u64>,
    /// Requests in flight.
    pub in_flight: u64,
    /// Attempts beyond the first.
    pub retries: u64,
    /// Requests sent again on a new connection after the server closed one.
    pub reconnects: u64,
    /// Prompt and completion tokens of the measured successes.
    pub prompt_tokens: u64,
    /// See `prompt_tokens`.
    pub completion_tokens: u64,
    /// The arrival rate the schedule asks for now (absent: a closed loop).
    pub target_rate: Option<f64>,
    /// The stage of a staged schedule now.
    pub stage: Option<usize>,
    /// How late requests went out behind their schedule.
    pub send_lag: LiveHistogram,
    /// Time to first token.
    pub ttft: LiveHistogram,
    /// Time to first answer token of the measured successes that reasoned
    /// first (empty when none did; absent from a view written before it).
    pub ttfat: LiveHistogram,
    /// Inter-token latency (per token).
    pub itl: LiveHistogram,
    /// Request latency, send to last byte.
    pub e2e: LiveHistogram,
    /// How late the client's runtime ran a probe task that wakes every
    /// 50 ms: the delay any of its tasks could see.
    pub scheduling_delay: LiveHistogram,
    /// The client runtime's worker threads (0: unknown).
    pub client_threads: u32,
    /// Seconds its threads have spent busy since the clock start, summed
    /// (over `elapsed_secs` times `client_threads`: their busy share).
    pub client_busy_secs: Option<f64>,
}

/// A latency distribution as a cumulative histogram over fixed bounds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveHistogram {
    /// `(upper bound in seconds, samples at or below it)`, rising, ending
    /// before `+Inf` (which is `count`).
    pub buckets: Vec<(f64, u64)>,
    /// Samples.
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

/// The upper bounds of [`LiveHistogram`]'s buckets, seconds.
pub const LIVE_BUCKETS: [f64; 17] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];

/// Adds per-request identity, and (a routing policy) picks the endpoint of a
/// fleet each request goes to.
pub trait Router: Send + Sync {
    /// Adds headers and body fields for the request described by `ctx` (by
    /// default none: a routing policy may only pick). An error stops the run
    /// (exit 1): a request must never go out without the identity the user
    /// asked for.
    fn decorate(&self, _ctx: &RouteContext<'_>, _out: &mut RouteExtras) -> Result<(), PluginError> {
        Ok(())
    }

    /// Whether this router picks endpoints (a routing policy). One router of
    /// a run may; two that do are refused before anything is sent.
    fn chooses_endpoint(&self) -> bool {
        false
    }

    /// The endpoint (an index below `ctx.in_flight.len()`) of the request
    /// about to go out; called only when [`Router::chooses_endpoint`]. An
    /// index out of range stops the run.
    fn choose_endpoint(&self, _ctx: &EndpointContext<'_>) -> Result<usize, PluginError> {
        Ok(0)
    }

    /// The data-parallel rank a routing slot is pinned to, if this router pins
    /// slots to ranks (reported per trajectory).
    fn dp_rank(&self, _routing_slot: u64) -> Option<u64> {
        None
    }
}

/// How one request attempt series ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Non-success HTTP status.
    Http(u16),
    /// The request timed out.
    Timeout,
    /// Could not connect, or the connection broke.
    Connect,
    /// The response could not be decoded.
    Decode,
    /// Cancelled by Ctrl+C.
    Cancelled,
}

impl FailureKind {
    /// Parses the [`Display`](std::fmt::Display) form (`http_429`, `timeout`, ...).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "timeout" => Self::Timeout,
            "connect" => Self::Connect,
            "decode" => Self::Decode,
            "cancelled" => Self::Cancelled,
            _ => Self::Http(s.strip_prefix("http_")?.parse().ok()?),
        })
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Http(s) => write!(f, "http_{s}"),
            Self::Timeout => f.write_str("timeout"),
            Self::Connect => f.write_str("connect"),
            Self::Decode => f.write_str("decode"),
            Self::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// How a structured answer was checked: the schema it was asked for (its
/// index among the run's), and why it was not valid, if it was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructuredCheck {
    /// The schema's index (0 for `json_object`).
    pub schema: u16,
    /// Why the answer is not valid (`None`: valid).
    pub invalid: Option<InvalidOutput>,
}

/// Why a structured answer is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum InvalidOutput {
    /// No answer at all (a reply of reasoning alone, or nothing).
    Empty,
    /// Not JSON, and the output reached its cap: cut short.
    Truncated,
    /// Not JSON.
    NotJson,
    /// JSON, but not an object (`json_object`).
    NotObject,
    /// JSON that the schema does not allow.
    Schema,
}

impl InvalidOutput {
    /// Every reason, by name.
    pub const ALL: [(&'static str, Self); 5] = [
        ("empty", Self::Empty),
        ("truncated", Self::Truncated),
        ("not_json", Self::NotJson),
        ("not_object", Self::NotObject),
        ("schema", Self::Schema),
    ];

    /// The reason's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::Truncated => "truncated",
            Self::NotJson => "not_json",
            Self::NotObject => "not_object",
            Self::Schema => "schema",
        }
    }

    /// The reason named `s`.
    pub fn named(s: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|(_, r)| *r)
    }
}

/// A request outcome, as reporters see it.
#[derive(Debug, Clone, Default)]
pub struct RequestRecord<'a> {
    /// Agent index.
    pub agent_id: u64,
    /// Trajectory id.
    pub trajectory_id: &'a str,
    /// Request index within the trajectory.
    pub request_index: u64,
    /// Planned absolute prompt tokens.
    pub planned_prompt_tokens: Option<u32>,
    /// Attempts made beyond the first.
    pub retries: u32,
    /// Times a kept connection turned out closed by the server and the
    /// request went out again at once on a new one (no backoff, not a retry).
    pub reconnects: u32,
    /// Latency of the final attempt, from the send that got the response to
    /// the last byte (`timing` gives the time before it: failed attempts and
    /// their backoff).
    pub latency: std::time::Duration,
    /// The server's own timings of the request, where it reported them.
    pub server_timing: Option<ServerTiming>,
    /// Usage on success.
    pub usage: Option<Usage>,
    /// This request's contribution to the perfect-prefix-cache estimate: the
    /// conversation's preceding prompt tokens, capped by this prompt's.
    pub estimated_cached_tokens: u64,
    /// What a perfect prefix cache shared by every request of the run (and, when
    /// the run routes to data-parallel ranks, one per rank) would have cached of
    /// this prompt, in send order (see [`crate::prefix`]); zero for a failure.
    pub cache_estimate: crate::prefix::Estimate,
    /// Live blocks of this request generated from their seed for want of a reply.
    pub live_block_fallbacks: u32,
    /// Time to first token (streaming).
    pub ttft: Option<std::time::Duration>,
    /// Time to the first reasoning token (streaming, where the API tells
    /// reasoning from content).
    pub ttfrt: Option<std::time::Duration>,
    /// Time to the first answer token (streaming): the first content token
    /// after any reasoning; the TTFT of a reply without reasoning, none for a
    /// reply whose cap was spent on reasoning.
    pub ttfat: Option<std::time::Duration>,
    /// Reasoning tokens of the reply: from the usage where the API reports
    /// them apart, else counted with the run's tokenizer from the reasoning
    /// text (`reasoning_counted`); none without reasoning.
    pub reasoning_tokens: Option<u64>,
    /// Whether `reasoning_tokens` was counted by the client (the usage had no
    /// reasoning count).
    pub reasoning_counted: bool,
    /// Images the request carried (`--images-per-request`).
    pub images: u64,
    /// Their encoded bytes.
    pub image_bytes: u64,
    /// Seconds of audio the request carried (`--audio-ms`, `--audio-files`).
    pub audio_seconds: f64,
    /// Time per output token after the first (streamed, two tokens or more).
    pub tpot: Option<std::time::Duration>,
    /// The longest per-token gap between two streamed chunks.
    pub itl_max: Option<std::time::Duration>,
    /// A structured answer's check (runs with `--response-format`; absent
    /// for failed requests).
    pub structured: Option<StructuredCheck>,
    /// When each chunk that carried tokens arrived, from the send of the last
    /// attempt (streamed; empty unless the run records token times).
    pub token_times: Vec<std::time::Duration>,
    /// Whether the request met every per-request SLO bound: present for a
    /// measured (not warmup) success of a run with per-request bounds.
    pub slo_met: Option<bool>,
    /// The failure, if the request failed.
    pub failure: Option<(FailureKind, &'a str)>,
    /// When it was due and when it went out.
    pub timing: SendTiming,
    /// The endpoint it went to, by index in the run's hosts: present only in
    /// a run against several (a fleet).
    pub endpoint: Option<u32>,
    /// The model of the run's mix it went to (a run of several models).
    pub model: Option<&'a str>,
    /// The ids that join the request with the server's logs and traces.
    pub ids: RequestIds,
}

/// The ids of one request, each where it is known: what joins a record of
/// this client with the same request in a server's logs and traces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestIds {
    /// The id this client sent in its request-id header (`--send-request-ids`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The server's id of the request: its response's request-id header
    /// (`x-request-id`, or the header `--request-id-header` names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_request_id: Option<String>,
    /// The response's own id: `id` of an OpenAI-style or Anthropic body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The W3C trace id the request's `traceparent` carried
    /// (`--trace-context`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The parent id its `traceparent` carried: the id of this client's span
    /// of the request, whose child the server's span is (`--otlp-endpoint`
    /// sends the span under this id).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

impl RequestIds {
    /// Whether no id is known.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// When a request was due and when it was sent, as offsets from the benchmark
/// clock start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SendTiming {
    /// The intended send time: from the arrival schedule, or (in a closed loop
    /// and for later turns) when the request became ready to send.
    pub intended: std::time::Duration,
    /// When the request was first sent (its first attempt): the client's own
    /// lag counts to here.
    pub sent: std::time::Duration,
    /// When its last attempt was sent (`sent` unless it was retried): the
    /// request's latency runs from here.
    pub last_attempt: std::time::Duration,
    /// When the last attempt's response head (status line and headers)
    /// arrived, if one did.
    pub first_byte: Option<std::time::Duration>,
    /// Time spent waiting for a concurrency slot (`max_concurrency`).
    pub queue_wait: std::time::Duration,
    /// A warmup request: sent, but excluded from the statistics.
    pub warmup: bool,
    /// An arrival of the schedule: a request released at its arrival time, or
    /// a session's first request (later turns follow their replies).
    pub arrival: bool,
}

impl SendTiming {
    /// How far the client itself sent the request behind its intended time,
    /// beyond the concurrency queue (first attempt: retries are not lag).
    pub fn send_lag(&self) -> std::time::Duration {
        self.sent
            .saturating_sub(self.intended)
            .saturating_sub(self.queue_wait)
    }

    /// The time before the last attempt: for a retried request, what its
    /// failed attempts and their backoff cost (added to its latency, its
    /// latency over all attempts); for a reconnected one, the moment its kept
    /// connection took to turn out closed.
    pub fn retry_time(&self) -> std::time::Duration {
        self.last_attempt.saturating_sub(self.sent)
    }

    /// The intended send time's lead over the last attempt: added to the
    /// request's latency, it gives the latency from the intended send time
    /// (queue, lag, failed attempts and their backoff included).
    pub fn behind(&self) -> std::time::Duration {
        self.last_attempt.saturating_sub(self.intended)
    }
}

/// A trajectory outcome, as reporters see it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrajectoryRecord {
    /// Agent index in admission order.
    pub agent_id: u64,
    /// Trajectory id.
    pub trajectory_id: String,
    /// Routing slot.
    pub routing_slot: u64,
    /// DP rank, when perfect routing is on.
    pub dp_rank: Option<u64>,
    /// Scheduled admission, seconds from benchmark start.
    pub scheduled_at_seconds: f64,
    /// Actual admission.
    pub admitted_at_seconds: f64,
    /// Admission minus the moment it became eligible.
    pub queue_wait_seconds: f64,
    /// When it finished.
    pub finished_at_seconds: f64,
    /// Finish minus admission.
    pub runtime_seconds: f64,
    /// All planned requests succeeded.
    pub completed: bool,
}

/// Observes a run. Every hook has a no-op default; the engine calls them from one
/// place at a time, in event order. A per-event hook that fails gets no further
/// events; the run goes on (its results are valid), every reporter still
/// finishes, and the first such error ends the run with exit code 1.
pub trait Reporter: Send {
    /// Before the first request.
    fn on_start(&mut self, _run: &crate::record::RunInfo) -> Result<(), PluginError> {
        Ok(())
    }
    /// When the benchmark clock starts, just after every reporter's
    /// [`on_start`](Self::on_start): the Unix time taken with it. The
    /// `started_unix` that `on_start` saw was made before the reporters
    /// started; a reporter that turns the records' offsets into wall-clock
    /// times takes this one.
    fn on_clock_start(&mut self, _started_unix: f64) {}
    /// After each request (all attempts).
    fn on_request(&mut self, _rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        Ok(())
    }
    /// After each request whose record is held until the run knows whether
    /// it is warmup (`warmup = "auto"` finds that once the run is over, or
    /// earlier when it holds too much): the same record comes through
    /// [`on_request`](Self::on_request) then. For
    /// live displays, which would otherwise stand still; a reporter that
    /// writes records waits for `on_request`.
    fn on_held(&mut self, _rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        Ok(())
    }
    /// After each trajectory.
    fn on_trajectory(&mut self, _rec: &TrajectoryRecord) -> Result<(), PluginError> {
        Ok(())
    }
    /// About four times a second while the run goes on, and once at its end:
    /// the run as it stands (for live views and exports; see [`LiveStats`]).
    /// Only while some reporter of the run [wants them](Self::wants_live).
    fn on_live(&mut self, _live: &LiveStats) -> Result<(), PluginError> {
        Ok(())
    }
    /// Whether this reporter reads the live views of [`on_live`](Self::on_live),
    /// asked once before the run. When no reporter of a run does, the engine
    /// makes none while it goes (a view costs a look at every histogram), and
    /// only the last one, at its end, is handed out. The default is yes, so that
    /// a reporter written before this hook keeps its views; one that ignores
    /// them says no.
    fn wants_live(&self) -> bool {
        true
    }
    /// After each scrape of the server's metrics (`--server-metrics`), failed
    /// ones too.
    fn on_server_metrics(
        &mut self,
        _scrape: &crate::results::ServerScrape,
    ) -> Result<(), PluginError> {
        Ok(())
    }
    /// At the end of the run, just before [`on_finish`](Self::on_finish): the
    /// run's latency distributions, exact and mergeable (see
    /// [`Histograms`](crate::results::Histograms)).
    fn on_histograms(
        &mut self,
        _histograms: &crate::results::Histograms,
    ) -> Result<(), PluginError> {
        Ok(())
    }
    /// At the end of the run, before its summary is made (also after
    /// Ctrl+C): a reporter that sends its records elsewhere (spans to a
    /// collector, rows to a database) finishes delivering what it holds,
    /// within a bound of its own, and says what came of it; the summary
    /// lists it under `deliveries`. A destination that was down or slow is a
    /// count of dropped items there, never a failed run. The default
    /// delivers nothing.
    fn deliver(&mut self) -> Result<Option<crate::record::Delivery>, PluginError> {
        Ok(None)
    }
    /// At the end of the run, also after Ctrl+C with a partial summary.
    fn on_finish(
        &mut self,
        _run: &crate::record::RunInfo,
        _summary: &Summary,
    ) -> Result<(), PluginError> {
        Ok(())
    }
}
