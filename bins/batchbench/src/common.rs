//! What every batchbench command shares: target resolution (including the
//! in-process simulator), tokenizer loading, Ctrl+C, progress, exit codes.

use batchbench_core::plugin::{PluginError, Reporter, RequestRecord};
use batchbench_core::tokens::TokenizerHandle;
use batchbench_sim::{Sim, SimConfig};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit code of a run that completed.
pub const EXIT_OK: i32 = 0;
/// Exit code of a run that could not complete.
pub const EXIT_FAILED: i32 = 1;
/// Exit code of bad input (nothing was sent).
pub const EXIT_BAD_INPUT: i32 = 2;
/// Exit code after Ctrl+C (a partial summary was printed).
pub const EXIT_INTERRUPTED: i32 = 130;

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// The error.
    pub error: anyhow::Error,
}

impl Failure {
    /// Bad input: exit 2.
    pub fn bad_input(e: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_BAD_INPUT,
            error: e.into(),
        }
    }

    /// A run that could not complete: exit 1.
    pub fn failed(e: impl Into<anyhow::Error>) -> Self {
        Self {
            code: EXIT_FAILED,
            error: e.into(),
        }
    }
}

/// Maps a plugin error to its exit code.
pub fn plugin_failure(e: PluginError) -> Failure {
    match e {
        PluginError::Config { .. } | PluginError::Plan(_) | PluginError::Unknown { .. } => {
            Failure::bad_input(e)
        }
        _ => Failure::failed(e),
    }
}

/// Every long flag of a command line and whether it takes a value: for hosts that
/// build argument lists (the Python package checks option names against it).
pub fn long_flags<C: clap::CommandFactory>() -> Vec<(String, bool)> {
    C::command()
        .get_arguments()
        .filter_map(|a| {
            a.get_long()
                .map(|l| (l.to_owned(), a.get_action().takes_values()))
        })
        .collect()
}

/// The exit code of a run, printing a failure as `prog: message`.
pub fn exit_code(prog: &str, result: Result<i32, Failure>) -> i32 {
    match result {
        Ok(code) => code,
        Err(f) => {
            eprintln!("{prog}: {:#}", f.error);
            f.code
        }
    }
}

/// Prints a clap error the way every batchbench error is printed: one line naming
/// the flag (help and version go to stdout unchanged).
pub fn clap_exit(prog: &str, e: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            EXIT_OK
        }
        _ => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("{prog}: {first}");
            EXIT_BAD_INPUT
        }
    }
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

/// Parses a finite float.
pub fn finite(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("'{s}' is not a finite number")),
    }
}

/// A resolved target: the URL to send to, and the simulator when `sim://`.
#[derive(Debug)]
pub struct Target {
    /// Base URL (the simulator's when in process).
    pub host: String,
    /// The in-process simulator, if any.
    pub sim: Option<Sim>,
}

/// Whether `host` asks for the in-process simulator.
pub fn is_sim(host: &str) -> bool {
    host.starts_with("sim://") || host == "sim:"
}

/// The simulator config of a `sim://?k=v` host.
pub fn sim_config(host: &str) -> Result<SimConfig, String> {
    let rest = host.trim_start_matches("sim:").trim_start_matches("//");
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let cfg = SimConfig::from_query(query)?;
    cfg.validate().map_err(|e| format!("sim:// option: {e}"))?;
    Ok(cfg)
}

/// Starts the in-process simulator when the host is `sim://`.
pub async fn resolve_target(
    host: &str,
    sim_cfg: Option<SimConfig>,
    tok: Option<Arc<TokenizerHandle>>,
) -> Result<Target, Failure> {
    let Some(cfg) = sim_cfg else {
        return Ok(Target {
            host: host.to_owned(),
            sim: None,
        });
    };
    let tok = tok.ok_or_else(|| {
        Failure::bad_input(anyhow::anyhow!(
            "--host sim:// needs a tokenizer (--tokenizer-model)"
        ))
    })?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let sim = Sim::start(cfg, tok, addr)
        .await
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the simulator: {e}")))?;
    Ok(Target {
        host: sim.url(),
        sim: Some(sim),
    })
}

impl TargetArgs {
    /// Loads the run's tokenizer (`--tokenizer-model`, else `--model`).
    pub async fn load_tokenizer(&self) -> Result<Arc<TokenizerHandle>, Failure> {
        let flag = if self.tokenizer_model.is_some() {
            "--tokenizer-model"
        } else {
            "--model (as tokenizer; pass --tokenizer-model)"
        };
        load_tokenizer(self.tokenizer_spec(), flag).await
    }
}

/// Loads the run's tokenizer, as bad input when it cannot be read.
pub async fn load_tokenizer(spec: &str, flag: &str) -> Result<Arc<TokenizerHandle>, Failure> {
    batchbench_core::tokens::load(spec)
        .await
        .map_err(|e| Failure::bad_input(anyhow::anyhow!("{flag}: {e}")))
}

/// Cancels `token` on the first Ctrl+C; a second Ctrl+C exits at once.
pub fn cancel_on_ctrl_c(token: CancellationToken) {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupted: cancelling in-flight requests (Ctrl+C again to quit now)");
            token.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(EXIT_INTERRUPTED);
            }
        }
    });
}

/// A seed for runs that did not give one (recorded in the report).
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    batchbench_core::rng::mix64(t ^ u64::from(std::process::id()).rotate_left(32))
}

/// The API key: the flag, else the variable named by `--api-key-env`.
pub fn api_key(flag: Option<String>, env_name: &str) -> Option<String> {
    flag.or_else(|| std::env::var(env_name).ok())
        .filter(|k| !k.is_empty())
}

/// A progress bar on stderr, redrawn at most four times a second, hidden when
/// stderr is not a terminal or with `--quiet`.
pub struct Progress {
    bar: ProgressBar,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}

impl Progress {
    /// A bar for `total` requests (unknown: a spinner).
    pub fn new(total: Option<u64>, quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr_with_hz(4)
        };
        let bar = match total {
            Some(n) => ProgressBar::with_draw_target(Some(n), target),
            None => ProgressBar::with_draw_target(None, target),
        };
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} requests ({per_sec}) {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self { bar }
    }
}

impl Reporter for Progress {
    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        self.bar.inc(1);
        if rec.failure.is_some() {
            self.bar.set_message("(failures: see summary)");
        }
        Ok(())
    }

    fn on_finish(
        &mut self,
        _run: &batchbench_core::engine::RunInfo,
        _s: &batchbench_core::metrics::Summary,
    ) -> Result<(), PluginError> {
        self.bar.finish_and_clear();
        Ok(())
    }
}

/// Target and protocol flags, shared by `batchbench` and `batchbench-agent`.
#[derive(Debug, Clone, clap::Args)]
pub struct TargetArgs {
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
    /// Tokenizer: a Hugging Face model id, a tokenizer.json, a directory holding one, or
    /// a .gguf model file (its embedded byte-level BPE tokenizer).
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
    #[arg(long, default_value = "2", value_parser = retries, help_heading = "Target")]
    pub max_retries: u64,
    /// Base delay of the exponential retry backoff, in milliseconds.
    #[arg(long, default_value = "250", value_parser = non_negative, help_heading = "Target")]
    pub retry_delay_ms: u64,

    /// Send min_new_tokens/max_new_tokens (SGLang) instead of min_tokens/max_tokens.
    #[arg(long, help_heading = "Protocol")]
    pub sglang: bool,
    /// Send "ignore_eos": true so outputs run to their length.
    #[arg(long, help_heading = "Protocol")]
    pub ignore_eos: bool,
    /// Stream responses (SSE); adds TTFT, inter-token latency and TPOT to the report.
    #[arg(long, help_heading = "Protocol")]
    pub stream: bool,
}

fn retries(s: &str) -> Result<u64, String> {
    let v = non_negative(s)?;
    if v > 100 {
        Err(format!("at most 100, got {v}"))
    } else {
        Ok(v)
    }
}

impl TargetArgs {
    /// The tokenizer spec: `--tokenizer-model`, else `--model`.
    pub fn tokenizer_spec(&self) -> &str {
        self.tokenizer_model.as_deref().unwrap_or(&self.model)
    }

    /// The simulator config when `--host sim://`.
    pub fn sim_config(&self) -> Result<Option<SimConfig>, Failure> {
        if is_sim(&self.host) {
            sim_config(&self.host)
                .map(Some)
                .map_err(|e| Failure::bad_input(anyhow::anyhow!("--host: {e}")))
        } else {
            Ok(None)
        }
    }

    /// The `openai_chat` codec config.
    pub fn codec_config(&self) -> serde_json::Value {
        serde_json::json!({ "sglang": self.sglang, "ignore_eos": self.ignore_eos })
    }

    /// These flags as report columns.
    pub fn config_json(&self) -> serde_json::Value {
        serde_json::json!({
            "host": self.host, "endpoint": self.endpoint, "tokenizer_model": self.tokenizer_spec(),
            "sglang": self.sglang, "ignore_eos": self.ignore_eos, "stream": self.stream,
            "request_timeout_secs": self.request_timeout_secs, "max_retries": self.max_retries,
            "retry_delay_ms": self.retry_delay_ms,
        })
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
    pub results_csv: Option<std::path::PathBuf>,
    /// Write the complete summary (and the run's configuration) as JSON to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub summary_json: Option<std::path::PathBuf>,
    /// Write one JSON line per request (outcome, latency, TTFT, planned vs
    /// server-counted prompt tokens, cached tokens) to this file.
    #[arg(long, value_name = "PATH", help_heading = "Output")]
    pub requests_jsonl: Option<std::path::PathBuf>,
    /// No progress bar.
    #[arg(short, long, help_heading = "Output")]
    pub quiet: bool,
}

impl OutputArgs {
    /// The console summary plus the file reporters these flags ask for.
    pub fn reporters(
        &self,
        csv_schema: &str,
        ctx: &batchbench_core::registry::BuildContext,
    ) -> Result<Vec<Box<dyn Reporter>>, Failure> {
        use batchbench_core::registry::reporter;
        let mut v =
            vec![reporter("console_summary", &serde_json::json!({}), ctx).map_err(plugin_failure)?];
        if let Some(path) = &self.summary_json {
            v.push(
                reporter("json_summary", &serde_json::json!({ "path": path }), ctx)
                    .map_err(plugin_failure)?,
            );
        }
        if let Some(path) = &self.requests_jsonl {
            v.push(
                reporter("requests_jsonl", &serde_json::json!({ "path": path }), ctx)
                    .map_err(plugin_failure)?,
            );
        }
        if let Some(path) = &self.results_csv {
            v.push(
                reporter(
                    "csv",
                    &serde_json::json!({ "path": path, "schema": csv_schema }),
                    ctx,
                )
                .map_err(plugin_failure)?,
            );
        }
        Ok(v)
    }
}

/// A length from a fixed flag (with variation) or a log-normal family; the two are
/// mutually exclusive. `family` is the flag stem (`input`, `output`, ...).
pub fn length(
    family: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: batchbench_core::dist::LogNormalFlags,
) -> Result<Option<batchbench_core::dist::LengthDist>, Failure> {
    length_with(family, "-tokens", "median", "max", fixed, vary, flags)
}

/// [`length`] with the family's own flag suffixes (`-ms`, `median-ms`, `max-ms`).
pub fn length_with(
    family: &str,
    fixed_suffix: &str,
    median: &str,
    max: &str,
    fixed: Option<u64>,
    vary: u64,
    flags: batchbench_core::dist::LogNormalFlags,
) -> Result<Option<batchbench_core::dist::LengthDist>, Failure> {
    use batchbench_core::dist::{LengthDist, lognormal_from_flags};
    let bad = |m: String| Failure::bad_input(anyhow::anyhow!(m));
    let ln =
        lognormal_from_flags(&format!("--{family}-lognorm"), median, max, flags).map_err(bad)?;
    match (fixed, ln) {
        (Some(_), Some(_)) => Err(bad(format!(
            "--{family}{fixed_suffix} and the --{family}-lognorm-* family are mutually exclusive"
        ))),
        (Some(v), None) => Ok(Some(LengthDist::Fixed { value: v, vary })),
        (None, ln) => {
            if vary > 0 {
                return Err(bad(format!(
                    "--{family}-vary needs --{family}{fixed_suffix}"
                )));
            }
            Ok(ln)
        }
    }
}

/// Maps an engine error to its exit code.
pub fn engine_failure(e: batchbench_core::engine::EngineError) -> Failure {
    if e.is_bad_input() {
        Failure::bad_input(e)
    } else {
        Failure::failed(e)
    }
}

/// The multi-threaded runtime of a run.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::failed(anyhow::anyhow!("cannot start the async runtime: {e}")))
}

/// What a run needs besides its plugins: the tokenizer, the target (and the
/// in-process simulator), the pooled transport, and Ctrl+C wiring.
#[derive(Debug)]
pub struct Session {
    /// The run's tokenizer, when needed.
    pub tokenizer: Option<Arc<TokenizerHandle>>,
    /// The shared transport.
    pub transport: batchbench_core::transport::Transport,
    target: Target,
    cancel: CancellationToken,
}

impl Session {
    /// Loads the tokenizer (when synthesis or the simulator needs it), starts the
    /// simulator for `sim://`, builds the transport pooled for `concurrency`.
    pub async fn open(
        t: &TargetArgs,
        sim_cfg: Option<SimConfig>,
        needs_tokens: bool,
        concurrency: usize,
        verbose: bool,
        cancel: Option<CancellationToken>,
    ) -> Result<Self, Failure> {
        let tokenizer = if needs_tokens || sim_cfg.is_some() {
            Some(t.load_tokenizer().await?)
        } else {
            None
        };
        Self::open_with(t, sim_cfg, tokenizer, concurrency, verbose, cancel).await
    }

    /// As [`Session::open`], with the tokenizer already loaded (or being loaded by
    /// `tokenizer`, a task started while the workload was read).
    pub async fn open_with(
        t: &TargetArgs,
        sim_cfg: Option<SimConfig>,
        tokenizer: Option<Arc<TokenizerHandle>>,
        concurrency: usize,
        verbose: bool,
        cancel: Option<CancellationToken>,
    ) -> Result<Self, Failure> {
        let target = resolve_target(&t.host, sim_cfg, tokenizer.clone()).await?;
        let transport =
            batchbench_core::transport::Transport::new(batchbench_core::transport::TargetConfig {
                url: batchbench_core::transport::join_url(&target.host, &t.endpoint),
                api_key: if target.sim.is_some() {
                    None
                } else {
                    api_key(t.api_key.clone(), &t.api_key_env)
                },
                timeout: std::time::Duration::from_secs(t.request_timeout_secs),
                max_retries: u32::try_from(t.max_retries).unwrap_or(u32::MAX),
                retry_delay: std::time::Duration::from_millis(t.retry_delay_ms),
                headers: Vec::new(),
                pool_size: concurrency,
                verbose,
            })
            .map_err(|e| Failure::bad_input(anyhow::anyhow!("--host/--endpoint: {e}")))?;
        // A host (the Python package) cancels through its own token; the CLI
        // cancels on Ctrl+C.
        let cancel = match cancel {
            Some(c) => c,
            None => {
                let c = CancellationToken::new();
                cancel_on_ctrl_c(c.clone());
                c
            }
        };
        Ok(Self {
            tokenizer,
            transport,
            target,
            cancel,
        })
    }

    /// Runs `engine` with the progress bar and `reporters`, then stops the simulator.
    pub async fn run(
        self,
        mut engine: batchbench_core::engine::Engine,
        source: Box<dyn batchbench_core::plugin::WorkloadSource>,
        reporters: Vec<Box<dyn Reporter>>,
        total_requests: Option<u64>,
        quiet: bool,
    ) -> Result<batchbench_core::engine::RunOutput, Failure> {
        engine = engine
            .cancel_token(self.cancel)
            .reporter(Box::new(Progress::new(total_requests, quiet)));
        for r in reporters {
            engine = engine.reporter(r);
        }
        if let Some(t) = self.tokenizer {
            engine = engine.tokenizer(t);
        }
        let out = engine.run(source).await.map_err(engine_failure);
        if let Some(sim) = self.target.sim {
            sim.stop().await;
        }
        out
    }
}

/// Parses a `--*-config` flag: a JSON object (absent: `{}`).
pub fn json_config(flag: &str, text: Option<&str>) -> Result<serde_json::Value, Failure> {
    let bad = |m: String| Failure::bad_input(anyhow::anyhow!(m));
    let v: serde_json::Value = serde_json::from_str(text.unwrap_or("{}"))
        .map_err(|e| bad(format!("{flag} is not JSON: {e}")))?;
    if !v.is_object() {
        return Err(bad(format!("{flag} must be a JSON object, got {v}")));
    }
    Ok(v)
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
    pub plugins: Vec<std::path::PathBuf>,
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

/// Loads the external plugin at `path` into the registries and returns the
/// `(kind, name)` of each plugin it registered. A missing file is bad input (exit
/// 2); a file that does not load is a failure (exit 1).
pub fn load_plugin(path: &std::path::Path) -> Result<Vec<(&'static str, String)>, Failure> {
    if !path.is_file() {
        return Err(Failure::bad_input(anyhow::anyhow!(
            "--plugin {}: no such file",
            path.display()
        )));
    }
    let is_wasm = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("wasm"));
    let r = if is_wasm {
        batchbench_wasm::load(path).map(|l| vec![(l.kind.as_str(), l.name)])
    } else {
        batchbench_dylib::load(path)
    };
    r.map_err(|e| Failure::failed(anyhow::anyhow!("cannot load plugin {e}")))
}

/// Loads every plugin of `paths` ([`load_plugin`]).
pub fn load_plugins(paths: &[std::path::PathBuf]) -> Result<(), Failure> {
    paths.iter().try_for_each(|p| load_plugin(p).map(drop))
}

impl PluginArgs {
    /// Loads every `--plugin`.
    pub fn load(&self) -> Result<(), Failure> {
        load_plugins(&self.plugins)
    }

    fn pairs(
        names: &[String],
        configs: &[String],
        flag: &str,
    ) -> Result<Vec<(String, serde_json::Value)>, Failure> {
        if configs.len() > names.len() {
            return Err(Failure::bad_input(anyhow::anyhow!(
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
                Ok((n.clone(), cfg))
            })
            .collect()
    }

    /// Checks the flags' shape (before anything is loaded or built).
    pub fn check(&self) -> Result<(), Failure> {
        Self::pairs(&self.routers, &self.router_configs, "router")?;
        Self::pairs(&self.reporters, &self.reporter_configs, "reporter")?;
        Ok(())
    }

    /// The `--router` plugins, built.
    pub fn build_routers(
        &self,
        ctx: &batchbench_core::registry::BuildContext,
    ) -> Result<Vec<Arc<dyn batchbench_core::plugin::Router>>, Failure> {
        Self::pairs(&self.routers, &self.router_configs, "router")?
            .into_iter()
            .map(|(n, cfg)| {
                batchbench_core::registry::router(&n, &cfg, ctx)
                    .map(Arc::from)
                    .map_err(plugin_failure)
            })
            .collect()
    }

    /// The `--reporter` plugins, built.
    pub fn build_reporters(
        &self,
        ctx: &batchbench_core::registry::BuildContext,
    ) -> Result<Vec<Box<dyn Reporter>>, Failure> {
        Self::pairs(&self.reporters, &self.reporter_configs, "reporter")?
            .into_iter()
            .map(|(n, cfg)| {
                batchbench_core::registry::reporter(&n, &cfg, ctx).map_err(plugin_failure)
            })
            .collect()
    }

    /// The plugin part of the run's recorded configuration.
    pub fn config_json(&self) -> serde_json::Value {
        let pairs = |names: &[String], configs: &[String]| -> Vec<serde_json::Value> {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let cfg = configs
                        .get(i)
                        .and_then(|c| serde_json::from_str(c).ok())
                        .unwrap_or_else(|| serde_json::json!({}));
                    serde_json::json!({ "name": n, "config": cfg })
                })
                .collect()
        };
        serde_json::json!({
            "plugin_files": self.plugins,
            "routers": pairs(&self.routers, &self.router_configs),
            "reporters": pairs(&self.reporters, &self.reporter_configs),
        })
    }
}
