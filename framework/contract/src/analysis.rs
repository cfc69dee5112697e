//! What `analyze` reports about a workload before it is run: its shape, its
//! arrivals, its prefix sharing and the cache hit rates a layout of it would
//! give. The engine computes it; reports and results read it.

use crate::record::WorkloadInfo;
use serde::Serialize;

/// A distribution's summary: the count, total, mean, smallest and largest
/// exactly; the percentiles by nearest rank, to 3 significant figures (each the
/// highest value of its histogram bucket, at most 0.1% above the exact one, and
/// never above the largest).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Dist {
    /// Values recorded.
    pub count: u64,
    /// Their sum.
    pub total: u64,
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// Requests sent in one interval of the layout.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Interval {
    /// Its start, seconds from the first request.
    pub start_secs: f64,
    /// Its length in seconds.
    pub secs: f64,
    /// Requests sent in it.
    pub requests: u64,
    /// Requests per second.
    pub rate: f64,
}

/// When requests are sent, as the layout places them.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Arrivals {
    /// From the first request to the last, in seconds.
    pub span_secs: f64,
    /// Requests per second over the span.
    pub mean_rate: f64,
    /// The busiest minute (or the whole span when shorter), requests per second.
    pub peak_rate: f64,
    /// Equal intervals over the span (at most 24).
    pub intervals: Vec<Interval>,
}

/// How many sessions send one block: a bucket of the sharing histogram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SharingBucket {
    /// The sessions, as a range (`1`, `2`, `3-4`, `65+`).
    pub sessions: String,
    /// Distinct blocks sent by that many sessions.
    pub blocks: u64,
    /// Their share of the distinct blocks.
    pub share: f64,
}

/// A prefix that several sessions send.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SharedPrefix {
    /// Its length (whole blocks).
    pub tokens: u64,
    /// Sessions that send it.
    pub sessions: u64,
    /// The first session that sent it (its position in the workload, from 0).
    pub first_session: u64,
    /// That session's trajectory id.
    pub first_trajectory_id: String,
}

/// The prefix-sharing structure of the workload.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sharing {
    /// Distinct blocks.
    pub distinct_blocks: u64,
    /// Blocks sent, counting repeats.
    pub block_references: u64,
    /// Distinct blocks by how many sessions send them.
    pub sessions_per_block: Vec<SharingBucket>,
    /// The longest prefixes sent by two sessions or more, longest first; none
    /// of them is a prefix of another listed one shared by as many sessions.
    pub longest_shared_prefixes: Vec<SharedPrefix>,
}

/// Cached tokens of one cache (or one rank's).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheFigures {
    /// The rank (absent: all ranks together).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u64>,
    /// Requests it saw.
    pub requests: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Tokens it would have served from cache.
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens`.
    pub hit_rate: f64,
}

impl CacheFigures {
    /// The figures of `cached_tokens` out of `prompt_tokens` over `requests`.
    pub fn new(rank: Option<u64>, requests: u64, prompt_tokens: u64, cached_tokens: u64) -> Self {
        Self {
            rank,
            requests,
            prompt_tokens,
            cached_tokens,
            hit_rate: if prompt_tokens > 0 {
                cached_tokens as f64 / prompt_tokens as f64
            } else {
                0.0
            },
        }
    }
}

/// One cache capacity per rank (absent capacity: ideal, never evicting).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheRow {
    /// Tokens per rank (absent: unbounded).
    pub capacity_tokens: Option<u64>,
    /// All ranks together.
    pub total: CacheFigures,
    /// Per rank, when there are several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<CacheFigures>,
}

/// What `analyze` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// The workload, as its source describes it.
    pub workload: WorkloadInfo,
    /// Requests.
    pub requests: u64,
    /// Sessions (trajectories).
    pub sessions: u64,
    /// Requests per session.
    pub turns_per_session: Option<Dist>,
    /// Prompt tokens per request: the plan's target, else the shape's length.
    pub prompt_tokens: Option<Dist>,
    /// Planned output tokens per request (requests with a target).
    pub output_tokens: Option<Dist>,
    /// Think time after a request, milliseconds (requests with one).
    pub think_time_ms: Option<Dist>,
    /// When requests go out.
    pub arrivals: Arrivals,
    /// The cache block size, in tokens.
    pub block_tokens: u32,
    /// How the layout placed requests in time: the assumed service time.
    pub assumed_latency_ms: f64,
    /// Data-parallel ranks.
    pub ranks: u64,
    /// How requests reach ranks.
    pub routing: String,
    /// Prefix sharing across sessions.
    pub sharing: Sharing,
    /// One ideal cache shared by every request: the most any cache could give.
    pub global: CacheFigures,
    /// Per-rank caches: ideal first, then each capacity.
    pub caches: Vec<CacheRow>,
    /// With replies assumed to reason (`--assume-reasoning-tokens`): the
    /// ideal per-rank caches' figures under each choice of what goes back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_history: Option<HistoryChoices>,
    /// A run of several models (`--model-mix`): each model's share of the
    /// requests, in the mix's order, and the ideal per-rank cache of its own
    /// (a server's prefix cache does not cross models).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelFigures>,
    /// The LoRA adapter loads the run will cause on servers that hold at
    /// most so many adapters at once (`--max-loras`), least recently used
    /// evicted, requests in the layout's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adapter_loads: Vec<AdapterLoads>,
    /// What the requests carry besides their text, and the answers they ask
    /// for, where that is more than text: absent for plain chat.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
}

/// What the requests carry besides their text, and the answers they ask
/// for: inputs an API answers one by one, images, audio, structured outputs.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Content {
    /// The codec (API) the requests are written for.
    pub codec: String,
    /// Inputs per request where the API answers each (a reranker's documents,
    /// an embedding batch's inputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs_per_request: Option<Dist>,
    /// Images sent, on the first user message of every conversation.
    #[serde(skip_serializing_if = "is_zero")]
    pub images: u64,
    /// Audio sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioContent>,
    /// Structured outputs: each format's requests, in the run's order (they
    /// rotate over requests).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response_formats: Vec<FormatShare>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The audio a run sends: clips on the first user message of every
/// conversation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AudioContent {
    /// Requests with audio.
    pub requests: u64,
    /// Clips sent.
    pub clips: u64,
    /// Seconds of audio sent, all clips together.
    pub seconds: f64,
    /// Each clip's duration, milliseconds (rounded).
    pub clip_ms: Dist,
}

/// One structured-output format's requests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FormatShare {
    /// The format: a schema's name (its file's stem), or `json_object`.
    pub name: String,
    /// Requests that ask for it.
    pub requests: u64,
}

/// One model's share of a mix's requests.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelFigures {
    /// The model's name.
    pub model: String,
    /// The base model it is an adapter of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// Its requests.
    pub requests: u64,
    /// Their share of all requests.
    pub share: f64,
    /// Its ideal per-rank cache: prompt tokens and the cached share.
    pub cache: CacheFigures,
}

/// Adapter loads under one adapter capacity.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AdapterLoads {
    /// Adapters resident at once per rank.
    pub max_loras: u32,
    /// Requests whose adapter was not resident (a load each).
    pub loads: u64,
    /// Requests for an adapter.
    pub adapter_requests: u64,
    /// `loads` over every request.
    pub share: f64,
}

/// The ideal per-rank caches under each choice of what an agent loop sends
/// back of a reply that reasoned: the whole reply, which the server cached
/// as it generated it (`keep`), or its answer alone, new to the server
/// (`drop`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistoryChoices {
    /// Reasoning tokens assumed per reply (part of its output tokens).
    pub reasoning_tokens: u32,
    /// The choice the run makes (`keep` or `drop`), whose figures the
    /// analysis's other cache rows are.
    pub run: String,
    /// Every reply sent back whole.
    pub keep: CacheFigures,
    /// Every reply sent back without its reasoning.
    pub drop: CacheFigures,
}
