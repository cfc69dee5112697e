//! `batchbench report DIR... -o report.html`: reads results directories (a
//! run's `--output-dir`, a sweep's or a capacity search's) and writes one
//! self-contained HTML file; nothing is re-run.

use crate::exit::{EXIT_OK, Failure};
use batchbench_results::report::{Input, render};
use std::path::{Path, PathBuf};

/// The flags of `batchbench report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Results directories: a run's (--output-dir), a sweep's or a capacity
    /// search's. Several overlay, one colour per run.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// The HTML file to write (replaced).
    #[arg(short, long, value_name = "PATH", default_value = "report.html")]
    pub output: PathBuf,
}

/// Each directory's label: its name, numbered when two share one.
fn labels(dirs: &[PathBuf]) -> Vec<String> {
    let base: Vec<String> = dirs
        .iter()
        .map(|d| {
            std::path::absolute(d)
                .ok()
                .and_then(|a| a.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| d.display().to_string())
        })
        .collect();
    base.iter()
        .enumerate()
        .map(|(i, b)| {
            if base.iter().filter(|x| *x == b).count() > 1 {
                format!("{b} ({})", i + 1)
            } else {
                b.clone()
            }
        })
        .collect()
}

/// What [`write`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    /// Bytes of the file.
    pub bytes: usize,
    /// Charts drawn.
    pub charts: usize,
    /// Directories read.
    pub dirs: usize,
}

/// Reads `dirs` and writes their report to `output` (replaced whole): bad
/// input (exit 2) when the output's directory is missing or a directory cannot
/// be read, nothing written then.
pub fn write(dirs: &[PathBuf], output: &Path) -> Result<Written, Failure> {
    crate::assemble::check_output("--output", output)?;
    let mut inputs = Vec::new();
    for (dir, label) in dirs.iter().zip(labels(dirs)) {
        let loaded = batchbench_results::load(dir).map_err(Failure::bad_input)?;
        inputs.push(Input { label, loaded });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let html = render(&inputs, &batchbench_core::timefmt::rfc3339(now));
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".part");
    let io = |e: std::io::Error| Failure::failed_msg(format!("{}: {e}", output.display()));
    std::fs::write(&tmp, &html).map_err(io)?;
    std::fs::rename(&tmp, output).map_err(io)?;
    Ok(Written {
        bytes: html.len(),
        charts: html.matches("<svg class=\"chart\"").count(),
        dirs: inputs.len(),
    })
}

/// Runs `batchbench report`.
pub fn main(args: &ReportArgs) -> Result<i32, Failure> {
    let w = write(&args.dirs, &args.output)?;
    println!(
        "wrote {} ({} KB, {} chart(s), {} director{})",
        args.output.display(),
        w.bytes.div_ceil(1024),
        w.charts,
        w.dirs,
        if w.dirs == 1 { "y" } else { "ies" }
    );
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_unique() {
        let l = labels(&["a/run".into(), "b/run".into(), "c/other".into()]);
        assert_eq!(l, ["run (1)", "run (2)", "other"]);
    }
}
