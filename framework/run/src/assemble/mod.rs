//! The one assembly: a [`RunSpec`] becomes a running engine. Both commands and the
//! Python package come here; nothing else builds a workload, a codec, a router, a
//! reporter, a transport or an engine.
//!
//! Order, so that bad input is found before anything is sent: the spec is
//! checked (output paths included), plugin files are loaded, the workload is
//! built (a local tokenizer loads meanwhile), then the codec, routers and
//! reporters; then the target (the in-process simulator for `sim://`), the
//! transport, and the engine, whose reporters all start before the clock does.
//!
//! In modules by step: `check` (the spec, before anything is loaded), `target`
//! (the hosts resolved once into a [`Target`]), `build` (routers, reporters,
//! the recorded spec), `execute` (a run, or a dry run's plan) and `analysis`
//! (`analyze`'s use of the same spec).

mod analysis;
mod build;
mod check;
mod execute;
mod target;

pub use analysis::analyze;
pub(crate) use build::reporters;
pub use check::{check, check_output, check_output_dir};
pub use execute::execute;
pub use target::Target;

use crate::exit::Failure;
use batchbench_contract::plugin::{Reporter, WorkloadInfo};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::spec::{AdmissionMode, RunSpec};
use batchbench_engine::run::{DryRunStats, RunOutput};
use batchbench_engine::tokens::TokenizerHandle;
use std::sync::Arc;
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

/// What the caller of a run (a command, the Python package, a series) adds to
/// its spec: the secrets and hooks that are not part of it.
#[derive(Default)]
pub struct RunHooks {
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

impl std::fmt::Debug for RunHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHooks")
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
    /// Reasoning tokens assumed per reply (part of its output): the cache
    /// figures are then taken under both choices of what goes back.
    pub reasoning_tokens: Option<u32>,
    /// LoRA adapter capacities per rank to count a mix's adapter loads under.
    pub max_loras: Vec<u32>,
}

/// What every use of a spec starts with: the spec checked and its target
/// resolved, its plugin files loaded, its seed drawn when absent, and the
/// context plugins are built in.
struct Prelude {
    /// The context plugins are built in.
    ctx: BuildContext,
    /// The preparation progress bar.
    prep: crate::progress::PrepBar,
    /// Whether the run is an open loop.
    open: bool,
    /// The tokenizer the workload's token counter loaded, if it did.
    counted: Counted,
    /// The target, resolved once.
    target: Target,
}

fn prelude(spec: &mut RunSpec, endless: bool) -> Result<Prelude, Failure> {
    let target = check(spec)?;
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
    Ok(Prelude {
        ctx,
        prep,
        open,
        counted,
        target,
    })
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
