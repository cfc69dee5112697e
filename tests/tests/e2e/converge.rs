//! Runs that stop once their figures are sure enough (`--target-ci`), against
//! the continuous-batching simulator: a steady load converges before its
//! cap, an overloaded one (its queue, and so its latency, growing) never
//! does, and each says so.

use batchbench_tests::{SimServer, run_batchbench, tokenizer_path, words};
use serde_json::Value;

/// One worker, at most 8 sequences in a batch, steps of 4 ms + 0.4 ms per
/// sequence: 10-token replies saturate it at 111 requests/s.
const SIM: &str = "sim://?max-running=8&step-base-ms=4&step-ms-per-seq=0.4";

fn run<S: AsRef<str>>(extra: &[S]) -> batchbench_tests::RunResult {
    let extra: Vec<&str> = extra.iter().map(AsRef::as_ref).collect();
    let extra = extra.as_slice();
    let tok = tokenizer_path("qwen").display().to_string();
    let mut args = vec![
        "--host",
        SIM,
        "--tokenizer-model",
        &tok,
        "--input-tokens",
        "16",
        "--output-tokens",
        "10",
        "--seed",
        "3",
    ];
    args.extend(extra);
    run_batchbench(&args)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_steady_run_stops_once_its_figure_is_within_the_target() {
    // Half the capacity: the median e2e (the SLO's figure) settles fast.
    let r = run(&words(
        "--request-rate 55 --slo e2e_p50<=1s --target-ci 2 --duration-secs 40",
    ));
    assert_eq!(r.code, 0);
    let c = r.summary("load")["convergence"].clone();
    assert_eq!(c["converged"], true, "{c}");
    let secs = f(&c["secs"]);
    assert!(secs < 40.0, "{c}");
    assert_eq!(c["rule"], "every figure within ±2%");
    let figures = c["figures"].as_array().cloned().unwrap_or_default();
    assert_eq!(figures.len(), 1, "the SLO's figure alone: {c}");
    assert_eq!(figures[0]["name"], "e2e_p50");
    assert!(f(&figures[0]["half_width_pct"]) <= 2.0, "{c}");
    // The run stopped there: nothing was sent after the stop.
    let total = f(r.summary("total_requests"));
    let duration = f(r.summary("total_duration_seconds"));
    assert!(
        duration < secs + 1.0,
        "ran {duration} s, converged at {secs} s"
    );
    assert!(total >= f(&c["requests"]), "{c}");
}

#[test]
fn an_overloaded_server_never_converges_and_the_run_says_why() {
    // 1.4 times the capacity: the queue grows for the whole run.
    let r = run(&words("--request-rate 155 --target-ci 5 --duration-secs 5"));
    assert_eq!(r.code, 0);
    let c = r.summary("load")["convergence"].clone();
    assert_eq!(c["converged"], false, "{c}");
    assert!(c["secs"].is_null(), "{c}");
    let why = c["reason"].as_str().unwrap_or_default();
    assert!(why.contains("e2e still drifts (+"), "{why}");
    // Without an SLO, e2e p50 and p99 are watched.
    let names: Vec<&str> = c["figures"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["e2e_p50", "e2e_p99"]);
}

#[test]
fn target_ci_without_a_cap_or_on_a_shard_is_exit_2_with_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    for (extra, needle) in [
        (
            &["--request-rate", "5", "--target-ci", "5"][..],
            "--target-ci runs until the figures are sure enough: it needs --duration-secs as its cap",
        ),
        (
            &words("--request-rate 5 --target-ci 100 --duration-secs 5"),
            "--target-ci is a percent above 0 and below 100",
        ),
        (
            &words("--request-rate 5 --target-ci 5 --duration-secs 5 --seed 1 --shard 0/2"),
            "each shard would stop on its share's alone",
        ),
    ] {
        let mut args = vec!["--host", url.as_str(), "--tokenizer-model", &tok];
        args.extend(extra);
        let message = batchbench_tests::refused_batchbench(&args);
        assert!(message.contains(needle), "{extra:?}: {message}");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}
