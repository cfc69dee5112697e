//! The `batchbench` binary as a user runs it: exit codes, one-line errors with
//! nothing sent, Ctrl+C, the hub cache.

use batchbench_tests::process::{interrupt, output, sigint, started, stderr, succeeded};
use batchbench_tests::{SimServer, cmd, read_csv, tokenizer_path, wait_for_requests, words};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_batchbench"))
}

fn run<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    output(env!("CARGO_BIN_EXE_batchbench"), args)
}

#[test]
fn help_lists_every_compatible_flag() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in words(
        "--host --endpoint --model --tokenizer-model --users --requests-per-user --input-tokens --input-vary --input-prefix-overlap --input-lognorm-mu --input-lognorm-median --input-lognorm-sigma --input-lognorm-max --output-tokens --output-vary --output-lognorm-mu --output-lognorm-median --output-lognorm-sigma --output-lognorm-max --sglang --ignore-eos --stream --api-key --api-key-env --request-timeout-secs --max-retries --retry-delay-ms --verbose --dry-run --results-csv --seed --quiet --request-rate --arrival --burstiness --ramp-up-secs --stages --max-concurrency --warmup-requests --warmup-secs --duration-secs --at-deadline",
    ) {
        assert!(help.contains(flag), "--help lacks {flag}");
    }
    assert!(help.contains("[default: https://api.openai.com]"));
    assert!(help.contains("[default: Qwen/Qwen3-VL-235B-A22B-Instruct-FP8]"));
}

#[test]
fn bad_input_is_one_line_naming_the_flag_exit_2_and_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bad_tok = dir.path().join("broken.json");
    std::fs::write(&bad_tok, "{}").unwrap_or_else(|e| panic!("{e}"));
    let bad_tok = bad_tok.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--input-tokens", "-5"], "--input-tokens"),
        (vec!["--users", "0"], "--users"),
        (vec!["--users", "abc"], "--users"),
        (vec!["--output-tokens", "-1"], "--output-tokens"),
        (
            vec!["--input-lognorm-sigma", "0.5"],
            "--input-lognorm-median or --input-lognorm-mu",
        ),
        (
            vec!["--output-lognorm-median", "64"],
            "--output-lognorm-sigma",
        ),
        (
            words("--input-lognorm-median 64 --input-lognorm-mu 4 --input-lognorm-sigma 1"),
            "not both",
        ),
        (
            vec!["--input-prefix-overlap", "1.5", "--input-tokens", "10"],
            "--input-prefix-overlap",
        ),
        (
            vec!["--input-prefix-overlap", "-0.1", "--input-tokens", "10"],
            "--input-prefix-overlap",
        ),
        (
            vec![
                "--input-tokens",
                "10",
                "--tokenizer-model",
                "/nonexistent/tokenizer.json",
            ],
            "--tokenizer-model",
        ),
        (
            vec!["--input-tokens", "10", "--tokenizer-model", &bad_tok],
            "--tokenizer-model",
        ),
        (
            vec!["--request-timeout-secs", "0"],
            "--request-timeout-secs",
        ),
        (vec!["--bogus-flag"], "--bogus-flag"),
        (vec!["--request-rate", "0"], "--request-rate"),
        (vec!["--request-rate", "-3"], "--request-rate"),
        (
            vec!["--request-rate", "5", "--burstiness", "2"],
            "--arrival gamma",
        ),
        (vec!["--stages", "60s-10"], "--stages"),
        (vec!["--stages", "60x@10"], "--stages"),
        (vec!["--request-rate", "5", "--stages", "1s@2"], "--stages"),
        (vec!["--ramp-up-secs", "5"], "--ramp-up-secs"),
        (vec!["--max-concurrency", "0"], "--max-concurrency"),
        (vec!["--at-deadline", "cancel"], "--duration-secs"),
        (vec!["--arrival", "weibull"], "--arrival"),
        (
            vec!["--duration-secs", "5", "--requests-per-user", "3"],
            "--requests-per-user",
        ),
        (vec!["--duration-secs", "5", "--dry-run"], "--duration-secs"),
        (vec!["--shard", "4/4", "--seed", "1"], "--shard"),
        (vec!["--shard", "1/0", "--seed", "1"], "--shard"),
        (vec!["--shard", "1of4", "--seed", "1"], "--shard"),
        (vec!["--shard", "1/4"], "--seed"),
        (
            vec!["--shard", "3/4", "--users", "2", "--seed", "1"],
            "--shard",
        ),
        (
            vec!["--shard", "1/4", "--shards", "4", "--seed", "1"],
            "--shards",
        ),
        (vec!["--start-at", "tomorrow"], "--start-at"),
        (vec!["--start-at", "2026-12-04T10:00:00"], "--start-at"),
        (vec!["--gpu-telemetry", "rocm"], "--gpu-telemetry"),
        // Reasoning knobs an API cannot carry, or that are out of its range.
        (vec!["--reasoning-effort", "extreme"], "--reasoning-effort"),
        (
            words("--codec anthropic_messages --thinking-budget 100"),
            "--thinking-budget",
        ),
        (
            words("--codec anthropic_messages --reasoning-effort low"),
            "--reasoning-effort",
        ),
        (
            words("--codec openai_completions --reasoning-effort low"),
            "--reasoning-effort",
        ),
        (vec!["--thinking-budget", "2048"], "--thinking-budget"),
        (
            words("--codec openai_responses --no-thinking --reasoning-effort low"),
            "--no-thinking",
        ),
        (
            words("--reasoning-history sometimes"),
            "--reasoning-history",
        ),
        (
            words("--codec openai_responses --reasoning-history keep"),
            "--reasoning-history keep",
        ),
        (
            words("--codec openai_completions --reasoning-history keep"),
            "--reasoning-history keep",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--host", &url, "--quiet"];
        if !args.contains(&"--tokenizer-model") {
            all.extend(["--tokenizer-model", &tok]);
        }
        all.extend(args.iter().copied());
        let o = run(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got: {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

/// On a terminal (a pseudo-terminal, through util-linux's `script`), the live
/// view is drawn under the bar while the run goes on, and cleared before the
/// final summary, which prints whole.
#[test]
fn the_live_view_draws_on_a_terminal_and_leaves_the_summary_whole() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("no `script` (util-linux) on this machine: no pseudo-terminal to draw on");
        return;
    }
    let tok = tokenizer_path("qwen").display().to_string();
    let cmd = format!(
        "{} --host 'sim://?ttft-base-ms=5&decode-ms-per-token=2' --tokenizer-model {tok} \
         --users 4 --input-tokens 32 --output-tokens 16 --stream --request-rate 20 \
         --duration-secs 3",
        env!("CARGO_BIN_EXE_batchbench")
    );
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    succeeded(&o);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    for part in ["target 20.0/s", "|  in flight", "TTFT p50", "e2e p50"] {
        assert!(text.contains(part), "the live view shows {part}: {text}");
    }
    // The summary comes after the last live line, whole: its lines in order,
    // none broken by a redraw.
    let at = text
        .rfind("batchbench summary")
        .unwrap_or_else(|| panic!("no summary: {text}"));
    assert!(text.rfind("TTFT p50").is_some_and(|live| live < at));
    let summary: Vec<&str> = text[at..].lines().map(str::trim_end).collect();
    assert!(summary[1].trim_start().starts_with("model"), "{summary:?}");
    assert!(
        summary
            .iter()
            .any(|l| l.trim_start().starts_with("requests ")),
        "{summary:?}"
    );
    assert!(
        !text[at..].contains("|  in flight"),
        "no live line inside the summary: {}",
        &text[at..]
    );
}

/// Where NVIDIA's management library cannot be used (no library, or no GPU),
/// `--gpu-telemetry nvml` is one line and exit 2 with nothing sent.
#[test]
fn gpu_telemetry_without_nvidias_library_is_one_line_exit_2() {
    if batchbench_engine::telemetry::gpu::Nvml::load().is_ok() {
        eprintln!("this machine has NVIDIA's library and a GPU: nothing to refuse");
        return;
    }
    let sim = SimServer::recording("qwen");
    let tok = tokenizer_path("qwen").display().to_string();
    let o = run(&cmd(
        "--host {} --tokenizer-model {} --quiet --gpu-telemetry nvml",
        &[&sim.url(), &tok],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("--gpu-telemetry nvml"), "{err}");
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

#[test]
fn a_malformed_dataset_line_names_the_file_and_line_exit_2_and_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cases: [(&str, &str, &str, &str); 6] = [
        (
            "sharegpt",
            "s.jsonl",
            "{\"id\": \"a\", \"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}\n{\"id\": \"b\", \"conversations\": [{\"from\": \"robot\", \"value\": \"hi\"}]}\n",
            "line 2: conversations[0].from",
        ),
        (
            "prompts_jsonl",
            "p.jsonl",
            "{\"prompt\": \"a\"}\n\n{\"prompt\": 5}\n",
            "line 3:",
        ),
        (
            "prompts_jsonl",
            "q.jsonl",
            "{\"prompt\": \"a\", \"output_token\": 5}\n",
            "output_token",
        ),
        (
            "mooncake",
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1]}\n",
            "line 1: hash_ids",
        ),
        (
            "azure_trace",
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,2\n2023-11-16 18:15:47.00,ten,2\n",
            "line 3: ContextTokens",
        ),
        (
            "burstgpt",
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,10,2,12,API log\nsoon,ChatGPT,10,2,12,API log\n",
            "line 3: Timestamp",
        ),
    ];
    for (workload, file, text, needle) in cases {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        let config = format!(
            r#"{{"path": {}}}"#,
            serde_json::Value::from(path.display().to_string())
        );
        let o = run(&cmd(
            "--host {} --quiet --tokenizer-model {} --workload {} --workload-config {}",
            &[&url, &tok, workload, &config],
        ));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{workload}: {err}");
        assert!(
            err.contains(&path.display().to_string()),
            "{workload}: {err}"
        );
        assert!(err.contains(needle), "{workload}: {err}");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

#[test]
fn shards_from_the_job_index_are_checked_before_anything_is_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let args = [
        "--host",
        &url,
        "--quiet",
        "--tokenizer-model",
        &tok,
        "--seed",
        "1",
        "--shards",
        "4",
    ];
    for (index, needle) in [
        (None, "JOB_COMPLETION_INDEX"),
        (Some("4"), "not below the shard count 4"),
        (Some("x"), "JOB_COMPLETION_INDEX \"x\""),
    ] {
        let mut cmd = bin();
        cmd.args(args).env_remove("JOB_COMPLETION_INDEX");
        if let Some(i) = index {
            cmd.env("JOB_COMPLETION_INDEX", i);
        }
        let o = cmd
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{index:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{index:?}: {err}");
        assert!(err.contains(needle), "{index:?}: {err}");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
    // With a valid index the pod runs its shard: one of four users.
    let o = bin()
        .args(args)
        .args(["--users", "4"])
        .env("JOB_COMPLETION_INDEX", "2")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(sim.stats().requests, 1);
}

#[cfg(unix)]
#[test]
fn ctrl_c_prints_a_partial_summary_writes_the_csv_and_exits_130() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let csv = dir.path().join("r.csv");
    let tok = tokenizer_path("qwen").display().to_string();
    // 4 users x 50 requests of 20 tokens at 25 ms per token: about 25 s of work.
    let sim = SimServer::decoding(25.0);
    let args = cmd(
        "--host {} --tokenizer-model {} --users 4 --requests-per-user 50 --output-tokens 20 --results-csv",
        &[&sim.url(), &tok],
    );
    let child = started(bin().args(args).arg(&csv));
    // A closed loop sends a user's next request only after the last one ended:
    // eight requests received means some have completed, however slow the start.
    wait_for_requests(&sim, 8);
    let t = Instant::now();
    let o = interrupt(child);
    assert!(t.elapsed() < Duration::from_secs(10), "stops promptly");
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("interrupted: partial results"), "{out}");
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["interrupted"], "true");
    let ok: u64 = rows[0]["successful_requests"].parse().unwrap_or(0);
    assert!(ok > 0 && ok < 200, "partial: {ok}");
    assert!(
        rows[0]["failures_by_kind"].contains("cancelled"),
        "{:?}",
        rows[0]["failures_by_kind"]
    );
}

#[test]
fn hub_ids_resolve_from_the_standard_cache_offline() {
    let cache = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let repo = cache.path().join("models--acme--tiny-model");
    let snap = repo.join("snapshots").join("abc123");
    std::fs::create_dir_all(&snap).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(repo.join("refs")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(repo.join("refs").join("main"), "abc123").unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(tokenizer_path("qwen"), snap.join("tokenizer.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let o = bin()
        .env("HF_HUB_CACHE", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .args(words(
            "--host sim:// --model acme/tiny-model --input-tokens 16 --output-tokens 2 -q",
        ))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = bin()
        .env("HF_HUB_CACHE", cache.path())
        .env("HF_HUB_OFFLINE", "1")
        .args(words(
            "--host sim:// --model acme/other-model --input-tokens 16 -q",
        ))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("acme/other-model") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
}

#[test]
fn verbose_never_prints_the_api_key() {
    // A real HTTP target, so the key is really sent in the Authorization header.
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let o = bin()
        .env("MY_KEY", "sk-secret-value-123")
        .args(cmd(
            "--host {} --api-key-env MY_KEY -v -q --output-tokens 2",
            &[&url],
        ))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0));
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(all.contains("-> POST"), "verbose prints payloads: {all}");
    assert!(!all.contains("sk-secret-value-123"));
}

#[test]
fn plugins_lists_the_builtins() {
    let o = run(&["plugins"]);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    for name in [
        "finite_batch",
        "openai_chat",
        "console_summary",
        "csv",
        "json_summary",
    ] {
        assert!(out.contains(name), "{out}");
    }
}

/// Ctrl+C in a sweep stops the point in flight, keeps what was measured and
/// exits 130; the index says the series was interrupted.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_sweep_with_130_and_an_index_that_says_so() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("sweep");
    let tok = tokenizer_path("qwen").display().to_string();
    // 2 users x 100 requests of 20 tokens at 25 ms per token: the first point
    // alone is about 50 s of work.
    let sim = SimServer::decoding(25.0);
    let args = cmd(
        "sweep --over users --values 2,4 --host {} --tokenizer-model {} --requests-per-user 100 --output-tokens 20 --output-dir",
        &[&sim.url(), &tok],
    );
    let child = started(bin().args(args).arg(&out));
    // The series registers its handler before its first point starts.
    wait_for_requests(&sim, 1);
    let o = interrupt(child);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("index.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(index["interrupted"], true, "{index}");
}

#[test]
fn ctrl_c_stops_an_export_with_130_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A FIFO as the rows file: the export blocks reading it until interrupted.
    let fifo = dir.path().join("rows.jsonl");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(made.success());
    let out = dir.path().join("plans.jsonl");
    let child = started(
        bin()
            .args([
                "export-plans",
                "--start",
                "2026-09-01T09:00:00Z",
                "--end",
                "2026-09-01T10:00:00Z",
                "--rows-jsonl",
            ])
            .arg(&fifo)
            .arg("--output")
            .arg(&out),
    );
    // Hold the FIFO open for writing (so the reader waits for data), then
    // interrupt. Opening it returns once the export has opened it to read,
    // which it does only after its SIGINT handler is registered.
    let _writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap_or_else(|e| panic!("{e}"));
    let o = interrupt(child);
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing was written"), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n != "rows.jsonl")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn console_summary_of_a_fixed_seed_simulator_run_is_pinned() {
    let tok = tokenizer_path("qwen").display().to_string();
    let o = run(&cmd(
        "--host sim:// --tokenizer-model {} --users 2 --requests-per-user 3 --input-tokens 32 --output-tokens 4 --stream --seed 21 --quiet",
        &[&tok],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    batchbench_tests::check_snapshot(
        "batchbench.console.snap",
        &batchbench_tests::mask_console(&text),
    );
}

#[test]
fn print_config_prints_the_effective_spec_exits_0_and_sends_nothing() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), tokenizer_path("qwen").display().to_string());
    let flags = [
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--users",
        "3",
        "--requests-per-user",
        "2",
        "--request-rate",
        "7.5",
        "--seed",
        "9",
    ];
    let o = run(&[&flags[..], &["--print-config"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let toml = String::from_utf8_lossy(&o.stdout).into_owned();
    for want in ["seed = 9", "rate = 7.5", "name = \"finite_batch\"", &url] {
        assert!(
            toml.contains(want),
            "--print-config lacks {want:?}:\n{toml}"
        );
    }

    // The printed spec is a config file; flags over it win, and it too prints.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("run.toml");
    std::fs::write(&file, &toml).unwrap_or_else(|e| panic!("{e}"));
    let file = file.display().to_string();
    let o = run(&["--config", &file, "--seed", "10", "--print-config"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let again = String::from_utf8_lossy(&o.stdout);
    assert!(again.contains("seed = 10"), "{again}");
    assert!(again.contains("rate = 7.5"), "{again}");
    assert_eq!(sim.requests().len(), 0, "--print-config sent requests");
}

#[test]
fn report_names_the_file_that_is_wrong_and_exits_2() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("run");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("requests.jsonl"), "{}\n").unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("r.html").display().to_string();
    let d = dir.display().to_string();
    let o = run(&["report", &d, "-o", &out]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(&d) && err.contains("incomplete results"),
        "{err}"
    );
    std::fs::write(
        dir.join("run.json"),
        r#"{"format": "batchbench-results", "version": 2, "run": {}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let o = run(&["report", &d, "-o", &out]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("run.json: format version 2, newer than this build reads (1)"),
        "{err}"
    );
    let missing = tmp.path().join("nope").display().to_string();
    let o = run(&["report", &missing, "-o", &out]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no such directory"), "{}", stderr(&o));
    assert!(!Path::new(&out).exists());
}

/// Every file and stream of a run with every output on: the API key given on
/// the command line and the passwords in the target's and the metrics
/// endpoints' URLs appear nowhere; the flag gets a one-line warning.
#[test]
fn secrets_never_appear_in_any_output() {
    let sim = SimServer::recording("qwen");
    let port = sim.url().rsplit(':').next().unwrap_or_default().to_owned();
    let tok = tokenizer_path("qwen").display().to_string();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = |name: &str| tmp.path().join(name).display().to_string();
    let host = format!("http://bench:hunter2pass@127.0.0.1:{port}");
    let metrics = format!("http://scraper:metricpass@127.0.0.1:{port}/metrics");
    let secrets = [
        "sk-flag-secret-999",
        "hunter2pass",
        "metricpass",
        "deadpass",
    ];
    let o = bin()
        .args(cmd("--host {} --api-key sk-flag-secret-999 --tokenizer-model {} --users 2 --requests-per-user 2 --input-tokens 16 --output-tokens 2 --stream -v --results-csv {} --summary-json {} --requests-jsonl {} --output-dir {} --server-metrics {} --server-metrics http://u:deadpass@127.0.0.1:9/metrics --metrics-interval 0.05", &[&host, &tok, &p("r.csv"), &p("s.json"), &p("q.jsonl"), &p("dir"), &metrics]))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("warning: --api-key on the command line")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("set OPENAI_API_KEY instead"), "{err}");
    let mut texts = vec![
        (
            "stdout".to_owned(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ),
        ("stderr".to_owned(), err),
    ];
    let mut stack = vec![tmp.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{e}")) {
            let path = e.unwrap_or_else(|e| panic!("{e}")).path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let text =
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                texts.push((path.display().to_string(), text));
            }
        }
    }
    assert!(
        texts.len() >= 9,
        "{:?}",
        texts.iter().map(|t| &t.0).collect::<Vec<_>>()
    );
    for (name, text) in &texts {
        for s in secrets {
            assert!(!text.contains(s), "{s} in {name}:\n{text}");
        }
    }
    // The scrapes with credentials went through, and are recorded redacted.
    let dir_metrics =
        std::fs::read_to_string(tmp.path().join("dir/server_metrics.jsonl")).unwrap_or_default();
    assert!(
        dir_metrics.contains("http://***@127.0.0.1"),
        "{dir_metrics}"
    );
    assert!(!sim.requests().is_empty());
}

/// Started with SIGINT ignored (as `nohup` and a non-interactive shell's `&`
/// start a background job), a run still stops on SIGINT with its partial
/// summary and exit 130: the tool installs its own handler.
#[test]
fn sigint_stops_a_run_that_started_with_sigint_ignored() {
    let tok = tokenizer_path("qwen").display().to_string();
    let sim = SimServer::decoding(20.0);
    let url = sim.url();
    let args = cmd(
        "--host {} --tokenizer-model {} --users 2 --requests-per-user 200 --output-tokens 50 -q",
        &[&url, &tok],
    );
    let child = Command::new("sh")
        .arg("-c")
        .arg("trap '' INT; exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_batchbench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    // Interrupt once the run is under way (its handler is registered before
    // the first request; its summary would come after 200 s).
    wait_for_requests(&sim, 1);
    sigint(&child);
    let start = Instant::now();
    let o = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("batchbench summary"));
    assert!(stderr(&o).contains("interrupted"));
}

/// The exit-code table of the book (`batchbench` reference) lists exactly the
/// codes the tool exits with, and each is produced by the case it names.
#[test]
fn the_books_exit_code_table_is_what_the_tool_does() {
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src/batchbench.md"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let table = page
        .split("## Exit codes")
        .nth(1)
        .unwrap_or_else(|| panic!("no exit-code section"));
    let codes: Vec<i32> = table
        .lines()
        .skip_while(|l| !l.starts_with("| code"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_matches('|').split('|').next()?.trim().parse().ok())
        .collect();
    assert_eq!(codes, [0, 1, 2, 130], "the table lists other codes");
    let tok = tokenizer_path("qwen").display().to_string();
    let common = [
        "--tokenizer-model",
        tok.as_str(),
        "-q",
        "--output-tokens",
        "2",
    ];
    let code = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(common);
        run(&all).status.code()
    };
    // 0: the run completed and requests succeeded.
    assert_eq!(code(&["--host", "sim://"]), Some(0));
    // 1: it completed, but no request succeeded (nothing listens on port 9).
    assert_eq!(
        code(&["--host", "http://127.0.0.1:9", "--max-retries", "0"]),
        Some(1)
    );
    // 1: more failed than --max-failure-rate allows.
    assert_eq!(
        code(&words(
            "--host sim://?fault-rate=0.5&seed=3 --max-retries 0 --users 4 --requests-per-user 10 --max-failure-rate 0.05"
        )),
        Some(1)
    );
    // 2: bad input, nothing sent.
    assert_eq!(code(&["--host", "sim://", "--users", "0"]), Some(2));
    // 130 is the SIGINT test's (sigint_stops_a_run_that_started_with_sigint_ignored).
}

#[test]
fn analyze_prints_its_tables_and_names_bad_input_by_file_line_and_field() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let m = root.join("examples/trajectory-replay/plans-v2.jsonl");
    let o = run(&cmd(
        "analyze {} --cache-tokens 1k,4k --ranks 2",
        &[&m.display().to_string()],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "requests             4 in 2 sessions",
        "turns per session",
        "prompt tokens",
        "think time (ms)",
        "arrivals (assuming 1000 ms per request)",
        "prefix sharing (blocks of 16 tokens)",
        "longest shared prefixes",
        "one ideal cache, all requests",
        "per rank: 2 rank(s), routing affinity",
        "LRU 4,000 tokens",
        "rank 1 (2 requests)",
    ] {
        assert!(out.contains(want), "no {want:?} in\n{out}");
    }
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bad = tmp.path().join("bad.jsonl");
    let good = r#"{"schema_version":2,"trajectory_id":"a","requests":[{"prompt_tokens":20,"output_tokens":4,"overhead_tokens":0,"blocks":[{"seed":"s","tokens":20,"role":"user"}]}]}"#;
    std::fs::write(
        &bad,
        format!("{good}\n{{\"schema_version\":2,\"trajectory_id\":\"b\",\"requests\":[{{\"prompt_tokens\":20,\"output_tokens\":4,\"blocks\":[{{\"seed\":\"s\",\"tokens\":-4,\"role\":\"user\"}}]}}]}}\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let b = bad.display().to_string();
    let o = run(&["analyze", &b]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("{b}:2: trajectory b, request 0")) && err.contains("tokens"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "nothing but the error");
    let o = run(&["analyze", &b, "--workload", "finite_batch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("SOURCE and --workload"),
        "{}",
        stderr(&o)
    );
    let o = run(&["analyze", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in
        words("--cache-tokens --ranks --routing --assume-latency-ms --json --cache-block-tokens")
    {
        assert!(help.contains(flag), "no {flag} in analyze --help");
    }
}
