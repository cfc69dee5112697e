//! `csv`: appends one row per run to a CSV file, writing the header when the file
//! is new. The columns are the caller's: each names a field of the run record
//! ([`RunInfo::fields`]), so the reporter knows nothing of the command that uses
//! it. A column that names no field is refused before anything is sent.

use batchbench_contract::plugin::{PluginError, Reporter};
use batchbench_contract::record::{RunInfo, Summary};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::PathBuf;

/// Config of [`CsvReport`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// Output file; created with a header, or appended to.
    pub path: PathBuf,
    /// The columns in order, each `name` (a field of the run record) or
    /// `name=field` (a column named differently from its field). Empty: every
    /// field, by name.
    #[serde(default)]
    pub columns: Vec<String>,
}

/// One column: its header and the record field it shows.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    field: String,
}

/// Writes the CSV row.
#[derive(Debug)]
pub struct CsvReport {
    cfg: CsvConfig,
    columns: Vec<Column>,
}

impl CsvReport {
    /// Validates the config.
    pub fn new(cfg: CsvConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let mut columns = Vec::with_capacity(cfg.columns.len());
        for c in &cfg.columns {
            let (name, field) = c.split_once('=').unwrap_or((c, c));
            if name.is_empty() || field.is_empty() || name.contains(',') {
                return Err(PluginError::Config {
                    plugin: "csv".into(),
                    message: format!("columns: {c:?} is not `name` or `name=field`"),
                });
            }
            columns.push(Column {
                name: name.to_owned(),
                field: field.to_owned(),
            });
        }
        Ok(Self { cfg, columns })
    }

    fn header(&self) -> String {
        self.columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "csv".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }
}

/// Why a file with header `theirs` cannot take rows of columns `ours`.
fn header_mismatch(theirs: &str, ours: &str) -> String {
    let (t, o) = (theirs.split(',').count(), ours.split(',').count());
    if ours.starts_with(theirs) && ours[theirs.len()..].starts_with(',') {
        format!(
            "the file was written by an earlier version: its {t} columns are the first {t} of this run's {o}, so a row of this run would not line up; choose a new path"
        )
    } else {
        format!(
            "the file exists with other columns ({t} of them; this run writes {o}); choose a new path"
        )
    }
}

impl Reporter for CsvReport {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        // The set of field names does not depend on the figures: check every
        // column against it now, so that a column that names no field fails
        // before anything is sent instead of leaving an empty cell.
        let fields = run.fields(&Summary::default());
        if self.columns.is_empty() {
            self.columns = fields
                .keys()
                .map(|k| Column {
                    name: k.clone(),
                    field: k.clone(),
                })
                .collect();
        }
        let unknown: Vec<&str> = self
            .columns
            .iter()
            .filter(|c| !fields.contains_key(&c.field))
            .map(|c| c.field.as_str())
            .collect();
        if !unknown.is_empty() {
            return Err(PluginError::Config {
                plugin: "csv".into(),
                message: format!(
                    "columns name no field of the run record: {} (fields: {})",
                    unknown.join(", "),
                    fields
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        // Fail before anything is sent when the file cannot take our row.
        if let Ok(f) = std::fs::File::open(&self.cfg.path) {
            let mut first = String::new();
            std::io::BufReader::new(f)
                .read_line(&mut first)
                .map_err(|e| self.fail(e))?;
            let first = first.trim_end();
            let ours = self.header();
            if !first.is_empty() && first != ours {
                return Err(self.fail(header_mismatch(first, &ours)));
            }
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cfg.path)
            .map_err(|e| self.fail(e))?;
        Ok(())
    }

    fn on_finish(&mut self, info: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let values: BTreeMap<String, String> = info.fields(summary);
        let empty = std::fs::metadata(&self.cfg.path).map_or(true, |m| m.len() == 0);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.cfg.path)
            .map_err(|e| self.fail(e))?;
        let mut w = csv::Writer::from_writer(file);
        if empty {
            w.write_record(self.columns.iter().map(|c| &c.name))
                .map_err(|e| self.fail(e))?;
        }
        let row: Vec<&str> = self
            .columns
            .iter()
            .map(|c| values.get(&c.field).map_or("", String::as_str))
            .collect();
        w.write_record(&row).map_err(|e| self.fail(e))?;
        w.flush().map_err(|e| self.fail(e))?;
        Ok(())
    }
}

batchbench_contract::register_reporter! {
    name: "csv",
    description: "appends one CSV row per run (header on a new file): the run record's fields you name as columns",
    example: r#"{"path": "results.csv", "columns": ["timestamp", "model", "total_requests", "rps=requests_per_second", "latency_p99_ms"]}"#,
    config: CsvConfig,
    build: CsvReport::new,
}

#[cfg(test)]
mod tests {
    use super::header_mismatch;

    #[test]
    fn a_shorter_legacy_header_is_named_as_an_earlier_version() {
        let m = header_mismatch("a,b", "a,b,c");
        assert!(m.contains("earlier version"), "{m}");
        assert!(m.contains("first 2 of this run's 3"), "{m}");
        let m = header_mismatch("a,x", "a,b,c");
        assert!(
            m.contains("other columns (2 of them; this run writes 3)"),
            "{m}"
        );
        // A prefix that ends inside a column name is not an earlier version.
        let m = header_mismatch("a,b", "a,bc");
        assert!(m.contains("other columns"), "{m}");
    }
}
