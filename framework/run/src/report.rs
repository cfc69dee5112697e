//! What is made from results directories without re-running anything:
//! `batchbench report DIR... -o report.html` (one self-contained HTML file of
//! runs, sweeps and capacity searches) and `batchbench export --format llm-d
//! DIR -o report.yaml` (the llm-d Benchmark Report of a run).

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

/// What [`write()`] wrote.
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
    let html = render(&inputs, &batchbench_contract::timefmt::rfc3339(now));
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

/// The flags of `batchbench compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The base run's results directory.
    #[arg(value_name = "BASE")]
    pub base: PathBuf,
    /// The new run's results directory.
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// Exit 1 when a figure changed past a threshold: comma-separated
    /// METRIC>+N% (a rise) or METRIC<-N% (a fall), such as
    /// 'ttft_p99>+10%,goodput<-5%'. Metrics: throughput,
    /// output_tokens_per_second, goodput, failure_rate (in percentage points)
    /// and {e2e,ttft,itl,tpot}_{p50,p90,p99,mean,max}. A latency percentile or
    /// mean breaches only when its own test also finds the change significant
    /// (see --alpha); a max and the rates are judged on the figure.
    #[arg(long, value_name = "THRESHOLDS")]
    pub fail_if: Option<String>,
    /// The significance level of the per-figure tests on the per-request
    /// latencies (a percentile: the split at the pooled percentile; the mean:
    /// Welch's test).
    #[arg(long, default_value = "0.05", value_name = "P")]
    pub alpha: f64,
    /// Print JSON (rows, p-values, breaches) instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn one_run(dir: &Path) -> Result<batchbench_results::RunDir, Failure> {
    match batchbench_results::load(dir).map_err(Failure::bad_input)? {
        batchbench_results::Loaded::Run(r) => Ok(*r),
        batchbench_results::Loaded::Series(s) => {
            let runs: Vec<&str> = s
                .doc
                .points
                .iter()
                .flat_map(|p| p.runs.iter().map(String::as_str))
                .collect();
            Err(Failure::bad(format!(
                "{}: a {} directory; name one of its runs ({})",
                dir.display(),
                s.doc.kind,
                runs.join(", ")
            )))
        }
    }
}

/// Runs `batchbench compare`: exit 0 when no threshold was breached, 1 when
/// one was.
pub fn compare(args: &CompareArgs) -> Result<i32, Failure> {
    use batchbench_results::compare;
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        return Err(Failure::bad(format!(
            "--alpha {}: a significance level between 0 and 1",
            args.alpha
        )));
    }
    let thresholds = args
        .fail_if
        .as_deref()
        .map(compare::parse_thresholds)
        .transpose()
        .map_err(Failure::bad)?
        .unwrap_or_default();
    let (base, new) = (one_run(&args.base)?, one_run(&args.new)?);
    let rows = compare::rows(&base, &new);
    let breaches = compare::judge(&rows, &thresholds, args.alpha).map_err(Failure::bad)?;
    if args.json {
        let doc = serde_json::json!({
            "base": args.base,
            "new": args.new,
            "alpha": args.alpha,
            "rows": rows,
            "thresholds": thresholds,
            "breaches": breaches,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print!(
            "{}",
            compare::table(
                &args.base.display().to_string(),
                &args.new.display().to_string(),
                &rows,
                args.alpha
            )
        );
        if !thresholds.is_empty() {
            println!();
            if breaches.is_empty() {
                println!(
                    "  gate  passed: no threshold breached ({})",
                    args.fail_if.as_deref().unwrap_or_default()
                );
            }
            for b in &breaches {
                println!("  gate  FAILED: {}", b.message);
            }
        }
    }
    if breaches.is_empty() {
        Ok(EXIT_OK)
    } else {
        eprintln!(
            "batchbench compare: {} threshold(s) breached: {}",
            breaches.len(),
            breaches
                .iter()
                .map(|b| b.threshold.text.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(crate::exit::EXIT_FAILED)
    }
}

/// The formats `batchbench export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// The llm-d Benchmark Report, schema v0.2.1, as YAML.
    #[value(name = "llm-d")]
    LlmD,
}

/// The flags of `batchbench export`.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The format to write.
    #[arg(long, value_enum, default_value = "llm-d")]
    pub format: ExportFormat,
    /// One run's results directory (--output-dir; for a sweep, one of its
    /// run-NNN directories).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The file to write (replaced); `-` for stdout.
    #[arg(short, long, value_name = "PATH")]
    pub output: PathBuf,
}

/// The export of one run's directory as text.
pub fn export_text(dir: &Path, format: ExportFormat) -> Result<String, Failure> {
    let run = one_run(dir)?;
    match format {
        ExportFormat::LlmD => Ok(batchbench_results::yaml::to_yaml_ordered(
            &batchbench_results::llmd::report(&run, env!("CARGO_PKG_VERSION")),
            &batchbench_results::llmd::KEY_ORDER,
        )),
    }
}

/// Runs `batchbench export`.
pub fn export(args: &ExportArgs) -> Result<i32, Failure> {
    let to_stdout = args.output.as_os_str() == "-";
    if !to_stdout {
        crate::assemble::check_output("--output", &args.output)?;
    }
    let text = export_text(&args.dir, args.format)?;
    if to_stdout {
        print!("{text}");
        return Ok(EXIT_OK);
    }
    let mut tmp = args.output.as_os_str().to_owned();
    tmp.push(".part");
    let io = |e: std::io::Error| Failure::failed_msg(format!("{}: {e}", args.output.display()));
    std::fs::write(&tmp, &text).map_err(io)?;
    std::fs::rename(&tmp, &args.output).map_err(io)?;
    println!(
        "wrote {} (llm-d Benchmark Report v{})",
        args.output.display(),
        batchbench_results::llmd::SCHEMA_VERSION
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
