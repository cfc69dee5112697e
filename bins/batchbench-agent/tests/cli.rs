//! The `batchbench-agent` binary as a user runs it.

use batchbench_tests::process::{interrupt, output, started, stderr};
use batchbench_tests::{SimServer, cmd, read_csv, tokenizer_path, wait_for_requests, words};
use serde_json::{Value, json};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchbench-agent"))
}

fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    output(env!("CARGO_BIN_EXE_batchbench-agent"), args)
}

#[test]
fn help_lists_every_compatible_flag() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    let mut flags = words(
        "--agents --input-tokens --output-tokens --environment-tokens --tool-invocations --tool-call-latency-ms --seed --max-active-agents --host --endpoint --model --tokenizer-model --api-key --api-key-env --request-timeout-secs --max-retries --retry-delay-ms --sglang --ignore-eos --disable-user-tagging --user-prefix --dp-rank-perfect-routing --dp-rank-perfect-routing-num --verbose --dry-run --results-csv --agent-events-jsonl --tool-call-latency-lognorm-mu --tool-call-latency-lognorm-median-ms --tool-call-latency-lognorm-sigma --tool-call-latency-lognorm-max-ms --session-rate --arrival --burstiness --stages --max-concurrency --warmup-requests --duration-secs --at-deadline",
    );
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
            words(
                "--environment-lognorm-median 10 --environment-lognorm-mu 2 --environment-lognorm-sigma 1",
            ),
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
            words("--input-tokens 100 --input-lognorm-median 100 --input-lognorm-sigma 1"),
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
        (vec!["--session-rate", "0"], "--session-rate"),
        (vec!["--session-rate", "-2"], "--session-rate"),
        (
            vec!["--session-rate", "5", "--burstiness", "2"],
            "--burstiness",
        ),
        (vec!["--stages", "10s@"], "--stages"),
        (vec!["--stages", "10s@4,oops"], "--stages"),
        (
            vec!["--session-rate", "5", "--admission", "closed-loop"],
            "--admission closed-loop",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--host", &url, "--tokenizer-model", &tok, "-q"];
        all.extend(args.iter().copied());
        let o = run(&all);
        let err = stderr(&o);
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
    let sim = SimServer::decoding(10.0);
    let args = cmd(
        "--host {} --tokenizer-model {} --agents 6 --max-active-agents 3 --tool-invocations 6 --output-tokens 20 --input-tokens 32",
        &[&sim.url(), &tok],
    );
    let child = started(
        bin()
            .args(args)
            .arg("--results-csv")
            .arg(&csv)
            .arg("--agent-events-jsonl")
            .arg(&events),
    );
    // Three active agents: a fourth request means some turn has completed.
    wait_for_requests(&sim, 4);
    let o = interrupt(child);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
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

#[test]
fn malformed_manifests_are_rejected_line_by_line_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let ok_req = json!({"prompt_tokens": 10, "output_tokens": 2});
    let blk =
        |seed: &str, tokens: i64, role: &str| json!({"seed": seed, "tokens": tokens, "role": role});
    let v2 =
        |id: &str, reqs: Value| json!({"schema_version": 2, "trajectory_id": id, "requests": reqs});
    let v1 =
        |id: &str, reqs: Value| json!({"schema_version": 1, "trajectory_id": id, "requests": reqs});
    // (line, what the message must say)
    let cases: Vec<(Value, &str)> = vec![
        (v1("ok-1", json!([ok_req])), ""),
        (
            v1(
                "v1-blocks",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": []}]),
            ),
            "trajectory v1-blocks, request 0: unknown field `blocks`",
        ),
        (
            v2(
                "v2-unknown",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "bogus": 1}]),
            ),
            "trajectory v2-unknown, request 0: unknown field `bogus`",
        ),
        (
            json!({"schema_version": 2, "trajectory_id": "top-unknown", "requests": [ok_req], "extra": 1}),
            "trajectory top-unknown: unknown field `extra`",
        ),
        (
            v1("v1-start", json!([ok_req]))
                .as_object()
                .map(|o| {
                    let mut o = o.clone();
                    o.insert("start_after_ms".into(), json!(5));
                    Value::Object(o)
                })
                .unwrap_or_default(),
            "unknown field `start_after_ms`",
        ),
        (
            v1("no-prompt", json!([{"output_tokens": 2}])),
            "trajectory no-prompt, request 0: field prompt_tokens: missing",
        ),
        (
            v1(
                "zero-output",
                json!([{"prompt_tokens": 10, "output_tokens": 0}]),
            ),
            "trajectory zero-output, request 0: field output_tokens: must be a positive integer",
        ),
        (
            v1("ok-1", json!([ok_req])),
            "trajectory ok-1: field trajectory_id: duplicate (first on line 1)",
        ),
        (
            v1("", json!([ok_req])),
            "field trajectory_id: must not be empty",
        ),
        (
            v2(
                "zero-block",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": [blk("s", 0, "user")]}]),
            ),
            "trajectory zero-block, request 0, block 0: field tokens",
        ),
        (
            v2(
                "bad-role",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": [blk("s", 3, "narrator")]}]),
            ),
            "trajectory bad-role, request 0: unknown variant `narrator`",
        ),
        (
            v2(
                "seed-count",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": [blk("s", 3, "user")]}, {"prompt_tokens": 20, "output_tokens": 2, "blocks": [blk("s", 4, "user")]}]),
            ),
            "trajectory seed-count, request 1, block 0: field seed: seed s was 3 tokens",
        ),
        (
            v2(
                "seed-role",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": [blk("s", 3, "user"), blk("s", 3, "system")]}]),
            ),
            "trajectory seed-role, request 0, block 1: field seed",
        ),
        (
            v1(
                "shrinks",
                json!([{"prompt_tokens": 100, "output_tokens": 10}, {"prompt_tokens": 50, "output_tokens": 2}]),
            ),
            "trajectory shrinks, request 1: field prompt_tokens: environment growth 50 - 100 - 10 - 0 = -60 is negative",
        ),
        (
            json!({"schema_version": 3, "trajectory_id": "v3", "requests": [ok_req]}),
            "trajectory v3: field schema_version: unsupported version 3",
        ),
        (
            v2(
                "live-user",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "blocks": [{"seed": "s", "tokens": 3, "role": "user", "live": true}]}]),
            ),
            "field live: only assistant blocks can be live",
        ),
        (
            v1(
                "v1-reset-first",
                json!([{"prompt_tokens": 10, "output_tokens": 2, "reset_before": true}]),
            ),
            "field reset_before: not allowed on the first request in schema version 1",
        ),
        (
            v2("no-requests", json!([])),
            "trajectory no-requests: field requests: must not be empty",
        ),
    ];
    let mut text: String = cases.iter().map(|(l, _)| format!("{l}\n")).collect();
    text.push_str("{not json\n");
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    let sim = SimServer::recording("qwen");
    let (url, tok, path) = (
        sim.url(),
        tokenizer_path("qwen").display().to_string(),
        p.display().to_string(),
    );
    let o = run(&cmd(
        "--host {} --tokenizer-model {} --agent-plans-jsonl {}",
        &[&url, &tok, &path],
    ));
    let err = (o.status.code().unwrap_or(-1), stderr(&o));
    assert_eq!(err.0, 2, "{}", err.1);
    let lines: Vec<&str> = err.1.lines().collect();
    for (i, (_, needle)) in cases.iter().enumerate().skip(1) {
        let prefix = format!("{path}:{}: ", i + 1);
        let line = lines
            .iter()
            .find(|l| l.contains(&prefix))
            .unwrap_or_else(|| panic!("no error for line {}: {needle}\n{}", i + 1, err.1));
        assert!(
            line.contains(needle),
            "line {}: want {needle:?} in {line}",
            i + 1
        );
    }
    assert!(
        err.1
            .contains(&format!("{path}:{}: not a JSON object", cases.len() + 1)),
        "{}",
        err.1
    );
    assert!(
        !err.1.contains(&format!("{path}:1:")),
        "the good line is not reported"
    );
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

#[test]
fn console_summary_of_a_fixed_seed_simulator_run_is_pinned() {
    let tok = batchbench_tests::tokenizer_path("qwen")
        .display()
        .to_string();
    let o = run(&cmd(
        "--host sim:// --tokenizer-model {} --agents 2 --tool-invocations 3 --input-tokens 48 --environment-tokens 16 --output-tokens 4 --tool-call-latency-ms 2 --seed 23 --quiet",
        &[&tok],
    ));
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    batchbench_tests::check_snapshot("agent.console.snap", &batchbench_tests::mask_console(&text));
}

#[test]
fn print_config_prints_the_effective_spec_exits_0_and_sends_nothing() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), tokenizer_path("qwen").display().to_string());
    let o = run(&cmd(
        "--host {} --tokenizer-model {} --agents 5 --tool-invocations 3 --session-rate 2 --seed 4 --print-config",
        &[&url, &tok],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let toml = String::from_utf8_lossy(&o.stdout);
    for want in ["seed = 4", "rate = 2.0", "release = \"sessions\"", &url] {
        assert!(
            toml.contains(want),
            "--print-config lacks {want:?}:\n{toml}"
        );
    }
    assert_eq!(sim.requests().len(), 0, "--print-config sent requests");
}

/// SIGINT at 20 seeded moments of an agent run with every output on: each
/// time exit 130, a partial summary, a CSV row marked interrupted, a complete
/// event line per admitted agent, a JSON summary and a complete results
/// directory whose request lines are every request that ended.
#[test]
fn sigint_at_twenty_seeded_moments_leaves_every_output_whole() {
    let tok = tokenizer_path("qwen").display().to_string();
    // A small LCG: the moments are the same in every run of the test.
    let mut state: u64 = 0x5eed_1234;
    let mut next_ms = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % 1200
    };
    for round in 0..20 {
        let delay = next_ms();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = |name: &str| dir.path().join(name);
        // A simulator of its own per round: requests of the previous run that
        // were still being served never count as this run's.
        let sim = SimServer::decoding(10.0);
        let url = sim.url();
        let args = cmd(
            "--host {} --tokenizer-model {} --agents 6 --max-active-agents 3 --tool-invocations 6 --output-tokens 20 --input-tokens 32 --seed 9",
            &[&url, &tok],
        );
        let child = started(
            bin()
                .args(args)
                .arg("--results-csv")
                .arg(p("r.csv"))
                .arg("--summary-json")
                .arg(p("s.json"))
                .arg("--requests-jsonl")
                .arg(p("q.jsonl"))
                .arg("--agent-events-jsonl")
                .arg(p("e.jsonl"))
                .arg("--output-dir")
                .arg(p("dir")),
        );
        // The run is under way once its first request arrives.
        wait_for_requests(&sim, 1);
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let o = interrupt(child);
        let why = format!(
            "round {round}, SIGINT {delay} ms after the first request: {}",
            stderr(&o)
        );
        assert_eq!(o.status.code(), Some(130), "{why}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("interrupted"),
            "{why}"
        );
        let rows = read_csv(&p("r.csv"));
        assert_eq!(rows.len(), 1, "{why}");
        assert_eq!(rows[0]["interrupted"], "true", "{why}");
        let json: Value = serde_json::from_slice(&std::fs::read(p("s.json")).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{why}: s.json: {e}"));
        let s = &json["summary"];
        assert_eq!(s["interrupted"], true, "{why}");
        let lines = |path: &std::path::Path| -> Vec<Value> {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "{why}: {}",
                path.display()
            );
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{why}: {e}: {l}")))
                .collect()
        };
        let events = lines(&p("e.jsonl"));
        assert_eq!(
            events.len() as u64,
            s["trajectories_started"].as_u64().unwrap_or(u64::MAX),
            "one event line per admitted agent: {why}"
        );
        assert!(events.iter().all(|e| e["agent_id"].is_u64()), "{why}");
        let requests = lines(&p("q.jsonl"));
        assert_eq!(
            requests.len() as u64,
            s["total_requests"].as_u64().unwrap_or(u64::MAX),
            "{why}"
        );
        let run: Value =
            serde_json::from_slice(&std::fs::read(p("dir/run.json")).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{why}: run.json: {e}"));
        assert_eq!(&run["summary"], s, "{why}");
        assert_eq!(
            lines(&p("dir/requests.jsonl")).len(),
            requests.len(),
            "{why}"
        );
        assert_eq!(
            lines(&p("dir/trajectories.jsonl")).len(),
            events.len(),
            "{why}"
        );
    }
}
