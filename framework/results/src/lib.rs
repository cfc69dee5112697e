//! Reading results directories, and what is made from them without re-running
//! anything: the HTML report ([`report`]), the comparison of two runs as a CI
//! gate ([`compare`]) and the llm-d Benchmark Report ([`llmd`]).
//!
//! A run's directory is described in [`batchbench_contract::results`]; a series'
//! (`sweep`, `capacity`) holds `index.json` and a run directory per run. Every
//! file is checked as it is read: a missing directory, one from a newer format
//! version, a run that never finished writing (no `run.json`) or a truncated or
//! malformed file is a [`ResultsError`] naming the file (and the line).

pub mod analysis;
pub mod compare;
pub mod llmd;
pub mod report;
pub mod svg;
pub mod yaml;

use batchbench_contract::results::series::{SERIES_VERSION, SeriesDoc};
use batchbench_contract::results::{self, Histograms, RunDoc, TimeSeries, files};
use serde::Deserialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Why a results directory cannot be read. Each is bad input (exit 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResultsError {
    /// Nothing at the path.
    #[error("{0}: no such directory")]
    Missing(PathBuf),
    /// A directory, but not one a run or a series wrote.
    #[error(
        "{0}: not a results directory (no run.json or index.json): give a directory written by --output-dir, sweep or capacity"
    )]
    NotResults(PathBuf),
    /// The run never finished writing its results.
    #[error(
        "{0}: incomplete results: no run.json, so the run that wrote them never finished (killed, or still running)"
    )]
    Incomplete(PathBuf),
    /// Written by a newer format version.
    #[error(
        "{path}: format version {version}, newer than this build reads ({supported}): use a newer batchbench"
    )]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A file that does not parse.
    #[error("{path}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The 1-based line, for line files.
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A file that cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// The fields of a `requests.jsonl` line that reports read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RequestLine {
    /// Request index within the trajectory (the turn of an agent).
    pub request_index: u64,
    /// Succeeded.
    pub ok: bool,
    /// A warmup request (left out of every figure).
    pub warmup: bool,
    /// Send to last byte.
    pub latency_ms: f64,
    /// Time to first token (streamed).
    pub ttft_ms: Option<f64>,
    /// The server's prompt token count.
    pub prompt_tokens: Option<u64>,
    /// The plan's prompt target.
    pub planned_prompt_tokens: Option<u64>,
    /// The server's output token count.
    pub completion_tokens: Option<u64>,
    /// Server-reported cached prompt tokens.
    pub server_cached_tokens: Option<u64>,
    /// The perfect-prefix-cache estimate.
    pub estimated_cached_tokens: u64,
    /// The estimate of one perfect cache shared by every request.
    pub global_estimated_cached_tokens: u64,
    /// When it ended, milliseconds from the clock start.
    pub end_ms: f64,
    /// The endpoint of a fleet it went to.
    pub endpoint: Option<u32>,
    /// The model of a mix it went to.
    pub model: Option<String>,
}

/// The fields of a `server_metrics.jsonl` line that reports read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ServerLine {
    /// Seconds from the clock start.
    pub t: f64,
    /// The URL scraped.
    pub url: String,
    /// Why the scrape failed.
    pub error: Option<String>,
    /// The common metrics.
    pub common: std::collections::BTreeMap<String, f64>,
}

/// One run's results directory, read whole.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// Where it was read from.
    pub dir: PathBuf,
    /// `run.json`.
    pub doc: RunDoc,
    /// `histograms.json`.
    pub histograms: Histograms,
    /// `timeseries.json`.
    pub timeseries: TimeSeries,
    /// `requests.jsonl`.
    pub requests: Vec<RequestLine>,
    /// `server_metrics.jsonl` (empty when the run scraped none).
    pub server: Vec<ServerLine>,
}

/// A series' results directory.
#[derive(Debug, Clone)]
pub struct SeriesDir {
    /// Where it was read from.
    pub dir: PathBuf,
    /// `index.json`.
    pub doc: SeriesDoc,
    /// Each point's first run, in the index's order.
    pub runs: Vec<RunDir>,
}

/// A results directory of either kind.
#[derive(Debug, Clone)]
pub enum Loaded {
    /// One run's.
    Run(Box<RunDir>),
    /// A series'.
    Series(Box<SeriesDir>),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ResultsError + '_ {
    move |source| ResultsError::Io {
        path: path.to_owned(),
        source,
    }
}

fn invalid(path: &Path, line: Option<usize>, message: impl std::fmt::Display) -> ResultsError {
    ResultsError::Invalid {
        path: path.to_owned(),
        line,
        message: message.to_string(),
    }
}

/// Reads a whole JSON file; a truncated or malformed one is an error naming it.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ResultsError> {
    let text = std::fs::read(path).map_err(io(path))?;
    serde_json::from_slice(&text).map_err(|e| {
        let what = if e.is_eof() {
            "truncated: the file ends inside the document".to_owned()
        } else {
            e.to_string()
        };
        invalid(path, None, what)
    })
}

/// The format version of a document, checked before the rest is read.
fn check_version(path: &Path, version: Option<u64>, supported: u32) -> Result<(), ResultsError> {
    match version {
        None => Err(invalid(path, None, "no format version")),
        Some(v) if v > u64::from(supported) => Err(ResultsError::Newer {
            path: path.to_owned(),
            version: u32::try_from(v).unwrap_or(u32::MAX),
            supported,
        }),
        Some(_) => Ok(()),
    }
}

/// Reads a run's or a series' results directory.
pub fn load(dir: &Path) -> Result<Loaded, ResultsError> {
    if !dir.exists() {
        return Err(ResultsError::Missing(dir.to_owned()));
    }
    if !dir.is_dir() {
        return Err(invalid(dir, None, "not a directory"));
    }
    if dir.join(files::SERIES_INDEX).is_file() {
        return load_series(dir).map(|s| Loaded::Series(Box::new(s)));
    }
    load_run(dir).map(|r| Loaded::Run(Box::new(r)))
}

/// Reads a run directory's `run.json` alone, checked as [`load_run`] checks it.
pub fn load_doc(dir: &Path) -> Result<RunDoc, ResultsError> {
    if !dir.is_dir() {
        return Err(ResultsError::Missing(dir.to_owned()));
    }
    let run_path = dir.join(files::RUN);
    if !run_path.is_file() {
        return Err(if dir.join(files::REQUESTS).exists() {
            ResultsError::Incomplete(dir.to_owned())
        } else {
            ResultsError::NotResults(dir.to_owned())
        });
    }
    let raw: serde_json::Value = read_json(&run_path)?;
    if raw.get("format").and_then(|f| f.as_str()) != Some(results::FORMAT) {
        return Err(invalid(
            &run_path,
            None,
            format!(
                "not a batchbench results record (format is not \"{}\")",
                results::FORMAT
            ),
        ));
    }
    check_version(
        &run_path,
        raw.get("version").and_then(serde_json::Value::as_u64),
        results::VERSION,
    )?;
    serde_json::from_value(raw).map_err(|e| invalid(&run_path, None, e))
}

/// Reads one run's results directory.
pub fn load_run(dir: &Path) -> Result<RunDir, ResultsError> {
    let doc = load_doc(dir)?;
    let histograms = read_json(&dir.join(files::HISTOGRAMS))?;
    let timeseries = read_json(&dir.join(files::TIMESERIES))?;
    let requests = read_lines(&dir.join(files::REQUESTS))?;
    let server_path = dir.join(files::SERVER_METRICS);
    let server = if server_path.exists() {
        read_lines(&server_path)?
    } else {
        Vec::new()
    };
    Ok(RunDir {
        dir: dir.to_owned(),
        doc,
        histograms,
        timeseries,
        requests,
        server,
    })
}

/// Reads a JSON-lines file whole; a malformed line (a truncated last one
/// included) is an error naming it.
pub fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, ResultsError> {
    let mut out = Vec::new();
    for_each_line(path, |v| {
        out.push(v);
        Ok(())
    })?;
    Ok(out)
}

/// Reads a JSON-lines file line by line, in bounded memory, handing each
/// value to `f`; a malformed line (a truncated last one included), or an
/// error of `f`, is an error naming the file and the line.
pub fn for_each_line<T: serde::de::DeserializeOwned>(
    path: &Path,
    mut f: impl FnMut(T) -> Result<(), String>,
) -> Result<(), ResultsError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        let read = reader.read_until(b'\n', &mut buf).map_err(io(path))?;
        if read == 0 {
            return Ok(());
        }
        n += 1;
        if buf.last() != Some(&b'\n') {
            return Err(invalid(
                path,
                Some(n),
                "truncated: the last line does not end (the file was cut short)",
            ));
        }
        let line = buf.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let value = serde_json::from_slice(line).map_err(|e| invalid(path, Some(n), e))?;
        f(value).map_err(|e| invalid(path, Some(n), e))?;
    }
}

/// Reads a series' results directory: its index and each point's first run.
pub fn load_series(dir: &Path) -> Result<SeriesDir, ResultsError> {
    let path = dir.join(files::SERIES_INDEX);
    let raw: serde_json::Value = read_json(&path)?;
    check_version(
        &path,
        raw.get("version").and_then(serde_json::Value::as_u64),
        SERIES_VERSION,
    )?;
    let doc: SeriesDoc = serde_json::from_value(raw).map_err(|e| invalid(&path, None, e))?;
    let runs = doc
        .points
        .iter()
        .filter_map(|p| p.runs.first())
        .map(|r| load_run(&dir.join(r)))
        .collect::<Result<_, _>>()?;
    Ok(SeriesDir {
        dir: dir.to_owned(),
        doc,
        runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_files_name_the_bad_line() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = d.path().join("r.jsonl");
        std::fs::write(&p, "{\"ok\":true}\n\n{\"ok\":tru\n").unwrap_or_else(|e| panic!("{e}"));
        let e = read_lines::<RequestLine>(&p).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("r.jsonl:3:")),
            "{e:?}"
        );
        std::fs::write(&p, "{\"ok\":true}\n{\"ok\":").unwrap_or_else(|e| panic!("{e}"));
        let e = read_lines::<RequestLine>(&p).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains(":2: truncated")),
            "{e:?}"
        );
        std::fs::write(&p, "{\"ok\":true,\"latency_ms\":3.5}\n").unwrap_or_else(|e| panic!("{e}"));
        let v = read_lines::<RequestLine>(&p).unwrap_or_default();
        assert_eq!(v.len(), 1);
        assert!(v[0].ok && (v[0].latency_ms - 3.5).abs() < 1e-12);
    }

    #[test]
    fn a_directory_is_checked_before_it_is_read() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let err = |p: &Path| load(p).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&d.path().join("nope")).contains("no such directory"));
        assert!(err(d.path()).contains("not a results directory"));
        std::fs::write(d.path().join("requests.jsonl"), "").unwrap_or_else(|e| panic!("{e}"));
        assert!(err(d.path()).contains("incomplete results"));
        std::fs::write(
            d.path().join("run.json"),
            r#"{"format": "batchbench-results", "version": 99}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = err(d.path());
        assert!(e.contains("run.json: format version 99, newer"), "{e}");
        std::fs::write(
            d.path().join("run.json"),
            r#"{"format": "batchbench-results", "vers"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(err(d.path()).contains("run.json: truncated"));
    }
}
