//! ClickHouse: `batchbench export-plans` (a window of prompt-chain records into a
//! version-2 replay manifest) and the `clickhouse` workload source (the same
//! reconstruction, replayed straight from the warehouse).
//!
//! Rows come from ClickHouse through the official `clickhouse` crate ([`fetch`]) or
//! from a rows file (`--rows-jsonl`, [`rows`]); [`reconstruct`] applies the session
//! rules; the manifest is validated by the replay loader before it is renamed into
//! place, so a failed export never leaves a file.

pub mod fetch;
pub mod reconstruct;
pub mod rows;

/// The plugins this crate registers, by kind: the contract the registry test checks.
pub const PLUGINS: &[(&str, &str)] = &[("workload", "clickhouse")];

use batchbench_contract::manifest::{self as replay, Replay, ReplayConfig};
use batchbench_contract::plan::Trajectory;
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::timefmt;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The flags of `batchbench export-plans`.
#[derive(Debug, Clone, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportArgs {
    /// Window start (RFC 3339, inclusive).
    #[arg(long)]
    pub start: String,
    /// Window end (RFC 3339, exclusive).
    #[arg(long)]
    pub end: String,
    /// The manifest to write (replaced only once the export validates).
    #[arg(long, value_name = "PATH", required = true)]
    #[serde(default)]
    pub output: Option<PathBuf>,
    /// Keep only this model alias.
    #[arg(long)]
    #[serde(default)]
    pub model: Option<String>,
    /// Keep only this principal (UUID).
    #[arg(long)]
    #[serde(default)]
    pub principal_id: Option<String>,
    /// Keep only requests served by this backend.
    #[arg(long)]
    #[serde(default)]
    pub served_by: Option<String>,
    /// Fraction of trajectories kept (deterministic, seeded).
    #[arg(long, default_value_t = 1.0)]
    #[serde(default = "one")]
    pub sample: f64,
    /// Sampling seed.
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub seed: u64,
    /// Sample within power-of-two session-length buckets.
    #[arg(long)]
    #[serde(default)]
    pub stratify_by_session_length: bool,
    /// Divides start offsets and delays.
    #[arg(long, default_value_t = 1.0)]
    #[serde(default = "one")]
    pub time_scale: f64,
    /// How far back a request's parent may lie, in hours.
    #[arg(long, default_value_t = 24.0)]
    #[serde(default = "day")]
    pub link_window_hours: f64,
    /// The chains table or view.
    #[arg(long, default_value = "clay.prompt_chains_current")]
    #[serde(default = "chains")]
    pub chains_table: String,
    /// Read the base table `clay.prompt_chains` with FINAL instead of the view.
    #[arg(long)]
    #[serde(default)]
    pub chains_final: bool,
    /// The analytics table.
    #[arg(long, default_value = "clay.http_analytics")]
    #[serde(default = "analytics")]
    pub analytics_table: String,
    /// The analytics column that bounds its side of the join.
    #[arg(long, default_value = "timestamp")]
    #[serde(default = "ts_column")]
    pub analytics_ts_column: String,
    /// Also save the fetched rows (to re-export offline with --rows-jsonl).
    #[arg(long, value_name = "PATH")]
    #[serde(default)]
    pub dump_rows_jsonl: Option<PathBuf>,
    /// Re-export from a rows file instead of ClickHouse.
    #[arg(long, value_name = "PATH")]
    #[serde(default)]
    pub rows_jsonl: Option<PathBuf>,
}

fn one() -> f64 {
    1.0
}
fn day() -> f64 {
    24.0
}
fn chains() -> String {
    "clay.prompt_chains_current".into()
}
fn analytics() -> String {
    "clay.http_analytics".into()
}
fn ts_column() -> String {
    "timestamp".into()
}

/// Why an export failed: bad flags (exit 2) or a failed export (exit 1).
#[derive(Debug)]
pub enum ExportError {
    /// A flag is wrong; nothing was read.
    BadInput(String),
    /// The export could not complete; no file was written.
    Failed(String),
}

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadInput(m) | Self::Failed(m) => f.write_str(m),
        }
    }
}

/// Validated options plus the manifest lines.
fn options(a: &ExportArgs) -> Result<reconstruct::Options, ExportError> {
    let bad = |m: String| ExportError::BadInput(m);
    let start = timefmt::parse_ms(&a.start).map_err(|e| bad(format!("--start: {e}")))?;
    let end = timefmt::parse_ms(&a.end).map_err(|e| bad(format!("--end: {e}")))?;
    if end <= start {
        return Err(ExportError::Failed(format!(
            "--end ({}) must be after --start ({})",
            a.end, a.start
        )));
    }
    if !(a.sample.is_finite() && (0.0..=1.0).contains(&a.sample)) {
        return Err(bad(format!(
            "--sample must be a fraction between 0 and 1, got {}",
            a.sample
        )));
    }
    if !(a.time_scale.is_finite() && a.time_scale > 0.0) {
        return Err(bad(format!(
            "--time-scale must be a positive number, got {}",
            a.time_scale
        )));
    }
    if !(a.link_window_hours.is_finite() && a.link_window_hours >= 0.0) {
        return Err(bad(format!(
            "--link-window-hours must be a number >= 0, got {}",
            a.link_window_hours
        )));
    }
    for (flag, name) in [
        ("--chains-table", &a.chains_table),
        ("--analytics-table", &a.analytics_table),
        ("--analytics-ts-column", &a.analytics_ts_column),
    ] {
        fetch::identifier(flag, name).map_err(bad)?;
    }
    Ok(reconstruct::Options {
        start_ms: start,
        end_ms: end,
        link_window_ms: (a.link_window_hours * 3_600_000.0).round() as i64,
        time_scale: a.time_scale,
        model: a.model.clone(),
        // UUIDs compare in ClickHouse's lower-case text form.
        principal_id: a.principal_id.as_ref().map(|p| p.to_ascii_lowercase()),
        served_by: a.served_by.clone(),
        sample: a.sample,
        seed: a.seed,
        stratify: a.stratify_by_session_length,
    })
}

/// Streams the rows into `builder`: from the rows file, or from ClickHouse (also
/// saving them when asked).
fn load_rows(
    a: &ExportArgs,
    o: &reconstruct::Options,
    builder: &mut reconstruct::Builder,
) -> Result<(), ExportError> {
    if let Some(p) = &a.rows_jsonl {
        return rows::for_each_jsonl(p, |r| builder.push(r)).map_err(ExportError::Failed);
    }
    let conn = fetch::Connection::from_env().map_err(ExportError::BadInput)?;
    let src = fetch::Source {
        // --chains-final reads the base table under the default view.
        chains_table: if a.chains_final && a.chains_table == chains() {
            "clay.prompt_chains".into()
        } else {
            a.chains_table.clone()
        },
        chains_final: a.chains_final,
        analytics_table: a.analytics_table.clone(),
        analytics_ts_column: a.analytics_ts_column.clone(),
    };
    let filters = fetch::Filters {
        model: a.model.clone(),
        principal_id: a.principal_id.clone(),
        served_by: a.served_by.clone(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ExportError::Failed(e.to_string()))?;
    let window = (o.start_ms, o.end_ms, o.link_window_ms);
    let Some(dump) = &a.dump_rows_jsonl else {
        return rt
            .block_on(fetch::fetch(&conn, &src, &filters, window, |r| {
                builder.push(r);
                Ok(())
            }))
            .map_err(ExportError::Failed);
    };
    let shown = dump.display().to_string();
    write_atomically(
        dump,
        |f| {
            rt.block_on(fetch::fetch(&conn, &src, &filters, window, |r| {
                rows::write_line(&r, f).map_err(|e| format!("{shown}: {e}"))?;
                builder.push(r);
                Ok(())
            }))
        },
        |_| Ok(()),
    )
    .map(drop)
    .map_err(ExportError::Failed)
}

/// Writes `path` through a temporary file in its directory: `write` fills it,
/// `check` vets the finished file, and only then is it renamed into place. On any
/// failure the temporary file is removed and nothing is left behind.
fn write_atomically<R, T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<R, String>,
    check: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<(R, T), String> {
    let tmp = temp_path(path);
    let shown = path.display();
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(|e| format!("{shown}: {e}"))?;
        let mut f = std::io::BufWriter::with_capacity(1 << 20, file);
        let r = write(&mut f)?;
        f.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .map_err(|e| format!("{shown}: {e}"))?;
        let t = check(&tmp)?;
        std::fs::rename(&tmp, path).map_err(|e| format!("{shown}: {e}"))?;
        Ok((r, t))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The temporary files an export writes before renaming them into place (to remove
/// when it is interrupted).
pub fn temp_files(a: &ExportArgs, output: &Path) -> Vec<PathBuf> {
    let mut v = vec![temp_path(output)];
    if let Some(d) = &a.dump_rows_jsonl {
        v.push(temp_path(d));
    }
    v
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "manifest".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

/// The export, start to end: rows, reconstruction, validation, the manifest.
/// Returns the summary; writes `output` only when everything succeeded.
pub fn export(a: &ExportArgs, output: &Path) -> Result<reconstruct::Stats, ExportError> {
    export_loaded(a, output, false).map(|(stats, _)| stats)
}

/// [`export`], also returning the manifest as the replay loader validated it (so
/// a replay of it needs no second parse).
fn export_loaded(
    a: &ExportArgs,
    output: &Path,
    order_by_start: bool,
) -> Result<(reconstruct::Stats, replay::Manifest), ExportError> {
    let o = options(a)?;
    let mut builder = reconstruct::Builder::new(&o).map_err(ExportError::BadInput)?;
    load_rows(a, &o, &mut builder)?;
    let plan = builder.finish();
    if plan.is_empty() {
        return Err(ExportError::Failed(format!(
            "the export holds no trajectories (window {} .. {}); nothing was written\n{}",
            a.start,
            a.end,
            plan.stats.report()
        )));
    }
    write_atomically(
        output,
        // The plan (and its rows) is dropped once written, before the loader runs.
        move |f| {
            let mut plan = plan;
            plan.write(f)
                .map_err(|e| format!("{}: {e}", output.display()))?;
            Ok(plan.stats)
        },
        // Validated with the replay loader's own rules before the file exists.
        |tmp| {
            replay::load(&ReplayConfig {
                path: tmp.to_owned(),
                order_by_start,
                initial_overhead_tokens: 0,
                turn_overhead_tokens: 0,
            })
            .map_err(|e| format!("the export does not validate as a replay manifest: {e}"))
        },
    )
    .map_err(ExportError::Failed)
}

/// The `clickhouse` workload: the export's reconstruction, replayed directly.
/// Config: the export flags (snake_case), without `output`; `order_by_start` for
/// open-loop admission.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// The export's options.
    #[serde(flatten)]
    pub export: ExportArgs,
    /// Yield trajectories by start offset (implied under open-loop admission).
    #[serde(default)]
    pub order_by_start: bool,
}

/// Replays a warehouse window without an intermediate file of the user's.
#[derive(Debug)]
pub struct ClickHouseWorkload {
    inner: Replay,
    /// The private manifest's directory, removed on drop.
    _dir: tempfile::TempDir,
}

impl ClickHouseWorkload {
    /// Exports into a private temporary manifest and loads it.
    pub fn new(cfg: WorkloadConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        let dir = tempfile::Builder::new()
            .prefix("batchbench-clickhouse-")
            .tempdir()
            .map_err(|e| PluginError::Plan(format!("cannot create a temporary directory: {e}")))?;
        let path = dir.path().join("plans.jsonl");
        let order_by_start = cfg.order_by_start || ctx.order_by_start;
        let (stats, manifest) = export_loaded(&cfg.export, &path, order_by_start)
            .map_err(|e| PluginError::Plan(e.to_string()))?;
        eprintln!("{}", stats.report());
        Ok(Self {
            inner: Replay::from_manifest(manifest, path),
            _dir: dir,
        })
    }
}

impl WorkloadSource for ClickHouseWorkload {
    fn info(&self) -> WorkloadInfo {
        WorkloadInfo {
            mode: "clickhouse".into(),
            ..self.inner.info()
        }
    }

    fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
        self.inner.next_trajectory()
    }

    fn final_info(&mut self) -> WorkloadInfo {
        WorkloadInfo {
            mode: "clickhouse".into(),
            ..self.inner.final_info()
        }
    }
}

batchbench_contract::register_workload! {
    name: "clickhouse",
    description: "sessions reconstructed from a ClickHouse prompt-chain window (CLICKHOUSE_URL), replayed directly",
    example: r#"{"start": "2026-09-01T09:00:00Z", "end": "2026-09-01T10:00:00Z", "rows_jsonl": "examples/clickhouse/rows.jsonl", "model": "vendor/model-a", "sample": 0.5, "seed": 7}"#,
    config: WorkloadConfig,
    build: ClickHouseWorkload::new,
}
