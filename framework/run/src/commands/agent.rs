//! The `batchbench-agent` command: `--agents` independent agent loops. Within an
//! agent, requests are sequential: the assistant reply and a synthetic tool result
//! are appended and the whole growing conversation is sent again, so every request
//! after the first reuses the previous prompt as a prefix and exercises the
//! server's prefix (KV) cache. Its flags resolve into a [`RunSpec`] of the
//! `synthetic_agents`, `replay_jsonl` or `--workload` plugin's workload.

use crate::assemble::Profile;
use crate::exit::Failure;
use crate::flags::{
    self, CommonArgs, Given, InputLogNormal, OutputLogNormal, PluginsView, TargetArgs,
};
use crate::series;
use crate::view::{self, LoadView, flat_view};
use batchbench_contract::dist::{LengthDist, LogNormalFlags};
use batchbench_contract::plugin::WorkloadInfo;
use batchbench_contract::spec::{AdmissionMode, PluginSpec, Release, RunSpec, defaults};
use batchbench_engine::run::DryRunStats;
use batchbench_plugins::routers::dp_rank::DpRankConfig;
use batchbench_plugins::routers::user_tag::UserTagConfig;
use batchbench_plugins::workloads::replay_jsonl::ReplayConfig;
use batchbench_plugins::workloads::synthetic_agents::SyntheticAgentsConfig;
use std::path::PathBuf;

/// The `--help` summary of `batchbench-agent`.
pub const ABOUT: &str = "Benchmark LLM servers with concurrent stateful agent loops";

/// The `--help` text of `batchbench-agent`.
pub const LONG_ABOUT: &str = "\
Benchmark an OpenAI-compatible LLM server with concurrent stateful agent loops.

Each of --agents agents makes --tool-invocations model requests in sequence. After each
response the agent keeps the reply (content and reasoning; tool calls the model made are
dropped), attaches one synthetic tool call of its own, sleeps the tool-call latency, then
appends a tool result of exactly --environment-tokens tokens and resends the whole
conversation. Every request after an agent's first reuses its previous prompt as a
prefix, which is what exercises the server's prefix cache.

Every request carries a `user` field and an X-SMG-Routing-Key header, stable per agent
(--disable-user-tagging omits both). --dp-rank-perfect-routing with
--dp-rank-perfect-routing-num N adds X-SMG-Target-Worker: <routing slot % N>.

Use --host sim:// for the built-in simulator. Exit codes: 0 completed, 1 could not
complete or no request succeeded (or more than --max-failure-rate failed), 2 bad input
(nothing sent), 130 interrupted (partial summary).

Series: `batchbench-agent sweep` runs these flags once per load value of one dimension
(session rate, agents, active agents, concurrency); `batchbench-agent capacity` finds the
highest load that meets --slo. See `batchbench-agent sweep --help`.

Analysis: `batchbench-agent analyze [MANIFEST]` reads the workload these flags select
and sends nothing: its shape, arrivals, prefix sharing across sessions, and prefix-cache
hit rates per data-parallel rank. See `batchbench-agent analyze --help`.

Shards: --shard I/N (or --shards N in a Kubernetes Indexed Job) runs one part of the
run; `batchbench-agent merge DIR... -o DIR` joins the shards' --output-dir exactly. See
`batchbench-agent merge --help`.";

/// `batchbench-agent`'s own run flags (beside the target's and the shared ones).
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Independent agent loops [default: 1].
    #[arg(long, value_parser = flags::positive, help_heading = "Workload")]
    pub agents: Option<u64>,
    /// Agents active at once. Closed loop: a finished agent's slot goes to the next
    /// one [default: all]. Open loop: a hard cap that delays admissions [default: none].
    #[arg(long, value_parser = flags::positive, help_heading = "Workload")]
    pub max_active_agents: Option<u64>,
    /// Initial prompt length in tokens [default: 128].
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub input_tokens: Option<u64>,
    /// Output length of each model request [default: 64].
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub output_tokens: Option<u64>,
    /// Length of each synthetic environment (tool) response [default: 64].
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub environment_tokens: Option<u64>,
    /// Model requests per agent [default: 4].
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub tool_invocations: Option<u64>,
    /// Sleep after each successful response, in milliseconds [default: 0].
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub tool_call_latency_ms: Option<u64>,

    /// Start this many agents (or replayed trajectories, instead of their recorded
    /// offsets) per second; each agent's later turns follow its replies.
    #[arg(long, value_parser = flags::positive_number, value_name = "PER_SECOND", help_heading = "Load")]
    pub session_rate: Option<f64>,

    /// `--input-lognorm-*`.
    #[command(flatten, next_help_heading = "Log-normal workload")]
    pub input_lognorm: InputLogNormal,
    /// `--output-lognorm-*`.
    #[command(flatten, next_help_heading = "Log-normal workload")]
    pub output_lognorm: OutputLogNormal,
    #[command(flatten)]
    lognorm: LogNormalArgs,

    /// Replay the trajectories of this JSONL manifest (schema versions 1 and 2) instead
    /// of sampling a synthetic workload.
    #[arg(long, value_name = "PATH", help_heading = "Replay")]
    pub agent_plans_jsonl: Option<PathBuf>,
    /// closed-loop: manifest order into --max-active-agents slots, offsets ignored;
    /// open-loop: each trajectory at its start_after_ms / --time-scale.
    #[arg(
        long,
        value_enum,
        default_value = "closed-loop",
        help_heading = "Replay"
    )]
    pub admission: AdmissionArg,
    /// Divides every start_after_ms and delay_after_ms (4 replays an hour in 15 minutes).
    #[arg(long, default_value_t = defaults::TIME_SCALE, value_parser = flags::finite, help_heading = "Replay")]
    pub time_scale: f64,
    /// Template tokens of a first or reset request, subtracted from its content.
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Replay")]
    pub replay_initial_overhead_tokens: u64,
    /// Template tokens of each appended turn, subtracted from the environment growth.
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Replay")]
    pub replay_turn_overhead_tokens: u64,

    /// Omit the user field and the X-SMG-Routing-Key header.
    #[arg(long, help_heading = "Identity and routing")]
    pub disable_user_tagging: bool,
    /// Use deterministic user tags P-N (N: the agent id) instead of seeded UUIDs.
    #[arg(long, value_name = "P", help_heading = "Identity and routing")]
    pub user_prefix: Option<String>,
    /// Pin each routing slot to a data-parallel rank (needs --dp-rank-perfect-routing-num).
    #[arg(long, help_heading = "Identity and routing")]
    pub dp_rank_perfect_routing: bool,
    /// Number of data-parallel ranks for --dp-rank-perfect-routing.
    #[arg(long, value_name = "N", value_parser = flags::non_negative, help_heading = "Identity and routing")]
    pub dp_rank_perfect_routing_num: Option<u64>,

    /// Write one JSON line per agent: admission, queue wait, routing slot, DP rank, runtime, completion.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub agent_events_jsonl: Option<PathBuf>,
}

/// `--admission`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AdmissionArg {
    /// Manifest order into free slots.
    ClosedLoop,
    /// At each trajectory's start offset.
    OpenLoop,
}

impl AdmissionArg {
    fn mode(self) -> AdmissionMode {
        match self {
            Self::ClosedLoop => AdmissionMode::ClosedLoop,
            Self::OpenLoop => AdmissionMode::OpenLoop,
        }
    }
}

/// The log-normal flag families, each `*-lognorm-{median,mu,sigma,max}`.
#[derive(Debug, Clone, clap::Args)]
struct LogNormalArgs {
    /// Log-normal environment response: median.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    environment_lognorm_median: Option<f64>,
    /// Log-normal environment response: mu.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    environment_lognorm_mu: Option<f64>,
    /// Log-normal environment response: sigma.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    environment_lognorm_sigma: Option<f64>,
    /// Log-normal environment response: upper bound.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    environment_lognorm_max: Option<f64>,
    /// Log-normal invocations per agent: median.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_median: Option<f64>,
    /// Log-normal invocations per agent: mu.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_mu: Option<f64>,
    /// Log-normal invocations per agent: sigma.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_sigma: Option<f64>,
    /// Log-normal invocations per agent: upper bound.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_max: Option<f64>,
    /// Log-normal tool-call latency: median in milliseconds.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_median_ms: Option<f64>,
    /// Log-normal tool-call latency: mu (of milliseconds).
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_mu: Option<f64>,
    /// Log-normal tool-call latency: sigma.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_sigma: Option<f64>,
    /// Log-normal tool-call latency: upper bound in milliseconds.
    #[arg(long, value_parser = flags::finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_max_ms: Option<f64>,
}

/// The validated workload shape.
#[derive(Debug)]
struct Shape {
    input: LengthDist,
    output: LengthDist,
    environment: LengthDist,
    invocations: LengthDist,
    latency: LengthDist,
}

fn ln(
    mu: Option<f64>,
    median: Option<f64>,
    sigma: Option<f64>,
    max: Option<f64>,
) -> LogNormalFlags {
    LogNormalFlags {
        mu,
        median,
        sigma,
        max,
    }
}

impl LogNormalArgs {
    /// The first log-normal flag given, if any.
    fn first_given(&self) -> Option<&'static str> {
        let l = self;
        [
            (
                "--environment-lognorm-median",
                l.environment_lognorm_median.is_some(),
            ),
            (
                "--environment-lognorm-mu",
                l.environment_lognorm_mu.is_some(),
            ),
            (
                "--environment-lognorm-sigma",
                l.environment_lognorm_sigma.is_some(),
            ),
            (
                "--environment-lognorm-max",
                l.environment_lognorm_max.is_some(),
            ),
            (
                "--tool-invocations-lognorm-median",
                l.tool_invocations_lognorm_median.is_some(),
            ),
            (
                "--tool-invocations-lognorm-mu",
                l.tool_invocations_lognorm_mu.is_some(),
            ),
            (
                "--tool-invocations-lognorm-sigma",
                l.tool_invocations_lognorm_sigma.is_some(),
            ),
            (
                "--tool-invocations-lognorm-max",
                l.tool_invocations_lognorm_max.is_some(),
            ),
            (
                "--tool-call-latency-lognorm-median-ms",
                l.tool_call_latency_lognorm_median_ms.is_some(),
            ),
            (
                "--tool-call-latency-lognorm-mu",
                l.tool_call_latency_lognorm_mu.is_some(),
            ),
            (
                "--tool-call-latency-lognorm-sigma",
                l.tool_call_latency_lognorm_sigma.is_some(),
            ),
            (
                "--tool-call-latency-lognorm-max-ms",
                l.tool_call_latency_lognorm_max_ms.is_some(),
            ),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

impl AgentArgs {
    /// The first log-normal flag given, if any.
    fn first_lognorm(&self) -> Option<String> {
        flags::first_lognorm("input", &self.input_lognorm.flags())
            .or_else(|| flags::first_lognorm("output", &self.output_lognorm.flags()))
            .or_else(|| self.lognorm.first_given().map(str::to_owned))
    }
}

/// Checks how the workload flags combine: a manifest excludes every synthetic shape
/// flag; the replay flags need a manifest.
fn check_mode(c: &AgentArgs, common: &CommonArgs) -> Result<(), Failure> {
    let bad = |m: String| Failure::bad(m);
    if !(c.time_scale.is_finite() && c.time_scale > 0.0) {
        return Err(bad(format!(
            "--time-scale must be a positive number, got {}",
            c.time_scale
        )));
    }
    if c.agent_plans_jsonl.is_some() && common.plugins.workload.is_some() {
        return Err(bad(
            "--workload and --agent-plans-jsonl are two workloads: give one".into(),
        ));
    }
    if c.agent_plans_jsonl.is_some() || common.plugins.workload.is_some() {
        let what = if common.plugins.workload.is_some() {
            "--workload"
        } else {
            "--agent-plans-jsonl"
        };
        let synthetic = [
            ("--agents", c.agents.is_some()),
            ("--input-tokens", c.input_tokens.is_some()),
            ("--output-tokens", c.output_tokens.is_some()),
            ("--environment-tokens", c.environment_tokens.is_some()),
            ("--tool-invocations", c.tool_invocations.is_some()),
            ("--tool-call-latency-ms", c.tool_call_latency_ms.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag.to_owned()))
        .or_else(|| c.first_lognorm());
        if let Some(flag) = synthetic {
            return Err(bad(format!(
                "{what} replays recorded shapes and cannot be combined with {flag}"
            )));
        }
        return Ok(());
    }
    if common.config.config.is_some() {
        // The file names the workload; the replay flags apply to it as given.
        return Ok(());
    }
    for (flag, given) in [
        (
            "--admission open-loop",
            c.admission == AdmissionArg::OpenLoop,
        ),
        ("--time-scale", c.time_scale != 1.0),
        (
            "--replay-initial-overhead-tokens",
            c.replay_initial_overhead_tokens != 0,
        ),
        (
            "--replay-turn-overhead-tokens",
            c.replay_turn_overhead_tokens != 0,
        ),
    ] {
        if given {
            return Err(bad(format!("{flag} needs --agent-plans-jsonl")));
        }
    }
    Ok(())
}

fn validate(c: &AgentArgs) -> Result<Shape, Failure> {
    let bad = |m: &str| Failure::bad(m);
    let l = &c.lognorm;
    let pick = |family: &str,
                fixed: Option<u64>,
                default: u64,
                flags: LogNormalFlags|
     -> Result<LengthDist, Failure> {
        Ok(flags::length(family, fixed, 0, flags)?.unwrap_or(LengthDist::fixed(default)))
    };
    let input = pick("input", c.input_tokens, 128, c.input_lognorm.flags())?;
    let output = pick("output", c.output_tokens, 64, c.output_lognorm.flags())?;
    let environment = pick(
        "environment",
        c.environment_tokens,
        64,
        ln(
            l.environment_lognorm_mu,
            l.environment_lognorm_median,
            l.environment_lognorm_sigma,
            l.environment_lognorm_max,
        ),
    )?;
    let invocations = flags::length_with(
        "tool-invocations",
        "",
        "median",
        "max",
        c.tool_invocations,
        0,
        ln(
            l.tool_invocations_lognorm_mu,
            l.tool_invocations_lognorm_median,
            l.tool_invocations_lognorm_sigma,
            l.tool_invocations_lognorm_max,
        ),
    )?
    .unwrap_or(LengthDist::fixed(4));
    let latency = flags::length_with(
        "tool-call-latency",
        "-ms",
        "median-ms",
        "max-ms",
        c.tool_call_latency_ms,
        0,
        ln(
            l.tool_call_latency_lognorm_mu,
            l.tool_call_latency_lognorm_median_ms,
            l.tool_call_latency_lognorm_sigma,
            l.tool_call_latency_lognorm_max_ms,
        ),
    )?
    .unwrap_or(LengthDist::fixed(0));
    if c.input_tokens == Some(0) {
        return Err(bad("--input-tokens must be at least 1"));
    }
    if c.output_tokens == Some(0) {
        return Err(bad("--output-tokens must be at least 1"));
    }
    if c.tool_invocations == Some(0) {
        return Err(bad("--tool-invocations must be at least 1"));
    }
    match (c.dp_rank_perfect_routing, c.dp_rank_perfect_routing_num) {
        (true, None) => {
            return Err(bad(
                "--dp-rank-perfect-routing needs --dp-rank-perfect-routing-num <ranks>",
            ));
        }
        (false, Some(_)) => {
            return Err(bad(
                "--dp-rank-perfect-routing-num needs --dp-rank-perfect-routing",
            ));
        }
        (true, Some(0)) => return Err(bad("--dp-rank-perfect-routing-num must be at least 1")),
        _ => {}
    }
    if c.disable_user_tagging && c.user_prefix.is_some() {
        return Err(bad(
            "--user-prefix and --disable-user-tagging are mutually exclusive",
        ));
    }
    Ok(Shape {
        input,
        output,
        environment,
        invocations,
        latency,
    })
}

/// What `sweep` and `capacity` vary: the session rate (open loop), the
/// agents of a closed loop, the cap on active agents, or the cap on requests
/// in flight.
pub const DIMENSIONS: &[series::Dimension] = &[
    series::Dimension::new("session-rate", "sessions/s", false),
    series::Dimension::new("agents", "agents", true),
    series::Dimension::new("max-active-agents", "agents", true),
    series::Dimension::new("max-concurrency", "requests", true),
];

front!(AgentArgs);

flat_view! {
    /// The `tool_call_latency_*` columns: set for a synthetic workload (the
    /// log-normal ones for a log-normal latency), null otherwise.
    #[derive(Default)]
    struct LatencyView;
    column tool_call_latency_ms: Option<u64>;
    column tool_call_latency_lognorm_mu: Option<f64>;
    column tool_call_latency_lognorm_median_ms: Option<f64>;
    column tool_call_latency_lognorm_sigma: Option<f64>;
    column tool_call_latency_lognorm_max_ms: Option<u64>;
}

impl LatencyView {
    fn of(d: LengthDist) -> Self {
        match d {
            LengthDist::Fixed { value, .. } => Self {
                tool_call_latency_ms: Some(value),
                ..Self::default()
            },
            LengthDist::LogNormal { mu, sigma, max } => Self {
                tool_call_latency_ms: None,
                tool_call_latency_lognorm_mu: Some(mu),
                tool_call_latency_lognorm_median_ms: Some(mu.exp()),
                tool_call_latency_lognorm_sigma: Some(sigma),
                tool_call_latency_lognorm_max_ms: max,
            },
        }
    }
}

/// How `batchbench-agent` runs report.
pub const PROFILE: Profile = Profile {
    command: "batchbench-agent",
    csv_columns: View::COLUMNS,
    view,
    dry_run_line,
};

flat_view! {
    /// The flat configuration view (`run.config`): the flags under the names
    /// existing notebooks read. Its columns: the legacy ones, in order, some
    /// under their legacy name (`column=field`), then our additions.
    struct View<'a>;
    record timestamp, model, workload_mode, agent_plans_jsonl = manifest_path,
        agent_plans_sha256 = manifest_sha256, trajectory_schema_version = schema_version;
    column admission_mode: &'static str;
    column time_scale: f64;
    column agents: Option<u64>;
    column requested_max_active_agents: Option<u64>;
    record max_active_agents = max_active_observed, late_admissions, max_admission_lag_ms,
        live_block_fallbacks, completed_agents = trajectories_completed,
        planned_tool_invocations = planned_requests, total_requests, successful_requests,
        failed_requests, total_input_tokens = total_prompt_tokens,
        total_output_tokens = total_completion_tokens, estimated_cached_input_tokens,
        total_tool_call_latency_seconds = total_delay_seconds, total_duration_seconds,
        last_agent_admitted_seconds = last_admitted_seconds, final_drain_seconds,
        requests_per_second, input_tokens_per_second = prompt_tokens_per_second,
        output_tokens_per_second = completion_tokens_per_second, latency_p50_ms,
        latency_p90_ms, latency_p99_ms,
        agent_end_to_end_latency_p50_ms = trajectory_e2e_p50_ms,
        agent_end_to_end_latency_p90_ms = trajectory_e2e_p90_ms,
        agent_end_to_end_latency_p99_ms = trajectory_e2e_p99_ms;
    column host: &'a str;
    column endpoint: &'a str;
    column sglang: bool;
    column ignore_eos: bool;
    column user_tagging: bool;
    column dp_rank_perfect_routing: bool;
    column dp_rank_perfect_routing_num: Option<u64>;
    record seed;
    column replay_initial_overhead_tokens: Option<u32>;
    column replay_turn_overhead_tokens: Option<u32>;
    column agent_events_jsonl: Option<&'a PathBuf>;
    flatten latency: LatencyView;
    // Additions.
    record retries, interrupted;
    column tokenizer_model: &'a str;
    column stream: bool;
    record failures_by_kind, server_cached_tokens, server_cached_ratio;
    group view::FIGURE_COLUMNS;
    column session_rate: Option<f64>;
    flatten load: LoadView;
    group view::OUTCOME_COLUMNS;
    hidden request_timeout_secs: serde_json::Value;
    hidden max_retries: u32;
    hidden retry_delay_ms: u64;
    hidden user_prefix: Option<String>;
    hidden workload: &'a serde_json::Value;
    hidden plugins: PluginsView<'a>;
}

const USER_TAG: &str = "user_tag";
const DP_RANK: &str = "dp_rank";
const SYNTHETIC: &str = "synthetic_agents";
const REPLAY: &str = "replay_jsonl";

fn view(spec: &RunSpec, info: &WorkloadInfo) -> serde_json::Value {
    let t = &spec.target;
    let hosts = t.host.to_string();
    let chat = flags::chat_options(spec);
    let router = |name: &str| spec.routers.iter().find(|r| r.name == name);
    let user_tag = router(USER_TAG).and_then(|r| r.config_as::<UserTagConfig>().ok());
    let dp = router(DP_RANK).and_then(|r| r.config_as::<DpRankConfig>().ok());
    let replay = spec.workload.name == REPLAY;
    let latency = (spec.workload.name == SYNTHETIC)
        .then(|| spec.workload.config_as::<SyntheticAgentsConfig>().ok())
        .flatten()
        .map_or_else(LatencyView::default, |c| {
            LatencyView::of(c.tool_call_latency_ms)
        });
    let v = View {
        host: &hosts,
        endpoint: &t.endpoint,
        tokenizer_model: t.tokenizer(),
        sglang: chat.sglang,
        ignore_eos: chat.ignore_eos,
        stream: t.stream,
        request_timeout_secs: view::whole(t.request_timeout_secs),
        max_retries: t.max_retries,
        retry_delay_ms: t.retry_delay_ms,
        agents: info.planned_trajectories,
        requested_max_active_agents: spec.admission.max_active,
        admission_mode: spec.admission.mode.as_str(),
        time_scale: spec.admission.time_scale,
        user_tagging: user_tag.is_some(),
        user_prefix: user_tag.and_then(|u| u.prefix),
        dp_rank_perfect_routing: dp.is_some(),
        dp_rank_perfect_routing_num: dp.map(|d| d.ranks),
        agent_events_jsonl: spec.output.agent_events_jsonl.as_ref(),
        workload: &spec.workload.config,
        plugins: PluginsView::of(spec, &[USER_TAG, DP_RANK]),
        replay_initial_overhead_tokens: replay.then_some(spec.template.initial_overhead_tokens),
        replay_turn_overhead_tokens: replay.then_some(spec.template.turn_overhead_tokens),
        latency,
        session_rate: spec.load.rate,
        load: LoadView::of(spec),
    };
    view::json(v)
}

fn dry_run_line(s: &DryRunStats) -> String {
    format!(
        "dry run: {} trajectories, {} requests, {} planned prompt tokens on first requests and prompt targets, {} planned output tokens; nothing sent",
        s.trajectories, s.requests, s.prompt_tokens, s.output_tokens
    )
}

fn synthetic_config(shape: Shape, agents: u64) -> SyntheticAgentsConfig {
    SyntheticAgentsConfig {
        agents,
        input: shape.input,
        output: shape.output,
        environment: shape.environment,
        tool_invocations: shape.invocations,
        tool_call_latency_ms: shape.latency,
    }
}

/// The default spec of `batchbench-agent`: one synthetic agent of four turns,
/// tagged with a seeded user identity.
pub fn default_spec() -> Result<RunSpec, Failure> {
    let shape = Shape {
        input: LengthDist::fixed(128),
        output: LengthDist::fixed(64),
        environment: LengthDist::fixed(64),
        invocations: LengthDist::fixed(4),
        latency: LengthDist::fixed(0),
    };
    let mut spec = RunSpec::new(
        PluginSpec::typed(SYNTHETIC, &synthetic_config(shape, 1)).map_err(Failure::failed_msg)?,
    );
    spec.routers
        .push(PluginSpec::typed(USER_TAG, &UserTagConfig::default()).map_err(Failure::failed_msg)?);
    Ok(spec)
}

const SHAPE_FLAGS: &[&str] = &[
    "agents",
    "input_tokens",
    "output_tokens",
    "environment_tokens",
    "tool_invocations",
    "tool_call_latency_ms",
];

/// Resolves the flags (over the `--config` file, when given) into the run spec.
pub fn resolve(
    c: &AgentArgs,
    target: &TargetArgs,
    common: &CommonArgs,
    g: &Given,
) -> Result<RunSpec, Failure> {
    check_mode(c, common)?;
    let shape = validate(c)?;
    let mut spec = common.base(target, default_spec, g)?;
    if c.agent_events_jsonl.is_some() {
        spec.output
            .agent_events_jsonl
            .clone_from(&c.agent_events_jsonl);
    }
    if g.has("admission") {
        spec.admission.mode = c.admission.mode();
    }
    if g.has("time_scale") {
        spec.admission.time_scale = c.time_scale;
    }
    if c.max_active_agents.is_some() {
        spec.admission.max_active = c.max_active_agents;
    }
    common.load.apply(
        &mut spec,
        c.session_rate,
        "--session-rate",
        Release::Sessions,
    )?;
    if spec.load.is_open() {
        if g.explicit("admission") && c.admission.mode() == AdmissionMode::ClosedLoop {
            return Err(Failure::bad(
                "--admission closed-loop and a session rate (--session-rate, --stages, --ramp-up-secs): give one (a rate starts each session at its arrival)",
            ));
        }
        // Each session at its arrival, whatever is active.
        spec.admission.mode = AdmissionMode::OpenLoop;
    }
    if spec.load.duration_secs.is_some() && g.explicit("agents") {
        return Err(Failure::bad(
            "--duration-secs and --agents: give one (a duration run starts agents until its deadline)",
        ));
    }
    let open = spec.admission.mode == AdmissionMode::OpenLoop;
    if g.has("replay_initial_overhead_tokens") {
        spec.template.initial_overhead_tokens =
            u32::try_from(c.replay_initial_overhead_tokens).unwrap_or(u32::MAX);
    }
    if g.has("replay_turn_overhead_tokens") {
        spec.template.turn_overhead_tokens =
            u32::try_from(c.replay_turn_overhead_tokens).unwrap_or(u32::MAX);
    }
    if let Some(w) = common.plugins.workload()? {
        spec.workload = w;
    } else if let Some(path) = &c.agent_plans_jsonl {
        let cfg = ReplayConfig {
            path: path.clone(),
            order_by_start: open,
            initial_overhead_tokens: spec.template.initial_overhead_tokens,
            turn_overhead_tokens: spec.template.turn_overhead_tokens,
        };
        spec.workload = PluginSpec::typed(REPLAY, &cfg).map_err(Failure::failed_msg)?;
    } else if spec.workload.name == SYNTHETIC {
        let mut cfg: SyntheticAgentsConfig = spec
            .workload
            .config_as()
            .map_err(|e| Failure::bad(format!("workload: {e}")))?;
        let family = |stem: &str, fixed: &str| {
            g.has(fixed)
                || ["median", "mu", "sigma", "max", "median_ms", "max_ms"]
                    .iter()
                    .any(|s| g.explicit(&format!("{stem}_lognorm_{s}")))
        };
        if g.has("agents") {
            cfg.agents = c.agents.unwrap_or(cfg.agents);
        }
        if family("input", "input_tokens") {
            cfg.input = shape.input;
        }
        if family("output", "output_tokens") {
            cfg.output = shape.output;
        }
        if family("environment", "environment_tokens") {
            cfg.environment = shape.environment;
        }
        if family("tool_invocations", "tool_invocations") {
            cfg.tool_invocations = shape.invocations;
        }
        if family("tool_call_latency", "tool_call_latency_ms") {
            cfg.tool_call_latency_ms = shape.latency;
        }
        if !g.over_file() {
            cfg = synthetic_config(shape, c.agents.unwrap_or(1));
        }
        spec.workload = PluginSpec::typed(SYNTHETIC, &cfg).map_err(Failure::failed_msg)?;
    } else {
        let fixed = SHAPE_FLAGS
            .iter()
            .find(|f| g.explicit(f))
            .map(|f| format!("--{}", f.replace('_', "-")));
        if let Some(flag) = fixed.or_else(|| c.first_lognorm()) {
            return Err(Failure::bad(format!(
                "{flag} shapes the {SYNTHETIC} workload, and the config file's workload is {}",
                spec.workload.name
            )));
        }
        if spec.workload.name == REPLAY
            && [
                "admission",
                "replay_initial_overhead_tokens",
                "replay_turn_overhead_tokens",
            ]
            .iter()
            .any(|f| g.explicit(f))
        {
            // The replay checks its manifest with the same overheads and order
            // the engine uses.
            let mut cfg: ReplayConfig = spec
                .workload
                .config_as()
                .map_err(|e| Failure::bad(format!("workload: {e}")))?;
            cfg.order_by_start = open;
            cfg.initial_overhead_tokens = spec.template.initial_overhead_tokens;
            cfg.turn_overhead_tokens = spec.template.turn_overhead_tokens;
            spec.workload = PluginSpec::typed(REPLAY, &cfg).map_err(Failure::failed_msg)?;
        }
    }
    // Identity routers: on unless disabled; the DP rank router when asked for.
    if c.disable_user_tagging {
        spec.routers.retain(|r| r.name != USER_TAG);
    } else if let Some(prefix) = &c.user_prefix {
        let cfg = UserTagConfig {
            prefix: Some(prefix.clone()),
        };
        let tag = PluginSpec::typed(USER_TAG, &cfg).map_err(Failure::failed_msg)?;
        match spec.routers.iter_mut().find(|r| r.name == USER_TAG) {
            Some(r) => *r = tag,
            None => spec.routers.insert(0, tag),
        }
    }
    if let (true, Some(ranks)) = (c.dp_rank_perfect_routing, c.dp_rank_perfect_routing_num) {
        let dp =
            PluginSpec::typed(DP_RANK, &DpRankConfig { ranks }).map_err(Failure::failed_msg)?;
        spec.routers.retain(|r| r.name != DP_RANK);
        let at = spec
            .routers
            .iter()
            .position(|r| r.name != USER_TAG)
            .unwrap_or(spec.routers.len());
        spec.routers.insert(at, dp);
    }
    common.plugins.apply(&mut spec)?;
    Ok(spec)
}
