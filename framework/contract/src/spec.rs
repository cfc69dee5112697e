//! The run spec: a complete, serialisable description of one run. Both commands
//! and the Python package resolve what the user asked for (flags, a `--config`
//! file, a dict) into a [`RunSpec`]; one assembly turns it into a running engine;
//! every run record embeds it, so feeding the recorded spec back as `--config`
//! repeats the run (same seed, same request bodies).
//!
//! Defaults are defined here, once: the command-line flags show and use these.

use crate::names::named;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Default values, shared by the spec and the flags that set it.
pub mod defaults {
    /// `--host`.
    pub const HOST: &str = "https://api.openai.com";
    /// `--endpoint`: empty, the codec's own path (`/v1/chat/completions` for
    /// `openai_chat`); a run records the path it used.
    pub const ENDPOINT: &str = "";
    /// `--model`.
    pub const MODEL: &str = "Qwen/Qwen3-VL-235B-A22B-Instruct-FP8";
    /// `--api-key-env`.
    pub const API_KEY_ENV: &str = "OPENAI_API_KEY";
    /// `--request-timeout-secs`.
    pub const REQUEST_TIMEOUT_SECS: f64 = 60.0;
    /// `--max-retries`.
    pub const MAX_RETRIES: u32 = 2;
    /// `--retry-delay-ms`.
    pub const RETRY_DELAY_MS: u64 = 250;
    /// One runtime thread: on a loopback benchmark it costs the least CPU per
    /// request (no work stealing, no cross-thread wake-ups) and still sends tens
    /// of thousands of requests a second; more help only a client-bound run.
    pub const CLIENT_THREADS: u32 = 1;
    /// `--codec`.
    pub const CODEC: &str = "openai_chat";
    /// `--time-scale`.
    pub const TIME_SCALE: f64 = 1.0;
}

/// A plugin selected by name, with its config (a JSON object; the plugin's own
/// typed config deserialises it when the plugin is built).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSpec {
    /// The registered name.
    pub name: String,
    /// The plugin's config.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl PluginSpec {
    /// A plugin with this config.
    pub fn new(name: impl Into<String>, config: serde_json::Value) -> Self {
        Self {
            name: name.into(),
            config,
        }
    }

    /// A plugin with the config serialised from a typed value.
    pub fn typed<C: Serialize>(name: impl Into<String>, config: &C) -> Result<Self, String> {
        let name = name.into();
        let config = serde_json::to_value(config).map_err(|e| format!("{name}: {e}"))?;
        Ok(Self { name, config })
    }

    /// The config as the plugin's typed config.
    pub fn config_as<C: serde::de::DeserializeOwned>(&self) -> Result<C, String> {
        C::deserialize(&self.config).map_err(|e| format!("{} config: {e}", self.name))
    }
}

/// Where requests go and how they are sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TargetSpec {
    /// Base URL of the server, or `sim://` (with options as a query) for the
    /// built-in simulator; several URLs (a list) make a fleet, whose endpoint
    /// a routing policy picks per request.
    pub host: Hosts,
    /// Request path, or a full URL; empty: the codec's own path.
    pub endpoint: String,
    /// The request's `model` field.
    pub model: String,
    /// The tokenizer (a Hugging Face id, a tokenizer.json, a directory, a .gguf);
    /// absent: `model`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer_model: Option<String>,
    /// The environment variable holding the API key (the key itself is never
    /// part of a spec).
    pub api_key_env: String,
    /// Per-request timeout in seconds.
    pub request_timeout_secs: f64,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Base delay of the exponential retry backoff, in milliseconds.
    pub retry_delay_ms: u64,
    /// Extra HTTP headers on every request.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Stream responses (SSE) unless a request says otherwise.
    pub stream: bool,
    /// Threads of the client's async runtime (sending, receiving, admission):
    /// a number, or `"auto"`. Synthesis that is not on the proven path runs on
    /// a separate pool.
    pub client_threads: ClientThreads,
    /// PEM file of extra CA certificates (a private CA) trusted beside the
    /// system's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Accept any server certificate, unverified (the summary says so).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The most bytes one response may hold (absent: 64 MiB); a larger one
    /// fails as `decode`, so one response never takes the client's memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    /// The server's KV-cache block size, in tokens, for the prefix-cache
    /// estimates (absent: 16, vLLM's default); only full blocks are cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_block_tokens: Option<u32>,
    /// What the run asks of a reasoning model's thinking, sent in the API's
    /// own fields (absent: nothing, the server's default).
    #[serde(skip_serializing_if = "ReasoningKnobs::is_empty")]
    pub reasoning: ReasoningKnobs,
    /// The ids that join each request with a server's logs and traces.
    #[serde(default, skip_serializing_if = "RequestIdSpec::is_default")]
    pub ids: RequestIdSpec,
    /// Structured outputs: the answer the run asks for (any JSON object, or
    /// JSON valid against a schema), in the API's own field; every reply is
    /// validated (absent: free text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormatSpec>,
    /// Several models in one run (`--model-mix`): base models and LoRA
    /// adapters, each conversation sent to one picked by weight (absent:
    /// `model` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<crate::models::ModelMixSpec>,
}

/// What a run asks of every answer's shape (`--response-format`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResponseFormatSpec {
    /// Any JSON object (`json_object`).
    JsonObject,
    /// JSON valid against a JSON Schema, one of `schemas` per request (they
    /// rotate: request `i` of trajectory `t` gets schema `(t + i) mod n`).
    JsonSchema {
        /// JSON Schema files.
        schemas: Vec<std::path::PathBuf>,
    },
}

impl std::str::FromStr for ResponseFormatSpec {
    type Err = String;
    /// `json_object`, or `json_schema:FILE[,FILE...]`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "json_object" => Ok(Self::JsonObject),
            Some(("json_schema", files)) if !files.trim().is_empty() => Ok(Self::JsonSchema {
                schemas: files
                    .split(',')
                    .map(|f| std::path::PathBuf::from(f.trim()))
                    .collect(),
            }),
            _ => Err(format!(
                "'{s}' is not a response format: json_object, or json_schema:FILE[,FILE...]"
            )),
        }
    }
}

/// One answer format as a codec writes it: `schema` absent for any JSON
/// object.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseFormat {
    /// The schema's name (its file's stem), where the API names it.
    pub name: String,
    /// The JSON Schema, or `None` for any JSON object.
    pub schema: Option<serde_json::Value>,
}

/// The ids of every request: the header a server's id of a request is read
/// from (and this client's own id sent in), this client's own ids, and a W3C
/// trace context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestIdSpec {
    /// The request-id header (absent: `X-Request-Id`): read from every
    /// response as the server's id of the request, and, with `send`, sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Send this client's own id of every request in `header`, drawn from the
    /// seed (a rerun sends the same ids).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub send: bool,
    /// Send a W3C `traceparent` (sampled) with every request.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trace_context: bool,
}

impl RequestIdSpec {
    /// Nothing asked: the default header is read, nothing is sent.
    pub fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// The request-id header's name.
    pub fn header(&self) -> &str {
        self.header.as_deref().unwrap_or("X-Request-Id")
    }

    /// Whether `name` is a header name HTTP accepts (a token: no spaces,
    /// separators or control characters), and not empty.
    pub fn check_header(name: &str) -> Result<(), String> {
        const SEPARATORS: &str = "()<>@,;:\\\"/[]?={} \t";
        if name.is_empty() {
            return Err("the request-id header name is empty".into());
        }
        match name
            .chars()
            .find(|c| !c.is_ascii() || c.is_ascii_control() || SEPARATORS.contains(*c))
        {
            Some(c) => Err(format!(
                "the request-id header name {name:?} holds {c:?}, which a header name cannot"
            )),
            None => Ok(()),
        }
    }
}

/// What a run asks of a reasoning model's thinking. Each codec writes them in
/// its API's own fields ([`RequestCodec::reasoning_fields`](crate::plugin::RequestCodec::reasoning_fields));
/// a knob the API cannot carry refuses the run before anything is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReasoningKnobs {
    /// Reasoning effort (`reasoning_effort`, `reasoning.effort`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// The most tokens the model may think (Anthropic's
    /// `thinking.budget_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
    /// Thinking turned off (the chat template's `enable_thinking: false`,
    /// Anthropic's `thinking: {"type": "disabled"}`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub off: bool,
    /// What an agent loop sends back of earlier reasoning (absent: the
    /// codec's default for its API, [`RequestCodec::reasoning_history`](crate::plugin::RequestCodec::reasoning_history)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<ReasoningHistory>,
}

impl ReasoningKnobs {
    /// No knob set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether a knob that goes into the request body is set (effort,
    /// budget, thinking off): the history choice is the client's own.
    pub fn has_fields(&self) -> bool {
        self.effort.is_some() || self.budget_tokens.is_some() || self.off
    }
}

/// What an agent loop or replay sends back of a reply's reasoning in the
/// turns that follow it. What is sent back decides what a server can take
/// from its prefix cache: it cached the reasoning it generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningHistory {
    /// The reasoning goes back with its answer, as the server generated it
    /// (with its signature where the API signs it).
    Keep,
    /// The answer goes back alone.
    Drop,
}

impl ReasoningHistory {
    /// Every choice, by name.
    pub const ALL: [(&'static str, Self); 2] = [("keep", Self::Keep), ("drop", Self::Drop)];

    /// The choice's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Keep => "keep",
            Self::Drop => "drop",
        }
    }
}

impl std::str::FromStr for ReasoningHistory {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(&Self::ALL, s, "a reasoning history (keep or drop)")
    }
}

/// A reasoning effort, as the OpenAI APIs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// No reasoning.
    None,
    /// The least reasoning short of none.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

impl ReasoningEffort {
    /// Every effort, by name.
    pub const ALL: [(&'static str, Self); 5] = [
        ("none", Self::None),
        ("minimal", Self::Minimal),
        ("low", Self::Low),
        ("medium", Self::Medium),
        ("high", Self::High),
    ];

    /// The name the APIs send.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, e)| *e == self)
            .map_or("medium", |(n, _)| n)
    }
}

impl std::str::FromStr for ReasoningEffort {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        named(
            &Self::ALL,
            s,
            "a reasoning effort (none, minimal, low, medium or high)",
        )
    }
}

impl Default for TargetSpec {
    fn default() -> Self {
        Self {
            host: defaults::HOST.into(),
            endpoint: defaults::ENDPOINT.into(),
            model: defaults::MODEL.into(),
            tokenizer_model: None,
            api_key_env: defaults::API_KEY_ENV.into(),
            request_timeout_secs: defaults::REQUEST_TIMEOUT_SECS,
            max_retries: defaults::MAX_RETRIES,
            retry_delay_ms: defaults::RETRY_DELAY_MS,
            headers: BTreeMap::new(),
            stream: false,
            client_threads: ClientThreads::Fixed(defaults::CLIENT_THREADS),
            ca_cert: None,
            insecure: false,
            max_response_bytes: None,
            cache_block_tokens: None,
            reasoning: ReasoningKnobs::default(),
            ids: RequestIdSpec::default(),
            response_format: None,
            mix: None,
        }
    }
}

impl TargetSpec {
    /// The tokenizer: `tokenizer_model`, else `model`.
    pub fn tokenizer(&self) -> &str {
        self.tokenizer_model.as_deref().unwrap_or(&self.model)
    }

    /// The block size of the prefix-cache estimates.
    pub fn cache_block_tokens(&self) -> u32 {
        self.cache_block_tokens
            .unwrap_or(crate::prefix::DEFAULT_BLOCK_TOKENS)
    }

    /// Whether `host` asks for the in-process simulator.
    pub fn is_sim(&self) -> bool {
        self.host.first().starts_with("sim://") || self.host.first() == "sim:"
    }
}

/// The server or servers of a run: one base URL, or several (a fleet of
/// replicas, one endpoint each). A spec writes one as a string and several as
/// a list; a string always reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hosts(Vec<String>);

impl Hosts {
    /// Several hosts; `None` for an empty list.
    pub fn new(hosts: Vec<String>) -> Option<Self> {
        (!hosts.is_empty()).then_some(Self(hosts))
    }

    /// The first host (the only one of a run with one).
    pub fn first(&self) -> &str {
        &self.0[0]
    }

    /// Every host, in the order given: endpoint `i` is `all()[i]`.
    pub fn all(&self) -> &[String] {
        &self.0
    }

    /// More than one host: the run routes.
    pub fn is_fleet(&self) -> bool {
        self.0.len() > 1
    }

    /// Each host through `f` (redacting credentials, say).
    pub fn map(&self, f: impl Fn(&str) -> String) -> Self {
        Self(self.0.iter().map(|h| f(h)).collect())
    }

    /// A fleet given as full URLs (`http://a:8000/v1/chat/completions`, ...):
    /// their bases as the hosts, and the one request path they share. An
    /// error names the URL (by its index) that is not http(s) or whose path
    /// differs from the first's.
    pub fn from_urls(urls: &[String]) -> Result<(Self, String), String> {
        let mut bases = Vec::with_capacity(urls.len());
        let mut path: Option<&str> = None;
        for (i, u) in urls.iter().enumerate() {
            let rest = u
                .strip_prefix("http://")
                .or_else(|| u.strip_prefix("https://"))
                .ok_or_else(|| format!("endpoint[{i}]: '{u}' is not an http or https URL"))?;
            let at = rest.find('/').map_or(u.len(), |k| u.len() - rest.len() + k);
            let (base, p) = u.split_at(at);
            match path {
                Some(q) if q != p => {
                    return Err(format!(
                        "endpoint[{i}]: every endpoint of a fleet takes the same path, got '{p}' after '{q}'"
                    ));
                }
                _ => path = Some(p),
            }
            bases.push(base.to_owned());
        }
        let hosts = Self::new(bases).ok_or_else(|| "endpoint: the list is empty".to_owned())?;
        Ok((hosts, path.unwrap_or_default().to_owned()))
    }
}

impl From<&str> for Hosts {
    fn from(h: &str) -> Self {
        Self(vec![h.to_owned()])
    }
}

impl From<String> for Hosts {
    fn from(h: String) -> Self {
        Self(vec![h])
    }
}

/// The hosts as one line: the URLs joined by commas (the CSV's `host`
/// column; one host is itself).
impl std::fmt::Display for Hosts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(","))
    }
}

impl Serialize for Hosts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Hosts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
        }
        match OneOrMany::deserialize(d)
            .map_err(|_| serde::de::Error::custom("a host is a URL string, or a list of them"))?
        {
            OneOrMany::One(h) => Ok(Self(vec![h])),
            OneOrMany::Many(hs) => {
                Self::new(hs).ok_or_else(|| serde::de::Error::custom("the list of hosts is empty"))
            }
        }
    }
}

/// How trajectories are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionMode {
    /// In source order into `max_active` slots; a finished trajectory's slot goes
    /// to the next one. Start offsets are ignored.
    #[default]
    ClosedLoop,
    /// Each trajectory at its start offset divided by the time scale;
    /// `max_active` is a hard cap that delays (and counts) late admissions.
    OpenLoop,
}

impl AdmissionMode {
    /// `closed-loop` or `open-loop`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClosedLoop => "closed-loop",
            Self::OpenLoop => "open-loop",
        }
    }
}

/// How trajectories enter the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionSpec {
    /// Closed or open loop.
    pub mode: AdmissionMode,
    /// Trajectories active at once. Absent: every trajectory at once (closed
    /// loop), no cap (open loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_active: Option<u64>,
    /// Divides every start offset and delay.
    pub time_scale: f64,
}

impl Default for AdmissionSpec {
    fn default() -> Self {
        Self {
            mode: AdmissionMode::ClosedLoop,
            max_active: None,
            time_scale: defaults::TIME_SCALE,
        }
    }
}

/// What an arrival rate releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Release {
    /// Each request on its own (`batchbench --request-rate`): a trajectory's
    /// requests must be independent (every one after the first resets).
    #[default]
    Requests,
    /// Each trajectory's first request (`batchbench-agent --session-rate`); later
    /// turns follow their replies.
    Sessions,
}

/// How inter-arrival times are drawn (in units of the mean gap, then spread
/// over the rate schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    /// Exponential gaps (a Poisson process).
    #[default]
    Poisson,
    /// Evenly spaced.
    Constant,
    /// Gamma gaps of shape `burstiness` (1: Poisson; below 1 burstier, above 1
    /// more regular).
    Gamma,
}

impl Arrival {
    /// `poisson`, `constant` or `gamma`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Poisson => "poisson",
            Self::Constant => "constant",
            Self::Gamma => "gamma",
        }
    }
}

/// One step of a rate schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// How long the step lasts.
    pub secs: f64,
    /// Arrivals per second during it.
    pub rate: f64,
}

/// What happens to requests in flight at the end of a `duration_secs` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtDeadline {
    /// They finish and are counted; nothing new is sent.
    #[default]
    Finish,
    /// They are cancelled and counted apart (`cut_at_deadline`), not as failures.
    Cancel,
}

impl AtDeadline {
    /// `finish` or `cancel`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Finish => "finish",
            Self::Cancel => "cancel",
        }
    }
}

/// When requests are released: the closed loop (no rate), or an arrival
/// process over a rate schedule; with a concurrency cap, warmup and a duration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadSpec {
    /// Arrivals per second (absent, and no `stages`: the closed loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// What an arrival releases.
    pub release: Release,
    /// How gaps are drawn.
    pub arrival: Arrival,
    /// The gamma shape (with `arrival = "gamma"` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// A linear ramp of the rate from 0 to `rate` over this many seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ramp_up_secs: Option<f64>,
    /// A rate schedule instead of `rate`: steps in order; arrivals end with the last.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
    /// Requests in flight at most; later arrivals wait in a client queue whose
    /// wait is measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
    /// An arrival that waits longer than this many seconds for a concurrency
    /// slot (`max_concurrency`) is dropped, unsent, and counted
    /// (`dropped_waiting`): the server, through the cap, could not take the
    /// load asked for in time. Absent: an arrival waits as long as it takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queue_wait_secs: Option<f64>,
    /// The first this many requests sent are warmup: sent, excluded from the
    /// statistics, reported apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup_requests: Option<u64>,
    /// Requests due in the first this many seconds are warmup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup_secs: Option<f64>,
    /// `"auto"`: the warmup is found from the run's own time series (the end
    /// of its transient), not given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Warmup>,
    /// Run for this long, drawing the workload for as long as needed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<f64>,
    /// Requests in flight at the deadline.
    pub at_deadline: AtDeadline,
    /// Stop once the figures are this sure: the 95% interval of each figure
    /// the run is judged by (the percentile bounds of `slo`, else e2e p50 and
    /// p99) reaches at most this far from it, in percent; `duration_secs` is
    /// the cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_ci: Option<f64>,
    /// Stop once every percentile bound of `slo` is decided: its interval
    /// wholly on one side of the bound; `duration_secs` is the cap.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub until_decided: bool,
    /// With `target_ci` or `until_decided`: not before this many measured
    /// requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<u64>,
}

/// How the warmup is found (`load.warmup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Warmup {
    /// The end of the run's transient, found from its own time series
    /// (MSER-5); the requests before it are warmup.
    Auto,
}

impl Warmup {
    /// Its name in a spec and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
        }
    }
}

impl std::str::FromStr for Warmup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            _ => Err(format!(
                "`{s}` is not a warmup mode: `auto` finds the end of the transient (give a count or a time with --warmup-requests or --warmup-secs)"
            )),
        }
    }
}

/// `target.client_threads`: a number of runtime threads, or `auto` (in a
/// spec, the string `"auto"`), which picks from the load and the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientThreads {
    /// As many as the load needs: one per [`ClientThreads::AUTO_RATE_PER_THREAD`]
    /// arrivals a second at the highest rate, at least one, at most the cores
    /// present; one for a closed loop.
    Auto,
    /// This many.
    Fixed(u32),
}

impl ClientThreads {
    /// The most threads a run may ask for.
    pub const MAX: u32 = 1024;
    /// The arrivals a second `auto` gives each thread: half of what one thread
    /// sustains with its send lag held (bench/load.sh), so that a thread has
    /// room for replies that arrive in bursts.
    pub const AUTO_RATE_PER_THREAD: f64 = 10_000.0;

    /// The threads to start for `load` on a machine with `cores` cores.
    pub fn resolve(self, load: &LoadSpec, cores: usize) -> u32 {
        match self {
            Self::Fixed(n) => n,
            Self::Auto => {
                let peak = load
                    .stages
                    .iter()
                    .map(|s| s.rate)
                    .chain(load.rate)
                    .fold(0.0_f64, f64::max);
                let cores = u32::try_from(cores.max(1)).unwrap_or(Self::MAX);
                let want = (peak / Self::AUTO_RATE_PER_THREAD).ceil();
                // In range: `want` is at least 0 and compared as a float.
                (want.min(f64::from(cores)) as u32).max(1)
            }
        }
    }

    /// Parses a flag's value: `auto` or a number from 1 to [`Self::MAX`].
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=Self::MAX).contains(&n) => Ok(Self::Fixed(n)),
            _ => Err(format!(
                "expected `auto` or a number of threads from 1 to {}, got `{s}`",
                Self::MAX
            )),
        }
    }
}

impl std::fmt::Display for ClientThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for ClientThreads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Fixed(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for ClientThreads {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)
            .map_err(|_| serde::de::Error::custom("expected a number of threads or \"auto\""))?
        {
            // Range-checked with the rest of the spec, so that the error names
            // the field.
            Raw::Number(n) => Ok(Self::Fixed(u32::try_from(n).unwrap_or(u32::MAX))),
            Raw::Text(t) if t == "auto" => Ok(Self::Auto),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "expected a number of threads or \"auto\", got \"{t}\""
            ))),
        }
    }
}

impl LoadSpec {
    /// Whether an arrival process releases requests (not the closed loop).
    pub fn is_open(&self) -> bool {
        self.rate.is_some() || !self.stages.is_empty()
    }

    /// The longest duration, warmup, ramp or stage, in seconds: a year.
    pub const MAX_SECS: f64 = 366.0 * 86_400.0;
    /// The largest concurrency cap.
    pub const MAX_CONCURRENCY: u64 = 1_000_000;

    /// Checks the numbers; an error names the field.
    pub fn check(&self) -> Result<(), String> {
        let positive = |name: &str, v: Option<f64>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => {
                Err(format!("load.{name} must be a positive number, got {x}"))
            }
            _ => Ok(()),
        };
        let span = |name: &str, v: Option<f64>| {
            positive(name, v)?;
            match v {
                Some(x) if x > Self::MAX_SECS => Err(format!(
                    "load.{name} is {x} s; the limit is {} s (a year)",
                    Self::MAX_SECS
                )),
                _ => Ok(()),
            }
        };
        positive("rate", self.rate)?;
        positive("burstiness", self.burstiness)?;
        span("ramp_up_secs", self.ramp_up_secs)?;
        span("warmup_secs", self.warmup_secs)?;
        span("duration_secs", self.duration_secs)?;
        span("max_queue_wait_secs", self.max_queue_wait_secs)?;
        if self.max_queue_wait_secs.is_some() {
            if self.max_concurrency.is_none() {
                return Err("load.max_queue_wait_secs bounds the wait for a concurrency slot: give load.max_concurrency".into());
            }
            if self.rate.is_none() && self.stages.is_empty() {
                return Err("load.max_queue_wait_secs drops arrivals that wait too long: give an arrival rate (load.rate or load.stages); the closed loop has no arrivals".into());
            }
        }
        for (i, st) in self.stages.iter().enumerate() {
            if !(st.secs.is_finite() && st.secs > 0.0 && st.secs <= Self::MAX_SECS) {
                return Err(format!(
                    "load.stages[{i}].secs must be a positive number of at most {} s, got {}",
                    Self::MAX_SECS,
                    st.secs
                ));
            }
            if !(st.rate.is_finite() && st.rate > 0.0) {
                return Err(format!(
                    "load.stages[{i}].rate must be a positive number, got {}",
                    st.rate
                ));
            }
        }
        if self.rate.is_some() && !self.stages.is_empty() {
            return Err(
                "load.rate and load.stages: give one (stages carry their own rates)".into(),
            );
        }
        if self.ramp_up_secs.is_some() && self.rate.is_none() {
            return Err("load.ramp_up_secs ramps up to load.rate: give a rate".into());
        }
        if self.burstiness.is_some() && self.arrival != Arrival::Gamma {
            return Err(format!(
                "load.burstiness is the gamma shape: it needs arrival \"gamma\", not \"{}\"",
                self.arrival.as_str()
            ));
        }
        if self.max_concurrency == Some(0) {
            return Err("load.max_concurrency must be at least 1 (absent: no cap)".into());
        }
        if let Some(n) = self.max_concurrency
            && n > Self::MAX_CONCURRENCY
        {
            return Err(format!(
                "load.max_concurrency is {n}; the limit is {} (absent: no cap)",
                Self::MAX_CONCURRENCY
            ));
        }
        if self.warmup_requests.is_some() && self.warmup_secs.is_some() {
            return Err("load.warmup_requests and load.warmup_secs: give one".into());
        }
        if self.warmup == Some(Warmup::Auto) {
            if self.warmup_requests.is_some() || self.warmup_secs.is_some() {
                return Err("load.warmup auto finds the warmup itself: leave out load.warmup_requests and load.warmup_secs".into());
            }
            if !self.stages.is_empty() || self.ramp_up_secs.is_some() {
                return Err("load.warmup auto looks for the end of a transient, and a rate schedule (load.stages, load.ramp_up_secs) changes the load on purpose: give a steady rate, or load.warmup_secs".into());
            }
            if self.target_ci.is_some() || self.until_decided {
                return Err("load.warmup auto finds its cut once the run is over, and load.target_ci (and a series' load.until_decided) stops the run on figures that must already leave the transient out: give load.warmup_secs instead".into());
            }
        }
        if self.at_deadline != AtDeadline::Finish && self.duration_secs.is_none() {
            return Err("load.at_deadline needs load.duration_secs".into());
        }
        if let (Some(d), Some(w)) = (self.duration_secs, self.warmup_secs)
            && w >= d
        {
            return Err(format!(
                "load.warmup_secs ({w}) must be shorter than load.duration_secs ({d})"
            ));
        }
        if let Some(t) = self.target_ci
            && !(t.is_finite() && t > 0.0 && t < 100.0)
        {
            return Err(format!(
                "load.target_ci is a percent above 0 and below 100, got {t}"
            ));
        }
        if self.duration_secs.is_none() {
            if self.target_ci.is_some() {
                return Err("load.target_ci runs until the figures are sure enough: it needs load.duration_secs as its cap".into());
            }
            if self.until_decided {
                return Err("load.until_decided runs until the SLO is decided: it needs load.duration_secs as its cap".into());
            }
        }
        if self.min_requests.is_some() && self.target_ci.is_none() && !self.until_decided {
            return Err("load.min_requests is the least a converging run measures: it needs load.target_ci (or a series' decided points)".into());
        }
        if self.min_requests == Some(0) {
            return Err("load.min_requests must be at least 1".into());
        }
        Ok(())
    }
}

/// Chat-template tokens the server adds around the content, which the engine
/// subtracts when it builds exact prompts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TemplateSpec {
    /// Tokens of a first or reset request.
    pub initial_overhead_tokens: u32,
    /// Tokens of each appended turn.
    pub turn_overhead_tokens: u32,
}

/// Result files and console behaviour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputSpec {
    /// Print the plan and send nothing.
    pub dry_run: bool,
    /// No progress bar.
    pub quiet: bool,
    /// Print truncated payloads to stderr.
    pub verbose: bool,
    /// Record each streamed request's token arrival times in its request
    /// record (`token_ms` in the requests' JSON lines).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub token_times: bool,
    /// Append a CSV row of totals, percentiles and configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub results_csv: Option<PathBuf>,
    /// The complete summary and run record as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_json: Option<PathBuf>,
    /// One JSON line per request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_jsonl: Option<PathBuf>,
    /// One JSON line per trajectory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_events_jsonl: Option<PathBuf>,
    /// The versioned results directory of the run (`batchbench report` reads
    /// it); for a series, the series' directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_dir: Option<PathBuf>,
    /// Serve the client's own live metrics (a Prometheus exposition at
    /// `/metrics`) on this address during the run: `host:port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    /// Seconds to go on serving `metrics_listen` after the run ends, so that
    /// a scraper reads the final figures (default 0: close with the run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_linger_secs: Option<f64>,
    /// Send one OpenTelemetry span per request to this OTLP/HTTP collector
    /// (`http://host:4318`, to which `/v1/traces` is added when it has no
    /// path), batched off the requests' path; spans it cannot deliver are
    /// counted in the summary's `deliveries`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
}

impl OutputSpec {
    /// Every result file with the flag that names it.
    pub fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        [
            ("--results-csv", &self.results_csv),
            ("--summary-json", &self.summary_json),
            ("--requests-jsonl", &self.requests_jsonl),
            ("--agent-events-jsonl", &self.agent_events_jsonl),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.as_ref().map(|p| (f, p)))
        .collect()
    }
}

/// The server's Prometheus metrics, scraped during the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerMetricsSpec {
    /// The endpoints to scrape (`http://host:port/metrics`); `target` is the
    /// target server's own `/metrics` (the in-process simulator's too).
    pub urls: Vec<String>,
    /// Seconds between scrapes.
    pub interval_secs: f64,
    /// Sample the GPUs of the machine the client runs on as well, at the same
    /// interval: `nvml` (NVIDIA's management library, loaded at run time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_telemetry: Option<GpuTelemetry>,
}

impl Default for ServerMetricsSpec {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            interval_secs: 1.0,
            gpu_telemetry: None,
        }
    }
}

/// Where the client reads the GPUs beside it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuTelemetry {
    /// NVIDIA's management library (`libnvidia-ml`), loaded at run time.
    Nvml,
}

impl std::str::FromStr for GpuTelemetry {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nvml" => Ok(Self::Nvml),
            other => Err(format!("'{other}' is not a GPU telemetry source (nvml)")),
        }
    }
}

/// One run, complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// The seed of every sampled shape, text and identity. Absent in a spec the
    /// user wrote: a fresh one is drawn and recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// This process's part of a run split over several (`--shard I/N`): it
    /// sends the requests of the trajectories it owns, and together the shards
    /// send the unsharded run's (see [`crate::shard`]). Absent: the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::shard::Shard>,
    /// When the benchmark clock starts, RFC 3339 with a zone (such as
    /// `2026-12-04T10:00:00Z`), so that every shard begins together; absent: as
    /// soon as the run is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
    /// Where and how requests are sent.
    #[serde(default)]
    pub target: TargetSpec,
    /// How request bodies are written and responses read.
    #[serde(default = "default_codec")]
    pub codec: PluginSpec,
    /// Where the trajectories come from.
    pub workload: PluginSpec,
    /// How trajectories are admitted.
    #[serde(default)]
    pub admission: AdmissionSpec,
    /// When requests are released: closed loop, or an arrival process.
    #[serde(default, skip_serializing_if = "is_default")]
    pub load: LoadSpec,
    /// The latency bounds the run is judged by, such as `["ttft_p99<=500ms",
    /// "e2e<=20s"]`: each bound's verdict and goodput in the summary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<crate::slo::SloBound>,
    /// The share (0 to 1) of measured requests that may fail before the run
    /// exits 1; absent: only a run in which no request succeeded does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failure_rate: Option<f64>,
    /// Exit 1 when the client, not the server, limited the run (the
    /// summary's `client_bound`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_if_client_bound: bool,
    /// Template overheads subtracted from exact prompts.
    #[serde(default)]
    pub template: TemplateSpec,
    /// Synthetic images attached to every conversation's first user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSpec>,
    /// Audio clips attached to every conversation's first user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<crate::audio::AudioSpec>,
    /// The server's metrics scraped during the run.
    #[serde(default, skip_serializing_if = "is_default")]
    pub server_metrics: ServerMetricsSpec,
    /// Routers, in the order they decorate requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routers: Vec<PluginSpec>,
    /// Reporter plugins beyond the result files of `output`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reporters: Vec<PluginSpec>,
    /// External plugin files (.wasm components, native libraries) to load first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_files: Vec<PathBuf>,
    /// Result files and console behaviour.
    #[serde(default)]
    pub output: OutputSpec,
}

/// The encoding of synthetic images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// PNG (lossless, larger).
    #[default]
    Png,
    /// JPEG (quality 85).
    Jpeg,
}

impl ImageFormat {
    /// The media type.
    pub fn media_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
        }
    }
}

/// Deterministic synthetic images for vision models (`--images-per-request N
/// --image-size WxH --image-format png|jpeg`): each conversation's first user
/// message carries `per_request` images, seeded by the run seed, the
/// trajectory and the request, so equal seeds give identical bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// Images per request.
    pub per_request: u32,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The encoding.
    #[serde(default)]
    pub format: ImageFormat,
}

impl ImageSpec {
    /// The most pixels one image may have (a 4096 x 4096 image).
    pub const MAX_PIXELS: u64 = 4096 * 4096;

    /// Checks the figures; an error names the field.
    pub fn check(&self) -> Result<(), String> {
        if self.per_request == 0 || self.per_request > 64 {
            return Err(format!(
                "images.per_request (--images-per-request) must be 1 to 64, got {}",
                self.per_request
            ));
        }
        if self.width == 0
            || self.height == 0
            || u64::from(self.width) * u64::from(self.height) > Self::MAX_PIXELS
            || self.width > 65_535
            || self.height > 65_535
        {
            return Err(format!(
                "images (--image-size): {}x{} must be at least 1x1 and at most {} pixels",
                self.width,
                self.height,
                Self::MAX_PIXELS
            ));
        }
        Ok(())
    }

    /// Parses `WxH`.
    pub fn parse_size(s: &str) -> Result<(u32, u32), String> {
        let (w, h) = s
            .split_once(['x', 'X'])
            .ok_or_else(|| format!("--image-size {s:?}: give WIDTHxHEIGHT, such as 512x512"))?;
        let n = |v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| format!("--image-size {s:?}: give WIDTHxHEIGHT, such as 512x512"))
        };
        Ok((n(w)?, n(h)?))
    }
}

/// The default codec: OpenAI chat completions.
pub fn default_codec() -> PluginSpec {
    PluginSpec::new(defaults::CODEC, empty_object())
}

impl RunSpec {
    /// A spec of `workload` with every other part at its default.
    pub fn new(workload: PluginSpec) -> Self {
        Self {
            seed: None,
            shard: None,
            start_at: None,
            target: TargetSpec::default(),
            codec: default_codec(),
            workload,
            admission: AdmissionSpec::default(),
            load: LoadSpec::default(),
            slo: Vec::new(),
            max_failure_rate: None,
            fail_if_client_bound: false,
            template: TemplateSpec::default(),
            images: None,
            audio: None,
            server_metrics: ServerMetricsSpec::default(),
            routers: Vec::new(),
            reporters: Vec::new(),
            plugin_files: Vec::new(),
            output: OutputSpec::default(),
        }
    }
}

impl RunSpec {
    /// The shard this spec runs (the whole run without one).
    pub fn shard(&self) -> crate::shard::Shard {
        self.shard.unwrap_or_default()
    }

    /// `start_at` as Unix milliseconds; an error names the field.
    pub fn start_at_ms(&self) -> Result<Option<i64>, String> {
        let Some(s) = &self.start_at else {
            return Ok(None);
        };
        // `Z`, or an offset such as `+02:00` (a zone-less stamp is ambiguous).
        let b = s.as_bytes();
        let offset = b.len() > 6 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':';
        let zoned = s.ends_with(['Z', 'z']) || offset;
        if !zoned {
            return Err(format!(
                "start_at (--start-at) {s:?}: give the zone too, such as 2026-12-04T10:00:00Z"
            ));
        }
        crate::timefmt::parse_ms(s)
            .map(Some)
            .map_err(|e| format!("start_at (--start-at): {e}"))
    }
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_of_full_urls_splits_into_hosts_and_their_one_path() {
        let urls = |u: &[&str]| u.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (hosts, path) = Hosts::from_urls(&urls(&[
            "http://a:8000/v1/chat/completions",
            "https://user:pw@b/v1/chat/completions",
        ]))
        .unwrap();
        assert_eq!(hosts.all(), ["http://a:8000", "https://user:pw@b"]);
        assert_eq!(path, "/v1/chat/completions");
        let (hosts, path) = Hosts::from_urls(&urls(&["http://a", "http://b"])).unwrap();
        assert_eq!((hosts.all().len(), path.as_str()), (2, ""));
        let e =
            Hosts::from_urls(&urls(&["http://a/v1/completions", "http://b/v1/chat"])).unwrap_err();
        assert!(e.starts_with("endpoint[1]: every endpoint"), "{e}");
        let e = Hosts::from_urls(&urls(&["http://a", "a:8000"])).unwrap_err();
        assert!(e.starts_with("endpoint[1]: 'a:8000' is not"), "{e}");
        assert!(Hosts::from_urls(&[]).is_err());
    }

    fn load(rate: Option<f64>, stages: &[f64]) -> LoadSpec {
        LoadSpec {
            rate,
            stages: stages
                .iter()
                .map(|&rate| Stage { secs: 1.0, rate })
                .collect(),
            ..LoadSpec::default()
        }
    }

    #[test]
    fn auto_threads_follow_the_highest_rate_up_to_the_cores() {
        let auto = ClientThreads::Auto;
        assert_eq!(auto.resolve(&load(None, &[]), 16), 1, "a closed loop");
        assert_eq!(auto.resolve(&load(Some(1.0), &[]), 16), 1);
        assert_eq!(auto.resolve(&load(Some(10_000.0), &[]), 16), 1);
        assert_eq!(auto.resolve(&load(Some(10_001.0), &[]), 16), 2);
        assert_eq!(
            auto.resolve(&load(Some(250_000.0), &[]), 16),
            16,
            "capped by the cores"
        );
        assert_eq!(
            auto.resolve(&load(None, &[100.0, 45_000.0, 5.0]), 16),
            5,
            "the highest stage"
        );
        assert_eq!(auto.resolve(&load(Some(50_000.0), &[]), 0), 1);
        assert_eq!(
            ClientThreads::Fixed(3).resolve(&load(Some(1e6), &[]), 16),
            3
        );
    }

    #[test]
    fn client_threads_read_a_number_or_auto_and_write_them_back() {
        assert_eq!(ClientThreads::parse("auto"), Ok(ClientThreads::Auto));
        assert_eq!(ClientThreads::parse("AUTO"), Ok(ClientThreads::Auto));
        assert_eq!(ClientThreads::parse("4"), Ok(ClientThreads::Fixed(4)));
        for bad in ["0", "1025", "-1", "many", ""] {
            let e = ClientThreads::parse(bad).expect_err(bad);
            assert!(
                e.contains("`auto` or a number of threads from 1 to 1024"),
                "{e}"
            );
        }
        let read = |v: serde_json::Value| serde_json::from_value::<ClientThreads>(v);
        assert_eq!(
            read(serde_json::json!("auto")).ok(),
            Some(ClientThreads::Auto)
        );
        assert_eq!(
            read(serde_json::json!(2)).ok(),
            Some(ClientThreads::Fixed(2))
        );
        let e = read(serde_json::json!("fast")).expect_err("a word");
        assert!(e.to_string().contains("\"auto\", got \"fast\""), "{e}");
        assert!(read(serde_json::json!(1.5)).is_err());
        for t in [ClientThreads::Auto, ClientThreads::Fixed(8)] {
            let text = serde_json::to_string(&t).unwrap_or_default();
            assert_eq!(
                read(serde_json::from_str(&text).unwrap_or_default()).ok(),
                Some(t)
            );
        }
        assert_eq!(
            serde_json::to_string(&ClientThreads::Auto).ok().as_deref(),
            Some("\"auto\"")
        );
        assert_eq!(
            serde_json::to_string(&ClientThreads::Fixed(8))
                .ok()
                .as_deref(),
            Some("8")
        );
    }
}
