//! The results directory (`--output-dir`) and `batchbench report`: every file
//! present and consistent with the summary, histograms that give back the
//! summary's percentiles, time series whose totals add up, a directory that is
//! never overwritten, and reports of runs and of a sweep.

use batchbench_engine::measurement::metrics::Latency;
use batchbench_tests::{
    SimServer, cmd, qwen, read_json, read_jsonl, run_agent, run_batchbench, run_series,
};
use serde_json::Value;
use std::path::Path;

fn sum_over_time(ts: &Value, key: &str) -> f64 {
    let w = ts["interval_secs"].as_f64().unwrap_or_default();
    ts[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key}: {ts}"))
        .iter()
        .map(|v| v.as_f64().unwrap_or_default())
        .sum::<f64>()
        * w
}

/// The distribution of one family of `histograms.json`.
fn family(h: &Value, name: &str) -> Latency {
    let buckets: Vec<[u64; 2]> = serde_json::from_value(h["families"][name].clone())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    Latency::from_buckets(&buckets)
}

fn assert_stats_match(h: &Value, name: &str, summary: &Value) {
    let got = family(h, name).stats().unwrap_or_default();
    let want = &summary[name];
    for (k, v) in [
        ("count", got.count as f64),
        ("p50_ms", got.p50_ms),
        ("p99_ms", got.p99_ms),
        ("max_ms", got.max_ms),
    ] {
        let w = want[k].as_f64().unwrap_or(f64::NAN);
        assert!(
            (w - v).abs() < 1e-9,
            "{name}.{k}: summary {w}, histogram {v}"
        );
    }
}

#[test]
fn a_run_writes_a_complete_results_directory_consistent_with_its_summary() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("nested/run");
    let d = dir.display().to_string();
    // One user in three fails now and then: failures must show in every file.
    let r = run_batchbench(&cmd(
        "--host sim://?decode-ms-per-token=1&fault-rate=0.1 --tokenizer-model {} --users 6 --requests-per-user 10 --input-tokens 32 --input-vary 16 --output-tokens 8 --stream --seed 11 --max-failure-rate 0.9 --max-retries 0 --output-dir {}",
        &[&tok, &d],
    ));
    assert_eq!(r.code, 0);
    let run = read_json(&dir.join("run.json")).unwrap_or_default();
    assert_eq!(run["format"], "batchbench-results");
    assert_eq!(run["version"], 1);
    let summary = &run["summary"];
    // The same figures as the JSON summary of the same run.
    let json = r.json.clone().unwrap_or_default();
    assert_eq!(summary, &json["summary"]);
    assert_eq!(run["run"]["spec"], json["run"]["spec"]);
    assert_eq!(
        run["run"]["spec"]["output"]["output_dir"].as_str(),
        Some(d.as_str())
    );
    let total = r.count("total_requests");
    let ok = r.count("successful_requests");
    assert_eq!(total, 60);
    assert!(ok < total && ok > 0, "faults must fail some: {ok}/{total}");

    let reqs = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(reqs.len() as u64, total);
    assert_eq!(reqs.iter().filter(|l| l["ok"] == true).count() as u64, ok);
    assert_eq!(read_jsonl(&dir.join("trajectories.jsonl")).len(), 6);

    let h = read_json(&dir.join("histograms.json")).unwrap_or_default();
    assert_eq!(h["unit"], "us");
    for name in ["latency", "ttft", "itl", "tpot"] {
        assert_stats_match(&h, name, summary);
    }
    assert_eq!(family(&h, "latency").len(), ok);

    let ts = read_json(&dir.join("timeseries.json")).unwrap_or_default();
    assert!((sum_over_time(&ts, "send_rate") - total as f64).abs() < 1e-6);
    assert!((sum_over_time(&ts, "throughput") - ok as f64).abs() < 1e-6);
    assert!((sum_over_time(&ts, "error_rate") - (total - ok) as f64).abs() < 1e-6);
    let tokens = r.count("total_completion_tokens") as f64;
    assert!((sum_over_time(&ts, "output_tokens_per_second") - tokens).abs() < 1e-3);
    // Busy request-time equals the requests' own send-to-end spans.
    let busy: f64 = reqs
        .iter()
        .map(|l| {
            l["end_ms"].as_f64().unwrap_or_default() - l["sent_ms"].as_f64().unwrap_or_default()
        })
        .sum::<f64>()
        / 1000.0;
    let got = sum_over_time(&ts, "concurrency");
    assert!(
        (got - busy).abs() < 1e-3 * busy.max(1.0),
        "busy {got} s, spans {busy} s"
    );
}

#[test]
fn an_agent_run_writes_its_trajectories_and_a_full_directory_is_never_overwritten() {
    let tok = qwen();
    let sim = SimServer::recording("qwen");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let d = tmp.path().join("agents").display().to_string();
    let url = sim.url();
    let args = [
        "--host",
        url.as_str(),
        "--tokenizer-model",
        &tok,
        "--agents",
        "3",
        "--tool-invocations",
        "2",
        "--input-tokens",
        "32",
        "--environment-tokens",
        "8",
        "--output-tokens",
        "4",
        "--output-dir",
        &d,
    ];
    let first = run_agent(&args);
    assert_eq!(first.code, 0);
    let dir = Path::new(&d);
    assert_eq!(read_jsonl(&dir.join("trajectories.jsonl")).len(), 3);
    // One request per tool invocation.
    assert_eq!(read_jsonl(&dir.join("requests.jsonl")).len(), 6);
    let sent = sim.requests().len();
    let again = run_agent(&args);
    assert_eq!(
        again.code, 2,
        "a second run into a complete directory is bad input"
    );
    assert_eq!(sim.requests().len(), sent, "nothing was sent");
}

#[test]
fn report_of_runs_and_a_sweep_is_one_self_contained_file_with_every_chart() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut dirs = Vec::new();
    for (name, decode) in [("base", "1"), ("slow", "3")] {
        let d = tmp.path().join(name);
        let host = format!("sim://?decode-ms-per-token={decode}");
        let r = run_batchbench(&cmd(
            "--host {} --tokenizer-model {} --users 4 --requests-per-user 6 --input-tokens 24 --input-vary 16 --output-tokens 6 --stream --output-dir {}",
            &[&host, &tok, &d.display().to_string()],
        ));
        assert_eq!(r.code, 0);
        dirs.push(d.display().to_string());
    }
    let sweep = run_series(
        "batchbench",
        "sweep",
        &cmd(
            "--over request-rate --values 20,40 --host sim://?max-running=4&step-base-ms=5 --tokenizer-model {} --input-tokens 16 --output-tokens 4 --stream --arrival constant --duration-secs 1 --slo ttft_p99<=200ms",
            &[&tok],
        ),
    );
    assert_eq!(sweep.code, 0);
    // Each point's run is a results directory of its own.
    for p in sweep.points() {
        let run = p["runs"][0].as_str().unwrap_or_default();
        assert!(sweep.dir.join(run).join("run.json").is_file(), "{run}");
    }
    let out = tmp.path().join("report.html");
    let mut argv = vec!["batchbench".to_owned(), "report".to_owned()];
    argv.extend(dirs.iter().cloned());
    argv.push(sweep.dir.display().to_string());
    argv.extend(["-o".into(), out.display().to_string()]);
    assert_eq!(batchbench_run::commands::batchbench::run(argv), 0);
    let html = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    for id in [
        "cdf-latency",
        "cdf-ttft",
        "cdf-itl",
        "cdf-tpot",
        "ts-rate",
        "ts-concurrency",
        "ts-tokens",
        "ts-ttft",
        "prompt-e2e",
        "prompt-ttft",
        "series-throughput",
        "series-latency",
        "series-curve",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no chart {id}");
    }
    // The SLO bound is drawn on the series' latency chart.
    assert!(html.contains("SLO ttft_p99&lt;=200ms"));
    // Each point's figures carry their run's own 95% interval, drawn as an
    // error bar around the point (a p50 of 20 requests has one).
    for p in sweep.points() {
        let ci = &p["e2e_p50_ms"]["interval"];
        let mean = p["e2e_p50_ms"]["mean"].as_f64().unwrap_or_default();
        assert!(
            ci[0].as_f64() <= Some(mean) && ci[1].as_f64() >= Some(mean),
            "{p}"
        );
    }
    assert!(
        html.matches("class=\"error\"").count() >= 4,
        "error bars on the series charts"
    );
    assert!(html.contains("e2e p50: ") && html.contains("(95% interval)"));
    // Both runs and both points overlay, and each run's spec is there.
    for label in ["base", "slow", "series 20 req/s", "series 40 req/s"] {
        assert!(html.contains(label), "no {label}");
    }
    assert_eq!(html.matches("<details>").count(), 4);
    // Self-contained: nothing is fetched.
    for external in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!html.contains(external), "{external}");
    }
    assert!(html.len() < 400 * 1024, "{} bytes", html.len());
}

#[test]
fn report_refuses_a_missing_newer_incomplete_or_truncated_directory_with_exit_2() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let good = tmp.path().join("good");
    let r = run_batchbench(&cmd(
        "--host sim:// --tokenizer-model {} --users 2 --requests-per-user 2 --output-dir {}",
        &[&tok, &good.display().to_string()],
    ));
    assert_eq!(r.code, 0);
    let copy = |name: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
        for f in std::fs::read_dir(&good).unwrap_or_else(|e| panic!("{e}")) {
            let f = f.unwrap_or_else(|e| panic!("{e}")).path();
            std::fs::copy(&f, d.join(f.file_name().unwrap_or_default()))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        d
    };
    let newer = copy("newer");
    let text = std::fs::read_to_string(newer.join("run.json")).unwrap_or_default();
    std::fs::write(
        newer.join("run.json"),
        text.replacen("\"version\": 1", "\"version\": 7", 1),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let incomplete = copy("incomplete");
    std::fs::remove_file(incomplete.join("run.json")).unwrap_or_else(|e| panic!("{e}"));
    let truncated = copy("truncated");
    let reqs = std::fs::read(truncated.join("requests.jsonl")).unwrap_or_default();
    std::fs::write(truncated.join("requests.jsonl"), &reqs[..reqs.len() - 9])
        .unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("r.html");
    let report = |dir: &Path| {
        batchbench_run::commands::batchbench::run([
            "batchbench".to_owned(),
            "report".to_owned(),
            dir.display().to_string(),
            "-o".to_owned(),
            out.display().to_string(),
        ])
    };
    assert_eq!(report(&good), 0);
    std::fs::remove_file(&out).unwrap_or_else(|e| panic!("{e}"));
    for bad in [&tmp.path().join("missing"), &newer, &incomplete, &truncated] {
        assert_eq!(report(bad), 2, "{}", bad.display());
        assert!(!out.exists(), "no report for {}", bad.display());
    }
}

/// Two runs of one configuration pass the gate; a simulator that decodes 30%
/// slower fails it with exit 1, naming the figures.
#[test]
fn compare_passes_one_configuration_twice_and_fails_a_30_percent_slower_decode() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |name: &str, decode_ms: &str| {
        let d = tmp.path().join(name).display().to_string();
        let host = format!("sim://?decode-ms-per-token={decode_ms}&ttft-base-ms=20");
        let r = run_batchbench(&cmd(
            "--host {} --tokenizer-model {} --users 4 --requests-per-user 12 --input-tokens 32 --output-tokens 16 --stream --seed 5 --output-dir {}",
            &[&host, &tok, &d],
        ));
        assert_eq!(r.code, 0);
        d
    };
    let (base, same, slow) = (run("base", "5"), run("same", "5"), run("slow", "6.5"));
    // Gated on medians: with both cores busy with other work, the same
    // configuration's ITL p90 moved by 14% between two runs (the machine's
    // timer, not the server), while every median stayed within 1%.
    let compare = |new: &str| {
        batchbench_run::commands::batchbench::run(cmd(
            "batchbench compare {} {} --fail-if e2e_p50>+10%,tpot_p50>+10%,itl_p50>+10%",
            &[&base, new],
        ))
    };
    assert_eq!(compare(&same), 0, "same configuration");
    assert_eq!(compare(&slow), 1, "30% slower decode");
    // The figure behind the verdict: TPOT rose by about 30%.
    let rise = tpot_p50(&slow) / tpot_p50(&base) - 1.0;
    assert!((0.2..0.45).contains(&rise), "TPOT p50 rose {rise}");
    // Bad thresholds are bad input.
    let bad = batchbench_run::commands::batchbench::run(cmd(
        "batchbench compare {} {} --fail-if ttft_p98>+10%",
        &[&base, &slow],
    ));
    assert_eq!(bad, 2);
}

fn tpot_p50(dir: &str) -> f64 {
    let run = read_json(&Path::new(dir).join("run.json")).unwrap_or_default();
    run["summary"]["tpot"]["p50_ms"]
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// `--server-metrics target` scrapes the simulator's own /metrics (vLLM names):
/// the running requests never exceed its batch, the generation counter of the
/// last scrape is the run's output tokens, and an unreachable endpoint is
/// counted as failed scrapes without failing the run.
#[test]
fn server_metrics_of_the_simulator_are_scraped_summarised_and_kept() {
    let tok = qwen();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("run");
    let r = run_batchbench(&cmd(
        "--host sim://?max-running=4&step-base-ms=10&step-ms-per-seq=1 --tokenizer-model {} --users 8 --requests-per-user 4 --input-tokens 32 --output-tokens 12 --server-metrics target --server-metrics http://127.0.0.1:9/metrics --metrics-interval 0.1 --output-dir {}",
        &[&tok, &dir.display().to_string()],
    ));
    assert_eq!(r.code, 0, "a failed scrape never fails the run");
    let m = r.summary("server_metrics").clone();
    let scrapes = m["scrapes"].as_u64().unwrap_or(0);
    assert!(scrapes >= 4, "{m}");
    // Every scrape of the unreachable endpoint failed, none of the simulator's.
    assert_eq!(
        m["failed_scrapes"].as_u64().unwrap_or(0) * 2,
        scrapes,
        "{m}"
    );
    assert!(
        m["errors"][0]
            .as_str()
            .unwrap_or_default()
            .contains("127.0.0.1:9"),
        "{m}"
    );
    let running = &m["metrics"]["requests_running"];
    let max = running["max"].as_f64().unwrap_or(f64::NAN);
    assert!(max > 0.0 && max <= 4.0, "{running}");
    let lines = read_jsonl(&dir.join("server_metrics.jsonl"));
    assert_eq!(lines.len() as u64, scrapes);
    let sim: Vec<&Value> = lines.iter().filter(|l| l["error"].is_null()).collect();
    let generated = |l: &Value| {
        l["raw"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| k.starts_with("vllm:generation_tokens_total"))
                    .map(|(_, v)| v.as_f64().unwrap_or_default())
                    .sum::<f64>()
            })
            .unwrap_or_default()
    };
    let last = sim.last().copied().cloned().unwrap_or_default();
    assert_eq!(generated(&last), r.count("total_completion_tokens") as f64);
    // Rates integrate to the counter's rise.
    let mut integral = 0.0;
    for w in sim.windows(2) {
        let dt = w[1]["t"].as_f64().unwrap_or_default() - w[0]["t"].as_f64().unwrap_or_default();
        integral += w[1]["common"]["generation_tokens_per_second"]
            .as_f64()
            .unwrap_or_default()
            * dt;
    }
    let rise = generated(&last) - generated(sim[0]);
    assert!(
        (integral - rise).abs() < 1e-6 * rise.max(1.0),
        "{integral} vs {rise}"
    );
    // The report draws the server's panels.
    let out = tmp.path().join("r.html");
    let code = batchbench_run::commands::batchbench::run([
        "batchbench".to_owned(),
        "report".to_owned(),
        dir.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
    ]);
    assert_eq!(code, 0);
    let html = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(html.contains("id=\"server-requests\"") && html.contains("id=\"server-tokens\""));
}

#[test]
fn bad_server_metrics_flags_are_refused_before_anything_is_sent() {
    let tok = qwen();
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    for bad in [
        ["--server-metrics", "ftp://x/metrics"],
        ["--metrics-interval", "0"],
        ["--metrics-interval", "nan"],
    ] {
        let mut args = vec!["--host", url.as_str(), "--tokenizer-model", &tok];
        args.extend(bad);
        assert_eq!(run_batchbench(&args).code, 2, "{bad:?}");
    }
    assert!(sim.requests().is_empty());
}

/// Every record carries what joins it with the server's logs: the response's
/// own id, the server's id from its `X-Request-Id`, the wall-clock send and
/// end; with `--send-request-ids` and `--trace-context`, this client's own
/// id (which the server echoes) and the trace id of its `traceparent`, the
/// same in two runs of one seed.
#[test]
fn records_carry_the_ids_that_join_them_with_the_servers_logs() {
    let sim = SimServer::start(
        batchbench_simulator::SimConfig {
            record_requests: true,
            request_id_headers: true,
            ..batchbench_simulator::SimConfig::default()
        },
        "qwen",
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |flags: &str, name: &str| {
        let path = dir.path().join(name);
        let line = format!(
            "--users 2 --requests-per-user 3 --output-tokens 2 --seed 5 {flags} --requests-jsonl {{}}"
        );
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
        let r = sim.batchbench(&line, &[&path.display().to_string()]);
        assert_eq!(r.code, 0);
        (read_jsonl(&path), before)
    };
    // Without the flags: the server's ids only.
    let (plain, before) = run("", "plain.jsonl");
    assert_eq!(plain.len(), 6);
    for rec in &plain {
        let server = rec["server_request_id"].as_str().unwrap_or_default();
        assert!(server.starts_with("sim-req-"), "{rec}");
        let response = rec["response_id"].as_str().unwrap_or_default();
        assert!(response.starts_with("chatcmpl-sim-"), "{rec}");
        assert!(
            rec.get("request_id").is_none() && rec.get("trace_id").is_none(),
            "{rec}"
        );
        let sent = rec["sent_unix_ms"].as_f64().unwrap_or_default();
        let end = rec["end_unix_ms"].as_f64().unwrap_or_default();
        assert!(sent >= before - 1000.0 && sent < before + 60_000.0, "{rec}");
        let latency = rec["end_ms"].as_f64().unwrap_or_default()
            - rec["sent_ms"].as_f64().unwrap_or_default();
        assert!((end - sent - latency).abs() < 0.01, "{rec}");
    }
    let seen = sim.requests();
    assert!(
        seen.iter()
            .all(|r| r.request_id.is_none() && r.traceparent.is_none())
    );

    // With them: the client's ids, as the server saw them.
    let (first, _) = run("--send-request-ids --trace-context", "first.jsonl");
    let seen: Vec<_> = sim.requests().into_iter().skip(6).collect();
    assert_eq!(seen.len(), 6);
    for rec in &first {
        let id = rec["request_id"].as_str().unwrap_or_default();
        assert_eq!(id.len(), 36, "{rec}");
        assert_eq!(
            rec["server_request_id"], id,
            "the server echoes the id sent: {rec}"
        );
        let trace = rec["trace_id"].as_str().unwrap_or_default();
        assert_eq!(trace.len(), 32, "{rec}");
        let log = seen
            .iter()
            .find(|l| l.request_id.as_deref() == Some(id))
            .unwrap_or_else(|| panic!("the server never saw {id}"));
        let parent = log.traceparent.as_deref().unwrap_or_default();
        assert!(
            parent.starts_with(&format!("00-{trace}-")) && parent.ends_with("-01"),
            "{parent}"
        );
    }
    let ids = |recs: &[Value]| {
        let mut v: Vec<String> = recs
            .iter()
            .map(|r| format!("{} {}", r["request_id"], r["trace_id"]))
            .collect();
        v.sort();
        v
    };
    let (again, _) = run("--send-request-ids --trace-context", "again.jsonl");
    assert_eq!(ids(&first), ids(&again), "one seed, the same ids");
    let distinct: std::collections::BTreeSet<String> =
        first.iter().map(|r| r["request_id"].to_string()).collect();
    assert_eq!(distinct.len(), 6, "one id per request");

    // A header name HTTP cannot carry is refused before anything is sent.
    let before = sim.requests().len();
    for bad in ["", "x request id"] {
        let r = sim.batchbench(
            "--users 1 --requests-per-user 1 --send-request-ids --request-id-header {}",
            &[bad],
        );
        assert_eq!(r.code, 2, "{bad:?}");
    }
    assert_eq!(sim.requests().len(), before, "nothing was sent");
}
