//! SLOs and goodput end to end: against a continuous-batching simulator whose
//! queue makes some requests wait, each bound gets its verdict, and goodput
//! recomputed from the per-request records is the reported one.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, run_agent, run_batchbench, tokenizer_path};
use serde_json::Value;

/// A batch of 2 in 20 ms steps: with 8-token replies a batch lasts 160 ms, so
/// a request that queues behind one has a TTFT near 180 ms and one that joins
/// at once near 20 ms.
fn queueing_sim() -> SimServer {
    SimServer::start(
        SimConfig {
            max_running: 2,
            step_base_ms: 20.0,
            ..SimConfig::default()
        },
        "qwen",
    )
}

#[test]
fn goodput_counts_the_requests_that_met_every_bound_and_each_bound_gets_a_verdict() {
    let sim = queueing_sim();
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("requests.jsonl");
    let p = path.display().to_string();
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 4 --requests-per-user 3 --input-tokens 16 --output-tokens 8 --stream --requests-jsonl {} --slo ttft<=100ms,e2e_p50<=10s,ttft_p99<=100ms",
        &[&url, &tok, &p],
    ));
    assert_eq!(r.code, 0);
    let slo = r.summary("slo");
    let bounds = slo["bounds"].as_array().cloned().unwrap_or_default();
    let verdicts: Vec<(&str, bool)> = bounds
        .iter()
        .map(|b| (b["bound"].as_str().unwrap_or(""), b["met"] == true))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("ttft<=100ms", false),
            ("e2e_p50<=10000ms", true),
            ("ttft_p99<=100ms", false)
        ],
        "{slo}"
    );
    assert_eq!(slo["passed"], false);
    let rows: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(rows.len(), 12);
    let good = rows
        .iter()
        .filter(|row| {
            row["ok"] == true
                && row["first_token_ms"].as_f64().unwrap_or(f64::MAX)
                    - row["intended_ms"].as_f64().unwrap_or(0.0)
                    <= 100.0
        })
        .count() as u64;
    assert!(
        good > 0 && good < 12,
        "the queue makes some late: {good} of 12"
    );
    assert_eq!(slo["good_requests"].as_u64(), Some(good), "{slo}");
    let flagged = rows.iter().filter(|row| row["slo_met"] == true).count() as u64;
    assert_eq!(flagged, good, "each line says whether it met every bound");
    assert!(
        rows.iter()
            .all(|row| row["tpot_ms"].as_f64().is_some() && row["itl_max_ms"].as_f64().is_some()),
        "every streamed 8-token reply has a TPOT and a longest gap"
    );
    let row = &r.csv[0];
    assert_eq!(row["slo"], "ttft<=100ms,e2e_p50<=10000ms,ttft_p99<=100ms");
    assert_eq!(row["slo_passed"], "false");
    assert_eq!(row["slo_failed_bounds"], "ttft<=100ms,ttft_p99<=100ms");
    assert_eq!(row["good_requests"], good.to_string());
    assert_eq!(
        row["goodput"],
        format!("{:.6}", slo["goodput"].as_f64().unwrap_or(-1.0))
    );
    let share = bounds[0]["share_met"].as_f64().unwrap_or(-1.0);
    assert!((share - good as f64 / 12.0).abs() < 1e-9, "{share}");
    let goodput = slo["goodput"].as_f64().unwrap_or(-1.0);
    let rate = r.summary("requests_per_second").as_f64().unwrap_or(0.0);
    assert!(
        (goodput - rate * good as f64 / 12.0).abs() < 1e-9,
        "goodput {goodput} against {rate} x {good}/12"
    );
}

#[test]
fn without_an_slo_the_summary_has_no_verdict() {
    let sim = queueing_sim();
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 1 --requests-per-user 1 --input-tokens 8 --output-tokens 2",
        &[&url, &tok],
    ));
    assert_eq!(r.code, 0);
    assert!(r.summary("slo").is_null());
    let row = &r.csv[0];
    assert!(
        [
            "slo",
            "slo_passed",
            "slo_failed_bounds",
            "good_requests",
            "goodput"
        ]
        .iter()
        .all(|c| row.get(*c).is_some_and(String::is_empty)),
        "the SLO columns are there, and empty: {row:?}"
    );
}

#[test]
fn a_bad_slo_names_the_flag_and_is_exit_2_with_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    for slo in [
        "latency_p99<=1s",
        "ttft_p99<500ms",
        "ttft<=5",
        ",",
        "ttft_p0<=1s",
        // Not parse errors: a TTFT bound without --stream could never be met.
        "ttft_p99<=1s",
        "e2e<=1s,tpot<=50ms",
    ] {
        for run in [run_batchbench, run_agent] {
            let r = run(&cmd(
                "--host {} --tokenizer-model {} --input-tokens 8 --slo {}",
                &[&url, &tok, slo],
            ));
            assert_eq!(r.code, 2, "{slo}");
            assert!(r.json.is_none(), "{slo}: no report");
        }
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}
