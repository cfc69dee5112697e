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
    fn on_request(&mut self, rec: &RequestRecord<'_>) {
        self.bar.inc(1);
        if rec.failure.is_some() {
            self.bar.set_message("(failures: see summary)");
        }
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
