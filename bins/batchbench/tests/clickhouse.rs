//! `batchbench export-plans` against a real ClickHouse engine (chdb behind a
//! loopback HTTP front) holding the production schema and the fixtures of
//! `.ci/clickhouse_fixtures.py`. `.ci/run` starts it with `bash .ci/clickhouse.sh
//! start`, which prints `CLICKHOUSE_URL` (with a password in it), and runs these
//! with `--ignored`; a plain `cargo test` skips them.

use batchbench_tests::{cmd, run_agent, tokenizer_path};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const WINDOW: [&str; 4] = [
    "--start",
    "2026-09-01T09:00:00Z",
    "--end",
    "2026-09-01T10:00:00Z",
];

fn url() -> String {
    std::env::var("CLICKHOUSE_URL").unwrap_or_else(|_| {
        panic!("CLICKHOUSE_URL is not set: start the engine with eval \"$(bash .ci/clickhouse.sh start)\"")
    })
}

/// The password inside CLICKHOUSE_URL, decoded and as written.
fn secrets() -> Vec<String> {
    let u = url();
    let creds = u
        .split("://")
        .nth(1)
        .and_then(|r| r.split('@').next())
        .unwrap_or("");
    let encoded = creds.split(':').nth(1).unwrap_or("").to_owned();
    assert!(encoded.len() > 4, "the test URL must carry a password");
    let decoded = encoded
        .replace("%3A", ":")
        .replace("%40", "@")
        .replace("%2F", "/");
    vec![encoded, decoded]
}

fn export<S: AsRef<str>>(env_url: Option<&str>, args: &[S]) -> Output {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let mut c = Command::new(env!("CARGO_BIN_EXE_batchbench"));
    c.arg("export-plans").args(args).stdin(Stdio::null());
    c.env_remove("CLICKHOUSE_USER")
        .env_remove("CLICKHOUSE_PASSWORD");
    match env_url {
        Some(u) => c.env("CLICKHOUSE_URL", u),
        None => c.env_remove("CLICKHOUSE_URL"),
    };
    c.output().unwrap_or_else(|e| panic!("{e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn out(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

/// Exports the test window with `extra` flags; asserts success and returns the lines.
fn export_ok<S: AsRef<str>>(dir: &tempfile::TempDir, extra: &[S]) -> Vec<serde_json::Value> {
    let extra: Vec<&str> = extra.iter().map(AsRef::as_ref).collect();
    let extra = extra.as_slice();
    let p = out(dir, "export.jsonl");
    let ps = p.display().to_string();
    let mut args = WINDOW.to_vec();
    args.extend(["--output", &ps]);
    args.extend(extra);
    let o = export(Some(&url()), &args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    lines(&p)
}

fn assert_no_secret(what: &str, s: &str) {
    for secret in secrets() {
        assert!(!s.contains(&secret), "{what} shows the password: {s}");
    }
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn exports_reconstruct_the_fixture_sessions_and_re_export_identically() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (plans, rows) = (out(&dir, "plans.jsonl"), out(&dir, "rows.jsonl"));
    let (p, r) = (plans.display().to_string(), rows.display().to_string());
    let mut args = WINDOW.to_vec();
    args.extend(["--output", &p, "--dump-rows-jsonl", &r]);
    let o = export(Some(&url()), &args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let summary = text(&o);
    assert_no_secret("the summary", &summary);
    for line in [
        "rows fetched: 20",
        "rows dropped: 1 (no_completion_tokens 1)",
        "trajectories: 11",
        "requests: 18",
        "pre-window sessions: 1",
    ] {
        assert!(summary.contains(line), "{line}: {summary}");
    }
    let t = lines(&plans);
    assert_eq!(t.len(), 11);
    let reqs = |l: &serde_json::Value| l["requests"].as_array().cloned().unwrap_or_default();
    // Continuation: 4 requests, live replies, think time from analytics durations.
    let cont = t
        .iter()
        .find(|l| reqs(l).len() == 4)
        .expect("the continuation");
    let cr = reqs(cont);
    assert_eq!(cr[1]["blocks"][3]["live"], true);
    assert_eq!(cr[0]["delay_after_ms"], 60_000 - 1_500);
    assert_eq!(cr[0]["overhead_tokens"], 9);
    assert_eq!(cr[0]["stream"], true);
    assert_eq!(cr[0]["max_tokens"], 256);
    // Branch and compaction: a later request that does not extend its predecessor.
    let resets = t
        .iter()
        .flat_map(reqs)
        .filter(|r| r["reset_before"] == true)
        .count();
    assert_eq!(resets, 3, "branch, compaction and the pre-window session");
    // Identical chains: the same stem twice.
    let ids: Vec<&str> = t
        .iter()
        .filter_map(|l| l["trajectory_id"].as_str())
        .collect();
    assert!(ids.iter().any(|i| i.ends_with("-1")), "{ids:?}");
    // Missing block counts: one user block of prompt_tokens.
    assert!(t.iter().flat_map(reqs).any(|r| {
        r["blocks"].as_array().map(Vec::len) == Some(1)
            && r["blocks"][0]["tokens"] == r["prompt_tokens"]
    }));
    // The file's own rows re-export byte for byte.
    let plans2 = out(&dir, "again.jsonl");
    let p2 = plans2.display().to_string();
    let mut offline = WINDOW.to_vec();
    offline.extend(["--output", &p2, "--rows-jsonl", &r]);
    let o = export(None, &offline);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read(&plans).ok(), std::fs::read(&plans2).ok());
    for f in [&plans, &rows] {
        assert_no_secret(
            "a written file",
            &std::fs::read_to_string(f).unwrap_or_default(),
        );
    }
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn the_view_and_final_remove_duplicates_the_base_table_keeps() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let count = |extra: &[&str]| export_ok(&dir, extra).len();
    assert_eq!(count(&[]), 11);
    assert_eq!(count(&["--chains-final"]), 11);
    // The base table without FINAL holds the duplicate: an identical chain, one more.
    assert_eq!(count(&["--chains-table", "clay.prompt_chains"]), 12);
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn filters_and_sampling_select_trajectories() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |extra: &[&str]| export_ok(&dir, extra);
    assert_eq!(run(&["--model", "vendor/model-b"]).len(), 1);
    assert_eq!(run(&["--model", "vendor/model-a"]).len(), 10);
    assert_eq!(run(&["--served-by", "backend-1"]).len(), 10);
    assert_eq!(
        run(&["--principal-id", "33333333-3333-4333-8333-333333333333"]).len(),
        2
    );
    let a = run(&["--sample", "0.5", "--seed", "7"]);
    let b = run(&["--sample", "0.5", "--seed", "7"]);
    assert_eq!(a.len(), 6); // round(0.5 x 11)
    assert_eq!(a, b);
    // Buckets by floor(log2(requests)): eight of 1 request, two of 3, one of 4;
    // ceil(0.3 x size) of each: 3 + 1 + 1, so every session length is represented.
    let strat = run(&["--sample", "0.3", "--stratify-by-session-length"]);
    let mut lengths: Vec<usize> = strat
        .iter()
        .map(|l| l["requests"].as_array().map_or(0, Vec::len))
        .collect();
    lengths.sort_unstable();
    assert_eq!(lengths, [1, 1, 1, 3, 4]);
    // Time scale divides offsets.
    let slow = run(&[]);
    let fast = run(&["--time-scale", "4"]);
    assert_eq!(
        slow[1]["start_after_ms"]
            .as_u64()
            .map(|v| (v as f64 / 4.0).round() as u64),
        fast[1]["start_after_ms"].as_u64()
    );
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn errors_are_one_clear_line_write_nothing_and_never_show_the_password() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = out(&dir, "never.jsonl");
    let ps = p.display().to_string();
    fn with<'a>(args: &[&'a str], out: &'a str) -> Vec<&'a str> {
        let mut a = args.to_vec();
        a.extend(["--output", out]);
        a
    }
    let good = url();
    let wrong = good.replace("s3cret", "wrongpass");
    let host = good.split('@').nth(1).unwrap_or("");
    let unreachable = good.replace(host, "127.0.0.1:9");
    let cases: Vec<(Option<String>, Vec<&str>, i32, &str)> = vec![
        (Some(wrong), with(&WINDOW, &ps), 1, "Authentication failed"),
        (Some(unreachable), with(&WINDOW, &ps), 1, "127.0.0.1:9"),
        (
            Some(good.clone()),
            with(
                &[&WINDOW[..], &["--analytics-table", "clay.nope"]].concat(),
                &ps,
            ),
            1,
            "nope",
        ),
        (
            Some(good.clone()),
            with(&[&WINDOW[..], &["--chains-table", "x;drop"]].concat(), &ps),
            2,
            "not a plain name",
        ),
        (
            Some(good.clone()),
            with(
                &[
                    WINDOW[0], WINDOW[1], WINDOW[2], WINDOW[3], "--sample", "1.5",
                ],
                &ps,
            ),
            2,
            "--sample",
        ),
        (
            Some(good.clone()),
            with(
                &[
                    "--start",
                    "2026-09-01T10:00:00Z",
                    "--end",
                    "2026-09-01T09:00:00Z",
                ],
                &ps,
            ),
            1,
            "must be after --start",
        ),
        (
            Some(good.clone()),
            with(
                &[
                    "--start",
                    "2026-01-01T00:00:00Z",
                    "--end",
                    "2026-01-01T01:00:00Z",
                ],
                &ps,
            ),
            1,
            "no trajectories",
        ),
        (None, with(&WINDOW, &ps), 2, "CLICKHOUSE_URL is not set"),
    ];
    for (u, args, code, needle) in cases {
        let o = export(u.as_deref(), &args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: {t}");
        assert!(t.contains("batchbench export-plans: "), "{t}");
        assert_no_secret("an error", &t);
        assert!(!p.exists(), "{args:?} left a file");
        let partial = std::fs::read_dir(dir.path())
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(partial, 0, "{args:?} left a partial file");
    }
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn the_export_replays_against_the_simulator_in_both_admission_modes() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    export_ok(&dir, &["--time-scale", "600"]);
    let ps = out(&dir, "export.jsonl").display().to_string();
    let tok = tokenizer_path("qwen").display().to_string();
    for admission in ["closed-loop", "open-loop"] {
        let r = run_agent(&cmd(
            "--host sim:// --tokenizer-model {} --agent-plans-jsonl {} --admission {} --time-scale 100",
            &[&tok, &ps, admission],
        ));
        assert_eq!(r.code, 0, "{admission}");
        assert_eq!(r.count("total_requests"), 18, "{admission}");
        assert_eq!(r.count("failed_requests"), 0, "{admission}");
        // Shared tool and system blocks across sessions hit the simulator's cache.
        assert!(r.count("server_cached_tokens") > 0, "{admission}");
    }
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn the_clickhouse_workload_replays_straight_from_the_warehouse() {
    let tok = tokenizer_path("qwen").display().to_string();
    let cfg = serde_json::json!({
        "start": "2026-09-01T09:00:00Z",
        "end": "2026-09-01T10:00:00Z",
        "time_scale": 600,
    })
    .to_string();
    let r = run_agent(&cmd(
        "--host sim:// --tokenizer-model {} --workload clickhouse --workload-config {} --time-scale 100",
        &[&tok, &cfg],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(r.count("total_requests"), 18);
    let run = r
        .json
        .as_ref()
        .map(|j| j["run"].clone())
        .unwrap_or_default();
    assert_eq!(run["workload"]["mode"], "clickhouse");
    assert_no_secret("the report", &run.to_string());
}

#[test]
#[ignore = "needs a ClickHouse engine: eval \"$(bash .ci/clickhouse.sh start)\""]
fn analyze_reads_a_warehouse_window_and_sends_nothing() {
    let cfg = serde_json::json!({
        "start": "2026-09-01T09:00:00Z",
        "end": "2026-09-01T10:00:00Z",
    })
    .to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let json = out(&dir, "analysis.json");
    let o = Command::new(env!("CARGO_BIN_EXE_batchbench"))
        .args(cmd(
            "analyze --workload clickhouse --workload-config {} --json {}",
            &[&cfg, json.to_str().unwrap_or_default()],
        ))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let a: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        a["requests"], 18,
        "the window's requests, as the replay sends them"
    );
    assert_eq!(a["workload"]["mode"], "clickhouse");
    assert!(a["sessions"].as_u64().unwrap_or(0) > 0);
    assert_no_secret("the analysis", &a.to_string());
    assert_no_secret("the console", &err);
}
