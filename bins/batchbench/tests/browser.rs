//! The HTML report in a real browser: headless Chromium renders the report of
//! a simulator run and of a sweep; the page must log nothing to the console,
//! raise no script error, and every chart must lay out with ink in it. A
//! screenshot of each is kept as an artifact.
//!
//! Ignored by default (it needs Chromium): `.ci/run` installs Debian's
//! `chromium` and runs `cargo test -p batchbench --test browser -- --ignored`
//! with `BATCHBENCH_CHROMIUM` set. `BATCHBENCH_ARTIFACTS` names the directory
//! the screenshots go to (default: `target/artifacts`).

use batchbench_tests::{cmd, target_dir, tokenizer_path, words};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn batchbench<S: AsRef<str>>(args: &[S]) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let o = Command::new(env!("CARGO_BIN_EXE_batchbench"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        o.status.success(),
        "batchbench {args:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn chromium() -> PathBuf {
    std::env::var_os("BATCHBENCH_CHROMIUM").map_or_else(|| PathBuf::from("chromium"), PathBuf::from)
}

/// Runs headless Chromium on `page` with `extra` flags; returns stdout and stderr.
fn browse(page: &Path, extra: &[String]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let args = words(
        "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --enable-logging=stderr --v=0 --window-size=1400,2400",
    );
    let o = Command::new(chromium())
        .args(args)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", chromium().display()));
    assert!(o.status.success(), "chromium: {}", o.status);
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn attr(dom: &str, name: &str) -> Option<u64> {
    let body = &dom[dom.find("<body")?..];
    let tag = &body[..body.find('>')?];
    let at = tag.find(&format!("{name}=\""))? + name.len() + 2;
    tag[at..].split('"').next()?.parse().ok()
}

/// Renders `report` in Chromium and checks it; the screenshot goes to the
/// artifacts directory as `name.png`.
fn check_in_browser(report: &Path, name: &str, min_charts: u64) {
    let (dom, log) = browse(report, &["--dump-dom".to_owned()]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console output: {console:#?}");
    let charts = attr(&dom, "data-charts").unwrap_or_else(|| panic!("the script did not run"));
    let drawn = attr(&dom, "data-charts-drawn").unwrap_or_default();
    assert_eq!(attr(&dom, "data-errors"), Some(0), "script errors");
    assert!(
        charts >= min_charts,
        "{charts} charts, expected {min_charts} at least"
    );
    assert_eq!(drawn, charts, "charts that drew");
    let artifacts = std::env::var_os("BATCHBENCH_ARTIFACTS")
        .map_or_else(|| target_dir().join("artifacts"), PathBuf::from);
    std::fs::create_dir_all(&artifacts).unwrap_or_else(|e| panic!("{e}"));
    let shot = artifacts.join(format!("{name}.png"));
    browse(report, &[format!("--screenshot={}", shot.display())]);
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "{}: {size} bytes", shot.display());
    eprintln!(
        "{name}: {charts} charts drew; screenshot {}",
        shot.display()
    );
}

#[test]
#[ignore = "needs Chromium: .ci/run runs it"]
fn the_report_of_a_run_and_of_a_sweep_renders_in_chromium_with_every_chart() {
    let tok = tokenizer_path("qwen").display().to_string();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = tmp.path().join("run");
    let r = run.display().to_string();
    batchbench(&cmd(
        "--quiet --host sim://?decode-ms-per-token=3&fault-rate=0.1 --tokenizer-model {} --users 8 --requests-per-user 12 --input-tokens 64 --input-vary 48 --output-tokens 12 --stream --max-failure-rate 0.5 --max-retries 0 --server-metrics target --metrics-interval 0.2 --output-dir {}",
        &[&tok, &r],
    ));
    let report = tmp.path().join("run.html");
    batchbench(&["report", &r, "-o", &report.display().to_string()]);
    // Four CDFs, five time series, two scatters, five server panels.
    check_in_browser(&report, "report-run", 16);

    let sweep = tmp.path().join("sweep");
    let s = sweep.display().to_string();
    batchbench(&cmd(
        "sweep --quiet --over request-rate --values 20,40,80 --no-early-stop --host sim://?max-running=4&step-base-ms=5&step-ms-per-seq=1 --tokenizer-model {} --input-tokens 16 --output-tokens 6 --stream --arrival constant --duration-secs 1.5 --slo ttft_p99<=150ms --output-dir {}",
        &[&tok, &s],
    ));
    let report = tmp.path().join("sweep.html");
    batchbench(&["report", &s, "-o", &report.display().to_string()]);
    // Three series charts, and the points' runs.
    check_in_browser(&report, "report-sweep", 13);
}

#[test]
#[ignore = "needs Chromium: .ci/run runs it"]
fn the_page_of_an_analysis_renders_in_chromium_with_every_chart() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let m = root.join("examples/trajectory-replay/plans-v2.jsonl");
    let page = tmp.path().join("analysis.html");
    batchbench(&cmd(
        "analyze {} --quiet --cache-tokens 64,256,1k,4k --ranks 2 --html {}",
        &[&m.display().to_string(), &page.display().to_string()],
    ));
    // Arrivals, sharing, and hit rates by capacity.
    check_in_browser(&page, "analysis", 3);
}
