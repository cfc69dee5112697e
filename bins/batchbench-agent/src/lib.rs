//! The `batchbench-agent` command: `--agents` independent agent loops. Within an
//! agent, requests are sequential: the assistant reply and a synthetic tool result
//! are appended and the whole growing conversation is sent again, so every request
//! after the first reuses the previous prompt as a prefix and exercises the
//! server's prefix (KV) cache.

use batchbench::common::{
    self, Failure, OutputArgs, TargetArgs, finite, length, length_with, non_negative, positive,
};
use batchbench_core::dist::{LengthDist, LogNormalFlags};
use batchbench_core::engine::{Admission, Engine, EngineOptions};
use batchbench_core::plugin::Router;
use batchbench_core::registry::{self, BuildContext};
use clap::Parser;
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use batchbench_clickhouse as _;
use batchbench_plugins as _;

const LONG_ABOUT: &str = "\
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
complete, 2 bad input (nothing sent), 130 interrupted (partial summary).";

/// Command line of `batchbench-agent`.
#[derive(Debug, Parser)]
#[command(name = "batchbench-agent", version, about = "Benchmark LLM servers with concurrent stateful agent loops", long_about = LONG_ABOUT)]
#[command(allow_negative_numbers = true)]
pub struct Cli {
    /// Target and protocol.
    #[command(flatten)]
    pub target: TargetArgs,

    /// Independent agent loops [default: 1].
    #[arg(long, value_parser = positive, help_heading = "Workload")]
    pub agents: Option<u64>,
    /// Agents active at once. Closed loop: a finished agent's slot goes to the next
    /// one [default: all]. Open loop: a hard cap that delays admissions [default: none].
    #[arg(long, value_parser = positive, help_heading = "Workload")]
    pub max_active_agents: Option<u64>,
    /// Initial prompt length in tokens [default: 128].
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub input_tokens: Option<u64>,
    /// Output length of each model request [default: 64].
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub output_tokens: Option<u64>,
    /// Length of each synthetic environment (tool) response [default: 64].
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub environment_tokens: Option<u64>,
    /// Model requests per agent [default: 4].
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub tool_invocations: Option<u64>,
    /// Sleep after each successful response, in milliseconds [default: 0].
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub tool_call_latency_ms: Option<u64>,
    /// Seed for reproducible plans, text and user tags (random when absent; reported).
    #[arg(long, help_heading = "Workload")]
    pub seed: Option<u64>,

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
    #[arg(long, default_value = "1", value_parser = finite, help_heading = "Replay")]
    pub time_scale: f64,
    /// Template tokens of a first or reset request, subtracted from its content.
    #[arg(long, default_value = "0", value_parser = non_negative, help_heading = "Replay")]
    pub replay_initial_overhead_tokens: u64,
    /// Template tokens of each appended turn, subtracted from the environment growth.
    #[arg(long, default_value = "0", value_parser = non_negative, help_heading = "Replay")]
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
    #[arg(long, value_name = "N", value_parser = non_negative, help_heading = "Identity and routing")]
    pub dp_rank_perfect_routing_num: Option<u64>,

    /// External plugins.
    #[command(flatten)]
    pub plugins: common::PluginArgs,

    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
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
    fn engine(self) -> Admission {
        match self {
            Self::ClosedLoop => Admission::ClosedLoop,
            Self::OpenLoop => Admission::OpenLoop,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::ClosedLoop => "closed-loop",
            Self::OpenLoop => "open-loop",
        }
    }
}

/// The log-normal flag families, each `*-lognorm-{median,mu,sigma,max}`.
#[derive(Debug, Clone, clap::Args)]
struct LogNormalArgs {
    /// Log-normal initial prompt: median (preferred over mu).
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    input_lognorm_median: Option<f64>,
    /// Log-normal initial prompt: mu of the underlying normal.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    input_lognorm_mu: Option<f64>,
    /// Log-normal initial prompt: sigma (required).
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    input_lognorm_sigma: Option<f64>,
    /// Log-normal initial prompt: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    input_lognorm_max: Option<f64>,
    /// Log-normal output: median.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    output_lognorm_median: Option<f64>,
    /// Log-normal output: mu.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    output_lognorm_mu: Option<f64>,
    /// Log-normal output: sigma.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    output_lognorm_sigma: Option<f64>,
    /// Log-normal output: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    output_lognorm_max: Option<f64>,
    /// Log-normal environment response: median.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    environment_lognorm_median: Option<f64>,
    /// Log-normal environment response: mu.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    environment_lognorm_mu: Option<f64>,
    /// Log-normal environment response: sigma.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    environment_lognorm_sigma: Option<f64>,
    /// Log-normal environment response: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    environment_lognorm_max: Option<f64>,
    /// Log-normal invocations per agent: median.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_median: Option<f64>,
    /// Log-normal invocations per agent: mu.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_mu: Option<f64>,
    /// Log-normal invocations per agent: sigma.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_sigma: Option<f64>,
    /// Log-normal invocations per agent: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_invocations_lognorm_max: Option<f64>,
    /// Log-normal tool-call latency: median in milliseconds.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_median_ms: Option<f64>,
    /// Log-normal tool-call latency: mu (of milliseconds).
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_mu: Option<f64>,
    /// Log-normal tool-call latency: sigma.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
    tool_call_latency_lognorm_sigma: Option<f64>,
    /// Log-normal tool-call latency: upper bound in milliseconds.
    #[arg(long, value_parser = finite, help_heading = "Log-normal workload")]
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
            ("--input-lognorm-median", l.input_lognorm_median.is_some()),
            ("--input-lognorm-mu", l.input_lognorm_mu.is_some()),
            ("--input-lognorm-sigma", l.input_lognorm_sigma.is_some()),
            ("--input-lognorm-max", l.input_lognorm_max.is_some()),
            ("--output-lognorm-median", l.output_lognorm_median.is_some()),
            ("--output-lognorm-mu", l.output_lognorm_mu.is_some()),
            ("--output-lognorm-sigma", l.output_lognorm_sigma.is_some()),
            ("--output-lognorm-max", l.output_lognorm_max.is_some()),
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

/// Checks how the workload flags combine: a manifest excludes every synthetic shape
/// flag; the replay flags need a manifest.
fn check_mode(c: &Cli) -> Result<(), Failure> {
    let bad = |m: String| Failure::bad_input(anyhow::anyhow!("{m}"));
    if !(c.time_scale.is_finite() && c.time_scale > 0.0) {
        return Err(bad(format!(
            "--time-scale must be a positive number, got {}",
            c.time_scale
        )));
    }
    if c.agent_plans_jsonl.is_some() && c.plugins.workload.is_some() {
        return Err(bad(
            "--workload and --agent-plans-jsonl are two workloads: give one".into(),
        ));
    }
    if c.agent_plans_jsonl.is_some() || c.plugins.workload.is_some() {
        let what = if c.plugins.workload.is_some() {
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
        .find_map(|(flag, given)| given.then_some(flag))
        .or_else(|| c.lognorm.first_given());
        if let Some(flag) = synthetic {
            return Err(bad(format!(
                "{what} replays recorded shapes and cannot be combined with {flag}"
            )));
        }
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

fn validate(c: &Cli) -> Result<Shape, Failure> {
    let bad = |m: &str| Failure::bad_input(anyhow::anyhow!("{m}"));
    let l = &c.lognorm;
    let pick = |family: &str,
                fixed: Option<u64>,
                default: u64,
                flags: LogNormalFlags|
     -> Result<LengthDist, Failure> {
        Ok(length(family, fixed, 0, flags)?.unwrap_or(LengthDist::fixed(default)))
    };
    let input = pick(
        "input",
        c.input_tokens,
        128,
        ln(
            l.input_lognorm_mu,
            l.input_lognorm_median,
            l.input_lognorm_sigma,
            l.input_lognorm_max,
        ),
    )?;
    let output = pick(
        "output",
        c.output_tokens,
        64,
        ln(
            l.output_lognorm_mu,
            l.output_lognorm_median,
            l.output_lognorm_sigma,
            l.output_lognorm_max,
        ),
    )?;
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
    let invocations = length_with(
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
    let latency = length_with(
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

/// Runs `batchbench-agent` with these arguments (the first is the program name)
/// and returns the exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, None)
}

/// Every long flag and whether it takes a value: for hosts that build argument
/// lists (the Python package checks option names against it).
pub fn flags() -> Vec<(String, bool)> {
    common::long_flags::<Cli>()
}

/// [`run`] for a host that cancels the run through `cancel` (instead of Ctrl+C,
/// whose handler is then not installed): the Python package.
pub fn run_embedded<I, T>(args: I, cancel: CancellationToken) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_with(args, Some(cancel))
}

fn run_with<I, T>(args: I, cancel: Option<CancellationToken>) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return common::clap_exit("batchbench-agent", &e),
    };
    common::exit_code("batchbench-agent", agents(cli, cancel))
}

fn latency_columns(d: LengthDist) -> serde_json::Value {
    match d {
        LengthDist::Fixed { value, .. } => json!({ "tool_call_latency_ms": value }),
        LengthDist::LogNormal { mu, sigma, max } => json!({
            "tool_call_latency_ms": null,
            "tool_call_latency_lognorm_mu": mu,
            "tool_call_latency_lognorm_median_ms": mu.exp(),
            "tool_call_latency_lognorm_sigma": sigma,
            "tool_call_latency_lognorm_max_ms": max,
        }),
    }
}

fn agents(c: Cli, cancel: Option<CancellationToken>) -> Result<i32, Failure> {
    check_mode(&c)?;
    c.plugins.check()?;
    c.plugins.load()?;
    let t = &c.target;
    let seed = c.seed.unwrap_or_else(common::fresh_seed);
    let open = c.admission == AdmissionArg::OpenLoop;
    let ctx = BuildContext {
        seed,
        order_by_start: open,
    };
    // A local tokenizer loads on the runtime while this thread reads the workload (a
    // large manifest takes seconds): both stand between launch and the first request.
    // A hub id waits, so that a bad manifest never starts a download.
    let rt = common::runtime()?;
    let local = std::path::Path::new(t.tokenizer_spec()).exists();
    let tokenizer = (!c.output.dry_run && local).then(|| {
        let t = t.clone();
        rt.spawn(async move { t.load_tokenizer().await })
    });
    let (mut source, workload_cfg, latency) = match (&c.agent_plans_jsonl, &c.plugins.workload) {
        (None, Some(name)) => {
            let cfg =
                common::json_config("--workload-config", c.plugins.workload_config.as_deref())?;
            let source = registry::workload(name, &cfg, &ctx).map_err(common::plugin_failure)?;
            (source, cfg, None)
        }
        (Some(path), _) => {
            let cfg = json!({
                "path": path,
                "order_by_start": open,
                "initial_overhead_tokens": c.replay_initial_overhead_tokens,
                "turn_overhead_tokens": c.replay_turn_overhead_tokens,
            });
            let source =
                registry::workload("replay_jsonl", &cfg, &ctx).map_err(common::plugin_failure)?;
            (source, cfg, None)
        }
        (None, None) => {
            let shape = validate(&c)?;
            let cfg = json!({
                "agents": c.agents.unwrap_or(1),
                "input": shape.input,
                "output": shape.output,
                "environment": shape.environment,
                "tool_invocations": shape.invocations,
                "tool_call_latency_ms": shape.latency,
            });
            let source = registry::workload("synthetic_agents", &cfg, &ctx)
                .map_err(common::plugin_failure)?;
            (source, cfg, Some(shape.latency))
        }
    };
    let info = source.info();
    let trajectories = info.planned_trajectories.unwrap_or(1);
    let sim_cfg = t.sim_config()?;
    if c.output.dry_run {
        let mut out = std::io::stdout().lock();
        let stats = batchbench_core::engine::dry_run(source.as_mut(), &mut out)
            .map_err(common::engine_failure)?;
        eprintln!(
            "dry run: {} trajectories, {} requests, {} planned prompt tokens on first requests and prompt targets, {} planned output tokens; nothing sent",
            stats.trajectories, stats.requests, stats.prompt_tokens, stats.output_tokens
        );
        return Ok(common::EXIT_OK);
    }

    let mut routers: Vec<Arc<dyn Router>> = Vec::new();
    if !c.disable_user_tagging {
        routers.push(Arc::from(
            registry::router("user_tag", &json!({ "prefix": c.user_prefix }), &ctx)
                .map_err(common::plugin_failure)?,
        ));
    }
    if let (true, Some(ranks)) = (c.dp_rank_perfect_routing, c.dp_rank_perfect_routing_num) {
        routers.push(Arc::from(
            registry::router("dp_rank", &json!({ "ranks": ranks }), &ctx)
                .map_err(common::plugin_failure)?,
        ));
    }
    routers.extend(c.plugins.build_routers(&ctx)?);
    let codec =
        registry::codec("openai_chat", &t.codec_config(), &ctx).map_err(common::plugin_failure)?;
    let mut reporters = c.output.reporters("agent", &ctx)?;
    reporters.extend(c.plugins.build_reporters(&ctx)?);
    if let Some(path) = &c.agent_events_jsonl {
        reporters.push(
            registry::reporter("agent_events", &json!({ "path": path }), &ctx)
                .map_err(common::plugin_failure)?,
        );
    }
    // Closed loop: every trajectory active at once unless capped. Open loop: no cap
    // unless given; the pool is sized for the trajectories that can be active.
    let cap = match (c.max_active_agents, open) {
        (Some(n), _) => n,
        (None, false) => trajectories,
        (None, true) => u64::from(u32::MAX),
    };
    let pool = cap.min(trajectories).max(1) as usize;
    let mut config = t.config_json();
    if let serde_json::Value::Object(m) = &mut config {
        for (k, v) in [
            ("agents", json!(trajectories)),
            ("requested_max_active_agents", json!(c.max_active_agents)),
            ("admission_mode", json!(c.admission.name())),
            ("time_scale", json!(c.time_scale)),
            ("user_tagging", json!(!c.disable_user_tagging)),
            ("user_prefix", json!(c.user_prefix)),
            ("dp_rank_perfect_routing", json!(c.dp_rank_perfect_routing)),
            (
                "dp_rank_perfect_routing_num",
                json!(c.dp_rank_perfect_routing_num),
            ),
            ("agent_events_jsonl", json!(c.agent_events_jsonl)),
            ("workload", workload_cfg.clone()),
            ("plugins", c.plugins.config_json()),
        ] {
            m.insert(k.to_owned(), v);
        }
        if c.agent_plans_jsonl.is_some() {
            m.insert(
                "replay_initial_overhead_tokens".into(),
                json!(c.replay_initial_overhead_tokens),
            );
            m.insert(
                "replay_turn_overhead_tokens".into(),
                json!(c.replay_turn_overhead_tokens),
            );
        }
        if let Some(serde_json::Value::Object(lat)) = latency.map(latency_columns) {
            m.extend(lat);
        }
    }
    let total = info.planned_requests;
    rt.block_on(async move {
        let tokenizer = match tokenizer {
            Some(task) => Some(task.await.map_err(|e| {
                Failure::failed(anyhow::anyhow!("the tokenizer loader failed: {e}"))
            })??),
            None => Some(t.load_tokenizer().await?),
        };
        let session =
            common::Session::open_with(t, sim_cfg, tokenizer, pool, c.output.verbose, cancel)
                .await?;
        let opts = EngineOptions {
            model: t.model.clone(),
            seed,
            max_active: usize::try_from(cap).unwrap_or(usize::MAX),
            stream: t.stream,
            admission: c.admission.engine(),
            time_scale: c.time_scale,
            initial_overhead_tokens: u32::try_from(c.replay_initial_overhead_tokens)
                .unwrap_or(u32::MAX),
            turn_overhead_tokens: u32::try_from(c.replay_turn_overhead_tokens).unwrap_or(u32::MAX),
            ..EngineOptions::default()
        };
        let mut engine =
            Engine::new(opts, session.transport.clone(), Arc::from(codec)).config(config);
        for r in routers {
            engine = engine.router(r);
        }
        let out = session
            .run(engine, source, reporters, total, c.output.quiet)
            .await?;
        Ok(if out.summary.interrupted {
            common::EXIT_INTERRUPTED
        } else {
            common::EXIT_OK
        })
    })
}
