//! The flags both commands share, and how they resolve into a [`RunSpec`].
//!
//! Resolution runs once, before anything else sees the flags: a command starts
//! from its default spec (or the `--config` file's), and every flag the user gave
//! overrides the spec field it names. Without a file, every flag applies, its
//! default included; the defaults are the spec's own ([`defaults`]).

use crate::exit::Failure;
use batchbench_contract::dist::{LengthDist, LogNormalFlags, lognormal_from_flags};
use batchbench_contract::slo::{SloBound, SloMetric};
use batchbench_contract::spec::{
    Arrival, AtDeadline, ClientThreads, Hosts, ImageFormat, ImageSpec, PluginSpec, Release,
    RunSpec, Stage, defaults,
};
use batchbench_plugins::openai::OpenAiChatConfig;
use clap::parser::ValueSource;
use std::ffi::OsString;
use std::path::PathBuf;

/// Which flags the user gave: with a `--config` file only those override it;
/// without one, every flag (its default included) sets its field.
#[derive(Debug)]
pub struct Given {
    matches: clap::ArgMatches,
    over_file: bool,
}

impl Given {
    /// The flags of `matches`; `over_file` when a `--config` file is the base.
    pub fn new(matches: clap::ArgMatches, over_file: bool) -> Self {
        Self { matches, over_file }
    }

    /// Whether the flag with this id (the field name) sets its spec field.
    pub fn has(&self, id: &str) -> bool {
        !self.over_file || self.explicit(id)
    }

    /// Whether a `--config` file is the base.
    pub fn over_file(&self) -> bool {
        self.over_file
    }

    /// Whether the user typed the flag with this id.
    pub fn explicit(&self, id: &str) -> bool {
        matches!(
            self.matches
                .try_get_raw(id)
                .map(|_| self.matches.value_source(id)),
            Ok(Some(ValueSource::CommandLine | ValueSource::EnvVariable))
        )
    }
}

/// Every long flag of a clap command and whether it takes a value.
pub fn command_flags(cmd: &clap::Command) -> Vec<(String, bool)> {
    cmd.get_arguments()
        .filter_map(|a| {
            a.get_long()
                .map(|l| (l.to_owned(), a.get_action().takes_values()))
        })
        .collect()
}

/// Parses a count that must be >= 0, with a message naming the value.
pub fn non_negative(s: &str) -> Result<u64, String> {
    match s.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v as u64),
        Ok(v) => Err(format!("must be >= 0, got {v}")),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

/// Parses a count that must be >= 1.
pub fn positive(s: &str) -> Result<u64, String> {
    match non_negative(s)? {
        0 => Err("must be at least 1".into()),
        v => Ok(v),
    }
}

/// `args` without the flags of `own` (long name, whether it takes a value)
/// and their values: the arguments a subcommand passes on to a run.
pub fn without(own: &[(String, bool)], args: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let text = a.to_string_lossy();
        let name = text
            .strip_prefix("--")
            .map(|r| r.split_once('=').map_or(r, |(n, _)| n));
        match name.and_then(|n| own.iter().find(|(l, _)| l == n)) {
            Some((_, takes)) => {
                if *takes && !text.contains('=') {
                    it.next();
                }
            }
            None => out.push(a.clone()),
        }
    }
    out
}

/// Parses a finite float.
pub fn finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a finite number")),
    }
}

fn retries(s: &str) -> Result<u32, String> {
    let v = non_negative(s)?;
    u32::try_from(v)
        .ok()
        .filter(|v| *v <= 100)
        .ok_or_else(|| format!("at most 100, got {v}"))
}

/// A length from a fixed flag (with variation) or a log-normal family; the two are
/// mutually exclusive. `family` is the flag stem (`input`, `output`, ...).
pub fn length(
    family: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: LogNormalFlags,
) -> Result<Option<LengthDist>, Failure> {
    let d = length_with(family, "-tokens", "median", "max", fixed, vary, flags)?;
    let (what, max) = match d {
        Some(LengthDist::Fixed { .. }) => (format!("--{family}-tokens"), String::new()),
        _ => (
            format!("--{family}-lognorm-*"),
            format!("--{family}-lognorm-max"),
        ),
    };
    match d.and_then(|d| d.beyond(batchbench_contract::dist::MAX_TOKENS, &what, &max)) {
        Some(m) => Err(Failure::bad(m)),
        None => Ok(d),
    }
}

/// [`length`] with the family's own flag suffixes (`-ms`, `median-ms`, `max-ms`).
pub fn length_with(
    family: &str,
    fixed_suffix: &str,
    median: &str,
    max: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: LogNormalFlags,
) -> Result<Option<LengthDist>, Failure> {
    let ln = lognormal_from_flags(&format!("--{family}-lognorm"), median, max, flags)
        .map_err(Failure::bad)?;
    match (fixed, ln) {
        (Some(_), Some(_)) => Err(Failure::bad(format!(
            "--{family}{fixed_suffix} and the --{family}-lognorm-* family are mutually exclusive"
        ))),
        (Some(v), None) => Ok(Some(LengthDist::Fixed { value: v, vary })),
        (None, ln) => {
            if vary > 0 {
                return Err(Failure::bad(format!(
                    "--{family}-vary needs --{family}{fixed_suffix}"
                )));
            }
            Ok(ln)
        }
    }
}

/// Parses a `--*-config` flag: a JSON object (absent: `{}`).
pub fn json_config(flag: &str, text: Option<&str>) -> Result<serde_json::Value, Failure> {
    let v: serde_json::Value = serde_json::from_str(text.unwrap_or("{}"))
        .map_err(|e| Failure::bad(format!("{flag} is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(Failure::bad(format!(
            "{flag} must be a JSON object, got {v}"
        )));
    }
    Ok(v)
}

/// Parses a positive finite number.
pub fn positive_number(s: &str) -> Result<f64, String> {
    match finite(s)? {
        v if v > 0.0 => Ok(v),
        v => Err(format!("must be a positive number, got {v}")),
    }
}

/// Parses a duration: seconds, or a number with `ms`, `s`, `m` or `h`.
fn secs(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("'{s}': unknown unit '{unit}' (ms, s, m or h)")),
    };
    positive_number(num)
        .map(|v| v * scale)
        .map_err(|e| format!("'{s}': {e}"))
}

/// A parsed `--stages` list.
#[derive(Debug, Clone, PartialEq)]
pub struct Stages(pub Vec<Stage>);

/// Parses a stage list: `DURATION@RATE` steps separated by commas, such as
/// `60s@10,60s@20,2m@40`.
pub fn stages(s: &str) -> Result<Stages, String> {
    s.split(',')
        .enumerate()
        .map(|(i, step)| {
            let (d, r) = step.split_once('@').ok_or_else(|| {
                format!(
                    "step {} '{step}' is not DURATION@RATE (such as 60s@10)",
                    i + 1
                )
            })?;
            Ok(Stage {
                secs: secs(d).map_err(|e| format!("step {}: {e}", i + 1))?,
                rate: positive_number(r).map_err(|e| format!("step {}: rate {e}", i + 1))?,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map(Stages)
}

/// An SLO: comma-separated bounds (see [`batchbench_contract::slo`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SloBounds(pub Vec<SloBound>);

/// `ttft_p99<=500ms,tpot_p90<=50ms,e2e<=20s`.
fn slo_bounds(s: &str) -> Result<SloBounds, String> {
    let bounds = s
        .split(',')
        .filter(|b| !b.trim().is_empty())
        .map(str::parse)
        .collect::<Result<Vec<SloBound>, String>>()?;
    if bounds.is_empty() {
        return Err("no bounds: give METRIC<=DURATION or METRIC_pNN<=DURATION, comma-separated, such as ttft_p99<=500ms,tpot_p90<=50ms".into());
    }
    Ok(SloBounds(bounds))
}

/// `constant`, `poisson` or `gamma`.
fn arrival(s: &str) -> Result<Arrival, String> {
    match s {
        "constant" => Ok(Arrival::Constant),
        "poisson" => Ok(Arrival::Poisson),
        "gamma" => Ok(Arrival::Gamma),
        _ => Err(format!("'{s}': one of constant, poisson, gamma")),
    }
}

/// `finish` or `cancel`.
fn at_deadline(s: &str) -> Result<AtDeadline, String> {
    match s {
        "finish" => Ok(AtDeadline::Finish),
        "cancel" => Ok(AtDeadline::Cancel),
        _ => Err(format!("'{s}': finish or cancel")),
    }
}

/// The load-model flags both commands share (each names its own rate flag).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoadArgs {
    /// How gaps between arrivals are drawn: constant, poisson or gamma (with
    /// --burstiness) [default: poisson].
    #[arg(long, value_parser = arrival, value_name = "KIND", help_heading = "Load")]
    pub arrival: Option<Arrival>,
    /// Gamma shape of the arrival gaps: 1 is Poisson, below 1 burstier, above 1
    /// more regular (with --arrival gamma).
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub burstiness: Option<f64>,
    /// Ramp the rate up linearly from 0 over this many seconds.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub ramp_up_secs: Option<f64>,
    /// A rate schedule instead of one rate: DURATION@RATE steps, such as
    /// 60s@10,60s@20,60s@40; arrivals end with the last step.
    #[arg(long, value_parser = stages, value_name = "STEPS", help_heading = "Load")]
    pub stages: Option<Stages>,
    /// Requests in flight at most; arrivals beyond it wait in a client queue whose
    /// wait is measured.
    #[arg(long, value_parser = positive, help_heading = "Load")]
    pub max_concurrency: Option<u64>,
    /// The first N requests sent are warmup: sent, excluded from the statistics,
    /// reported apart.
    #[arg(long, value_parser = positive, help_heading = "Load")]
    pub warmup_requests: Option<u64>,
    /// Requests due in the first S seconds are warmup.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub warmup_secs: Option<f64>,
    /// auto: find where the run's transient ends, from its own time series
    /// (MSER-5 on e2e latency, TTFT, send rate and prefix-cache hits), and
    /// leave the requests due before it out as warmup. The summary gives the
    /// steady window; records reach reporters once it is known.
    #[arg(long, value_name = "MODE", help_heading = "Load")]
    pub warmup: Option<batchbench_contract::spec::Warmup>,
    /// Run for S seconds, drawing the workload for as long as needed.
    #[arg(long, value_parser = positive_number, help_heading = "Load")]
    pub duration_secs: Option<f64>,
    /// Requests in flight at the deadline of --duration-secs: finish (counted) or
    /// cancel (counted apart, not as failures) [default: finish].
    #[arg(long, value_parser = at_deadline, value_name = "POLICY", help_heading = "Load")]
    pub at_deadline: Option<AtDeadline>,
    /// Stop once every figure the run is judged by (the percentile bounds of
    /// --slo, else e2e p50 and p99) has a 95% interval within PCT percent of
    /// it; --duration-secs is the cap. The summary says after how many
    /// requests it converged, or what kept it from converging.
    #[arg(long, value_parser = positive_number, value_name = "PCT", help_heading = "Load")]
    pub target_ci: Option<f64>,
    /// Latency bounds the run is judged by, comma-separated: per request
    /// (ttft<=500ms: goodput counts the requests that met every one) or an
    /// aggregate percentile (ttft_p99<=500ms). Metrics: ttft, itl, tpot, e2e,
    /// queue_wait; TTFT and e2e count from the intended send time.
    #[arg(long, value_parser = slo_bounds, value_name = "BOUNDS", help_heading = "Load")]
    pub slo: Option<SloBounds>,
    /// Exit 1 when more than this share (0.0-1.0) of the measured requests
    /// failed. A run in which no request succeeded exits 1 regardless.
    #[arg(long, value_parser = finite, value_name = "SHARE", help_heading = "Load")]
    pub max_failure_rate: Option<f64>,
}

impl LoadArgs {
    /// Sets the load fields these flags (and the command's `rate` flag, named
    /// `rate_flag`) name; then checks the whole load spec, naming flags.
    pub fn apply(
        &self,
        spec: &mut RunSpec,
        rate: Option<f64>,
        rate_flag: &str,
        release: Release,
    ) -> Result<(), Failure> {
        if let Some(b) = &self.slo {
            spec.slo.clone_from(&b.0);
        }
        if self.max_failure_rate.is_some() {
            spec.max_failure_rate = self.max_failure_rate;
        }
        // TTFT, ITL and TPOT exist only for streamed replies: without
        // --stream every request would miss such a bound, silently.
        let timed = spec
            .slo
            .iter()
            .find(|b| matches!(b.metric, SloMetric::Ttft | SloMetric::Itl | SloMetric::Tpot));
        if let (Some(b), false) = (timed, spec.target.stream) {
            return Err(Failure::bad(format!(
                "--slo {b}: TTFT, ITL and TPOT are measured on streamed replies only: add --stream (or bound e2e)"
            )));
        }
        let l = &mut spec.load;
        l.release = release;
        if let Some(r) = rate {
            l.rate = Some(r);
            l.stages.clear();
        }
        if let Some(st) = &self.stages {
            if rate.is_some() {
                return Err(Failure::bad(format!(
                    "{rate_flag} and --stages: give one (each step carries its rate)"
                )));
            }
            l.stages.clone_from(&st.0);
            l.rate = None;
        }
        if let Some(a) = self.arrival {
            l.arrival = a;
        }
        if self.burstiness.is_some() {
            l.burstiness = self.burstiness;
            if self.arrival.is_none() && l.arrival != Arrival::Gamma {
                return Err(Failure::bad(
                    "--burstiness is the gamma shape: add --arrival gamma",
                ));
            }
        }
        for (v, field) in [
            (self.ramp_up_secs, &mut l.ramp_up_secs),
            (self.warmup_secs, &mut l.warmup_secs),
            (self.duration_secs, &mut l.duration_secs),
            (self.target_ci, &mut l.target_ci),
        ] {
            if v.is_some() {
                *field = v;
            }
        }
        for (v, field) in [
            (self.max_concurrency, &mut l.max_concurrency),
            (self.warmup_requests, &mut l.warmup_requests),
        ] {
            if v.is_some() {
                *field = v;
            }
        }
        if self.warmup.is_some() {
            l.warmup = self.warmup;
        }
        if let Some(p) = self.at_deadline {
            l.at_deadline = p;
        }
        l.check()
            .map_err(|e| Failure::bad(load_flag_names(&e, rate_flag)))
    }
}

/// The flags that split a run over several processes and start them together.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ShardArgs {
    /// Run shard I of N (such as 0/4): the trajectories (users, agents) whose
    /// position in the workload is I modulo N, with their share of the arrivals
    /// and of the caps. The N shards of one --seed together send exactly the
    /// requests of the unsharded run; `merge` joins their --output-dir.
    #[arg(long, value_parser = batchbench_contract::shard::Shard::parse, value_name = "I/N", help_heading = "Distributed", conflicts_with = "shards")]
    pub shard: Option<batchbench_contract::shard::Shard>,
    /// Run shard $JOB_COMPLETION_INDEX of N: the index a Kubernetes Indexed Job
    /// gives each pod.
    #[arg(long, value_parser = shard_count, value_name = "N", help_heading = "Distributed")]
    pub shards: Option<u32>,
    /// Start the benchmark clock at this time, RFC 3339 with a zone (such as
    /// 2026-12-04T10:00:00Z), so that every shard begins together; each records
    /// how late it started. Empty: as soon as the run is ready.
    #[arg(long, value_name = "TIME", help_heading = "Distributed")]
    pub start_at: Option<String>,
}

/// The environment variable of a Kubernetes Indexed Job's pod index.
pub const JOB_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

fn shard_count(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("expected a whole number of shards, got {s:?}"))?;
    batchbench_contract::shard::Shard::new(0, n)?;
    Ok(n)
}

impl ShardArgs {
    /// Sets the spec's shard and start time; `--shards` reads the index from
    /// the environment.
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), Failure> {
        if let Some(s) = self.shard {
            spec.shard = Some(s);
        }
        if let Some(n) = self.shards {
            let index = std::env::var(JOB_INDEX_ENV).ok();
            let s = batchbench_contract::shard::Shard::from_job_index(n, index.as_deref())
                .map_err(Failure::bad)?;
            spec.shard = Some(s);
        }
        if let Some(at) = &self.start_at {
            // Empty: start when ready (what a template leaves unset).
            spec.start_at = (!at.trim().is_empty()).then(|| at.clone());
        }
        spec.start_at_ms().map_err(Failure::bad)?;
        Ok(())
    }
}

/// A load-spec message in terms of flags: `load.rate` is the command's rate
/// flag, `load.x_y` is `--x-y`.
pub fn load_flag_names(message: &str, rate_flag: &str) -> String {
    let mut out = message.replace("load.rate", rate_flag);
    for field in [
        "arrival",
        "burstiness",
        "ramp_up_secs",
        "stages",
        "max_concurrency",
        "warmup_requests",
        "warmup_secs",
        "duration_secs",
        "at_deadline",
        "target_ci",
        "warmup",
    ] {
        out = out.replace(
            &format!("load.{field}"),
            &format!("--{}", field.replace('_', "-")),
        );
    }
    out
}

/// `--config` and `--print-config`, on both commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// Start from this run spec (TOML, or the JSON a run records as
    /// `run.spec`); the flags given override it.
    #[arg(long, value_name = "FILE", help_heading = "Config")]
    pub config: Option<PathBuf>,
    /// Print the effective run spec as TOML and exit (nothing is sent).
    #[arg(long, help_heading = "Config")]
    pub print_config: bool,
}

/// Target and protocol flags, shared by `batchbench` and `batchbench-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
    /// Base URL of the server, or sim:// for the built-in simulator. Given
    /// more than once: a fleet, each request sent to the endpoint a routing
    /// policy picks (--router round_robin, the default, random,
    /// least_outstanding, session_affinity, prefix_affinity).
    #[arg(long, default_value = defaults::HOST, help_heading = "Target")]
    pub host: Vec<String>,
    /// Request path, or a full URL [default: the codec's path: /v1/chat/completions
    /// for openai_chat, /v1/completions, /v1/responses, /v1/messages, /generate,
    /// /v1/embeddings for the others].
    #[arg(long, default_value = defaults::ENDPOINT, hide_default_value = true, help_heading = "Target")]
    pub endpoint: String,
    /// The request's model field; also the tokenizer unless --tokenizer-model is given.
    #[arg(long, default_value = defaults::MODEL, help_heading = "Target")]
    pub model: String,
    /// Tokenizer: a Hugging Face model id, a tokenizer.json, a directory holding one, or
    /// a .gguf model file (its embedded byte-level BPE tokenizer).
    #[arg(long, help_heading = "Target")]
    pub tokenizer_model: Option<String>,
    /// Bearer token; else read from the variable named by --api-key-env.
    #[arg(long, help_heading = "Target")]
    pub api_key: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long, default_value = defaults::API_KEY_ENV, help_heading = "Target")]
    pub api_key_env: String,
    /// Per-request timeout in seconds.
    #[arg(long, default_value_t = defaults::REQUEST_TIMEOUT_SECS as u64, value_parser = positive, help_heading = "Target")]
    pub request_timeout_secs: u64,
    /// Retries after the first attempt (5xx, 408, 429, timeouts, broken connections).
    #[arg(long, default_value_t = defaults::MAX_RETRIES, value_parser = retries, help_heading = "Target")]
    pub max_retries: u32,
    /// Base delay of the exponential retry backoff, in milliseconds.
    #[arg(long, default_value_t = defaults::RETRY_DELAY_MS, value_parser = non_negative, help_heading = "Target")]
    pub retry_delay_ms: u64,
    /// Threads of the client's async runtime, or `auto`: one thread per 10,000
    /// arrivals a second at the run's highest rate, up to the cores present (one
    /// for a closed loop). One costs the least CPU per request; raise it when
    /// the run's verdict says the client is CPU-bound.
    #[arg(long, value_name = "N|auto", default_value_t = ClientThreads::Fixed(defaults::CLIENT_THREADS), value_parser = ClientThreads::parse, help_heading = "Target")]
    pub client_threads: ClientThreads,
    /// Trust the CA certificates of this PEM file too (a private CA); server
    /// certificates are always verified unless --insecure.
    #[arg(long, value_name = "FILE", help_heading = "Target")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Accept any TLS certificate, unverified (self-signed test servers only);
    /// the summary says so.
    #[arg(long, help_heading = "Target")]
    pub insecure: bool,
    /// The most bytes one response may hold; a larger one fails as `decode`
    /// [default: 67108864, 64 MiB].
    #[arg(long, value_name = "BYTES", value_parser = positive, help_heading = "Target")]
    pub max_response_bytes: Option<u64>,
    /// The server's KV-cache block size in tokens, for the prefix-cache
    /// estimates of the report [default: 16].
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..=1_048_576), help_heading = "Target")]
    pub cache_block_tokens: Option<u32>,

    /// The request codec: how bodies are written and responses read (see
    /// `batchbench plugins`).
    #[arg(long, value_name = "NAME", default_value = defaults::CODEC, help_heading = "Protocol")]
    pub codec: String,
    /// The codec's config, a JSON object (openai_chat: {"sglang": bool, "ignore_eos": bool};
    /// `batchbench plugins` lists each codec's).
    #[arg(long, value_name = "JSON", help_heading = "Protocol")]
    pub codec_config: Option<String>,
    /// Send min_new_tokens/max_new_tokens (SGLang) instead of min_tokens/max_tokens
    /// (openai_chat, openai_completions).
    #[arg(long, help_heading = "Protocol")]
    pub sglang: bool,
    /// Send "ignore_eos": true so outputs run to their length (every built-in codec
    /// that generates).
    #[arg(long, help_heading = "Protocol")]
    pub ignore_eos: bool,
    /// Stream responses (SSE); adds TTFT, inter-token latency and TPOT to the report.
    #[arg(long, help_heading = "Protocol")]
    pub stream: bool,
    /// Synthetic images on each conversation's first user message (vision models;
    /// openai_chat, openai_responses, anthropic_messages).
    #[arg(long, value_name = "N", help_heading = "Images")]
    pub images_per_request: Option<u32>,
    /// Size of each image, WIDTHxHEIGHT.
    #[arg(
        long,
        value_name = "WxH",
        default_value = "512x512",
        help_heading = "Images"
    )]
    pub image_size: String,
    /// Encoding of each image.
    #[arg(long, value_name = "FORMAT", default_value = "png", value_parser = ["png", "jpeg"], help_heading = "Images")]
    pub image_format: String,
}

impl TargetArgs {
    /// Sets the target and codec fields these flags name.
    pub fn apply(&self, spec: &mut RunSpec, g: &Given) -> Result<(), Failure> {
        let t = &mut spec.target;
        if g.has("host") {
            t.host = Hosts::new(self.host.clone())
                .ok_or_else(|| Failure::bad("--host: no host given"))?;
        }
        if g.has("endpoint") {
            t.endpoint.clone_from(&self.endpoint);
        }
        if g.has("model") {
            t.model.clone_from(&self.model);
        }
        if self.tokenizer_model.is_some() {
            t.tokenizer_model.clone_from(&self.tokenizer_model);
        }
        if g.has("api_key_env") {
            t.api_key_env.clone_from(&self.api_key_env);
        }
        if g.has("request_timeout_secs") {
            t.request_timeout_secs = self.request_timeout_secs as f64;
        }
        if g.has("max_retries") {
            t.max_retries = self.max_retries;
        }
        if g.has("retry_delay_ms") {
            t.retry_delay_ms = self.retry_delay_ms;
        }
        if g.has("client_threads") {
            t.client_threads = self.client_threads;
        }
        if self.stream {
            t.stream = true;
        }
        if self.ca_cert.is_some() {
            t.ca_cert.clone_from(&self.ca_cert);
        }
        if self.insecure {
            t.insecure = true;
        }
        if self.max_response_bytes.is_some() {
            t.max_response_bytes = self.max_response_bytes;
        }
        if self.cache_block_tokens.is_some() {
            t.cache_block_tokens = self.cache_block_tokens;
        }
        if g.has("codec") && spec.codec.name != self.codec {
            spec.codec = PluginSpec::new(self.codec.clone(), json_config("--codec-config", None)?);
        }
        if self.codec_config.is_some() {
            spec.codec.config = json_config("--codec-config", self.codec_config.as_deref())?;
        }
        if let Some(n) = self.images_per_request {
            let (width, height) = ImageSpec::parse_size(&self.image_size).map_err(Failure::bad)?;
            let images = ImageSpec {
                per_request: n,
                width,
                height,
                format: if self.image_format == "jpeg" {
                    ImageFormat::Jpeg
                } else {
                    ImageFormat::Png
                },
            };
            images.check().map_err(Failure::bad)?;
            spec.images = Some(images);
        } else if g.explicit("image_size") || g.explicit("image_format") {
            return Err(Failure::bad(
                "--image-size and --image-format shape the images of --images-per-request: give it too",
            ));
        }
        // The flags set the codec's own fields of those names (every built-in
        // generating codec has `ignore_eos`; the OpenAI ones `sglang`); a codec without
        // them refuses the field, naming it.
        for (on, field) in [(self.sglang, "sglang"), (self.ignore_eos, "ignore_eos")] {
            if on {
                set_codec_option(spec, field)
                    .map_err(|e| Failure::bad(format!("--{}: {e}", field.replace('_', "-"))))?;
            }
        }
        Ok(())
    }
}

/// Output flags, shared by `batchbench` and `batchbench-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Print truncated request and response payloads to stderr (never the API key).
    #[arg(short, long, help_heading = "Output")]
    pub verbose: bool,
    /// Print the plan (one JSON line per request) and send nothing.
    #[arg(long, help_heading = "Output")]
    pub dry_run: bool,
    /// Append a CSV row of totals, percentiles and configuration to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub results_csv: Option<PathBuf>,
    /// Write the complete summary (and the run's configuration) as JSON to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub summary_json: Option<PathBuf>,
    /// Write one JSON line per request (outcome, latency, TTFT, planned vs
    /// server-counted prompt tokens, cached tokens) to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_jsonl: Option<PathBuf>,
    /// Also write each streamed request's token arrival times (`token_ms`:
    /// milliseconds from its send, one per chunk that carried tokens) into
    /// --requests-jsonl and the results directory.
    #[arg(long, help_heading = "Output")]
    pub token_times: bool,
    /// Write the run's results directory here (created with its parents): the run
    /// record, one line per request and per trajectory, latency histograms and
    /// time series, for `batchbench report`. For sweep and capacity, the series'
    /// directory [default there: ./sweep-TIME or ./capacity-TIME, UTC].
    #[arg(long, value_name = "DIR", help_heading = "Output")]
    pub output_dir: Option<PathBuf>,
    /// Serve the client's own live metrics during the run, a Prometheus
    /// exposition at http://ADDR/metrics: requests sent, ok and failed by
    /// kind, in flight, retries, tokens, send lag, TTFT, ITL and e2e
    /// histograms, the target rate and stage.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    pub metrics_listen: Option<String>,
    /// Go on serving --metrics-listen this many seconds after the run ends,
    /// so that a scraper reads the final figures (`batchbench_run_finished`
    /// is 1 then) [default: 0, close with the run].
    #[arg(long, value_name = "SECS", help_heading = "Output")]
    pub metrics_linger: Option<f64>,
    /// No progress bar.
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
    /// Scrape the server's Prometheus metrics at this URL during the run
    /// (repeatable); `target` is the target server's own /metrics. Known vLLM,
    /// SGLang and llama.cpp metrics are summarised under common names; the
    /// results directory keeps every scrape. A failed scrape is counted, never
    /// fatal.
    #[arg(
        long = "server-metrics",
        value_name = "URL",
        help_heading = "Server metrics"
    )]
    pub server_metrics: Vec<String>,
    /// Seconds between scrapes of --server-metrics [default: 1].
    #[arg(long, value_name = "SECS", help_heading = "Server metrics")]
    pub metrics_interval: Option<f64>,
    /// Sample the GPUs beside the client during the run, at --metrics-interval:
    /// nvml (NVIDIA's management library, loaded at run time). Power, energy,
    /// utilization, memory, clocks and temperature, as a DCGM exporter's.
    #[arg(long, value_name = "SOURCE", help_heading = "Server metrics")]
    pub gpu_telemetry: Option<batchbench_contract::spec::GpuTelemetry>,
}

impl OutputArgs {
    /// Sets the output fields these flags name.
    pub fn apply(&self, spec: &mut RunSpec) {
        let o = &mut spec.output;
        o.verbose |= self.verbose;
        o.dry_run |= self.dry_run;
        o.quiet |= self.quiet;
        o.token_times |= self.token_times;
        for (flag, field) in [
            (&self.results_csv, &mut o.results_csv),
            (&self.summary_json, &mut o.summary_json),
            (&self.requests_jsonl, &mut o.requests_jsonl),
            (&self.output_dir, &mut o.output_dir),
        ] {
            if flag.is_some() {
                field.clone_from(flag);
            }
        }
        if self.metrics_listen.is_some() {
            o.metrics_listen.clone_from(&self.metrics_listen);
        }
        if self.metrics_linger.is_some() {
            o.metrics_linger_secs = self.metrics_linger;
        }
        if !self.server_metrics.is_empty() {
            spec.server_metrics.urls.clone_from(&self.server_metrics);
        }
        if let Some(i) = self.metrics_interval {
            spec.server_metrics.interval_secs = i;
        }
        if self.gpu_telemetry.is_some() {
            spec.server_metrics.gpu_telemetry = self.gpu_telemetry;
        }
    }
}

/// External plugins and plugin selection, shared by both commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PluginArgs {
    /// Take the trajectories from a workload plugin (a built-in such as clickhouse,
    /// or one loaded with --plugin) instead of the synthetic workload; see
    /// `batchbench plugins`.
    #[arg(long, value_name = "NAME", help_heading = "Plugins")]
    pub workload: Option<String>,
    /// The --workload plugin's config, a JSON object.
    #[arg(
        long,
        value_name = "JSON",
        help_heading = "Plugins",
        requires = "workload"
    )]
    pub workload_config: Option<String>,
    /// Load an external plugin: a WebAssembly component (.wasm, sandboxed) or a
    /// native library (.so, .dylib, .dll; trusted code only). Repeatable; its plugins
    /// are then selected by name like the built-ins (see `batchbench plugins`).
    #[arg(long = "plugin", value_name = "PATH", help_heading = "Plugins")]
    pub plugins: Vec<PathBuf>,
    /// Add a router plugin (repeatable; after the built-in identity routers).
    #[arg(long = "router", value_name = "NAME", help_heading = "Plugins")]
    pub routers: Vec<String>,
    /// Config of the router of the same position, a JSON object (default {}).
    #[arg(long = "router-config", value_name = "JSON", help_heading = "Plugins")]
    pub router_configs: Vec<String>,
    /// Add a reporter plugin (repeatable).
    #[arg(long = "reporter", value_name = "NAME", help_heading = "Plugins")]
    pub reporters: Vec<String>,
    /// Config of the reporter of the same position, a JSON object (default {}).
    #[arg(
        long = "reporter-config",
        value_name = "JSON",
        help_heading = "Plugins"
    )]
    pub reporter_configs: Vec<String>,
}

impl PluginArgs {
    fn pairs(names: &[String], configs: &[String], flag: &str) -> Result<Vec<PluginSpec>, Failure> {
        if configs.len() > names.len() {
            return Err(Failure::bad(format!(
                "{} --{flag}-config values for {} --{flag} plugins: each config belongs to the --{flag} of the same position",
                configs.len(),
                names.len()
            )));
        }
        names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let cfg = json_config(
                    &format!("--{flag}-config of --{flag} {n}"),
                    configs.get(i).map(String::as_str),
                )?;
                Ok(PluginSpec::new(n.clone(), cfg))
            })
            .collect()
    }

    /// The `--workload` plugin, when one is named.
    pub fn workload(&self) -> Result<Option<PluginSpec>, Failure> {
        self.workload
            .as_ref()
            .map(|name| {
                let cfg = json_config("--workload-config", self.workload_config.as_deref())?;
                Ok(PluginSpec::new(name.clone(), cfg))
            })
            .transpose()
    }

    /// Adds the plugin files, routers and reporters these flags name (routers
    /// after those already in the spec).
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), Failure> {
        spec.plugin_files.extend(self.plugins.iter().cloned());
        spec.routers
            .extend(Self::pairs(&self.routers, &self.router_configs, "router")?);
        spec.reporters.extend(Self::pairs(
            &self.reporters,
            &self.reporter_configs,
            "reporter",
        )?);
        Ok(())
    }
}

/// The `plugins` part of a flat configuration view: the plugin files, and the
/// routers and reporters the user added (the built-in identity routers are
/// shown by their own fields).
#[derive(Debug, serde::Serialize)]
pub struct PluginsView<'a> {
    /// `--plugin` files.
    pub plugin_files: &'a [PathBuf],
    /// `--router` plugins with their configs.
    pub routers: Vec<&'a PluginSpec>,
    /// `--reporter` plugins with their configs.
    pub reporters: &'a [PluginSpec],
}

impl<'a> PluginsView<'a> {
    /// The view of `spec`, leaving out routers named in `builtin`.
    pub fn of(spec: &'a RunSpec, builtin: &[&str]) -> Self {
        Self {
            plugin_files: &spec.plugin_files,
            routers: spec
                .routers
                .iter()
                .filter(|r| !builtin.contains(&r.name.as_str()))
                .collect(),
            reporters: &spec.reporters,
        }
    }
}

/// Turns on the codec's own boolean option `field` (`sglang`, `ignore_eos`),
/// for every front end's shorthand of it; a codec without the option refuses
/// the field, naming it, when it is built.
pub fn set_codec_option(spec: &mut RunSpec, field: &str) -> Result<(), String> {
    match &mut spec.codec.config {
        serde_json::Value::Object(o) => {
            o.insert(field.to_owned(), serde_json::Value::Bool(true));
        }
        serde_json::Value::Null => spec.codec.config = serde_json::json!({ field: true }),
        _ => {
            return Err(format!(
                "the {} codec's config is not a JSON object; give the option in its config",
                spec.codec.name
            ));
        }
    }
    Ok(())
}

/// The `sglang` and `ignore_eos` options of a spec's codec, for the flat view
/// (`false` for a codec without them).
pub fn chat_options(spec: &RunSpec) -> OpenAiChatConfig {
    let on = |k: &str| {
        spec.codec
            .config
            .get(k)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    };
    OpenAiChatConfig {
        sglang: on("sglang"),
        ignore_eos: on("ignore_eos"),
    }
}

/// One line on stderr when the API key came on the command line, where other
/// users of the machine can read it (the process list, shell history). Hosts
/// that run the command in process (the Python package) pass no command line
/// to anyone and get no warning.
pub fn warn_api_key_flag(program: &str, env: &str) {
    eprintln!(
        "{program}: warning: --api-key on the command line can be read by other users of this machine (process list, shell history); set {env} instead (--api-key-env names another variable)"
    );
}

/// The run flags both commands take beside the target's and their own.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Seed for reproducible workloads, text and user tags (random when absent; reported).
    #[arg(long, help_heading = "Workload")]
    pub seed: Option<u64>,
    /// Arrival process, concurrency cap, warmup and duration.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Shards and a coordinated start.
    #[command(flatten)]
    pub shard: ShardArgs,
    /// External plugins.
    #[command(flatten)]
    pub plugins: PluginArgs,
    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// `--config` and `--print-config`.
    #[command(flatten)]
    pub config: ConfigArgs,
}

impl CommonArgs {
    /// The spec a command's own flags start from: the `--config` file's (else
    /// `default`), with the target, output, seed and shard flags applied.
    pub fn base(
        &self,
        target: &TargetArgs,
        default: impl FnOnce() -> Result<RunSpec, Failure>,
        g: &Given,
    ) -> Result<RunSpec, Failure> {
        let mut spec = match &self.config.config {
            Some(path) => crate::config::load(path)?,
            None => default()?,
        };
        target.apply(&mut spec, g)?;
        self.output.apply(&mut spec);
        if let Some(seed) = self.seed {
            spec.seed = Some(seed);
        }
        self.shard.apply(&mut spec)?;
        Ok(spec)
    }
}

/// `--input-lognorm-{median,mu,sigma,max}`: a log-normal prompt length.
#[derive(Debug, Clone, clap::Args)]
pub struct InputLogNormal {
    /// Log-normal prompt length: median (preferred over mu).
    #[arg(long, value_parser = finite)]
    pub input_lognorm_median: Option<f64>,
    /// Log-normal prompt length: mu of the underlying normal.
    #[arg(long, value_parser = finite)]
    pub input_lognorm_mu: Option<f64>,
    /// Log-normal prompt length: sigma (required with mu or median).
    #[arg(long, value_parser = finite)]
    pub input_lognorm_sigma: Option<f64>,
    /// Log-normal prompt length: upper bound.
    #[arg(long, value_parser = finite)]
    pub input_lognorm_max: Option<f64>,
}

impl InputLogNormal {
    /// The family's flags.
    pub fn flags(&self) -> LogNormalFlags {
        LogNormalFlags {
            mu: self.input_lognorm_mu,
            median: self.input_lognorm_median,
            sigma: self.input_lognorm_sigma,
            max: self.input_lognorm_max,
        }
    }
}

/// `--output-lognorm-{median,mu,sigma,max}`: a log-normal output length.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputLogNormal {
    /// Log-normal output length: median.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_median: Option<f64>,
    /// Log-normal output length: mu.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_mu: Option<f64>,
    /// Log-normal output length: sigma.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_sigma: Option<f64>,
    /// Log-normal output length: upper bound.
    #[arg(long, value_parser = finite)]
    pub output_lognorm_max: Option<f64>,
}

impl OutputLogNormal {
    /// The family's flags.
    pub fn flags(&self) -> LogNormalFlags {
        LogNormalFlags {
            mu: self.output_lognorm_mu,
            median: self.output_lognorm_median,
            sigma: self.output_lognorm_sigma,
            max: self.output_lognorm_max,
        }
    }
}

/// The first flag of a log-normal family given (median, mu, sigma, max), if any.
pub fn first_lognorm(family: &str, f: &LogNormalFlags) -> Option<String> {
    [
        ("median", f.median),
        ("mu", f.mu),
        ("sigma", f.sigma),
        ("max", f.max),
    ]
    .into_iter()
    .find_map(|(k, v)| v.map(|_| format!("--{family}-lognorm-{k}")))
}
