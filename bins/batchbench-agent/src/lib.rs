//! The `batchbench-agent` command: `--agents` independent agent loops. Within an
//! agent, requests are sequential: the assistant reply and a synthetic tool result
//! are appended and the whole growing conversation is sent again, so every request
//! after the first reuses the previous prompt as a prefix and exercises the
//! server's prefix (KV) cache.

use batchbench::common::{
    self, Failure, OutputArgs, TargetArgs, finite, length, length_with, non_negative, positive,
};
use batchbench_core::dist::{LengthDist, LogNormalFlags};
use batchbench_core::engine::{Engine, EngineOptions};
use batchbench_core::plugin::Router;
use batchbench_core::registry::{self, BuildContext};
use clap::Parser;
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

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

    /// Independent agent loops.
    #[arg(long, default_value = "1", value_parser = positive, help_heading = "Workload")]
    pub agents: u64,
    /// Agents active at once; a finished agent's slot goes to the next one [default: --agents].
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

    /// Output.
    #[command(flatten)]
    pub output: OutputArgs,
    /// Write one JSON line per agent: admission, queue wait, routing slot, DP rank, runtime, completion.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub agent_events_jsonl: Option<PathBuf>,
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
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return common::clap_exit("batchbench-agent", &e),
    };
    match agents(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("batchbench-agent: {:#}", f.error);
            f.code
        }
    }
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

fn agents(c: Cli) -> Result<i32, Failure> {
    let shape = validate(&c)?;
    let t = &c.target;
    let seed = c.seed.unwrap_or_else(common::fresh_seed);
    let ctx = BuildContext { seed };
    let workload_cfg = json!({
        "agents": c.agents,
        "input": shape.input,
        "output": shape.output,
        "environment": shape.environment,
        "tool_invocations": shape.invocations,
        "tool_call_latency_ms": shape.latency,
    });
    let mut source = registry::workload("synthetic_agents", &workload_cfg, &ctx)
        .map_err(common::plugin_failure)?;
    let sim_cfg = t.sim_config()?;
    if c.output.dry_run {
        let mut out = std::io::stdout().lock();
        let stats = batchbench_core::engine::dry_run(source.as_mut(), &mut out)
            .map_err(common::engine_failure)?;
        eprintln!(
            "dry run: {} agents, {} invocations, {} planned initial prompt tokens, {} planned output tokens; nothing sent",
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
    let codec =
        registry::codec("openai_chat", &t.codec_config(), &ctx).map_err(common::plugin_failure)?;
    let mut reporters = c.output.reporters("agent", &ctx)?;
    if let Some(path) = &c.agent_events_jsonl {
        reporters.push(
            registry::reporter("agent_events", &json!({ "path": path }), &ctx)
                .map_err(common::plugin_failure)?,
        );
    }
    let max_active = c.max_active_agents.unwrap_or(c.agents);
    let mut config = t.config_json();
    if let serde_json::Value::Object(m) = &mut config {
        for (k, v) in [
            ("agents", json!(c.agents)),
            ("requested_max_active_agents", json!(c.max_active_agents)),
            ("admission_mode", json!("closed-loop")),
            ("time_scale", json!(1.0)),
            ("late_admissions", json!(0)),
            ("max_admission_lag_ms", json!(0.0)),
            ("live_block_fallbacks", json!(0)),
            ("user_tagging", json!(!c.disable_user_tagging)),
            ("user_prefix", json!(c.user_prefix)),
            ("dp_rank_perfect_routing", json!(c.dp_rank_perfect_routing)),
            (
                "dp_rank_perfect_routing_num",
                json!(c.dp_rank_perfect_routing_num),
            ),
            ("agent_events_jsonl", json!(c.agent_events_jsonl)),
            ("workload", workload_cfg.clone()),
        ] {
            m.insert(k.to_owned(), v);
        }
        if let serde_json::Value::Object(lat) = latency_columns(shape.latency) {
            m.extend(lat);
        }
    }
    let total = source.info().planned_requests;
    common::runtime()?.block_on(async move {
        let session =
            common::Session::open(t, sim_cfg, true, max_active as usize, c.output.verbose).await?;
        let opts = EngineOptions {
            model: t.model.clone(),
            seed,
            max_active: max_active as usize,
            stream: t.stream,
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
