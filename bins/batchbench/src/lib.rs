//! The `batchbench` command: `users` concurrent users, each sending
//! `requests-per-user` independent requests, against a server or the built-in
//! simulator (`--host sim://`).
//!
//! `main.rs` only calls [`run`], so tests and the Python package drive the whole
//! tool in process.

pub mod common;

use batchbench_core::dist::{LengthDist, LogNormalFlags, lognormal_from_flags};
use batchbench_core::engine::{Engine, EngineError, EngineOptions};
use batchbench_core::registry::{self, BuildContext};
use batchbench_core::transport::{TargetConfig, Transport, join_url};
use clap::{Args, Parser, Subcommand};
use common::{Failure, Progress, finite, non_negative, positive};
use serde_json::json;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

// The built-in plugins register themselves; naming the crate keeps them linked.
use batchbench_plugins as _;

const LONG_ABOUT: &str = "\
Benchmark an OpenAI-compatible LLM server with many concurrent users.

Each of --users users sends --requests-per-user requests one after another; users run
concurrently. Prompt and output lengths are exact: prompts are synthesised to re-encode
to exactly the requested token count with the model's tokenizer.

Use --host sim:// to run against the built-in simulator (options as a query, for
example sim://?fault-rate=0.5&decode-ms-per-token=5). Ctrl+C cancels in-flight
requests and prints a partial summary (exit 130).

Exit codes: 0 run completed, 1 run could not complete, 2 bad input (nothing sent),
130 interrupted.";

/// Command line of `batchbench`.
#[derive(Debug, Parser)]
#[command(name = "batchbench", version, about = "Benchmark LLM-serving systems under concurrent load", long_about = LONG_ABOUT)]
#[command(args_conflicts_with_subcommands = true, allow_negative_numbers = true)]
pub struct Cli {
    /// A subcommand; without one, run a benchmark.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Benchmark flags.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every registered plugin (kind, name, description, example config).
    Plugins {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// The flags of a benchmark run.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Base URL of the server, or sim:// for the built-in simulator.
    #[arg(
        long,
        default_value = "https://api.openai.com",
        help_heading = "Target"
    )]
    pub host: String,
    /// Request path, or a full URL.
    #[arg(long, default_value = "/v1/chat/completions", help_heading = "Target")]
    pub endpoint: String,
    /// The request's model field; also the tokenizer unless --tokenizer-model is given.
    #[arg(
        long,
        default_value = "Qwen/Qwen3-VL-235B-A22B-Instruct-FP8",
        help_heading = "Target"
    )]
    pub model: String,
    /// Tokenizer: a Hugging Face model id, a tokenizer.json, or a directory holding one.
    #[arg(long, help_heading = "Target")]
    pub tokenizer_model: Option<String>,
    /// Bearer token; else read from the variable named by --api-key-env.
    #[arg(long, help_heading = "Target")]
    pub api_key: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long, default_value = "OPENAI_API_KEY", help_heading = "Target")]
    pub api_key_env: String,
    /// Per-request timeout in seconds.
    #[arg(long, default_value = "60", value_parser = positive, help_heading = "Target")]
    pub request_timeout_secs: u64,
    /// Retries after the first attempt (5xx, 408, 429, timeouts, broken connections).
    #[arg(long, default_value = "2", value_parser = non_negative, help_heading = "Target")]
    pub max_retries: u64,
    /// Base delay of the exponential retry backoff, in milliseconds.
    #[arg(long, default_value = "250", value_parser = non_negative, help_heading = "Target")]
    pub retry_delay_ms: u64,

    /// Concurrent users.
    #[arg(long, default_value = "1", value_parser = positive, help_heading = "Workload")]
    pub users: u64,
    /// Requests each user sends, one after another.
    #[arg(long, default_value = "1", value_parser = non_negative, help_heading = "Workload")]
    pub requests_per_user: u64,
    /// Prompt content length in tokens (0: off, a short fixed prompt).
    #[arg(long, default_value = "0", value_parser = non_negative, help_heading = "Workload")]
    pub input_tokens: u64,
    /// Uniform +/- variation of the prompt length.
    #[arg(long, default_value = "0", value_parser = non_negative, help_heading = "Workload")]
    pub input_vary: u64,
    /// Fraction of each prompt shared as a common prefix across prompts (0.0-1.0).
    #[arg(long, default_value = "0.0", value_parser = finite, help_heading = "Workload")]
    pub input_prefix_overlap: f64,
    /// Log-normal prompt length: mu of the underlying normal.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub input_lognorm_mu: Option<f64>,
    /// Log-normal prompt length: median (preferred over mu).
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub input_lognorm_median: Option<f64>,
    /// Log-normal prompt length: sigma (required with mu or median).
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub input_lognorm_sigma: Option<f64>,
    /// Log-normal prompt length: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub input_lognorm_max: Option<f64>,
    /// Exact output length (sent as min and max tokens).
    #[arg(long, value_parser = non_negative, help_heading = "Workload")]
    pub output_tokens: Option<u64>,
    /// Uniform +/- variation of the output length.
    #[arg(long, default_value = "0", value_parser = non_negative, help_heading = "Workload")]
    pub output_vary: u64,
    /// Log-normal output length: mu.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub output_lognorm_mu: Option<f64>,
    /// Log-normal output length: median.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub output_lognorm_median: Option<f64>,
    /// Log-normal output length: sigma.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub output_lognorm_sigma: Option<f64>,
    /// Log-normal output length: upper bound.
    #[arg(long, value_parser = finite, help_heading = "Workload")]
    pub output_lognorm_max: Option<f64>,
    /// Seed for reproducible sampling and text (random when absent; reported).
    #[arg(long, help_heading = "Workload")]
    pub seed: Option<u64>,

    /// Send min_new_tokens/max_new_tokens (SGLang) instead of min_tokens/max_tokens.
    #[arg(long, help_heading = "Protocol")]
    pub sglang: bool,
    /// Send "ignore_eos": true so outputs run to their length.
    #[arg(long, help_heading = "Protocol")]
    pub ignore_eos: bool,
    /// Stream responses (SSE); adds TTFT, inter-token latency and TPOT to the report.
    #[arg(long, help_heading = "Protocol")]
    pub stream: bool,

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
    /// No progress bar.
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
}

/// Runs `batchbench` with these arguments (the first is the program name) and
/// returns the exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => return common::clap_exit("batchbench", &e),
    };
    match cli.command {
        Some(Command::Plugins { json }) => plugins(json),
        None => match bench(cli.bench) {
            Ok(code) => code,
            Err(f) => {
                eprintln!("batchbench: {:#}", f.error);
                f.code
            }
        },
    }
}

fn plugins(as_json: bool) -> i32 {
    let list = registry::list();
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for p in list {
            println!(
                "{:<9} {:<18} {}\n{:<28} example: {}",
                p.kind, p.name, p.description, "", p.example
            );
        }
    }
    common::EXIT_OK
}

fn length(
    family: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: LogNormalFlags,
) -> Result<Option<LengthDist>, Failure> {
    let ln = lognormal_from_flags(&format!("--{family}-lognorm"), "median", "max", flags)
        .map_err(|e| Failure::bad_input(anyhow::anyhow!(e)))?;
    match (fixed, ln) {
        (Some(_), Some(_)) => Err(Failure::bad_input(anyhow::anyhow!(
            "--{family}-tokens and the --{family}-lognorm-* family are mutually exclusive"
        ))),
        (Some(v), None) => Ok(Some(LengthDist::Fixed { value: v, vary })),
        (None, ln) => {
            if vary > 0 {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "--{family}-vary needs --{family}-tokens"
                )));
            }
            Ok(ln)
        }
    }
}

/// The validated plan of a `batchbench` run.
#[derive(Debug)]
struct Plan {
    input: Option<LengthDist>,
    output: Option<LengthDist>,
}

fn validate(a: &BenchArgs) -> Result<Plan, Failure> {
    let bad = |m: String| Failure::bad_input(anyhow::anyhow!(m));
    if !(0.0..=1.0).contains(&a.input_prefix_overlap) {
        return Err(bad(format!(
            "--input-prefix-overlap must be between 0.0 and 1.0, got {}",
            a.input_prefix_overlap
        )));
    }
    let input = length(
        "input",
        (a.input_tokens > 0).then_some(a.input_tokens),
        a.input_vary,
        LogNormalFlags {
            mu: a.input_lognorm_mu,
            median: a.input_lognorm_median,
            sigma: a.input_lognorm_sigma,
            max: a.input_lognorm_max,
        },
    )?;
    if a.output_tokens == Some(0) {
        return Err(bad("--output-tokens must be at least 1".into()));
    }
    let output = length(
        "output",
        a.output_tokens,
        a.output_vary,
        LogNormalFlags {
            mu: a.output_lognorm_mu,
            median: a.output_lognorm_median,
            sigma: a.output_lognorm_sigma,
            max: a.output_lognorm_max,
        },
    )?;
    if a.input_prefix_overlap > 0.0 && input.is_none() {
        return Err(bad(
            "--input-prefix-overlap needs --input-tokens or the --input-lognorm-* family".into(),
        ));
    }
    if u32::try_from(a.max_retries).is_err() {
        return Err(bad(format!(
            "--max-retries is too large: {}",
            a.max_retries
        )));
    }
    Ok(Plan { input, output })
}

fn lognorm_parts(
    d: Option<LengthDist>,
) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    match d {
        Some(LengthDist::LogNormal { mu, sigma, max }) => (json!(mu), json!(sigma), json!(max)),
        _ => (json!(null), json!(null), json!(null)),
    }
}

fn bench(a: BenchArgs) -> Result<i32, Failure> {
    let plan = validate(&a)?;
    let seed = a.seed.unwrap_or_else(common::fresh_seed);
    let ctx = BuildContext { seed };
    let workload_cfg = json!({
        "users": a.users,
        "requests_per_user": a.requests_per_user,
        "input": plan.input,
        "output": plan.output,
        "prefix_overlap": a.input_prefix_overlap,
    });
    let mut source =
        registry::workload("finite_batch", &workload_cfg, &ctx).map_err(common::plugin_failure)?;
    let sim_cfg = if common::is_sim(&a.host) {
        Some(
            common::sim_config(&a.host)
                .map_err(|e| Failure::bad_input(anyhow::anyhow!("--host: {e}")))?,
        )
    } else {
        None
    };

    if a.dry_run {
        let mut out = std::io::stdout().lock();
        let stats =
            batchbench_core::engine::dry_run(source.as_mut(), &mut out).map_err(engine_failure)?;
        eprintln!(
            "dry run: {} users, {} requests, {} planned prompt tokens, {} planned output tokens; nothing sent",
            stats.trajectories, stats.requests, stats.prompt_tokens, stats.output_tokens
        );
        return Ok(common::EXIT_OK);
    }

    let codec_cfg = json!({ "sglang": a.sglang, "ignore_eos": a.ignore_eos });
    let codec = registry::codec("openai_chat", &codec_cfg, &ctx).map_err(common::plugin_failure)?;
    let mut reporters = vec![
        registry::reporter("console_summary", &json!({}), &ctx).map_err(common::plugin_failure)?,
    ];
    if let Some(path) = &a.summary_json {
        reporters.push(
            registry::reporter("json_summary", &json!({ "path": path }), &ctx)
                .map_err(common::plugin_failure)?,
        );
    }
    if let Some(path) = &a.results_csv {
        reporters.push(
            registry::reporter(
                "csv",
                &json!({ "path": path, "schema": "batchbench" }),
                &ctx,
            )
            .map_err(common::plugin_failure)?,
        );
    }

    let (in_mu, in_sigma, in_max) = lognorm_parts(plan.input);
    let (out_mu, out_sigma, out_max) = lognorm_parts(plan.output);
    let tokenizer_spec = a.tokenizer_model.clone().unwrap_or_else(|| a.model.clone());
    let config = json!({
        "dataset_path": "", "dataset_size": "",
        "users": a.users, "requests_per_user": a.requests_per_user,
        "output_tokens": a.output_tokens, "output_vary": a.output_vary,
        "output_lognorm_mu": out_mu, "output_lognorm_sigma": out_sigma, "output_lognorm_max": out_max,
        "input_tokens": a.input_tokens, "input_vary": a.input_vary, "input_prefix_overlap": a.input_prefix_overlap,
        "input_lognorm_mu": in_mu, "input_lognorm_sigma": in_sigma, "input_lognorm_max": in_max,
        "sglang": a.sglang, "ignore_eos": a.ignore_eos, "stream": a.stream,
        "request_timeout_secs": a.request_timeout_secs, "max_retries": a.max_retries, "retry_delay_ms": a.retry_delay_ms,
        "host": a.host, "endpoint": a.endpoint, "tokenizer_model": tokenizer_spec,
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))?;
    rt.block_on(async move {
        let needs_tokens = plan.input.is_some() || sim_cfg.is_some();
        let tokenizer = if needs_tokens {
            let flag = if a.tokenizer_model.is_some() {
                "--tokenizer-model"
            } else {
                "--model (as tokenizer; pass --tokenizer-model)"
            };
            Some(common::load_tokenizer(&tokenizer_spec, flag).await?)
        } else {
            None
        };
        let target = common::resolve_target(&a.host, sim_cfg, tokenizer.clone()).await?;
        let url = join_url(&target.host, &a.endpoint);
        let transport = Transport::new(TargetConfig {
            url,
            api_key: if target.sim.is_some() {
                None
            } else {
                common::api_key(a.api_key.clone(), &a.api_key_env)
            },
            timeout: Duration::from_secs(a.request_timeout_secs),
            max_retries: a.max_retries as u32,
            retry_delay: Duration::from_millis(a.retry_delay_ms),
            headers: Vec::new(),
            pool_size: a.users as usize,
            verbose: a.verbose,
        })
        .map_err(|e| Failure::bad_input(anyhow::anyhow!("--host/--endpoint: {e}")))?;

        let cancel = CancellationToken::new();
        common::cancel_on_ctrl_c(cancel.clone());
        let opts = EngineOptions {
            model: a.model.clone(),
            seed,
            max_active: a.users as usize,
            stream: a.stream,
            ..EngineOptions::default()
        };
        let mut engine = Engine::new(opts, transport, Arc::from(codec))
            .cancel_token(cancel)
            .config(config);
        let total = a.users.saturating_mul(a.requests_per_user);
        engine = engine.reporter(Box::new(Progress::new(Some(total), a.quiet)));
        for r in reporters {
            engine = engine.reporter(r);
        }
        if let Some(t) = tokenizer {
            engine = engine.tokenizer(t);
        }
        let out = engine.run(source).await.map_err(engine_failure);
        if let Some(sim) = target.sim {
            sim.stop().await;
        }
        let out = out?;
        Ok(if out.summary.interrupted {
            common::EXIT_INTERRUPTED
        } else {
            common::EXIT_OK
        })
    })
}

fn engine_failure(e: EngineError) -> Failure {
    if e.is_bad_input() {
        Failure::bad_input(e)
    } else {
        Failure::failed(e)
    }
}
