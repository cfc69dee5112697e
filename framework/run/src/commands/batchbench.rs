//! The `batchbench` command: `users` concurrent users, each sending
//! `requests-per-user` independent requests, against a server or the built-in
//! simulator (`--host sim://`). Its flags resolve into a [`RunSpec`] of the
//! `finite_batch` workload (or the `--workload` plugin's); its CSV columns and
//! flat configuration view are the ones existing notebooks read.

use crate::assemble::Profile;
use crate::exit::{self, Failure};
use crate::flags::{
    self, ConfigArgs, Given, LoadArgs, LoadView, OutputArgs, PluginArgs, PluginsView, TargetArgs,
};
use crate::series;
use batchbench_contract::dist::{LengthDist, LogNormalFlags};
use batchbench_contract::plugin::WorkloadInfo;
use batchbench_contract::registry;
use batchbench_contract::spec::{PluginSpec, Release, RunSpec};
use batchbench_engine::run::DryRunStats;
use batchbench_plugins::batch::FiniteBatchConfig;
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use std::ffi::OsString;
use tokio_util::sync::CancellationToken;

const LONG_ABOUT: &str = "\
Benchmark an OpenAI-compatible LLM server with many concurrent users.

Each of --users users sends --requests-per-user requests one after another; users run
concurrently. Prompt and output lengths are exact: prompts are synthesised to re-encode
to exactly the requested token count with the model's tokenizer.

Use --host sim:// to run against the built-in simulator (options as a query, for
example sim://?fault-rate=0.5&decode-ms-per-token=5). Ctrl+C cancels in-flight
requests and prints a partial summary (exit 130).

Exit codes: 0 run completed, 1 run could not complete or no request succeeded (or more
than --max-failure-rate failed), 2 bad input (nothing sent), 130 interrupted.";

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
    /// Run the benchmark once per load value of one dimension, into a results
    /// directory, stopping at saturation (batchbench sweep --help).
    Sweep(Box<SweepCmd>),
    /// Describe a workload before running it: sessions, token shapes, arrivals,
    /// prefix sharing, cache hit rates; nothing is sent (batchbench analyze --help).
    Analyze(Box<AnalyzeCmd>),
    /// Find the highest load that meets the SLO (batchbench capacity --help).
    Capacity(Box<CapacityCmd>),
    /// Write one self-contained HTML report of results directories (runs, sweeps)
    ///
    /// A run's directory (--output-dir), a sweep's or a capacity search's;
    /// several overlay.
    ///
    /// Latency CDFs, time series, latency against prompt length, cached tokens
    /// per turn, a series' throughput, goodput and latency against load with
    /// its SLO, and each run's summary and spec. Nothing is re-run. Exit codes:
    /// 0 written, 1 it could not be written, 2 a directory is missing, from a
    /// newer format, incomplete or malformed (the message names the file).
    Report(crate::report::ReportArgs),
    /// Write one run's results directory as the llm-d Benchmark Report (v0.2.1, YAML)
    ///
    /// Exit codes: 0 written, 1 it could not be written, 2 the directory cannot
    /// be read (the message names the file).
    Export(crate::report::ExportArgs),
    /// Join the results directories of a run's shards (--shard I/N) into the
    /// one run's, exactly
    #[command(long_about = crate::merge::LONG_ABOUT)]
    Merge(crate::merge::MergeArgs),
    /// Compare two runs' results directories; with --fail-if, a gate for CI
    ///
    /// Every figure's change, a significance test on the per-request latencies,
    /// and --fail-if thresholds. Exit codes: 0 no threshold breached, 1 one
    /// was, 2 bad input (a directory or a threshold; the message names it).
    Compare(crate::report::CompareArgs),
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

/// `batchbench analyze`: its flags and a run's.
#[derive(Debug, Clone, Args)]
pub struct AnalyzeCmd {
    /// The analysis' flags.
    #[command(flatten)]
    pub analyze: crate::analyze::AnalyzeArgs,
    /// The run's flags.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// `batchbench sweep`: the series' flags and a run's.
#[derive(Debug, Clone, Args)]
pub struct SweepCmd {
    /// The sweep's flags.
    #[command(flatten)]
    pub sweep: series::SweepArgs,
    /// The run's flags.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// `batchbench capacity`: the search's flags and a run's.
#[derive(Debug, Clone, Args)]
pub struct CapacityCmd {
    /// The search's flags.
    #[command(flatten)]
    pub capacity: series::CapacityArgs,
    /// The run's flags.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// The flags of a benchmark run.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Target and protocol flags shared with `batchbench-agent`.
    #[command(flatten)]
    pub target: TargetArgs,

    /// Concurrent users.
    #[arg(long, default_value = "1", value_parser = flags::positive, help_heading = "Workload")]
    pub users: u64,
    /// Requests each user sends, one after another.
    #[arg(long, default_value = "1", value_parser = flags::non_negative, help_heading = "Workload")]
    pub requests_per_user: u64,
    /// Prompt content length in tokens (0: off, a short fixed prompt).
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Workload")]
    pub input_tokens: u64,
    /// Uniform +/- variation of the prompt length.
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Workload")]
    pub input_vary: u64,
    /// Prompts per request, each of --input-tokens (openai_embeddings sends them as
    /// one request's inputs).
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=65_536), help_heading = "Workload")]
    pub batch_size: u32,
    /// Fraction of each prompt shared as a common prefix across prompts (0.0-1.0).
    #[arg(long, default_value = "0.0", value_parser = flags::finite, help_heading = "Workload")]
    pub input_prefix_overlap: f64,
    /// Log-normal prompt length: mu of the underlying normal.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub input_lognorm_mu: Option<f64>,
    /// Log-normal prompt length: median (preferred over mu).
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub input_lognorm_median: Option<f64>,
    /// Log-normal prompt length: sigma (required with mu or median).
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub input_lognorm_sigma: Option<f64>,
    /// Log-normal prompt length: upper bound.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub input_lognorm_max: Option<f64>,
    /// Exact output length (sent as min and max tokens).
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub output_tokens: Option<u64>,
    /// Uniform +/- variation of the output length.
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Workload")]
    pub output_vary: u64,
    /// Log-normal output length: mu.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub output_lognorm_mu: Option<f64>,
    /// Log-normal output length: median.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub output_lognorm_median: Option<f64>,
    /// Log-normal output length: sigma.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub output_lognorm_sigma: Option<f64>,
    /// Log-normal output length: upper bound.
    #[arg(long, value_parser = flags::finite, help_heading = "Workload")]
    pub output_lognorm_max: Option<f64>,
    /// Seed for reproducible sampling and text (random when absent; reported).
    #[arg(long, help_heading = "Workload")]
    pub seed: Option<u64>,

    /// Release requests at this many per second (open loop), whatever is in
    /// flight, instead of each user's next request after its previous reply.
    /// The requests and their bodies stay the same.
    #[arg(long, value_parser = flags::positive_number, value_name = "PER_SECOND", help_heading = "Load")]
    pub request_rate: Option<f64>,
    /// Arrival process, concurrency cap, warmup and duration.
    #[command(flatten)]
    pub load: LoadArgs,

    /// Shards and a coordinated start.
    #[command(flatten)]
    pub shard: flags::ShardArgs,

    /// External plugins.
    #[command(flatten)]
    pub plugins: PluginArgs,

    /// Output flags shared with `batchbench-agent`.
    #[command(flatten)]
    pub output: OutputArgs,

    /// `--config` and `--print-config`.
    #[command(flatten)]
    pub config: ConfigArgs,
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

/// Resolves a command line (program name first) into the run spec it
/// describes: what `--print-config` prints.
pub fn resolve_args<I, T>(args: I) -> Result<RunSpec, Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let (cli, m) = super::parse::<Cli, _, _>(args).map_err(|e| super::bad_args(&e))?;
    super::spec_of(&cli.bench, m)
}

/// Every long flag and whether it takes a value: for hosts that build argument
/// lists (the Python package checks option names against it).
pub fn flags() -> Vec<(String, bool)> {
    flags::long_flags::<Cli>()
}

/// Every long flag of `batchbench sweep` or `batchbench capacity`.
pub fn series_flags(kind: series::Kind) -> Vec<(String, bool)> {
    series::long_flags(&FRONT, kind)
}

/// Every long flag of `analyze`.
pub fn analyze_flags() -> Vec<(String, bool)> {
    crate::analyze::long_flags(&FRONT)
}

/// What `sweep` and `capacity` vary: users (closed loop), the concurrency
/// cap, or the request rate (open loop).
pub const DIMENSIONS: &[series::Dimension] = &[
    series::Dimension {
        name: "request-rate",
        unit: "req/s",
        whole: false,
    },
    series::Dimension {
        name: "users",
        unit: "users",
        whole: true,
    },
    series::Dimension {
        name: "max-concurrency",
        unit: "requests",
        whole: true,
    },
];

fn series_command() -> clap::Command {
    BenchArgs::augment_args(clap::Command::new("batchbench")).allow_negative_numbers(true)
}

/// `batchbench` as a series sees it.
pub const FRONT: series::Front = series::Front {
    program: "batchbench",
    command: series_command,
    resolve: resolve_args::<Vec<OsString>, OsString>,
    profile: &PROFILE,
    dimensions: DIMENSIONS,
};

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
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(kind) = series::Kind::of(args.get(1)) {
        return series::main(&FRONT, kind, &args[2..], cancel);
    }
    if args.get(1).is_some_and(|a| a == "analyze") {
        return crate::analyze::main(&FRONT, &args[2..]);
    }
    let (cli, matches) = match super::parse::<Cli, _, _>(args) {
        Ok(p) => p,
        Err(e) => return exit::clap_exit("batchbench", &e),
    };
    match cli.command {
        Some(Command::Plugins { json, plugins: p }) => match crate::plugins::load_plugins(&p) {
            Ok(()) => plugins(json),
            Err(f) => exit::exit_code("batchbench plugins", Err(f)),
        },
        Some(Command::ExportPlans(a)) => export_plans(&a, cancel),
        Some(Command::Report(a)) => exit::exit_code("batchbench report", crate::report::main(&a)),
        Some(Command::Export(a)) => exit::exit_code("batchbench export", crate::report::export(&a)),
        Some(Command::Merge(a)) => crate::merge::main(FRONT.profile, &a),
        Some(Command::Compare(a)) => {
            exit::exit_code("batchbench compare", crate::report::compare(&a))
        }
        // Handled above when they come first, as they must.
        Some(Command::Sweep(_) | Command::Capacity(_) | Command::Analyze(_)) => {
            eprintln!("batchbench: give sweep, capacity or analyze first, before any flag");
            exit::EXIT_BAD_INPUT
        }
        None => exit::exit_code("batchbench", super::launch(&cli.bench, matches, cancel)),
    }
}

fn export_plans(a: &batchbench_clickhouse::ExportArgs, cancel: Option<CancellationToken>) -> i32 {
    use batchbench_clickhouse::ExportError;
    let Some(output) = a.output.as_deref() else {
        eprintln!("batchbench export-plans: --output PATH is required");
        return crate::exit::EXIT_BAD_INPUT;
    };
    // Ctrl+C (or the host's cancellation) removes the temporary files and exits
    // 130: an export has no partial result, and nothing may be left half-written.
    // The export starts only once the SIGINT handler is registered, so a
    // Ctrl+C at any moment of it is an interruption, never a kill.
    let done = CancellationToken::new();
    let (ready, registered) = std::sync::mpsc::channel();
    let watcher = {
        let (done, temps) = (done.clone(), batchbench_clickhouse::temp_files(a, output));
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                let _ = ready.send(());
                return;
            };
            let interrupted = rt.block_on(async {
                match cancel {
                    Some(c) => {
                        let _ = ready.send(());
                        tokio::select! {
                            () = c.cancelled() => true,
                            () = done.cancelled() => false,
                        }
                    }
                    None => {
                        let mut interrupts = crate::exit::interrupts();
                        let _ = ready.send(());
                        tokio::select! {
                            r = interrupts.recv() => r,
                            () = done.cancelled() => false,
                        }
                    }
                }
            });
            if interrupted {
                for t in temps {
                    let _ = std::fs::remove_file(t);
                }
                eprintln!("\ninterrupted: the export was stopped; nothing was written");
                std::process::exit(crate::exit::EXIT_INTERRUPTED);
            }
        })
    };
    let _ = registered.recv();
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
            crate::exit::EXIT_OK
        }
        Err(ExportError::BadInput(m)) => {
            eprintln!("batchbench export-plans: {m}");
            crate::exit::EXIT_BAD_INPUT
        }
        Err(ExportError::Failed(m)) => {
            eprintln!("batchbench export-plans: {m}");
            crate::exit::EXIT_FAILED
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
    crate::exit::EXIT_OK
}

/// The CSV columns `batchbench` promises: the legacy ones existing notebooks
/// read, in order, then our additions. Each is a field of the run record. The
/// load model's columns follow (see [`PROFILE`]).
pub const COLUMNS: &[&str] = &[
    "timestamp",
    "model",
    "dataset_path",
    "dataset_size",
    "users",
    "requests_per_user",
    "total_requests",
    "successful_requests",
    "failed_requests",
    "total_prompt_tokens",
    "total_completion_tokens",
    "total_duration_seconds",
    "requests_per_second",
    "prompt_tokens_per_second",
    "completion_tokens_per_second",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "output_tokens",
    "output_vary",
    "output_lognorm_mu",
    "output_lognorm_sigma",
    "output_lognorm_max",
    "sglang",
    "request_timeout_secs",
    "max_retries",
    "retry_delay_ms",
    "host",
    "endpoint",
    // Additions.
    "retries",
    "interrupted",
    "seed",
    "tokenizer_model",
    "input_tokens",
    "input_vary",
    "input_prefix_overlap",
    "input_lognorm_mu",
    "input_lognorm_sigma",
    "input_lognorm_max",
    "ignore_eos",
    "stream",
    "failures_by_kind",
    "server_cached_tokens",
    "planned_prompt_tokens",
    "counted_prompt_tokens",
    "worst_prompt_drift_tokens",
    "latency_mean_ms",
    "latency_max_ms",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
];

/// The flat configuration view (`run.config`): the flags under the names the
/// CSV columns and existing notebooks read.
#[derive(Debug, Serialize)]
struct View<'a> {
    host: &'a str,
    endpoint: &'a str,
    tokenizer_model: &'a str,
    sglang: bool,
    ignore_eos: bool,
    stream: bool,
    request_timeout_secs: serde_json::Value,
    max_retries: u32,
    retry_delay_ms: u64,
    dataset_path: &'static str,
    dataset_size: &'static str,
    users: u64,
    requests_per_user: u64,
    output_tokens: Option<u64>,
    output_vary: u64,
    output_lognorm_mu: Option<f64>,
    output_lognorm_sigma: Option<f64>,
    output_lognorm_max: Option<u64>,
    input_tokens: u64,
    input_vary: u64,
    input_prefix_overlap: f64,
    input_lognorm_mu: Option<f64>,
    input_lognorm_sigma: Option<f64>,
    input_lognorm_max: Option<u64>,
    request_rate: Option<f64>,
    #[serde(flatten)]
    load: LoadView,
    workload: Option<&'a str>,
    workload_config: Option<&'a serde_json::Value>,
    plugins: PluginsView<'a>,
}

/// A length as the legacy columns show it: `(fixed value, vary, mu, sigma, max)`.
type Columns = (Option<u64>, u64, Option<f64>, Option<f64>, Option<u64>);

fn length_columns(d: Option<LengthDist>) -> Columns {
    match d {
        Some(LengthDist::Fixed { value, vary }) => (Some(value), vary, None, None, None),
        Some(LengthDist::LogNormal { mu, sigma, max }) => (None, 0, Some(mu), Some(sigma), max),
        None => (None, 0, None, None, None),
    }
}

/// A number as a flag gave it: whole numbers without a fraction.
pub(crate) fn whole(x: f64) -> serde_json::Value {
    if x.fract() == 0.0 && (0.0..9.0e15).contains(&x) {
        serde_json::Value::from(x as u64)
    } else {
        serde_json::Value::from(x)
    }
}

fn view(spec: &RunSpec, _info: &WorkloadInfo) -> serde_json::Value {
    let t = &spec.target;
    let chat = flags::chat_options(spec);
    let batch = (spec.workload.name == FINITE_BATCH)
        .then(|| spec.workload.config_as::<FiniteBatchConfig>().ok())
        .flatten();
    let plugin = batch.is_none();
    let (users, rpu, input, output, overlap) = match &batch {
        Some(c) => (
            c.users,
            c.requests_per_user,
            c.input,
            c.output,
            c.prefix_overlap,
        ),
        None => (spec.admission.max_active.unwrap_or(1), 1, None, None, 0.0),
    };
    let (out_fixed, out_vary, out_mu, out_sigma, out_max) = length_columns(output);
    let (in_fixed, in_vary, in_mu, in_sigma, in_max) = length_columns(input);
    let v = View {
        host: &t.host,
        endpoint: &t.endpoint,
        tokenizer_model: t.tokenizer(),
        sglang: chat.sglang,
        ignore_eos: chat.ignore_eos,
        stream: t.stream,
        request_timeout_secs: whole(t.request_timeout_secs),
        max_retries: t.max_retries,
        retry_delay_ms: t.retry_delay_ms,
        dataset_path: "",
        dataset_size: "",
        users,
        requests_per_user: rpu,
        output_tokens: out_fixed,
        output_vary: out_vary,
        output_lognorm_mu: out_mu,
        output_lognorm_sigma: out_sigma,
        output_lognorm_max: out_max,
        input_tokens: in_fixed.unwrap_or(0),
        input_vary: in_vary,
        input_prefix_overlap: overlap,
        input_lognorm_mu: in_mu,
        input_lognorm_sigma: in_sigma,
        input_lognorm_max: in_max,
        request_rate: spec.load.rate,
        load: LoadView::of(spec),
        workload: plugin.then_some(spec.workload.name.as_str()),
        workload_config: plugin.then_some(&spec.workload.config),
        plugins: PluginsView::of(spec, &[]),
    };
    serde_json::to_value(v).unwrap_or_default()
}

fn dry_run_line(s: &DryRunStats) -> String {
    format!(
        "dry run: {} users, {} requests, {} planned prompt tokens, {} planned output tokens; nothing sent",
        s.trajectories, s.requests, s.prompt_tokens, s.output_tokens
    )
}

/// How `batchbench` runs report.
pub const PROFILE: Profile = Profile {
    command: "batchbench",
    csv_columns: &[
        COLUMNS,
        &["request_rate"],
        flags::LOAD_COLUMNS,
        flags::SLO_COLUMNS,
        flags::CACHE_COLUMNS,
        flags::TRUTH_COLUMNS,
    ],
    view,
    dry_run_line,
};

const FINITE_BATCH: &str = "finite_batch";

/// The default spec of `batchbench`: one user sending one request.
pub fn default_spec() -> RunSpec {
    let cfg = FiniteBatchConfig {
        users: 1,
        requests_per_user: 1,
        input: None,
        output: None,
        prefix_overlap: 0.0,
        batch_size: 1,
    };
    RunSpec::new(
        PluginSpec::typed(FINITE_BATCH, &cfg)
            .unwrap_or_else(|_| PluginSpec::new(FINITE_BATCH, serde_json::Value::Null)),
    )
}

/// The validated lengths of the synthetic flags.
#[derive(Debug)]
struct Lengths {
    input: Option<LengthDist>,
    output: Option<LengthDist>,
}

fn validate(a: &BenchArgs) -> Result<Lengths, Failure> {
    if !(0.0..=1.0).contains(&a.input_prefix_overlap) {
        return Err(Failure::bad(format!(
            "--input-prefix-overlap must be between 0.0 and 1.0, got {}",
            a.input_prefix_overlap
        )));
    }
    let input = flags::length(
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
        return Err(Failure::bad("--output-tokens must be at least 1"));
    }
    let output = flags::length(
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
        return Err(Failure::bad(
            "--input-prefix-overlap needs --input-tokens or the --input-lognorm-* family",
        ));
    }
    if a.batch_size > 1 && (input.is_none() || a.input_prefix_overlap > 0.0) {
        return Err(Failure::bad(
            "--batch-size above 1 needs --input-tokens (or the --input-lognorm-* family) and no --input-prefix-overlap",
        ));
    }
    Ok(Lengths { input, output })
}

const INPUT_FLAGS: &[&str] = &[
    "input_tokens",
    "input_vary",
    "input_lognorm_mu",
    "input_lognorm_median",
    "input_lognorm_sigma",
    "input_lognorm_max",
];
const OUTPUT_FLAGS: &[&str] = &[
    "output_tokens",
    "output_vary",
    "output_lognorm_mu",
    "output_lognorm_median",
    "output_lognorm_sigma",
    "output_lognorm_max",
];

/// Resolves the flags (over the `--config` file, when given) into the run spec.
pub fn resolve(a: &BenchArgs, g: &Given) -> Result<RunSpec, Failure> {
    let lengths = validate(a)?;
    let mut spec = match &a.config.config {
        Some(path) => crate::config::load(path)?,
        None => default_spec(),
    };
    a.target.apply(&mut spec, g)?;
    a.output.apply(&mut spec);
    if let Some(seed) = a.seed {
        spec.seed = Some(seed);
    }
    a.shard.apply(&mut spec)?;
    if let Some(w) = a.plugins.workload()? {
        let synthetic = [
            ("--requests-per-user", a.requests_per_user != 1),
            ("--input-tokens", lengths.input.is_some()),
            ("--output-tokens", lengths.output.is_some()),
            ("--input-prefix-overlap", a.input_prefix_overlap != 0.0),
            ("--batch-size", a.batch_size != 1),
        ];
        if let Some((flag, _)) = synthetic.iter().find(|(_, given)| *given) {
            return Err(Failure::bad(format!(
                "--workload {} replaces the synthetic users: drop {flag}",
                w.name
            )));
        }
        spec.workload = w;
        if g.has("users") {
            spec.admission.max_active = Some(a.users);
        }
    } else if spec.workload.name == FINITE_BATCH {
        let mut c: FiniteBatchConfig = spec
            .workload
            .config_as()
            .map_err(|e| Failure::bad(format!("workload: {e}")))?;
        if g.has("users") {
            c.users = a.users;
        }
        if g.has("requests_per_user") {
            c.requests_per_user = a.requests_per_user;
        }
        // A length family given on the command line replaces the file's.
        if INPUT_FLAGS.iter().any(|f| g.has(f)) {
            c.input = lengths.input;
        }
        if OUTPUT_FLAGS.iter().any(|f| g.has(f)) {
            c.output = lengths.output;
        }
        if g.has("input_prefix_overlap") {
            c.prefix_overlap = a.input_prefix_overlap;
        }
        if g.has("batch_size") {
            c.batch_size = a.batch_size;
        }
        spec.workload = PluginSpec::typed(FINITE_BATCH, &c).map_err(Failure::failed_msg)?;
    } else {
        // A plugin workload from the file: --users is its concurrency, as with
        // --workload on the command line; the shape flags do not apply.
        if g.explicit("users") {
            spec.admission.max_active = Some(a.users);
        }
        let shape = ["requests_per_user", "input_prefix_overlap", "batch_size"]
            .iter()
            .chain(INPUT_FLAGS)
            .chain(OUTPUT_FLAGS)
            .find(|f| g.explicit(f));
        if let Some(f) = shape {
            return Err(Failure::bad(format!(
                "--{} shapes the {FINITE_BATCH} workload, and the config file's workload is {}",
                f.replace('_', "-"),
                spec.workload.name
            )));
        }
    }
    a.plugins.apply(&mut spec)?;
    a.load.apply(
        &mut spec,
        a.request_rate,
        "--request-rate",
        Release::Requests,
    )?;
    if spec.load.duration_secs.is_some() && g.explicit("requests_per_user") {
        return Err(Failure::bad(
            "--duration-secs and --requests-per-user: give one (a duration run sends requests until its deadline)",
        ));
    }
    Ok(spec)
}

impl super::Front for BenchArgs {
    const PROFILE: Profile = PROFILE;

    fn config(&self) -> &ConfigArgs {
        &self.config
    }

    fn target(&self) -> &TargetArgs {
        &self.target
    }

    fn resolve(&self, g: &Given) -> Result<RunSpec, Failure> {
        resolve(self, g)
    }
}
