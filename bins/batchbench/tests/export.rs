//! `batchbench export --format llm-d`: the report of a simulator run and of an
//! open-loop agent run validated by the schema's own package
//! (`llmd-benchmark-report` from PyPI).
//!
//! Ignored by default (it needs that package): `.ci/run` runs it with
//! `BATCHBENCH_LLMD_PYTHON` naming a Python that has it (`.ci/llmd.sh python`).

use batchbench_tests::tokenizer_path;
use std::path::Path;
use std::process::{Command, Stdio};

fn run(program: &str, args: &[&str]) {
    let exe = Path::new(env!("CARGO_BIN_EXE_batchbench"));
    // The multi-call executable runs the agent under that name.
    let o = if program == "batchbench-agent" {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let link = tmp.path().join("batchbench-agent");
        std::os::unix::fs::symlink(exe, &link).unwrap_or_else(|e| panic!("{e}"));
        Command::new(&link).args(args).stdin(Stdio::null()).output()
    } else {
        Command::new(exe).args(args).stdin(Stdio::null()).output()
    }
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn validate(python: &str, file: &Path) -> String {
    let o = Command::new(python)
        .arg("-c")
        .arg(
            "import sys\n\
             from llmd_benchmark_report import import_benchmark_report\n\
             r = import_benchmark_report(sys.argv[1])\n\
             a = r.results.request_performance.aggregate\n\
             print(r.version, a.requests.total, a.requests.failures, a.latency.request_latency.p99, r.scenario.load.standardized.tool)\n",
        )
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        o.status.success(),
        "{} does not validate:\n{}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
#[ignore = "needs the llmd-benchmark-report package: .ci/run runs it"]
fn llm_d_reports_of_a_run_and_an_agent_run_validate_with_the_schema_package() {
    let python = std::env::var("BATCHBENCH_LLMD_PYTHON").unwrap_or_else(|_| "python3".into());
    let tok = tokenizer_path("qwen").display().to_string();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run_dir = tmp.path().join("run").display().to_string();
    run(
        "batchbench",
        &[
            "--quiet",
            "--host",
            "sim://?decode-ms-per-token=1&fault-rate=0.1",
            "--max-retries",
            "0",
            "--max-failure-rate",
            "0.9",
            "--tokenizer-model",
            &tok,
            "--users",
            "4",
            "--requests-per-user",
            "10",
            "--input-tokens",
            "32",
            "--input-vary",
            "16",
            "--output-tokens",
            "8",
            "--stream",
            "--output-dir",
            &run_dir,
        ],
    );
    let yaml = tmp.path().join("run.yaml");
    run(
        "batchbench",
        &[
            "export",
            "--format",
            "llm-d",
            &run_dir,
            "-o",
            &yaml.display().to_string(),
        ],
    );
    let got = validate(&python, &yaml);
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(&run_dir).join("run.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let s = &summary["summary"];
    let want = format!("0.2.1 {} {}", s["total_requests"], s["failed_requests"]);
    assert!(got.starts_with(&want), "{got} vs {want}");
    // The p99 in seconds is the summary's, in milliseconds.
    let p99: f64 = got
        .split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let want_p99 = s["latency"]["p99_ms"].as_f64().unwrap_or(f64::NAN) / 1000.0;
    assert!((p99 - want_p99).abs() < 1e-9, "{p99} vs {want_p99}");
    assert!(got.ends_with("batchbench"), "{got}");

    let agent_dir = tmp.path().join("agents").display().to_string();
    run(
        "batchbench-agent",
        &[
            "--quiet",
            "--host",
            "sim://",
            "--tokenizer-model",
            &tok,
            "--agents",
            "3",
            "--tool-invocations",
            "3",
            "--input-tokens",
            "64",
            "--environment-tokens",
            "16",
            "--output-tokens",
            "4",
            "--session-rate",
            "20",
            "--stream",
            "--output-dir",
            &agent_dir,
        ],
    );
    let yaml = tmp.path().join("agents.yaml");
    run(
        "batchbench",
        &[
            "export",
            "--format",
            "llm-d",
            &agent_dir,
            "-o",
            &yaml.display().to_string(),
        ],
    );
    let got = validate(&python, &yaml);
    assert!(got.starts_with("0.2.1 9 0"), "{got}");
    let text = std::fs::read_to_string(&yaml).unwrap_or_default();
    assert!(
        text.contains("\"multi_turn\":") && text.contains("\"rate_qps\": 20.0"),
        "{text}"
    );
}
