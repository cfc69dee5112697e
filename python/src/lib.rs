//! `batchbench._core`: the Rust engine behind the `batchbench` Python package.
//!
//! The boundary is deliberately narrow: configurations come in and reports go out
//! as JSON text, validated on both sides (the Python layer names bad keys; serde
//! rejects anything else). Runs execute on their own thread with their own runtime,
//! so no state is shared between two runs in one process; `Run.wait` releases the
//! GIL while it waits, and `Run.cancel` is how a `KeyboardInterrupt` reaches the
//! engine.

use batchbench_contract::dist::{LengthDist, LogNormalFlags, lognormal_from_flags};
use batchbench_contract::plugin::{PluginError, Reporter, RequestRecord, WorkloadInfo};
use batchbench_contract::record::Summary;
use batchbench_contract::registry;
use batchbench_contract::rng;
use batchbench_contract::spec::{LoadSpec, PluginSpec, Release, RunSpec};
use batchbench_engine::run::DryRunStats;
use batchbench_plugins::workloads::request_bodies::{RequestBodiesConfig, RequestEntry};
use batchbench_run::assemble::{self, Outcome as RunOutcome, Profile, RunHooks};
use batchbench_run::commands::{agent, batchbench};
use pyo3::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How a run ended, as the Python layer sees it.
#[derive(Debug, Clone)]
enum Outcome {
    /// A CLI's exit code.
    Code(i32),
    /// A report, as JSON text.
    Report(String),
    /// `(kind, message)`: kind is `config`, `tokenizer`, `plugin` or `run`.
    Error(&'static str, String),
}

impl Outcome {
    fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match self {
            Self::Code(c) => c.into_pyobject(py)?.into_any().unbind(),
            Self::Report(r) => ("report", r).into_pyobject(py)?.into_any().unbind(),
            Self::Error(k, m) => ("error", k, m).into_pyobject(py)?.into_any().unbind(),
        })
    }
}

type Slot = Arc<(Mutex<Option<Outcome>>, Condvar)>;

/// A run in progress on its own thread.
#[pyclass(module = "batchbench._core")]
struct Run {
    slot: Slot,
    cancel: CancellationToken,
}

impl Run {
    fn spawn(f: impl FnOnce(CancellationToken) -> Outcome + Send + 'static) -> PyResult<Self> {
        let slot: Slot = Arc::default();
        let cancel = CancellationToken::new();
        let (s, c) = (slot.clone(), cancel.clone());
        std::thread::Builder::new()
            .name("batchbench-run".into())
            .spawn(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(c)))
                    .unwrap_or_else(|_| Outcome::Error("run", "the run panicked".into()));
                let (lock, cv) = &*s;
                *lock
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(out);
                cv.notify_all();
            })
            .map_err(|e| {
                pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start a run: {e}"))
            })?;
        Ok(Self { slot, cancel })
    }
}

#[pymethods]
impl Run {
    /// Waits up to `timeout` seconds (forever when `None`) with the GIL released.
    /// Returns `None` while the run goes on; then an exit code, `("report", json)`
    /// or `("error", kind, message)`.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let slot = self.slot.clone();
        let out = py.detach(move || {
            let (lock, cv) = &*slot;
            let guard = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let guard = match timeout {
                None => cv
                    .wait_while(guard, |o| o.is_none())
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                // An infinite or huge timeout waits as long as it takes.
                Some(t) => match Duration::try_from_secs_f64(t.max(0.0)) {
                    Ok(d) => {
                        cv.wait_timeout_while(guard, d, |o| o.is_none())
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0
                    }
                    Err(_) => cv
                        .wait_while(guard, |o| o.is_none())
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                },
            };
            guard.clone()
        });
        out.map(|o| o.into_py(py)).transpose()
    }

    /// Cancels the run: in-flight requests are cancelled and the partial report
    /// (or exit code 130) follows.
    fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// Starts `batchbench` (`program` = "batchbench") or `batchbench-agent` with
/// `argv` (program name first), cancelled through the returned run.
#[pyfunction]
fn start_cli(program: String, argv: Vec<String>) -> PyResult<Run> {
    Run::spawn(move |cancel| {
        Outcome::Code(match program.as_str() {
            "batchbench-agent" => agent::run_embedded(argv, cancel),
            _ => batchbench::run_embedded(argv, cancel),
        })
    })
}

/// Every long flag of a CLI (or of its subcommand `sweep`, `capacity` or
/// `analyze`) and whether it takes a value.
#[pyfunction]
#[pyo3(signature = (program, series = None))]
fn cli_flags(program: &str, series: Option<&str>) -> Vec<(String, bool)> {
    use batchbench_run::series::Kind;
    let kind = series.and_then(|s| Kind::of(Some(&std::ffi::OsString::from(s))));
    if series == Some("analyze") {
        return match program {
            "batchbench-agent" => agent::analyze_flags(),
            _ => batchbench::analyze_flags(),
        };
    }
    match (program, kind) {
        ("batchbench-agent", Some(k)) => agent::series_flags(k),
        ("batchbench-agent", None) => agent::flags(),
        (_, Some(k)) => batchbench::series_flags(k),
        (_, None) => batchbench::flags(),
    }
}

/// Loads an external plugin (a `.wasm` component or a native library) into this
/// process's registries; returns `("report", json)` with the `[kind, name]` pairs it
/// registered, or `("error", kind, message)`.
#[pyfunction]
fn load_plugin(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Py<PyAny>> {
    let out = py.detach(move || match batchbench_run::plugins::load_plugin(&path) {
        Ok(names) => Outcome::Report(serde_json::json!(names).to_string()),
        Err(f) if f.is_bad_input() => Outcome::Error("config", format!("{:#}", f.error)),
        Err(f) => Outcome::Error("plugin", format!("{:#}", f.error)),
    });
    out.into_py(py)
}

/// Checks a results directory as `batchbench report` reads it: `("report",
/// json)` with its kind (`run`, `sweep` or `capacity`) and, for a series, each
/// point's run directory; or `("error", "config", message)` naming the file.
#[pyfunction]
fn check_results(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Py<PyAny>> {
    let out = py.detach(move || match batchbench_results::load(&path) {
        Ok(batchbench_results::Loaded::Run(_)) => {
            Outcome::Report(json!({"kind": "run"}).to_string())
        }
        Ok(batchbench_results::Loaded::Series(s)) => {
            let runs: Vec<&String> = s.doc.points.iter().flat_map(|p| &p.runs).collect();
            Outcome::Report(json!({"kind": s.doc.kind, "runs": runs}).to_string())
        }
        Err(e) => Outcome::Error("config", e.to_string()),
    });
    out.into_py(py)
}

/// Writes the HTML report of results directories (`batchbench report`):
/// `("report", json)` with the bytes, charts and directories written, or
/// `("error", kind, message)`.
#[pyfunction]
fn write_report(
    py: Python<'_>,
    dirs: Vec<std::path::PathBuf>,
    output: std::path::PathBuf,
) -> PyResult<Py<PyAny>> {
    let out = py.detach(
        move || match batchbench_run::report::write(&dirs, &output) {
            Ok(w) => Outcome::Report(
                json!({"bytes": w.bytes, "charts": w.charts, "dirs": w.dirs}).to_string(),
            ),
            Err(f) if f.is_bad_input() => Outcome::Error("config", format!("{:#}", f.error)),
            Err(f) => Outcome::Error("run", format!("{:#}", f.error)),
        },
    );
    out.into_py(py)
}

/// Every registered plugin, as JSON text.
#[pyfunction]
fn plugins() -> String {
    serde_json::to_string(&registry::list()).unwrap_or_default()
}

// --- run_benchmark -------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
enum Mode {
    Finite { requests_per_user: u64 },
    LongRunning { duration_secs: f64 },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogNormal {
    #[serde(default)]
    mu: Option<f64>,
    #[serde(default)]
    median: Option<f64>,
    sigma: f64,
    #[serde(default)]
    max: Option<f64>,
}

fn lognormal(name: &str, l: &LogNormal) -> Result<LengthDist, String> {
    lognormal_from_flags(
        name,
        "median",
        "max",
        LogNormalFlags {
            mu: l.mu,
            median: l.median,
            sigma: Some(l.sigma),
            max: l.max,
        },
    )?
    .ok_or_else(|| format!("{name}: sigma and mu or median are needed"))
}

fn default_timeout() -> f64 {
    batchbench_contract::spec::defaults::REQUEST_TIMEOUT_SECS
}
fn default_retries() -> u32 {
    batchbench_contract::spec::defaults::MAX_RETRIES
}
fn default_retry_delay() -> u64 {
    batchbench_contract::spec::defaults::RETRY_DELAY_MS
}

/// One full URL, or several: a fleet, each request sent where the routing
/// policy picks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Endpoints {
    One(String),
    Many(Vec<String>),
}

impl Endpoints {
    /// The run's hosts and request path: one full URL is the endpoint itself
    /// (no host); several are split into their bases and their one path.
    fn target(&self) -> Result<(batchbench_contract::spec::Hosts, String), String> {
        match self {
            Self::One(u) => {
                Self::check("'endpoint'", u)?;
                Ok(("".into(), u.clone()))
            }
            Self::Many(us) => {
                for (i, u) in us.iter().enumerate() {
                    Self::check(&format!("'endpoint'[{i}]"), u)?;
                }
                batchbench_contract::spec::Hosts::from_urls(us)
            }
        }
    }

    /// An endpoint is a server's full URL, in the words of a Python caller:
    /// the CLI's `sim://` is not one (Python starts its simulator itself).
    fn check(key: &str, url: &str) -> Result<(), String> {
        if url.starts_with("sim:") {
            return Err(format!(
                "config key {key} is {url:?}, the command line's in-process simulator: in Python, start one with batchbench.Simulator(tokenizer_model, query) and pass its .endpoint"
            ));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "config key {key} is {url:?}: give a full URL, such as http://localhost:8000/v1/chat/completions"
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchmarkConfig {
    endpoint: Endpoints,
    /// The routing policy of a fleet (several endpoints): a router's name.
    #[serde(default)]
    routing: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    user_count: u64,
    mode: Mode,
    #[serde(default)]
    request_body: Option<Value>,
    #[serde(default)]
    requests: Option<Vec<Value>>,
    #[serde(default = "default_timeout")]
    request_timeout_secs: f64,
    #[serde(default = "default_retries")]
    max_retries: u32,
    #[serde(default = "default_retry_delay")]
    retry_delay_ms: u64,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    verbose: bool,
    #[serde(default)]
    sglang: bool,
    #[serde(default)]
    codec: Option<String>,
    #[serde(default)]
    codec_config: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    output_lognorm: Option<LogNormal>,
    /// The run spec's load table: arrival rate and process, concurrency cap,
    /// warmup (the duration comes from `long_running_mode`).
    #[serde(default)]
    load: Option<LoadSpec>,
    /// The run's SLO bounds (`ttft_p99<=500ms`, `e2e<=20s`).
    #[serde(default)]
    slo: Vec<batchbench_contract::slo::SloBound>,
    /// What the run asks of a reasoning model, with the keys of a run spec's
    /// `[target.reasoning]` table (`effort`, `budget_tokens`, `off`, `history`).
    #[serde(default)]
    reasoning: batchbench_contract::spec::ReasoningKnobs,
    /// Structured outputs, with the keys of a run spec's
    /// `[target.response_format]` table: `{"type": "json_object"}`, or
    /// `{"type": "json_schema", "schemas": ["pet.json"]}`.
    #[serde(default)]
    response_format: Option<batchbench_contract::spec::ResponseFormatSpec>,
    /// Several models, with the keys of a run spec's `[target.mix]` table:
    /// `models` (each `name`, `weight`, and `base` for an adapter),
    /// `selection`, `adapter_field`, and against several endpoints
    /// `endpoints` (each `endpoint`, its index, and the `models` it serves).
    #[serde(default)]
    model_mix: Option<batchbench_contract::models::ModelMixSpec>,
}

/// Collects every request as a record (the report's `records`), with the
/// run's start for their wall-clock times.
#[derive(Debug, Clone, Default)]
struct Collect(Arc<Mutex<Vec<Value>>>, Option<f64>);

impl Reporter for Collect {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, run: &batchbench_contract::record::RunInfo) -> Result<(), PluginError> {
        self.1 = batchbench_plugins::reporters::requests_jsonl::epoch_ms(run);
        Ok(())
    }

    fn on_clock_start(&mut self, started_unix: f64) {
        self.1 = batchbench_plugins::reporters::requests_jsonl::clock_epoch_ms(started_unix);
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(batchbench_plugins::reporters::requests_jsonl::record_json(
                rec, self.1,
            ));
        Ok(())
    }
}

fn config_error(e: impl std::fmt::Display) -> Outcome {
    Outcome::Error("config", e.to_string())
}

fn plugin_error(e: PluginError) -> Outcome {
    match e {
        PluginError::Config { .. } => Outcome::Error("config", e.to_string()),
        _ => Outcome::Error("plugin", e.to_string()),
    }
}

/// The report: every summary figure, the latency percentiles flattened the way the
/// CSV names them, the run description and the per-request records.
fn report(summary: &Summary, run: Value, records: Vec<Value>, dry_run: bool) -> Outcome {
    let mut v = match serde_json::to_value(summary) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let lat = v.get("latency").cloned().unwrap_or(Value::Null);
    for (k, src) in [
        ("latency_p50_ms", "p50_ms"),
        ("latency_p90_ms", "p90_ms"),
        ("latency_p99_ms", "p99_ms"),
        ("latency_mean_ms", "mean_ms"),
        ("latency_max_ms", "max_ms"),
    ] {
        v.insert(k.into(), lat.get(src).cloned().unwrap_or(Value::Null));
    }
    v.insert("dry_run".into(), Value::Bool(dry_run));
    v.insert("run".into(), run);
    v.insert("records".into(), Value::Array(records));
    Outcome::Report(Value::Object(v).to_string())
}

/// The report's `run` description of a `run_benchmark` run, from its spec.
#[derive(Debug, Serialize)]
struct BenchmarkView<'a> {
    endpoint: &'a str,
    user_count: u64,
    mode: &'a str,
    seed: Option<u64>,
    sglang: bool,
    request_timeout_secs: f64,
    max_retries: u32,
    retry_delay_ms: u64,
}

fn benchmark_view(spec: &RunSpec, info: &WorkloadInfo) -> Value {
    let users = spec
        .workload
        .config_as::<RequestBodiesConfig>()
        .map_or(0, |c| c.users);
    let v = BenchmarkView {
        endpoint: &spec.target.endpoint,
        user_count: users,
        mode: &info.mode,
        seed: spec.seed,
        sglang: batchbench_run::flags::chat_options(spec).sglang,
        request_timeout_secs: spec.target.request_timeout_secs,
        max_retries: spec.target.max_retries,
        retry_delay_ms: spec.target.retry_delay_ms,
    };
    serde_json::to_value(v).unwrap_or_default()
}

fn no_dry_run_line(_: &DryRunStats) -> String {
    String::new()
}

/// How `run_benchmark` reports: no CSV; its own `run` description.
const BENCHMARK: Profile = Profile {
    command: "run_benchmark",
    csv_columns: &[],
    view: benchmark_view,
    dry_run_line: no_dry_run_line,
};

/// The run spec of a `run_benchmark` configuration.
fn benchmark_spec(cfg: &BenchmarkConfig) -> Result<RunSpec, Outcome> {
    if cfg.user_count == 0 {
        return Err(config_error("user_count: must be at least 1"));
    }
    if !(cfg.request_timeout_secs.is_finite() && cfg.request_timeout_secs > 0.0) {
        return Err(config_error(
            "request_timeout_secs: must be a positive number",
        ));
    }
    let entries: Vec<Value> = match (&cfg.requests, &cfg.request_body) {
        (Some(r), _) if !r.is_empty() => r.clone(),
        (_, Some(b)) => vec![b.clone()],
        _ => {
            return Err(config_error(
                "requests or request_body: at least one request is needed",
            ));
        }
    };
    let requests = entries
        .into_iter()
        .map(serde_json::from_value::<RequestEntry>)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            plugin_error(PluginError::Config {
                plugin: "request_bodies".into(),
                message: e.to_string(),
            })
        })?;
    let output = match &cfg.output_lognorm {
        None => None,
        Some(l) => Some(lognormal("output_lognorm", l).map_err(config_error)?),
    };
    let (requests_per_user, duration_secs) = match cfg.mode {
        Mode::Finite { requests_per_user } => (Some(requests_per_user), None),
        // A dry run plans one cycle through the entries; the run repeats it.
        Mode::LongRunning { .. } if cfg.dry_run => (
            Some((requests.len() as u64).div_ceil(cfg.user_count).max(1)),
            None,
        ),
        Mode::LongRunning { duration_secs } => (None, Some(duration_secs)),
    };
    // A long-running mode is the engine's duration: the users go on until its
    // deadline, whatever the rate.
    let workload = RequestBodiesConfig {
        users: cfg.user_count,
        requests_per_user,
        duration_secs: None,
        requests,
        output,
    };
    let workload = PluginSpec::typed("request_bodies", &workload).map_err(config_error)?;
    let mut spec = RunSpec::new(workload);
    if let Some(load) = &cfg.load {
        if load.duration_secs.is_some() {
            return Err(config_error(
                "load.duration_secs: the duration is the mode's: use batchbench.long_running_mode(seconds)",
            ));
        }
        spec.load = load.clone();
    }
    spec.load.release = Release::Requests;
    spec.load.duration_secs = duration_secs;
    spec.slo.clone_from(&cfg.slo);
    spec.target.reasoning = cfg.reasoning;
    spec.target.response_format.clone_from(&cfg.response_format);
    spec.target.mix.clone_from(&cfg.model_mix);
    spec.seed = Some(cfg.seed.unwrap_or_else(assemble::fresh_seed));
    if let Some(name) = &cfg.routing {
        spec.routers
            .push(PluginSpec::new(name.clone(), serde_json::json!({})));
    }
    let t = &mut spec.target;
    // One endpoint is a full URL (the host part stays empty); several are a
    // fleet of hosts with one path.
    (t.host, t.endpoint) = cfg.endpoint.target().map_err(config_error)?;
    t.model = String::new();
    t.request_timeout_secs = cfg.request_timeout_secs;
    t.max_retries = cfg.max_retries;
    t.retry_delay_ms = cfg.retry_delay_ms;
    t.headers = cfg.headers.clone();
    let default_codec = batchbench_contract::spec::defaults::CODEC;
    let name = cfg
        .codec
        .clone()
        .unwrap_or_else(|| default_codec.to_owned());
    let config = Value::Object(cfg.codec_config.clone().unwrap_or_default());
    spec.codec = PluginSpec::new(name, config);
    if cfg.sglang {
        batchbench_run::flags::set_codec_option(&mut spec, "sglang")
            .map_err(|e| config_error(format!("sglang: {e}")))?;
    }
    spec.admission.max_active = Some(cfg.user_count);
    spec.output.verbose = cfg.verbose;
    spec.output.quiet = true;
    spec.output.dry_run = cfg.dry_run;
    Ok(spec)
}

/// Collects what a dry run writes (one JSON plan line per request).
#[derive(Debug, Clone, Default)]
struct PlanSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for PlanSink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn benchmark(config: &str, cancel: CancellationToken) -> Outcome {
    let cfg: BenchmarkConfig = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => return config_error(e),
    };
    let spec = match benchmark_spec(&cfg) {
        Ok(s) => s,
        Err(o) => return o,
    };
    let records = Collect::default();
    let plan = PlanSink::default();
    let hooks = RunHooks {
        cancel: Some(cancel),
        api_key: cfg.api_key.clone().filter(|k| !k.is_empty()),
        reporters: vec![Box::new(records.clone())],
        plan_out: Some(Box::new(plan.clone())),
        quiet_summary: false,
    };
    match assemble::execute(spec, &BENCHMARK, hooks) {
        Ok(RunOutcome::DryRun { view: mut run, .. }) => {
            let text = std::mem::take(
                &mut *plan
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let plan: Vec<Value> = String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
            run["planned_requests"] = json!(plan.len());
            run["plan"] = Value::Array(plan);
            report(&Summary::default(), run, Vec::new(), true)
        }
        Ok(RunOutcome::Ran(out)) => {
            let records = std::mem::take(
                &mut *records
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            let mut run = out.info.config.clone();
            if let (Value::Object(m), Some(spec)) = (&mut run, &out.info.spec) {
                m.insert(
                    "spec".into(),
                    serde_json::to_value(spec).unwrap_or_default(),
                );
            }
            report(&out.summary, run, records, false)
        }
        Err(f) if f.is_bad_input() => Outcome::Error("config", format!("{:#}", f.error)),
        Err(f) => Outcome::Error("run", format!("{:#}", f.error)),
    }
}

/// Starts a `run_benchmark` run from its JSON configuration.
#[pyfunction]
fn start_benchmark(config: String) -> PyResult<Run> {
    Run::spawn(move |cancel| benchmark(&config, cancel))
}

// --- generate_requests -------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GenerateOptions {
    count: u64,
    target_tokens: u64,
    #[serde(default)]
    prefix_overlap: f64,
    tokenizer_model: String,
    #[serde(default = "default_dist")]
    dist_mode: String,
    #[serde(default)]
    dist_mu: Option<f64>,
    #[serde(default)]
    dist_median: Option<f64>,
    #[serde(default)]
    dist_sigma: Option<f64>,
    #[serde(default)]
    dist_max: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
}

fn default_dist() -> String {
    "fixed".into()
}

const PURPOSE_GENERATE: u64 = 0x4745_4e52; // "GENR"
const PURPOSE_GENERATE_SHARED: u64 = 0x4753_4852; // "GSHR"

fn generate(options: &str, model: &str) -> Result<Value, (&'static str, String)> {
    let o: GenerateOptions =
        serde_json::from_str(options).map_err(|e| ("config", e.to_string()))?;
    let bad = |m: String| ("config", m);
    if o.count == 0 || o.count > 10_000_000 {
        return Err(bad(format!(
            "count: must be between 1 and 10,000,000, got {}",
            o.count
        )));
    }
    if o.target_tokens == 0 {
        return Err(bad("target_tokens: must be at least 1".into()));
    }
    if !(0.0..=1.0).contains(&o.prefix_overlap) {
        return Err(bad(format!(
            "prefix_overlap: must be between 0.0 and 1.0, got {}",
            o.prefix_overlap
        )));
    }
    let dist = match o.dist_mode.as_str() {
        "fixed" => LengthDist::fixed(o.target_tokens),
        "log_normal" | "lognormal" => {
            let flags = LogNormalFlags {
                mu: o.dist_mu,
                median: o.dist_median,
                sigma: o.dist_sigma,
                max: o.dist_max,
            };
            lognormal_from_flags("dist", "median", "max", flags)
                .map_err(bad)?
                .ok_or_else(|| {
                    bad("dist_sigma and dist_median (or dist_mu) are needed for log_normal".into())
                })?
        }
        other => {
            return Err(bad(format!(
                "dist_mode: must be fixed, log_normal or lognormal, got {other:?}"
            )));
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ("run", e.to_string()))?;
    let tok = rt
        .block_on(batchbench_engine::tokens::load(&o.tokenizer_model))
        .map_err(|e| ("tokenizer", e.to_string()))?;
    let seed = o.seed.unwrap_or(0);
    let shared_key = rng::derive(seed, &[PURPOSE_GENERATE_SHARED]);
    let mut out = Vec::with_capacity(o.count.min(1 << 16) as usize);
    for i in 0..o.count {
        let mut r = rng::Stream::at(seed, &[PURPOSE_GENERATE, i]);
        let n = dist.sample(&mut r, 1) as usize;
        // The shared prefix is a fraction of the fixed target, the same for every
        // prompt (capped by shorter prompts).
        let shared = (o.prefix_overlap * o.target_tokens as f64).round() as usize;
        let prefix = (shared > 0).then_some((shared_key, shared));
        let text = tok
            .exact_text_with_prefix(
                prefix,
                rng::derive(seed, &[PURPOSE_GENERATE, i, 1]),
                n,
                &|| format!("generated request {i}"),
            )
            .map_err(|e| ("tokenizer", e.to_string()))?;
        out.push(json!({
            "body": {
                "model": model,
                "messages": [{"role": "user", "content": text}],
            },
            "line_idx": i,
            "input_tokens": n,
        }));
    }
    Ok(Value::Array(out))
}

/// Generates request entries whose prompts re-encode to exactly their token
/// targets. Returns `("report", json)` or `("error", kind, message)`.
#[pyfunction]
fn generate_requests(py: Python<'_>, options: String, model: String) -> PyResult<Py<PyAny>> {
    let out = py.detach(move || match generate(&options, &model) {
        Ok(v) => Outcome::Report(v.to_string()),
        Err((k, m)) => Outcome::Error(k, m),
    });
    out.into_py(py)
}

/// Token ids of each text under a tokenizer (a check for tests and notebooks).
#[pyfunction]
fn count_tokens(
    py: Python<'_>,
    tokenizer_model: String,
    texts: Vec<String>,
) -> PyResult<Py<PyAny>> {
    let out = py.detach(move || {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return Outcome::Error("run", e.to_string()),
        };
        match rt
            .block_on(batchbench_engine::tokens::load(&tokenizer_model))
            .and_then(|t| {
                texts
                    .iter()
                    .map(|x| t.ids(x))
                    .collect::<Result<Vec<_>, _>>()
            }) {
            Ok(ids) => Outcome::Report(json!(ids).to_string()),
            Err(e) => Outcome::Error("tokenizer", e.to_string()),
        }
    });
    out.into_py(py)
}

// --- the simulator -------------------------------------------------------------

/// The built-in simulator, serving on loopback from its own runtime.
#[pyclass(module = "batchbench._core")]
struct Simulator {
    rt: Option<tokio::runtime::Runtime>,
    sim: Option<batchbench_simulator::Sim>,
    url: String,
}

#[pymethods]
impl Simulator {
    /// Starts the simulator with `tokenizer_model` and options given as a
    /// `sim://` query (`fault-rate=0.5&decode-ms-per-token=5`).
    #[new]
    #[pyo3(signature = (tokenizer_model, query=String::new()))]
    fn new(py: Python<'_>, tokenizer_model: String, query: String) -> PyResult<Self> {
        let started = py.detach(move || -> Result<_, (&'static str, String)> {
            let cfg =
                batchbench_simulator::SimConfig::from_query(&query).map_err(|e| ("config", e))?;
            cfg.validate().map_err(|e| ("config", e.to_string()))?;
            if cfg.replicas > 1 {
                return Err((
                    "config",
                    "replicas: a Simulator is one endpoint; start one per replica and pass their endpoints as a list".to_owned(),
                ));
            }
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| ("run", e.to_string()))?;
            let tok = rt
                .block_on(batchbench_engine::tokens::load(&tokenizer_model))
                .map_err(|e| ("tokenizer", e.to_string()))?;
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            let sim = rt
                .block_on(batchbench_simulator::Sim::start(cfg, tok, addr))
                .map_err(|e| ("run", format!("cannot start the simulator: {e}")))?;
            Ok((rt, sim))
        });
        match started {
            Ok((rt, sim)) => Ok(Self {
                url: sim.url(),
                rt: Some(rt),
                sim: Some(sim),
            }),
            Err((kind, m)) => Err(pyo3::exceptions::PyValueError::new_err((kind, m))),
        }
    }

    /// Base URL (`http://127.0.0.1:PORT`).
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// Counters (`requests`, tokens, cached tokens, faults), as JSON text.
    fn stats(&self) -> String {
        self.sim
            .as_ref()
            .map(|s| serde_json::to_string(&s.stats()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// The request log (with `record_requests` in the query), as JSON text.
    fn requests(&self) -> String {
        self.sim
            .as_ref()
            .map(|s| serde_json::to_string(&s.requests()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Stops serving (idempotent).
    fn stop(&mut self, py: Python<'_>) {
        let (rt, sim) = (self.rt.take(), self.sim.take());
        py.detach(move || {
            if let (Some(rt), Some(sim)) = (rt, sim) {
                rt.block_on(sim.stop());
            }
        });
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Run>()?;
    m.add_class::<Simulator>()?;
    m.add_function(wrap_pyfunction!(start_cli, m)?)?;
    m.add_function(wrap_pyfunction!(cli_flags, m)?)?;
    m.add_function(wrap_pyfunction!(plugins, m)?)?;
    m.add_function(wrap_pyfunction!(load_plugin, m)?)?;
    m.add_function(wrap_pyfunction!(check_results, m)?)?;
    m.add_function(wrap_pyfunction!(write_report, m)?)?;
    m.add_function(wrap_pyfunction!(start_benchmark, m)?)?;
    m.add_function(wrap_pyfunction!(generate_requests, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    Ok(())
}
