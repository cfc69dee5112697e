//! The `batchbench-agent` binary as a user runs it.

use batchbench_tests::{SimServer, read_csv, tokenizer_path};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchbench-agent"))
}

fn run(args: &[&str]) -> Output {
    bin()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn help_lists_every_compatible_flag() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    let mut flags = vec![
        "--agents",
        "--input-tokens",
        "--output-tokens",
        "--environment-tokens",
        "--tool-invocations",
        "--tool-call-latency-ms",
        "--seed",
        "--max-active-agents",
        "--host",
        "--endpoint",
        "--model",
        "--tokenizer-model",
        "--api-key",
        "--api-key-env",
        "--request-timeout-secs",
        "--max-retries",
        "--retry-delay-ms",
        "--sglang",
        "--ignore-eos",
        "--disable-user-tagging",
        "--user-prefix",
        "--dp-rank-perfect-routing",
        "--dp-rank-perfect-routing-num",
        "--verbose",
        "--dry-run",
        "--results-csv",
        "--agent-events-jsonl",
        "--tool-call-latency-lognorm-mu",
        "--tool-call-latency-lognorm-median-ms",
        "--tool-call-latency-lognorm-sigma",
        "--tool-call-latency-lognorm-max-ms",
    ];
    let families: Vec<String> = ["input", "output", "environment", "tool-invocations"]
        .iter()
        .flat_map(|f| ["mu", "median", "sigma", "max"].map(|p| format!("--{f}-lognorm-{p}")))
        .collect();
    flags.extend(families.iter().map(String::as_str));
    for flag in flags {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
}

#[test]
fn flag_errors_are_one_line_exit_2_and_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--input-lognorm-median", "100"],
            "--input-lognorm-sigma",
        ),
        (
            vec![
                "--environment-lognorm-median",
                "10",
                "--environment-lognorm-mu",
                "2",
                "--environment-lognorm-sigma",
                "1",
            ],
            "not both",
        ),
        (
            vec!["--tool-call-latency-lognorm-sigma", "1"],
            "--tool-call-latency-lognorm-median-ms",
        ),
        (
            vec!["--dp-rank-perfect-routing"],
            "--dp-rank-perfect-routing-num",
        ),
        (
            vec!["--dp-rank-perfect-routing-num", "4"],
            "--dp-rank-perfect-routing",
        ),
        (vec!["--agents", "0"], "--agents"),
        (vec!["--agents", "-3"], "--agents"),
        (
            vec![
                "--input-tokens",
                "100",
                "--input-lognorm-median",
                "100",
                "--input-lognorm-sigma",
                "1",
            ],
            "mutually exclusive",
        ),
        (
            vec!["--user-prefix", "x", "--disable-user-tagging"],
            "mutually exclusive",
        ),
        (
            vec!["--agent-plans-jsonl", "plans.jsonl", "--agents", "2"],
            "cannot be combined with --agents",
        ),
        (
            vec![
                "--agent-plans-jsonl",
                "plans.jsonl",
                "--environment-lognorm-sigma",
                "1",
            ],
            "cannot be combined with --environment-lognorm-sigma",
        ),
        (
            vec!["--admission", "open-loop"],
            "--admission open-loop needs --agent-plans-jsonl",
        ),
        (
            vec!["--time-scale", "2"],
            "--time-scale needs --agent-plans-jsonl",
        ),
        (
            vec!["--agent-plans-jsonl", "/nonexistent/plans.jsonl"],
            "/nonexistent/plans.jsonl: cannot read the manifest",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--host", &url, "--tokenizer-model", &tok, "-q"];
        all.extend(args.iter().copied());
        let o = run(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert_eq!(sim.stats().requests, 0);
}

#[cfg(unix)]
#[test]
fn ctrl_c_leaves_a_partial_summary_csv_and_complete_event_lines() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (csv, events) = (dir.path().join("r.csv"), dir.path().join("e.jsonl"));
    let tok = tokenizer_path("qwen").display().to_string();
    let child = bin()
        .args([
            "--host",
            "sim://?decode-ms-per-token=10",
            "--tokenizer-model",
            &tok,
            "--agents",
            "6",
            "--max-active-agents",
            "3",
            "--tool-invocations",
            "6",
            "--output-tokens",
            "20",
            "--input-tokens",
            "32",
        ])
        .arg("--results-csv")
        .arg(&csv)
        .arg("--agent-events-jsonl")
        .arg(&events)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(2000));
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        o.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("interrupted"));
    let rows = read_csv(&csv);
    assert_eq!(rows[0]["interrupted"], "true");
    let text = std::fs::read_to_string(&events).unwrap_or_default();
    assert!(text.ends_with('\n') || text.is_empty());
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["agent_id"].is_u64());
    }
    assert!(
        text.contains("\"completed\":false"),
        "the agents cut short are reported: {text}"
    );
}
