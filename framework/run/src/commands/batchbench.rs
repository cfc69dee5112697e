//! The `batchbench` command: `users` concurrent users, each sending
//! `requests-per-user` independent requests, against a server or the built-in
//! simulator (`--host sim://`). Its flags resolve into a [`RunSpec`] of the
//! `finite_batch` workload (or the `--workload` plugin's); its CSV columns and
//! flat configuration view are the ones existing notebooks read.

use crate::assemble::Profile;
use crate::exit::Failure;
use crate::flags::{
    self, CommonArgs, Given, InputLogNormal, OutputLogNormal, PluginsView, TargetArgs,
};
use crate::series;
use crate::view::{self, LoadView, flat_view};
use batchbench_contract::dist::LengthDist;
use batchbench_contract::plugin::WorkloadInfo;
use batchbench_contract::spec::{PluginSpec, Release, RunSpec};
use batchbench_engine::run::DryRunStats;
use batchbench_plugins::workloads::finite_batch::FiniteBatchConfig;
use clap::Args;

/// The `--help` summary of `batchbench`.
pub const ABOUT: &str = "Benchmark LLM-serving systems under concurrent load";

/// The `--help` text of `batchbench`.
pub const LONG_ABOUT: &str = "\
Benchmark an OpenAI-compatible LLM server with many concurrent users.

Each of --users users sends --requests-per-user requests one after another; users run
concurrently. Prompt and output lengths are exact: prompts are synthesised to re-encode
to exactly the requested token count with the model's tokenizer.

Use --host sim:// to run against the built-in simulator (options as a query, for
example sim://?fault-rate=0.5&decode-ms-per-token=5). Ctrl+C cancels in-flight
requests and prints a partial summary (exit 130).

Exit codes: 0 run completed, 1 run could not complete or no request succeeded (or more
than --max-failure-rate failed), 2 bad input (nothing sent), 130 interrupted.";

/// `batchbench`'s own run flags (beside the target's and the shared ones).
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
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
    /// Uniform +/- variation of --batch-size, drawn per request (a reranker's
    /// documents: from --batch-size minus this to plus this); below --batch-size.
    #[arg(long, default_value = "0", value_name = "PROMPTS", value_parser = clap::value_parser!(u32).range(0..65_536), help_heading = "Workload")]
    pub batch_vary: u32,
    /// A query of this many exact tokens before the --batch-size prompts
    /// (a reranker's query; the prompts are its documents: --codec rerank).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Workload")]
    pub query_tokens: Option<u32>,
    /// Fraction of each prompt shared as a common prefix across prompts (0.0-1.0).
    #[arg(long, default_value = "0.0", value_parser = flags::finite, help_heading = "Workload")]
    pub input_prefix_overlap: f64,
    /// `--input-lognorm-*`.
    #[command(flatten, next_help_heading = "Workload")]
    pub input_lognorm: InputLogNormal,
    /// Exact output length (sent as min and max tokens).
    #[arg(long, value_parser = flags::non_negative, help_heading = "Workload")]
    pub output_tokens: Option<u64>,
    /// Uniform +/- variation of the output length.
    #[arg(long, default_value = "0", value_parser = flags::non_negative, help_heading = "Workload")]
    pub output_vary: u64,
    /// `--output-lognorm-*`.
    #[command(flatten, next_help_heading = "Workload")]
    pub output_lognorm: OutputLogNormal,
    /// Release requests at this many per second (open loop), whatever is in
    /// flight, instead of each user's next request after its previous reply.
    /// The requests and their bodies stay the same.
    #[arg(long, value_parser = flags::positive_number, value_name = "PER_SECOND", help_heading = "Load")]
    pub request_rate: Option<f64>,
}

/// What `sweep` and `capacity` vary: users (closed loop), the concurrency
/// cap, or the request rate (open loop).
pub const DIMENSIONS: &[series::Dimension] = &[
    series::Dimension::new("request-rate", "req/s", false),
    series::Dimension::new("users", "users", true),
    series::Dimension::new("max-concurrency", "requests", true),
];

front!(BenchArgs);

flat_view! {
    /// The flat configuration view (`run.config`): the flags under the names
    /// existing notebooks read. Its columns: the legacy ones, in order, then
    /// our additions.
    struct View<'a>;
    record timestamp, model;
    column dataset_path: &'static str;
    column dataset_size: &'static str;
    column users: u64;
    column requests_per_user: u64;
    record total_requests, successful_requests, failed_requests, total_prompt_tokens,
        total_completion_tokens, total_duration_seconds, requests_per_second,
        prompt_tokens_per_second, completion_tokens_per_second, latency_p50_ms,
        latency_p90_ms, latency_p99_ms;
    column output_tokens: Option<u64>;
    column output_vary: u64;
    column output_lognorm_mu: Option<f64>;
    column output_lognorm_sigma: Option<f64>;
    column output_lognorm_max: Option<u64>;
    column sglang: bool;
    column request_timeout_secs: serde_json::Value;
    column max_retries: u32;
    column retry_delay_ms: u64;
    column host: &'a str;
    column endpoint: &'a str;
    // Additions.
    record retries, interrupted, seed;
    column tokenizer_model: &'a str;
    column input_tokens: u64;
    column input_vary: u64;
    column input_prefix_overlap: f64;
    column input_lognorm_mu: Option<f64>;
    column input_lognorm_sigma: Option<f64>;
    column input_lognorm_max: Option<u64>;
    column ignore_eos: bool;
    column stream: bool;
    record failures_by_kind, server_cached_tokens;
    group view::FIGURE_COLUMNS;
    column request_rate: Option<f64>;
    flatten load: LoadView;
    group view::OUTCOME_COLUMNS;
    hidden workload: Option<&'a str>;
    hidden workload_config: Option<&'a serde_json::Value>;
    hidden plugins: PluginsView<'a>;
}

/// How `batchbench` runs report.
pub const PROFILE: Profile = Profile {
    command: "batchbench",
    csv_columns: View::COLUMNS,
    view,
    dry_run_line,
};

/// A length as the legacy columns show it: `(fixed value, vary, mu, sigma, max)`.
type Columns = (Option<u64>, u64, Option<f64>, Option<f64>, Option<u64>);

fn length_columns(d: Option<LengthDist>) -> Columns {
    match d {
        Some(LengthDist::Fixed { value, vary }) => (Some(value), vary, None, None, None),
        Some(LengthDist::LogNormal { mu, sigma, max }) => (None, 0, Some(mu), Some(sigma), max),
        None => (None, 0, None, None, None),
    }
}

fn view(spec: &RunSpec, _info: &WorkloadInfo) -> serde_json::Value {
    let t = &spec.target;
    let hosts = t.host.to_string();
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
    view::json(View {
        dataset_path: "",
        dataset_size: "",
        users,
        requests_per_user: rpu,
        output_tokens: out_fixed,
        output_vary: out_vary,
        output_lognorm_mu: out_mu,
        output_lognorm_sigma: out_sigma,
        output_lognorm_max: out_max,
        sglang: chat.sglang,
        request_timeout_secs: view::whole(t.request_timeout_secs),
        max_retries: t.max_retries,
        retry_delay_ms: t.retry_delay_ms,
        host: &hosts,
        endpoint: &t.endpoint,
        tokenizer_model: t.tokenizer(),
        input_tokens: in_fixed.unwrap_or(0),
        input_vary: in_vary,
        input_prefix_overlap: overlap,
        input_lognorm_mu: in_mu,
        input_lognorm_sigma: in_sigma,
        input_lognorm_max: in_max,
        ignore_eos: chat.ignore_eos,
        stream: t.stream,
        request_rate: spec.load.rate,
        load: LoadView::of(spec),
        workload: plugin.then_some(spec.workload.name.as_str()),
        workload_config: plugin.then_some(&spec.workload.config),
        plugins: PluginsView::of(spec, &[]),
    })
}

fn dry_run_line(s: &DryRunStats) -> String {
    format!(
        "dry run: {} users, {} requests, {} planned prompt tokens, {} planned output tokens; nothing sent",
        s.trajectories, s.requests, s.prompt_tokens, s.output_tokens
    )
}

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
        batch_vary: 0,
        query_tokens: None,
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
        a.input_lognorm.flags(),
    )?;
    if a.output_tokens == Some(0) {
        return Err(Failure::bad("--output-tokens must be at least 1"));
    }
    let output = flags::length(
        "output",
        a.output_tokens,
        a.output_vary,
        a.output_lognorm.flags(),
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
    if a.batch_vary >= a.batch_size && a.batch_vary > 0 {
        return Err(Failure::bad(format!(
            "--batch-vary {} must be below --batch-size {} (every request has one prompt at least)",
            a.batch_vary, a.batch_size
        )));
    }
    if u64::from(a.batch_size) + u64::from(a.batch_vary) > 65_536 {
        return Err(Failure::bad(
            "--batch-size plus --batch-vary must be at most 65536 prompts per request",
        ));
    }
    if a.query_tokens.is_some() && (input.is_none() || a.input_prefix_overlap > 0.0) {
        return Err(Failure::bad(
            "--query-tokens needs --input-tokens (the documents' length) and no --input-prefix-overlap",
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
pub fn resolve(
    a: &BenchArgs,
    target: &TargetArgs,
    c: &CommonArgs,
    g: &Given,
) -> Result<RunSpec, Failure> {
    let lengths = validate(a)?;
    let mut spec = c.base(target, || Ok(default_spec()), g)?;
    if let Some(w) = c.plugins.workload()? {
        let synthetic = [
            ("--requests-per-user", a.requests_per_user != 1),
            ("--input-tokens", lengths.input.is_some()),
            ("--output-tokens", lengths.output.is_some()),
            ("--input-prefix-overlap", a.input_prefix_overlap != 0.0),
            ("--batch-size", a.batch_size != 1),
            ("--batch-vary", a.batch_vary != 0),
            ("--query-tokens", a.query_tokens.is_some()),
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
        if g.has("batch_vary") {
            c.batch_vary = a.batch_vary;
        }
        if g.has("query_tokens") {
            c.query_tokens = a.query_tokens;
        }
        spec.workload = PluginSpec::typed(FINITE_BATCH, &c).map_err(Failure::failed_msg)?;
    } else {
        // A plugin workload from the file: --users is its concurrency, as with
        // --workload on the command line; the shape flags do not apply.
        if g.explicit("users") {
            spec.admission.max_active = Some(a.users);
        }
        let shape = [
            "requests_per_user",
            "input_prefix_overlap",
            "batch_size",
            "batch_vary",
            "query_tokens",
        ]
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
    c.plugins.apply(&mut spec)?;
    c.load.apply(
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
