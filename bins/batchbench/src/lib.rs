//! The `batchbench` command: `users` concurrent users, each sending
//! `requests-per-user` independent requests, against a server or the built-in
//! simulator (`--host sim://`).
//!
//! `main.rs` only calls [`run`], so tests and the Python package drive the whole
//! tool in process.

pub mod common;

use batchbench_core::dist::{LengthDist, LogNormalFlags};
use batchbench_core::engine::{Engine, EngineOptions};
use batchbench_core::registry::{self, BuildContext};
use clap::{Args, Parser, Subcommand};
use common::{Failure, OutputArgs, PluginArgs, TargetArgs, finite, length, non_negative, positive};
use serde_json::json;
use std::ffi::OsString;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

// The built-in plugins register themselves; naming the crate keeps them linked.
use batchbench_clickhouse as _;
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
        /// Load an external plugin first (.wasm or a native library), to list it
        /// beside the built-ins. Repeatable.
        #[arg(long = "plugin", value_name = "PATH")]
        plugins: Vec<std::path::PathBuf>,
    },
    /// Turn a window of ClickHouse prompt-chain records into a version-2 replay
    /// manifest (CLICKHOUSE_URL, or --rows-jsonl to re-export offline).
    ///
    /// Sessions are reconstructed from the chains: within a principal a request
    /// continues the latest earlier request (within --link-window-hours) whose chain
    /// is a strict prefix of its own. The manifest is written only once it validates
    /// as a replay manifest. Exit codes: 0 written, 1 export failed (no file), 2 bad
    /// flags.
    ExportPlans(Box<batchbench_clickhouse::ExportArgs>),
}

/// The flags of a benchmark run.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Target and protocol flags shared with `batchbench-agent`.
    #[command(flatten)]
    pub target: TargetArgs,

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

    /// External plugins.
    #[command(flatten)]
    pub plugins: PluginArgs,

    /// Output flags shared with `batchbench-agent`.
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Runs `batchbench` with these arguments (the first is the program name) and
/// returns the exit code.
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
        Err(e) => return common::clap_exit("batchbench", &e),
    };
    match cli.command {
        Some(Command::Plugins { json, plugins: p }) => match common::load_plugins(&p) {
            Ok(()) => plugins(json),
            Err(f) => common::exit_code("batchbench plugins", Err(f)),
        },
        Some(Command::ExportPlans(a)) => export_plans(&a, cancel),
        None => common::exit_code("batchbench", bench(cli.bench, cancel)),
    }
}

fn export_plans(a: &batchbench_clickhouse::ExportArgs, cancel: Option<CancellationToken>) -> i32 {
    use batchbench_clickhouse::ExportError;
    let Some(output) = a.output.as_deref() else {
        eprintln!("batchbench export-plans: --output PATH is required");
        return common::EXIT_BAD_INPUT;
    };
    // Ctrl+C (or the host's cancellation) removes the temporary files and exits
    // 130: an export has no partial result, and nothing may be left half-written.
    let done = CancellationToken::new();
    let watcher = {
        let (done, temps) = (done.clone(), batchbench_clickhouse::temp_files(a, output));
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            let interrupted = rt.block_on(async {
                match cancel {
                    Some(c) => tokio::select! {
                        () = c.cancelled() => true,
                        () = done.cancelled() => false,
                    },
                    None => tokio::select! {
                        r = tokio::signal::ctrl_c() => r.is_ok(),
                        () = done.cancelled() => false,
                    },
                }
            });
            if interrupted {
                for t in temps {
                    let _ = std::fs::remove_file(t);
                }
                eprintln!("\ninterrupted: the export was stopped; nothing was written");
                std::process::exit(common::EXIT_INTERRUPTED);
            }
        })
    };
    let result = batchbench_clickhouse::export(a, output);
    done.cancel();
    let _ = watcher.join();
    match result {
        Ok(stats) => {
            eprintln!("{}", stats.report());
            eprintln!(
                "wrote {} trajectories ({} requests) to {}",
                stats.trajectories,
                stats.requests,
                output.display()
            );
            common::EXIT_OK
        }
        Err(ExportError::BadInput(m)) => {
            eprintln!("batchbench export-plans: {m}");
            common::EXIT_BAD_INPUT
        }
        Err(ExportError::Failed(m)) => {
            eprintln!("batchbench export-plans: {m}");
            common::EXIT_FAILED
        }
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
            if p.origin != "built-in" {
                println!("{:<28} from: {}", "", p.origin);
            }
        }
    }
    common::EXIT_OK
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

fn bench(a: BenchArgs, cancel: Option<CancellationToken>) -> Result<i32, Failure> {
    let plan = validate(&a)?;
    let t = &a.target;
    let seed = a.seed.unwrap_or_else(common::fresh_seed);
    let ctx = BuildContext {
        seed,
        ..BuildContext::default()
    };
    a.plugins.check()?;
    a.plugins.load()?;
    let (mut source, total) = match &a.plugins.workload {
        Some(name) => {
            let synthetic = [
                ("--requests-per-user", a.requests_per_user != 1),
                ("--input-tokens", plan.input.is_some()),
                ("--output-tokens", plan.output.is_some()),
                ("--input-prefix-overlap", a.input_prefix_overlap != 0.0),
            ];
            if let Some((flag, _)) = synthetic.iter().find(|(_, given)| *given) {
                return Err(Failure::bad_input(anyhow::anyhow!(
                    "--workload {name} replaces the synthetic users: drop {flag}"
                )));
            }
            let cfg =
                common::json_config("--workload-config", a.plugins.workload_config.as_deref())?;
            let source = registry::workload(name, &cfg, &ctx).map_err(common::plugin_failure)?;
            let total = source.info().planned_requests;
            (source, total)
        }
        None => {
            let workload_cfg = json!({
                "users": a.users,
                "requests_per_user": a.requests_per_user,
                "input": plan.input,
                "output": plan.output,
                "prefix_overlap": a.input_prefix_overlap,
            });
            let source = registry::workload("finite_batch", &workload_cfg, &ctx)
                .map_err(common::plugin_failure)?;
            (source, Some(a.users.saturating_mul(a.requests_per_user)))
        }
    };
    let sim_cfg = t.sim_config()?;

    if a.output.dry_run {
        let mut out = std::io::stdout().lock();
        let stats = batchbench_core::engine::dry_run(source.as_mut(), &mut out)
            .map_err(common::engine_failure)?;
        eprintln!(
            "dry run: {} users, {} requests, {} planned prompt tokens, {} planned output tokens; nothing sent",
            stats.trajectories, stats.requests, stats.prompt_tokens, stats.output_tokens
        );
        return Ok(common::EXIT_OK);
    }

    let codec =
        registry::codec("openai_chat", &t.codec_config(), &ctx).map_err(common::plugin_failure)?;
    let mut reporters = a.output.reporters("batchbench", &ctx)?;
    reporters.extend(a.plugins.build_reporters(&ctx)?);
    let routers = a.plugins.build_routers(&ctx)?;
    let (in_mu, in_sigma, in_max) = lognorm_parts(plan.input);
    let (out_mu, out_sigma, out_max) = lognorm_parts(plan.output);
    let mut config = t.config_json();
    if let serde_json::Value::Object(m) = &mut config {
        m.extend(
            json!({
                "dataset_path": "", "dataset_size": "",
                "users": a.users, "requests_per_user": a.requests_per_user,
                "output_tokens": a.output_tokens, "output_vary": a.output_vary,
                "output_lognorm_mu": out_mu, "output_lognorm_sigma": out_sigma, "output_lognorm_max": out_max,
                "input_tokens": a.input_tokens, "input_vary": a.input_vary, "input_prefix_overlap": a.input_prefix_overlap,
                "input_lognorm_mu": in_mu, "input_lognorm_sigma": in_sigma, "input_lognorm_max": in_max,
                "workload": a.plugins.workload, "workload_config": a.plugins.workload_config.as_deref().and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok()),
                "plugins": a.plugins.config_json(),
            })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        );
    }
    let needs_tokens = plan.input.is_some() || a.plugins.workload.is_some();
    common::runtime()?.block_on(async move {
        let session = common::Session::open(
            t,
            sim_cfg,
            needs_tokens,
            a.users as usize,
            a.output.verbose,
            cancel,
        )
        .await?;
        let opts = EngineOptions {
            model: t.model.clone(),
            seed,
            max_active: a.users as usize,
            stream: t.stream,
            ..EngineOptions::default()
        };
        let mut engine =
            Engine::new(opts, session.transport.clone(), Arc::from(codec)).config(config);
        for r in routers {
            engine = engine.router(r);
        }
        let out = session
            .run(engine, source, reporters, total, a.output.quiet)
            .await?;
        Ok(if out.summary.interrupted {
            common::EXIT_INTERRUPTED
        } else {
            common::EXIT_OK
        })
    })
}
