//! The one assembly: a [`RunSpec`] becomes a running engine. Both commands and the
//! Python package come here; nothing else builds a workload, a codec, a router, a
//! reporter, a transport or an engine.
//!
//! Order, so that bad input is found before anything is sent: the spec is
//! checked (output paths included), plugin files are loaded, the workload is
//! built (a local tokenizer loads meanwhile), then the codec, routers and
//! reporters; then the target (the in-process simulator for `sim://`), the
//! transport, and the engine, whose reporters all start before the clock does.

use crate::exit::{Failure, engine_failure, plugin_failure, runtime};
use crate::progress::Progress;
use batchbench_contract::plugin::{Reporter, Router, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::{self, BuildContext};
use batchbench_contract::spec::{AdmissionMode, ClientThreads, PluginSpec, RunSpec};
use batchbench_engine::run::{DryRunStats, Engine, EngineOptions, RunOutput};
use batchbench_engine::shard::ShardedSource;
use batchbench_engine::tokens::TokenizerHandle;
use batchbench_engine::transport::{TargetConfig, TlsConfig, Transport, join_url};
use batchbench_simulator::{Sim, SimConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a front end promises about its reports: the flat configuration view
/// under the names its users' notebooks read, and its CSV columns.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    /// The command, for messages (`batchbench`, `batchbench-agent`).
    pub command: &'static str,
    /// The CSV columns, in order (see [`crate::view::Column`]).
    pub csv_columns: &'static [crate::view::Column],
    /// The record's flat configuration view (`run.config` of the JSON summary).
    pub view: fn(&RunSpec, &WorkloadInfo) -> serde_json::Value,
    /// The dry run's closing line on stderr.
    pub dry_run_line: fn(&DryRunStats) -> String,
}

/// What a host adds to a spec: the secrets and hooks that are not part of it.
#[derive(Default)]
pub struct Host {
    /// Cancels the run (the Python package); absent: the first Ctrl+C does.
    pub cancel: Option<CancellationToken>,
    /// The API key given on the command line or by the host; absent: the
    /// variable named by the spec's `target.api_key_env`. Never recorded.
    pub api_key: Option<String>,
    /// In-process reporters after the spec's own.
    pub reporters: Vec<Box<dyn Reporter>>,
    /// Where a dry run writes its plan; absent: stdout.
    pub plan_out: Option<Box<dyn std::io::Write + Send>>,
    /// Leave out the console summary: a series prints its own line per point.
    pub quiet_summary: bool,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("cancel", &self.cancel.is_some())
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("reporters", &self.reporters.len())
            .field("quiet_summary", &self.quiet_summary)
            .finish_non_exhaustive()
    }
}

/// How a run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The run went (possibly interrupted: see the summary).
    Ran(Box<RunOutput>),
    /// A dry run wrote its plan and sent nothing.
    DryRun {
        /// Its totals.
        stats: DryRunStats,
        /// The flat configuration view the run would have recorded.
        view: serde_json::Value,
    },
}

/// A seed for runs that did not give one (recorded in the report).
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    batchbench_contract::rng::mix64(t ^ u64::from(std::process::id()).rotate_left(32))
}

/// The simulator config of a `sim://?k=v` host.
pub fn sim_config(host: &str) -> Result<SimConfig, String> {
    let rest = host.trim_start_matches("sim:").trim_start_matches("//");
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let cfg = SimConfig::from_query(query)?;
    cfg.validate().map_err(|e| format!("sim:// option: {e}"))?;
    Ok(cfg)
}

/// Cancels `token` on the first Ctrl+C; a second Ctrl+C exits at once. The
/// handler is registered before this returns, so a SIGINT at any later moment
/// (the first request included) cancels the run instead of killing it.
fn cancel_on_ctrl_c(token: CancellationToken) {
    let mut interrupts = crate::exit::interrupts();
    tokio::spawn(async move {
        if interrupts.recv().await {
            eprintln!("\ninterrupted: cancelling in-flight requests (Ctrl+C again to quit now)");
            token.cancel();
            if interrupts.recv().await {
                std::process::exit(crate::exit::EXIT_INTERRUPTED);
            }
        }
    });
}

/// Checks what can be checked of a spec before anything is loaded: numbers in
/// range, and every result file creatable. Bad input names the field.
pub fn check(spec: &RunSpec) -> Result<(), Failure> {
    if let ClientThreads::Fixed(threads) = spec.target.client_threads
        && !(1..=ClientThreads::MAX).contains(&threads)
    {
        return Err(Failure::bad(format!(
            "target.client_threads (--client-threads) must be `auto` or between 1 and {}, got {threads}",
            ClientThreads::MAX
        )));
    }
    let a = &spec.admission;
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        return Err(Failure::bad(format!(
            "admission.time_scale (--time-scale) must be a positive number, got {}",
            a.time_scale
        )));
    }
    if a.max_active == Some(0) {
        return Err(Failure::bad(
            "admission.max_active must be at least 1 (absent: no cap)",
        ));
    }
    spec.load.check().map_err(Failure::bad)?;
    check_shard(spec)?;
    let converging = spec.load.target_ci.is_some() || spec.load.until_decided;
    if converging && spec.shard.is_some() {
        return Err(Failure::bad(
            "load.target_ci (--target-ci) and load.until_decided (a series' --min-requests, --point-max-secs) stop a run once its own figures are sure: each shard would stop on its share's alone; run it unsharded",
        ));
    }
    if spec.load.warmup.is_some() && spec.shard.is_some() {
        return Err(Failure::bad(
            "load.warmup auto (--warmup auto) finds a run's transient from its own time series: each shard would cut on its share alone; run it unsharded, or give load.warmup_secs",
        ));
    }
    if spec.load.until_decided && !spec.slo.iter().any(|b| b.percentile.is_some()) {
        return Err(Failure::bad(
            "load.until_decided runs until every percentile bound of the SLO is decided: give one in slo (--slo), such as e2e_p99<=2s",
        ));
    }
    if let Some(r) = spec.max_failure_rate
        && !(0.0..=1.0).contains(&r)
    {
        return Err(Failure::bad(format!(
            "max_failure_rate (--max-failure-rate) must be a share from 0.0 to 1.0, got {r}"
        )));
    }
    if spec.load.duration_secs.is_some() && spec.output.dry_run {
        return Err(Failure::bad(
            "load.duration_secs (--duration-secs) draws the workload without end: a dry run cannot list it",
        ));
    }
    let t = &spec.target;
    if !(t.request_timeout_secs.is_finite() && t.request_timeout_secs > 0.0) {
        return Err(Failure::bad(format!(
            "target.request_timeout_secs must be a positive number, got {}",
            t.request_timeout_secs
        )));
    }
    check_hosts(t)?;
    for (flag, path) in spec.output.files() {
        check_output(flag, path)?;
    }
    if let Some(dir) = &spec.output.output_dir {
        check_output_dir(dir)?;
    }
    if spec.target.max_response_bytes == Some(0) {
        return Err(Failure::bad(
            "target.max_response_bytes (--max-response-bytes) must be at least 1 (absent: 64 MiB)",
        ));
    }
    if let Some(ca) = &spec.target.ca_cert {
        batchbench_engine::transport::TlsConfig::read_ca(ca).map_err(|e| Failure::bad(e.0))?;
    }
    let m = &spec.server_metrics;
    if !(m.interval_secs.is_finite() && (0.05..=3600.0).contains(&m.interval_secs)) {
        return Err(Failure::bad(format!(
            "server_metrics.interval_secs (--metrics-interval) must be from 0.05 to 3600 seconds, got {}",
            m.interval_secs
        )));
    }
    for url in &m.urls {
        if url != "target" && !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(Failure::bad(format!(
                "--server-metrics {url}: an http:// or https:// URL, or `target` for the target server's /metrics"
            )));
        }
    }
    Ok(())
}

/// A shard must be one of its count, of a run with a seed (every shard must
/// draw the same workload), and its caps must leave it something to run.
fn check_shard(spec: &RunSpec) -> Result<(), Failure> {
    spec.start_at_ms().map_err(Failure::bad)?;
    let Some(shard) = spec.shard else {
        return Ok(());
    };
    shard
        .check()
        .map_err(|e| Failure::bad(format!("shard (--shard): {e}")))?;
    if spec.seed.is_none() {
        return Err(Failure::bad(format!(
            "shard (--shard {shard}) needs a seed (--seed): every shard must draw the same workload"
        )));
    }
    let caps = [
        (
            "admission.max_active (--max-active-agents, or --users with a plugin workload)",
            spec.admission.max_active,
        ),
        (
            "load.max_concurrency (--max-concurrency)",
            spec.load.max_concurrency,
        ),
    ];
    for (name, cap) in caps {
        if let Some(n) = cap
            && shard.share(n) == 0
        {
            return Err(Failure::bad(format!(
                "{name} {n} leaves shard {shard} nothing: split a run over at most {n} shards"
            )));
        }
    }
    Ok(())
}

/// The hosts of a spec: one server, a fleet of URLs, or the simulator (a
/// fleet with `replicas`); every URL checked before anything is sent.
fn check_hosts(t: &batchbench_contract::spec::TargetSpec) -> Result<(), Failure> {
    let hosts = t.host.all();
    let full_url = t.endpoint.starts_with("http://") || t.endpoint.starts_with("https://");
    if full_url && t.host.is_fleet() {
        return Err(Failure::bad(
            "--endpoint: a full URL sends every request to one server; with several --host, give the request path",
        ));
    }
    if full_url && !t.is_sim() {
        // The endpoint is the whole URL (the host is not used).
        return Ok(());
    }
    let name = |i: usize| {
        if t.host.is_fleet() {
            format!("--host {} (target.host[{i}])", hosts[i])
        } else {
            "--host".to_owned()
        }
    };
    for (i, h) in hosts.iter().enumerate() {
        let sim = h.starts_with("sim:");
        if sim && t.host.is_fleet() {
            return Err(Failure::bad(format!(
                "{}: the simulator cannot be one host of several; a simulated fleet is one host, sim://?replicas=N",
                name(i)
            )));
        }
        if sim {
            sim_config(h).map_err(|e| Failure::bad(format!("--host: {e}")))?;
            continue;
        }
        batchbench_engine::transport::check_url(h)
            .map_err(|e| Failure::bad(format!("{}: {e}", name(i))))?;
    }
    if let Some(dup) = hosts
        .iter()
        .enumerate()
        .find(|(i, h)| hosts[..*i].contains(h))
    {
        return Err(Failure::bad(format!(
            "{}: given twice; each endpoint of a fleet is its own server",
            name(dup.0)
        )));
    }
    Ok(())
}

/// How many endpoints the run's hosts make (a simulator's replicas count).
fn endpoint_count(t: &batchbench_contract::spec::TargetSpec) -> u32 {
    if t.is_sim() {
        sim_config(t.host.first()).map_or(1, |c| c.replicas)
    } else {
        u32::try_from(t.host.all().len()).unwrap_or(u32::MAX)
    }
}

/// Against a fleet, the routers must hold exactly one routing policy (a
/// router that picks endpoints): none given, `round_robin` is added (and
/// recorded in the spec); two are refused. Returns the policy's name.
fn routing_policy(
    spec: &mut RunSpec,
    routers: &mut Vec<Arc<dyn Router>>,
    ctx: &BuildContext,
) -> Result<Option<String>, Failure> {
    let choosers: Vec<&str> = spec
        .routers
        .iter()
        .zip(routers.iter())
        .filter(|(_, r)| r.chooses_endpoint())
        .map(|(s, _)| s.name.as_str())
        .collect();
    if let [a, b, ..] = choosers.as_slice() {
        return Err(Failure::bad(format!(
            "--router: {a} and {b} both pick endpoints; give one routing policy"
        )));
    }
    if let Some(name) = choosers.first() {
        return Ok(Some((*name).to_owned()));
    }
    if endpoint_count(&spec.target) < 2 {
        return Ok(None);
    }
    let policy = PluginSpec::new("round_robin", serde_json::json!({}));
    routers.push(Arc::from(
        registry::router(&policy.name, &policy.config, ctx).map_err(plugin_failure)?,
    ));
    spec.routers.push(policy);
    Ok(Some("round_robin".to_owned()))
}

/// The spec as the run record keeps it: the credentials of its URLs (the
/// target's, the metrics endpoints') replaced by `***`; the API key is never in
/// a spec at all.
fn recorded_spec(spec: &RunSpec) -> RunSpec {
    use batchbench_contract::record::redact_url;
    let mut s = spec.clone();
    s.target.host = s.target.host.map(redact_url);
    for u in &mut s.server_metrics.urls {
        *u = redact_url(u);
    }
    s
}

/// A results directory must be creatable and must not hold a complete run: no
/// result is overwritten.
pub fn check_output_dir(dir: &Path) -> Result<(), Failure> {
    let bad = |m: &str| Failure::bad(format!("--output-dir {}: {m}", dir.display()));
    if dir.as_os_str().is_empty() {
        return Err(bad("the path is empty"));
    }
    if dir.exists() && !dir.is_dir() {
        return Err(bad("exists and is not a directory"));
    }
    if dir.join(batchbench_contract::results::files::RUN).exists() {
        return Err(bad(
            "already holds a run's results (run.json): choose another directory or remove it",
        ));
    }
    // The nearest existing ancestor must be a directory to create it in.
    match dir.ancestors().skip(1).find(|a| a.exists()) {
        Some(a) if !a.as_os_str().is_empty() && !a.is_dir() => Err(bad(&format!(
            "cannot be created: {} is not a directory",
            a.display()
        ))),
        _ => Ok(()),
    }
}

/// A result file must be creatable: its directory exists, and it is not itself a
/// directory.
pub fn check_output(flag: &str, path: &Path) -> Result<(), Failure> {
    if path.as_os_str().is_empty() {
        return Err(Failure::bad(format!("{flag}: the path is empty")));
    }
    if path.is_dir() {
        return Err(Failure::bad(format!(
            "{flag} {}: is a directory, not a file",
            path.display()
        )));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(Failure::bad(format!(
            "{flag} {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    Ok(())
}

fn build_reporter(
    name: &str,
    config: serde_json::Value,
    ctx: &BuildContext,
) -> Result<Box<dyn Reporter>, Failure> {
    registry::reporter(name, &config, ctx).map_err(plugin_failure)
}

fn path_config(path: &Path) -> serde_json::Value {
    serde_json::Value::Object(
        [(
            "path".to_owned(),
            serde_json::Value::String(path.display().to_string()),
        )]
        .into_iter()
        .collect(),
    )
}

/// The reporters of a spec, in event order: the console summary, the result
/// files, then the spec's reporter plugins.
pub(crate) fn reporters(
    spec: &RunSpec,
    profile: &Profile,
    ctx: &BuildContext,
    console: bool,
) -> Result<Vec<Box<dyn Reporter>>, Failure> {
    let o = &spec.output;
    let mut v = Vec::new();
    if console {
        v.push(build_reporter(
            "console_summary",
            serde_json::Value::Object(serde_json::Map::new()),
            ctx,
        )?);
    }
    if let Some(p) = &o.summary_json {
        v.push(build_reporter("json_summary", path_config(p), ctx)?);
    }
    if let Some(p) = &o.requests_jsonl {
        v.push(build_reporter("requests_jsonl", path_config(p), ctx)?);
    }
    if let Some(p) = &o.output_dir {
        v.push(build_reporter("results_dir", path_config(p), ctx)?);
    }
    if let Some(p) = &o.results_csv {
        let cfg = batchbench_plugins::csv_report::CsvConfig {
            path: p.clone(),
            columns: crate::view::names(profile.csv_columns)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let cfg = serde_json::to_value(&cfg).map_err(Failure::failed)?;
        v.push(build_reporter("csv", cfg, ctx)?);
    }
    for r in &spec.reporters {
        v.push(build_reporter(&r.name, r.config.clone(), ctx)?);
    }
    if let Some(p) = &o.agent_events_jsonl {
        v.push(build_reporter("agent_events", path_config(p), ctx)?);
    }
    if let Some(addr) = &o.metrics_listen {
        v.push(build_reporter(
            "metrics_listen",
            serde_json::json!({
                "addr": addr,
                "linger_secs": o.metrics_linger_secs.unwrap_or(0.0),
            }),
            ctx,
        )?);
    }
    Ok(v)
}

fn build_routers(
    specs: &[PluginSpec],
    ctx: &BuildContext,
) -> Result<Vec<Arc<dyn Router>>, Failure> {
    specs
        .iter()
        .map(|r| {
            registry::router(&r.name, &r.config, ctx)
                .map(Arc::from)
                .map_err(plugin_failure)
        })
        .collect()
}

/// Idle connections kept for an open loop without a concurrency cap.
const OPEN_POOL: u64 = 1024;

/// A duration run needs a workload drawn without end, and an endless workload
/// needs a duration.
fn check_endless(spec: &RunSpec, info: &WorkloadInfo) -> Result<(), Failure> {
    match (spec.load.duration_secs, info.endless) {
        (Some(_), false) => Err(Failure::bad(format!(
            "load.duration_secs (--duration-secs) draws the workload for as long as needed, and the {} workload ({}) is finite: drop the duration, or use a workload that can go on (finite_batch, synthetic_agents)",
            spec.workload.name, info.mode
        ))),
        (None, true) => Err(Failure::bad(format!(
            "the {} workload goes on without end: give load.duration_secs (--duration-secs)",
            spec.workload.name
        ))),
        // A closed loop runs every trajectory at once unless capped: endless
        // trajectories need the cap.
        (Some(_), true)
            if info.planned_trajectories.is_none()
                && spec.admission.mode == AdmissionMode::ClosedLoop
                && !spec.load.is_open()
                && spec.admission.max_active.is_none() =>
        {
            Err(Failure::bad(format!(
                "the {} workload starts trajectories without end over the duration: cap how many run at once (admission.max_active, --max-active-agents) or give a session rate",
                spec.workload.name
            )))
        }
        _ => Ok(()),
    }
}

/// How `analyze` reads the run: what the flags of a run do not say.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeSettings {
    /// LRU capacities per rank, in tokens.
    pub capacities: Vec<u64>,
    /// Data-parallel ranks (absent: the run's router's, else 1).
    pub ranks: Option<u64>,
    /// `round-robin`, `affinity` or `run` (absent: `run` when the run routes to
    /// ranks, else `affinity`).
    pub routing: Option<String>,
    /// The service time assumed per request, in milliseconds.
    pub latency_ms: f64,
    /// The longest shared prefixes listed.
    pub top: usize,
}

/// What every use of a spec starts with: the spec checked, its plugin files
/// loaded, its seed drawn when absent, and the context plugins are built in.
/// Returns that context, the preparation progress bar, and whether the run is
/// an open loop.
fn prelude(
    spec: &mut RunSpec,
    endless: bool,
) -> Result<(BuildContext, crate::progress::PrepBar, bool, Counted), Failure> {
    check(spec)?;
    crate::plugins::load_plugins(&spec.plugin_files)?;
    let seed = *spec.seed.get_or_insert_with(fresh_seed);
    let open = spec.admission.mode == AdmissionMode::OpenLoop;
    let prep = crate::progress::PrepBar::new(spec.output.quiet);
    let counted = Counted::default();
    let ctx = BuildContext {
        seed,
        order_by_start: open,
        endless,
        progress: prep.hook(),
        tokens: token_counter(spec, counted.clone()),
    };
    Ok((ctx, prep, open, counted))
}

/// The tokenizer a workload's token counter loaded, for the run to reuse.
type Counted = Arc<std::sync::OnceLock<Arc<TokenizerHandle>>>;

/// Counts with the run's tokenizer, loaded on the first call (on a runtime of
/// its own: sources count while they are built, outside the run's runtime).
fn token_counter(spec: &RunSpec, cell: Counted) -> batchbench_contract::registry::TokenCounter {
    let spec = spec.clone();
    batchbench_contract::registry::TokenCounter::new(move |text| {
        let tok = match cell.get() {
            Some(t) => t.clone(),
            None => {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                let t = rt
                    .block_on(load_tokenizer(&spec))
                    .map_err(|f| format!("{:#}", f.error))?;
                cell.get_or_init(|| t).clone()
            }
        };
        tok.ids(text).map_err(|e| e.to_string())
    })
}

/// Analyses the workload of `spec` without sending anything: the same
/// workload, routers and template overheads a run of it would use.
pub fn analyze(
    mut spec: RunSpec,
    settings: &AnalyzeSettings,
) -> Result<batchbench_contract::analysis::Analysis, Failure> {
    use batchbench_engine::analysis::{AnalyzeOptions, Routing};
    if let Some(shard) = spec.shard {
        return Err(Failure::bad(format!(
            "--shard {shard}: analyze describes the whole workload; drop --shard"
        )));
    }
    let (ctx, prep, open, _) = prelude(&mut spec, false)?;
    let built = registry::workload(&spec.workload.name, &spec.workload.config, &ctx);
    let mut source = built.map_err(plugin_failure)?;
    let info = source.info();
    if info.endless {
        return Err(Failure::bad(format!(
            "the {} workload goes on without end: analyze needs a finite one",
            spec.workload.name
        )));
    }
    let mut routers = build_routers(&spec.routers, &ctx)?;
    // A fleet's run picks endpoints by its policy: analysed with it, one
    // cache per endpoint.
    let fleet = endpoint_count(&spec.target);
    let policy = routing_policy(&mut spec, &mut routers, &ctx)?;
    let routed = routers.iter().any(|r| r.dp_rank(0).is_some());
    let routing = match settings.routing.as_deref() {
        None if policy.is_some() => "run",
        None if routed && settings.ranks.is_none() => "run",
        None => "affinity",
        Some(r) => r,
    };
    // The run's own policy (with its config), else a routing policy built
    // by name with its defaults; `None` when the name picks no endpoint.
    let chooser = |name: &str| -> Option<Arc<dyn Router>> {
        if let Some(r) = routers.iter().find(|r| r.chooses_endpoint())
            && policy.as_deref() == Some(name)
        {
            return Some(r.clone());
        }
        registry::router(name, &serde_json::json!({}), &ctx)
            .ok()
            .filter(|r| r.chooses_endpoint())
            .map(Arc::from)
    };
    let mut ranks = settings.ranks;
    let routing = match routing {
        "round-robin" => Routing::RoundRobin,
        "affinity" => Routing::Affinity,
        "run" if policy.is_some() => {
            let name = policy.clone().unwrap_or_default();
            ranks = Some(ranks.unwrap_or(u64::from(fleet)));
            Routing::Policy {
                router: chooser(&name).ok_or_else(|| {
                    Failure::bad(format!("--routing run: {name} picks no endpoint"))
                })?,
                name,
                seed: ctx.seed,
            }
        }
        "run" if !routed => {
            return Err(Failure::bad(
                "--routing run: the run has no router that assigns data-parallel ranks (--dp-rank-perfect-routing, or a --router with dp_rank)",
            ));
        }
        "run" if settings.ranks.is_some() => {
            return Err(Failure::bad(
                "--ranks and --routing run: the run's router sets the ranks; give one or the other",
            ));
        }
        "run" => Routing::Slots(Box::new(move |slot| {
            routers.iter().find_map(|r| r.dp_rank(slot))
        })),
        other => match chooser(other) {
            Some(router) => {
                ranks = Some(ranks.unwrap_or(u64::from(fleet)));
                Routing::Policy {
                    name: other.to_owned(),
                    router,
                    seed: ctx.seed,
                }
            }
            None => {
                return Err(Failure::bad(format!(
                    "--routing {other}: one of round-robin, affinity, run, or a routing policy (round_robin, random, least_outstanding, session_affinity, prefix_affinity)"
                )));
            }
        },
    };
    if settings.ranks == Some(0) {
        return Err(Failure::bad("--ranks must be at least 1"));
    }
    let opts = AnalyzeOptions {
        block_tokens: spec.target.cache_block_tokens(),
        overheads: batchbench_engine::prefix::Overheads {
            initial: spec.template.initial_overhead_tokens,
            turn: spec.template.turn_overhead_tokens,
        },
        capacities: settings.capacities.clone(),
        ranks: ranks.unwrap_or(1),
        routing,
        max_active: spec.admission.max_active,
        open,
        // Sessions released at a rate start evenly at it; a request rate
        // (independent requests) is laid out as the closed loop.
        session_rate: spec
            .load
            .rate
            .filter(|_| spec.load.release == batchbench_contract::spec::Release::Sessions),
        time_scale: spec.admission.time_scale,
        latency_ms: settings.latency_ms,
        top: settings.top,
        seed: ctx.seed,
    };
    let total = info.planned_requests.unwrap_or(0);
    let hook = prep.hook();
    let out = batchbench_engine::analysis::analyze(source.as_mut(), &opts, &mut |done| {
        hook.report("analysing requests", done, total.max(done));
    })
    .map_err(engine_failure);
    prep.finish();
    out
}

/// Loads the run's tokenizer, as bad input when it cannot be read.
pub async fn load_tokenizer(spec: &RunSpec) -> Result<Arc<TokenizerHandle>, Failure> {
    let flag = if spec.target.tokenizer_model.is_some() {
        "--tokenizer-model"
    } else {
        "--model (as tokenizer; pass --tokenizer-model)"
    };
    batchbench_engine::tokens::load(spec.target.tokenizer())
        .await
        .map_err(|e| Failure::bad(format!("{flag}: {e}")))
}

/// Runs `spec` as `profile` describes its reports: the whole path from a spec to
/// a summary. The spec's seed is drawn here when absent, and recorded.
pub fn execute(mut spec: RunSpec, profile: &Profile, mut host: Host) -> Result<Outcome, Failure> {
    let endless = spec.load.duration_secs.is_some();
    let (ctx, prep, open, counted) = prelude(&mut spec, endless)?;
    let seed = ctx.seed;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let rt = runtime(spec.target.client_threads.resolve(&spec.load, cores))?;
    // A local tokenizer loads on the runtime while this thread builds the
    // workload (reading a large manifest takes seconds): both stand between
    // launch and the first request. A hub id waits, so that bad input never
    // starts a download.
    let local = Path::new(spec.target.tokenizer()).exists();
    let named = spec.target.tokenizer_model.is_some() || spec.target.is_sim();
    let preload = (!spec.output.dry_run && local).then(|| {
        let spec = spec.clone();
        rt.spawn(async move { load_tokenizer(&spec).await })
    });
    let built = registry::workload(&spec.workload.name, &spec.workload.config, &ctx);
    prep.finish();
    let mut source = built.map_err(plugin_failure)?;
    let shard = spec.shard();
    if !shard.is_whole() {
        let whole = source.info().planned_trajectories;
        if let Some(t) = whole
            && shard.share(t) == 0
        {
            return Err(Failure::bad(format!(
                "shard (--shard {shard}): the workload has {t} trajectories (users, agents), so this shard would get none; split it over at most {t} shards"
            )));
        }
        source = Box::new(ShardedSource::new(source, shard));
    }
    let info = source.info();
    check_endless(&spec, &info)?;
    let codec =
        registry::codec(&spec.codec.name, &spec.codec.config, &ctx).map_err(plugin_failure)?;
    if let Some(i) = &spec.images {
        i.check().map_err(Failure::bad)?;
    }
    if spec.images.is_some() && !codec.supports_images() {
        return Err(Failure::bad(format!(
            "--images-per-request: the {} codec cannot send images (openai_chat, openai_responses and anthropic_messages can)",
            spec.codec.name
        )));
    }
    // No endpoint named: the codec's API path, recorded as the one used.
    if spec.target.endpoint.is_empty() {
        spec.target.endpoint = codec.endpoint().to_owned();
    }
    let mut routers = build_routers(&spec.routers, &ctx)?;
    let routing = routing_policy(&mut spec, &mut routers, &ctx)?;
    // The GPUs beside the client: refused here, before anything is sent,
    // where the library or a GPU is missing.
    let gpu = match spec.server_metrics.gpu_telemetry {
        Some(batchbench_contract::spec::GpuTelemetry::Nvml) if !spec.output.dry_run => Some(
            batchbench_engine::gpu::Nvml::load()
                .map_err(|e| Failure::bad(format!("--gpu-telemetry nvml: {e}")))?,
        ),
        _ => None,
    };
    // The tokenizer the workload or the codec loaded while built, if one did.
    let counted = counted.get().cloned();
    let mut reps = reporters(&spec, profile, &ctx, !host.quiet_summary)?;
    reps.append(&mut host.reporters);
    // A dry run builds every plugin too, so a bad codec, router or reporter
    // config fails the same way it would fail a run.
    if spec.output.dry_run {
        let stats = match host.plan_out.as_mut() {
            Some(out) => batchbench_engine::run::dry_run(source.as_mut(), out),
            None => batchbench_engine::run::dry_run(source.as_mut(), &mut std::io::stdout().lock()),
        }
        .map_err(engine_failure)?;
        let line = (profile.dry_run_line)(&stats);
        if !line.is_empty() {
            eprintln!("{line}");
        }
        let view = (profile.view)(&recorded_spec(&spec), &info);
        return Ok(Outcome::DryRun { stats, view });
    }

    let needs_tokens = named || source.needs_tokenizer();

    // Closed loop: every trajectory active at once unless capped. Open loop: no
    // cap unless given. The connection pool is sized for what can be active.
    let planned = info.planned_trajectories;
    let cap = match (spec.admission.max_active, open) {
        (Some(n), _) => shard.share(n),
        (None, false) => planned.unwrap_or(u64::from(u32::MAX)),
        (None, true) => u64::from(u32::MAX),
    };
    // A shard's share of the run's caps (checked to be at least one).
    let mut load = spec.load.clone();
    load.max_concurrency = load.max_concurrency.map(|n| shard.share(n));
    load.warmup_requests = load.warmup_requests.map(|n| shard.share(n));
    let start_at_ms = spec.start_at_ms().map_err(Failure::bad)?;
    let pool = match (spec.load.is_open(), load.max_concurrency) {
        (_, Some(n)) => n,
        // Arrivals do not wait for replies: as many connections as are in flight.
        (true, None) => OPEN_POOL,
        (false, None) => cap.min(planned.unwrap_or(cap)),
    }
    .max(1);
    let recorded = recorded_spec(&spec);
    let view = (profile.view)(&recorded, &info);
    let total = info.planned_requests;
    rt.block_on(async move {
        let tokenizer = match preload {
            // The workload counted with it already: no second load.
            Some(task) if counted.is_some() => {
                task.abort();
                counted
            }
            None if counted.is_some() => counted,
            Some(task) if needs_tokens => Some(task.await.map_err(|e| {
                Failure::failed(anyhow::anyhow!("the tokenizer loader failed: {e}"))
            })??),
            Some(_) | None if !needs_tokens => None,
            _ => Some(load_tokenizer(&spec).await?),
        };
        let t = &spec.target;
        let mut sims = Vec::new();
        if t.is_sim() {
            let cfg =
                sim_config(t.host.first()).map_err(|e| Failure::bad(format!("--host: {e}")))?;
            let tok = tokenizer.clone().ok_or_else(|| {
                Failure::bad("--host sim:// needs a tokenizer (--tokenizer-model)")
            })?;
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
            for i in 0..cfg.replicas {
                sims.push(
                    Sim::start(cfg.replica(i), tok.clone(), addr)
                        .await
                        .map_err(|e| {
                            Failure::failed(anyhow::anyhow!("cannot start the simulator: {e}"))
                        })?,
                );
            }
        }
        let bases: Vec<String> = if sims.is_empty() {
            t.host.all().to_vec()
        } else {
            sims.iter().map(Sim::url).collect()
        };
        let api_key = match sims.first() {
            Some(_) => None,
            None => host
                .api_key
                .clone()
                .or_else(|| std::env::var(&t.api_key_env).ok())
                .filter(|k| !k.is_empty()),
        };
        let ca_pem = t
            .ca_cert
            .as_deref()
            .map(TlsConfig::read_ca)
            .transpose()
            .map_err(|e| Failure::bad(e.0))?;
        let target = |base: &str| TargetConfig {
            url: join_url(base, &t.endpoint),
            api_key: api_key.clone(),
            api_key_header: codec.api_key_header().map(str::to_owned),
            timeout: Duration::from_secs_f64(t.request_timeout_secs),
            max_retries: t.max_retries,
            retry_delay: Duration::from_millis(spec.target.retry_delay_ms),
            // The API's own headers, then the run's, which win.
            headers: codec
                .headers()
                .into_iter()
                .chain(t.headers.clone())
                .collect(),
            pool_size: usize::try_from(pool).unwrap_or(usize::MAX),
            verbose: spec.output.verbose,
            tls: TlsConfig {
                ca_pem: ca_pem.clone(),
                insecure: t.insecure,
            },
            max_response_bytes: t
                .max_response_bytes
                .unwrap_or(batchbench_engine::transport::MAX_RESPONSE_BYTES),
        };
        let mut transports = Vec::with_capacity(bases.len());
        for base in &bases {
            transports.push(
                Transport::new(target(base))
                    .map_err(|e| Failure::bad(format!("--host/--endpoint: {e}")))?,
            );
        }
        // A host (the Python package) cancels through its own token; the CLI
        // cancels on Ctrl+C.
        let cancel = host.cancel.unwrap_or_else(|| {
            let c = CancellationToken::new();
            cancel_on_ctrl_c(c.clone());
            c
        });
        let opts = EngineOptions {
            model: t.model.clone(),
            seed,
            max_active: usize::try_from(cap).unwrap_or(usize::MAX),
            stream: t.stream,
            admission: spec.admission.mode,
            time_scale: spec.admission.time_scale,
            initial_overhead_tokens: spec.template.initial_overhead_tokens,
            turn_overhead_tokens: spec.template.turn_overhead_tokens,
            cache_block_tokens: spec.target.cache_block_tokens(),
            load,
            shard,
            start_at_ms,
            images: spec.images,
            token_times: spec.output.token_times,
            slo: spec.slo.clone(),
            max_failure_rate: spec.max_failure_rate,
            server_metrics: spec
                .server_metrics
                .urls
                .iter()
                .flat_map(|u| match u.as_str() {
                    "target" => bases.iter().map(|b| join_url(b, "/metrics")).collect(),
                    _ => vec![u.clone()],
                })
                .collect(),
            routing,
            metrics_interval: Duration::from_secs_f64(spec.server_metrics.interval_secs),
            ..EngineOptions::default()
        };
        let quiet = spec.output.quiet;
        let mut transports = transports.into_iter();
        let first = transports
            .next()
            .ok_or_else(|| Failure::bad("--host: no host given"))?;
        let mut engine = Engine::new(opts, first, Arc::from(codec))
            .record(view, recorded)
            .cancel_token(cancel)
            .reporter(Box::new(Progress::new(total, quiet)));
        for t in transports {
            engine = engine.endpoint(t);
        }
        if let Some(g) = gpu {
            engine = engine.gpu_telemetry(g);
        }
        for r in routers {
            engine = engine.router(r);
        }
        for r in reps {
            engine = engine.reporter(r);
        }
        if let Some(t) = tokenizer {
            engine = engine.tokenizer(t);
        }
        let out = run_source(engine, source).await;
        for sim in sims {
            sim.stop().await;
        }
        out.map(|o| Outcome::Ran(Box::new(o)))
    })
}

async fn run_source(engine: Engine, source: Box<dyn WorkloadSource>) -> Result<RunOutput, Failure> {
    engine.run(source).await.map_err(engine_failure)
}
