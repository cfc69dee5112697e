//! `batchbench` end to end against the simulator.

use batchbench_run::commands::batchbench::PROFILE as BATCHBENCH;
use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, qwen, run_batchbench, tokenizer_path};

#[test]
fn prompts_and_outputs_are_exact() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = qwen();
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 8 --requests-per-user 2 --input-tokens 256 --output-tokens 64 --seed 3",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    let log = sim.requests();
    assert_eq!(log.len(), 16);
    let overhead = SimConfig::default().template_overhead_tokens
        + SimConfig::default().message_overhead_tokens;
    for e in &log {
        assert_eq!(e.prompt_tokens, 256 + u64::from(overhead), "{e:?}");
        assert_eq!(e.completion_tokens, 64, "{e:?}");
    }
    assert_eq!(r.count("successful_requests"), 16);
    assert_eq!(r.count("total_completion_tokens"), 16 * 64);
    assert_eq!(r.count("planned_prompt_tokens"), 16 * 256);
    assert_eq!(
        r.count("counted_prompt_tokens"),
        16 * (256 + u64::from(overhead))
    );
    // The CSV keeps the column names existing notebooks read, in order.
    let row = &r.csv[0];
    assert_eq!(row["total_requests"], "16");
    assert_eq!(row["users"], "8");
    assert_eq!(row["output_tokens"], "64");
    assert_eq!(row["host"], url);
    assert!(!row["latency_p99_ms"].is_empty());
}

#[test]
fn csv_header_starts_with_the_legacy_columns() {
    let sim = SimServer::recording("qwen");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let csv = dir.path().join("r.csv");
    let (url, tok, path) = (sim.url(), qwen(), csv.display().to_string());
    for _ in 0..2 {
        let code = batchbench_run::commands::batchbench::run(cmd(
            "batchbench -q --host {} --tokenizer-model {} --results-csv {}",
            &[&url, &tok, &path],
        ));
        assert_eq!(code, 0);
    }
    let text = std::fs::read_to_string(&csv).unwrap_or_default();
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let legacy = "timestamp,model,dataset_path,dataset_size,users,requests_per_user,total_requests,successful_requests,failed_requests,total_prompt_tokens,total_completion_tokens,total_duration_seconds,requests_per_second,prompt_tokens_per_second,completion_tokens_per_second,latency_p50_ms,latency_p90_ms,latency_p99_ms,output_tokens,output_vary,output_lognorm_mu,output_lognorm_sigma,output_lognorm_max,sglang,request_timeout_secs,max_retries,retry_delay_ms,host,endpoint";
    assert!(header.starts_with(legacy), "{header}");
    let columns = batchbench_run::view::names(BATCHBENCH.csv_columns).len();
    assert_eq!(header.split(',').count(), columns);
    assert_eq!(lines.count(), 2, "one header, then one row per run");
}

#[test]
fn retries_recover_from_injected_503s_and_are_counted() {
    let sim = SimServer::start(
        SimConfig {
            fault_rate: 0.5,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let (url, tok) = (sim.url(), qwen());
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 4 --requests-per-user 10 --output-tokens 4 --max-retries 3 --retry-delay-ms 1",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0, "the run completes");
    let retries = r.count("retries");
    let failed = r.count("failed_requests");
    assert!(retries > 0);
    assert_eq!(r.count("total_requests"), 40);
    assert_eq!(r.count("successful_requests") + failed, 40);
    // Every injected fault was either retried or is a final failure.
    assert_eq!(sim.stats().faults["status"], retries + failed);
    // Usage totals count successes only, never retried attempts.
    assert_eq!(
        r.count("total_completion_tokens"),
        4 * r.count("successful_requests")
    );
    assert_eq!(r.csv[0]["retries"], retries.to_string());
}

#[test]
fn faults_are_classified() {
    for (kind, want) in [
        ("reset", "connect"),
        ("truncate", "decode"),
        ("malformed", "decode"),
        ("stall", "timeout"),
    ] {
        for stream in [false, true] {
            if kind == "stall" && stream {
                continue;
            }
            let sim = SimServer::start(
                SimConfig {
                    fault_rate: 1.0,
                    fault_kinds: vec![parse_kind(kind)],
                    stall_secs: 5.0,
                    ..SimConfig::default()
                },
                "qwen",
            );
            let mut args = sim.args(
                "--max-retries 0 --request-timeout-secs 1 --output-tokens 8",
                &[],
            );
            if stream {
                args.push("--stream".into());
            }
            let r = run_batchbench(&args);
            assert_eq!(r.code, 1, "no request succeeded: the run failed");
            assert_eq!(
                r.summary("run_failed"),
                "no request succeeded (1 of 1 failed)",
                "{kind} stream={stream}"
            );
            assert_eq!(r.count("failed_requests"), 1, "{kind} stream={stream}");
            assert_eq!(
                r.summary("failures_by_kind")[want],
                1,
                "{kind} stream={stream}: {:?}",
                r.summary("failures_by_kind")
            );
        }
    }
}

fn parse_kind(k: &str) -> batchbench_simulator::FaultKind {
    use batchbench_simulator::FaultKind::*;
    match k {
        "reset" => Reset,
        "truncate" => Truncate,
        "malformed" => Malformed,
        "stall" => Stall,
        _ => Status,
    }
}

#[test]
fn streaming_reports_ttft_itl_and_tpot() {
    let sim = SimServer::start(
        SimConfig {
            ttft_base_ms: 40.0,
            decode_ms_per_token: 4.0,
            ..SimConfig::default()
        },
        "qwen",
    );
    let (url, tok) = (sim.url(), qwen());
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 2 --requests-per-user 2 --output-tokens 10 --stream",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    let ms = |k: &str, p: &str| r.summary(k)[p].as_f64().unwrap_or(-1.0);
    // TTFT is measured at the first content token, not at the role chunk the
    // simulator sends at once.
    assert!(ms("ttft", "p50_ms") >= 40.0, "ttft {:?}", r.summary("ttft"));
    assert!(
        (3.0..20.0).contains(&ms("itl", "p50_ms")),
        "itl {:?}",
        r.summary("itl")
    );
    assert!(
        (3.0..20.0).contains(&ms("tpot", "p50_ms")),
        "tpot {:?}",
        r.summary("tpot")
    );
    assert_eq!(
        r.summary("itl")["count"],
        4 * 9,
        "one sample per token after the first"
    );
    assert_eq!(r.count("total_completion_tokens"), 40);
    assert!(!r.csv[0]["ttft_p50_ms"].is_empty());
}

#[test]
fn same_seed_sends_identical_bodies() {
    let bodies = |seed: &str| {
        let sim = SimServer::recording("qwen");
        let (url, tok) = (sim.url(), qwen());
        let r = run_batchbench(&cmd(
            "--host {} --tokenizer-model {} --users 3 --requests-per-user 3 --input-lognorm-median 64 --input-lognorm-sigma 0.5 --output-tokens 2 --seed {}",
            &[&url, &tok, seed],
        ));
        assert_eq!(r.code, 0);
        let mut h: Vec<u64> = sim.requests().iter().map(|e| e.body_hash).collect();
        h.sort_unstable();
        h
    };
    let a = bodies("11");
    assert_eq!(a, bodies("11"));
    assert_ne!(a, bodies("12"));
}

#[test]
fn log_normal_prompts_are_exact_per_request() {
    let sim = SimServer::recording("llama3.2");
    let (url, tok) = (sim.url(), tokenizer_path("llama3.2").display().to_string());
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 4 --requests-per-user 5 --input-lognorm-median 300 --input-lognorm-sigma 0.8 --input-lognorm-max 2000 --output-tokens 1",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(
        r.count("counted_prompt_tokens"),
        r.count("planned_prompt_tokens") + 20 * 8
    );
    assert_eq!(r.summary("worst_prompt_drift_tokens"), 8);
    let sizes: std::collections::BTreeSet<u64> =
        sim.requests().iter().map(|e| e.prompt_tokens).collect();
    assert!(sizes.len() > 5, "lengths vary: {sizes:?}");
}

#[test]
fn prefix_overlap_is_shared_and_cached() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), qwen());
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 4 --requests-per-user 3 --input-tokens 256 --input-prefix-overlap 0.5 --output-tokens 1",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    let log = sim.requests();
    // 128 shared content tokens after the role marker: 8 full 16-token blocks.
    let hits = log.iter().filter(|e| e.cached_tokens >= 128).count();
    assert!(
        hits >= log.len() - 1,
        "{:?}",
        log.iter().map(|e| e.cached_tokens).collect::<Vec<_>>()
    );
    assert!(
        log.iter().all(|e| e.cached_tokens < 256),
        "only the prefix is shared"
    );
}

#[test]
fn sglang_fields_constrain_the_output() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), qwen());
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --output-tokens 33 --sglang --requests-per-user 3",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    assert!(sim.requests().iter().all(|e| e.completion_tokens == 33));
}

#[test]
fn dry_run_sends_nothing() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let r = run_batchbench(&cmd(
        "--host {} --users 3 --requests-per-user 2 --input-tokens 100 --dry-run",
        &[&url],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(sim.stats().requests, 0);
}

#[test]
fn in_process_simulator_runs_with_options() {
    let tok = qwen();
    let r = run_batchbench(&cmd(
        "--host sim://?fault-rate=0.3&workers=2 --tokenizer-model {} --users 2 --requests-per-user 5 --input-tokens 32 --output-tokens 3 --max-retries 10 --retry-delay-ms 1",
        &[&tok],
    ));
    assert_eq!(r.code, 0);
    // The query's options reached the simulator: faults happened and were retried.
    // (Eleven faults in a row for one request, 0.3^11, would be a final failure.)
    assert!(r.count("retries") > 0);
    let ok = r.count("successful_requests");
    assert_eq!(ok + r.count("failed_requests"), 10);
    assert!(
        r.summary("failures_by_kind")
            .as_object()
            .is_some_and(|m| m.keys().all(|k| k == "http_503"))
    );
    assert_eq!(r.count("counted_prompt_tokens"), ok * (32 + 8));
}

#[test]
fn requests_jsonl_has_one_line_per_request_with_outcome_and_counts() {
    let tok = qwen();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("requests.jsonl");
    let p = path.display().to_string();
    let r = run_batchbench(&cmd(
        "--host sim://?fault-rate=0.4&seed=5 --tokenizer-model {} --users 3 --requests-per-user 4 --input-tokens 40 --output-tokens 5 --max-retries 0 --seed 2 --requests-jsonl {}",
        &[&tok, &p],
    ));
    assert_eq!(r.code, 0);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len() as u64, r.count("total_requests"));
    let ok: Vec<&serde_json::Value> = lines.iter().filter(|l| l["ok"] == true).collect();
    let failed = lines.len() - ok.len();
    assert_eq!(ok.len() as u64, r.count("successful_requests"));
    assert!(
        failed > 0 && !ok.is_empty(),
        "fault rate 0.4 over 12 requests"
    );
    let overhead = u64::from(
        SimConfig::default().template_overhead_tokens
            + SimConfig::default().message_overhead_tokens,
    );
    for l in &ok {
        assert_eq!(l["planned_prompt_tokens"], 40, "{l}");
        assert_eq!(l["prompt_tokens"], 40 + overhead, "{l}");
        assert_eq!(l["prompt_drift_tokens"], overhead, "{l}");
        assert_eq!(l["completion_tokens"], 5, "{l}");
        assert!(l["latency_ms"].as_f64().unwrap() > 0.0);
    }
    for l in lines.iter().filter(|l| l["ok"] == false) {
        assert_eq!(l["failure_kind"], "http_503", "{l}");
        assert!(l["prompt_tokens"].is_null());
    }
    let sum: u64 = ok
        .iter()
        .map(|l| l["prompt_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, r.count("total_prompt_tokens"));
    // Every (agent, request) appears once.
    let mut keys: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| {
            (
                l["agent_id"].as_u64().unwrap(),
                l["request_index"].as_u64().unwrap(),
            )
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 12);
}

#[test]
fn a_failed_share_above_max_failure_rate_fails_the_run_and_says_why() {
    let sim = SimServer::start(
        SimConfig {
            fault_rate: 0.5,
            seed: 11,
            ..SimConfig::default()
        },
        "qwen",
    );
    let (url, tok) = (sim.url(), qwen());
    let run = |rate: &str| {
        run_batchbench(&cmd(
            "--host {} --tokenizer-model {} --users 4 --requests-per-user 10 --max-retries 0 --max-failure-rate {}",
            &[&url, &tok, rate],
        ))
    };
    let lenient = run("0.9");
    let failed = lenient.count("failed_requests");
    assert!(failed > 4 && failed < 36, "about half of 40 fail: {failed}");
    assert_eq!(lenient.code, 0, "{}", lenient.summary("run_failed"));
    assert!(lenient.summary("run_failed").is_null());
    let strict = run("0.1");
    assert_eq!(strict.code, 1);
    let why = strict
        .summary("run_failed")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        why.contains("above the allowed 10.00% (--max-failure-rate 0.1)"),
        "{why}"
    );
    assert_eq!(strict.csv.len(), 1, "the reports are written all the same");
    let requests = sim.stats().requests;
    let bad = run("1.5");
    assert_eq!(bad.code, 2);
    assert_eq!(sim.stats().requests, requests, "nothing was sent");
}

#[test]
fn a_length_beyond_the_token_limit_is_refused_before_anything_is_sent() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), qwen());
    let base = ["--host", url.as_str(), "--tokenizer-model", tok.as_str()];
    let with = |extra: &[&'static str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| (*s).to_owned()).collect()
    };
    for extra in [
        &["--input-tokens", "99999999"][..],
        &["--output-tokens", "20000000"],
        &[
            "--input-lognorm-median",
            "200000",
            "--input-lognorm-sigma",
            "2",
        ],
    ] {
        let args = with(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_batchbench(&args);
        assert_eq!(r.code, 2, "{extra:?}");
        let flag = extra[0].split("-lognorm").next().unwrap_or_default();
        let spec = batchbench_run::commands::batchbench::resolve_args(
            std::iter::once("batchbench").chain(args.iter().copied()),
        );
        let e = spec
            .err()
            .map(|f| format!("{:#}", f.error))
            .unwrap_or_default();
        assert!(e.contains(flag) && e.contains("10485760"), "{extra:?}: {e}");
    }
    let args = with(&["--environment-tokens", "10485761"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(batchbench_tests::run_agent(&args).code, 2);
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}
