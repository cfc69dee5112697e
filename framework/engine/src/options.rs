//! What a run is given besides its plugins: the engine's options, and the
//! errors that stop a run.

use crate::tokens::TokenError;
use batchbench_contract::plugin::PluginError;
use batchbench_contract::spec::LoadSpec;
use std::time::Duration;

/// The prompt sent when a request has no prompt-length target.
pub const DEFAULT_PROMPT: &str = "Write a short paragraph about the history of computing.";

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The plan cannot be run as written (bad input: exit 2).
    #[error("{0}")]
    Plan(String),
    /// Text could not be synthesised exactly (bad input: exit 2).
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A plugin failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A reporter could not start: nothing was sent (bad input: exit 2).
    #[error("{0} (nothing was sent)")]
    Start(PluginError),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl EngineError {
    /// Whether this is bad input (exit 2, nothing was sent).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Plan(_)
                | Self::Token(_)
                | Self::Start(_)
                | Self::Plugin(PluginError::Config { .. } | PluginError::Plan(_))
        )
    }
}

/// Engine settings that are not plugins.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The `model` field.
    pub model: String,
    /// Run seed.
    pub seed: u64,
    /// Trajectories active at once (closed-loop slots).
    pub max_active: usize,
    /// Stream responses unless a request says otherwise.
    pub stream: bool,
    /// Template tokens of a first or reset request, subtracted from its content.
    pub initial_overhead_tokens: u32,
    /// Template tokens of each appended turn, subtracted from its environment.
    pub turn_overhead_tokens: u32,
    /// Divides every delay and start offset.
    pub time_scale: f64,
    /// Token-synthesis jobs at once.
    pub synth_workers: usize,
    /// How trajectories are admitted.
    pub admission: Admission,
    /// Open loop: trajectories whose first request is prepared ahead of its offset.
    pub lookahead: usize,
    /// When requests are released: the closed loop, or an arrival process; a
    /// concurrency cap, warmup and a duration.
    pub load: LoadSpec,
    /// The latency bounds the run is judged by (none: no verdict, no goodput).
    pub slo: Vec<batchbench_contract::slo::SloBound>,
    /// The share of measured requests that may fail before the run fails
    /// (see [`Summary::run_failed`](crate::measurement::metrics::Summary::run_failed)).
    pub max_failure_rate: Option<f64>,
    /// The run fails when the client, not the server, limited it.
    pub fail_if_client_bound: bool,
    /// Prometheus endpoints of the server scraped during the run.
    pub server_metrics: Vec<String>,
    /// The name of the router that picks each request's endpoint, against a
    /// fleet (reported, and named in its errors).
    pub routing: Option<String>,
    /// Time between scrapes.
    pub metrics_interval: Duration,
    /// The block size of the prefix-cache estimates.
    pub cache_block_tokens: u32,
    /// This run's shard: agent ids and routing slots are the unsharded run's
    /// (the source must yield only the shard's trajectories, as
    /// [`ShardedSource`](crate::schedule::shard::ShardedSource) does), and arrivals are
    /// the shard's share of the one schedule.
    pub shard: batchbench_contract::shard::Shard,
    /// When the benchmark clock starts, Unix milliseconds (absent: when ready).
    pub start_at_ms: Option<i64>,
    /// Synthetic images on every conversation's first user message.
    pub images: Option<batchbench_contract::spec::ImageSpec>,
    /// Audio clips on every conversation's first user message.
    pub audio: Option<std::sync::Arc<crate::audio::AudioPlan>>,
    /// Record each streamed request's token arrival times.
    pub token_times: bool,
    /// What goes back of a reply's reasoning in the turns after it (absent:
    /// the codec's default for its API).
    pub reasoning_history: Option<batchbench_contract::spec::ReasoningHistory>,
    /// Structured outputs: the formats requests ask for, in rotation, and
    /// every answer checked against its own (absent: free text).
    pub structured: Option<std::sync::Arc<crate::measurement::structured::Structured>>,
    /// Several models: each conversation's model, picked by weight (absent:
    /// `model` alone).
    pub models: Option<std::sync::Arc<crate::models::Models>>,
}

pub use batchbench_contract::spec::AdmissionMode as Admission;

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            model: String::new(),
            seed: 0,
            max_active: 1,
            stream: false,
            initial_overhead_tokens: 0,
            turn_overhead_tokens: 0,
            time_scale: 1.0,
            synth_workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            admission: Admission::ClosedLoop,
            lookahead: 256,
            load: LoadSpec::default(),
            slo: Vec::new(),
            max_failure_rate: None,
            fail_if_client_bound: false,
            server_metrics: Vec::new(),
            routing: None,
            metrics_interval: Duration::from_secs(1),
            cache_block_tokens: batchbench_contract::prefix::DEFAULT_BLOCK_TOKENS,
            shard: batchbench_contract::shard::Shard::WHOLE,
            start_at_ms: None,
            images: None,
            audio: None,
            token_times: false,
            reasoning_history: None,
            structured: None,
            models: None,
        }
    }
}
