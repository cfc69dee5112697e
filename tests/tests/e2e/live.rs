//! The client's own metrics endpoint (`--metrics-listen`): read during a run
//! with the same exposition reader the server scrapes use.

use batchbench_tests::http::{free_addr, scrape};
use batchbench_tests::{run_batchbench, tokenizer_path};
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn metrics_listen_serves_the_run_as_it_goes_and_closes_with_it() {
    let addr = free_addr();
    let tok = tokenizer_path("qwen").display().to_string();
    let a = addr.clone();
    let run = std::thread::spawn(move || {
        run_batchbench(&[
            "--host",
            "sim://?ttft-base-ms=5&decode-ms-per-token=2",
            "--tokenizer-model",
            &tok,
            "--users",
            "4",
            "--input-tokens",
            "32",
            "--output-tokens",
            "16",
            "--stream",
            "--request-rate",
            "40",
            "--duration-secs",
            "3",
            "--metrics-listen",
            &a,
            // Long enough that a stalled test thread still reads the final
            // page: the loop below waits for the page's own signal.
            "--metrics-linger",
            "15",
        ])
    });
    let v = |p: &std::collections::BTreeMap<String, f64>, k: &str| {
        *p.get(k).unwrap_or_else(|| panic!("no {k}: {p:?}"))
    };
    // Read during the run until the page says it is final (the endpoint
    // lingers after the run for a scraper to read that).
    let mut pages = Vec::new();
    let final_page = loop {
        assert!(
            !run.is_finished(),
            "the endpoint closed before its final page was read"
        );
        if let Some(p) = scrape(&addr) {
            if v(&p, "batchbench_run_finished{}") == 1.0 {
                break p;
            }
            pages.push(p);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    // Read mid-run, several times, and growing.
    let sent: Vec<f64> = pages
        .iter()
        .map(|p| v(p, "batchbench_requests_sent_total{}"))
        .collect();
    assert!(sent.len() >= 5, "{sent:?}");
    assert!(sent.windows(2).all(|w| w[0] <= w[1]), "{sent:?}");
    let last = pages.last().unwrap_or_else(|| panic!("no page"));
    assert!(sent[sent.len() - 1] > sent[0], "{sent:?}");
    // One page is one snapshot: the histograms count what the counters do.
    // (A page read before the run's first live view is empty.)
    for p in pages
        .iter()
        .filter(|p| v(p, "batchbench_elapsed_seconds{}") > 0.0)
    {
        let ok = v(p, "batchbench_requests_ok_total{}");
        assert_eq!(v(p, "batchbench_e2e_seconds_count{}"), ok, "{p:?}");
        assert_eq!(v(p, "batchbench_e2e_seconds_bucket{le=+Inf}"), ok);
        assert!(v(p, "batchbench_requests_in_flight{}") >= 0.0);
        assert_eq!(v(p, "batchbench_target_rate{}"), 40.0);
    }
    // The final page is the run's summary, exactly; the last page read
    // during the run is at most that, and not far from it.
    let r = run.join().unwrap_or_else(|_| panic!("the run panicked"));
    assert_eq!(r.code, 0);
    let f = |k: &str| v(&final_page, k);
    let ok = r.count("successful_requests") as f64;
    assert!(ok > 0.0);
    assert_eq!(f("batchbench_requests_ok_total{}"), ok);
    assert_eq!(f("batchbench_e2e_seconds_count{}"), ok);
    assert_eq!(f("batchbench_ttft_seconds_count{}"), ok);
    assert_eq!(
        f("batchbench_completion_tokens_total{}"),
        r.count("total_completion_tokens") as f64
    );
    assert_eq!(
        f("batchbench_prompt_tokens_total{}"),
        r.count("total_prompt_tokens") as f64
    );
    assert_eq!(f("batchbench_requests_in_flight{}"), 0.0);
    assert_eq!(
        f("batchbench_requests_sent_total{}"),
        r.count("total_requests") as f64
    );
    let mean_e2e = f("batchbench_e2e_seconds_sum{}") / ok;
    let summary_mean = r.summary("latency")["mean_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("no latency: {:?}", r.json))
        / 1000.0;
    assert_eq!(r.summary("latency")["count"].as_u64(), Some(ok as u64));
    assert!(
        (mean_e2e - summary_mean).abs() <= 1e-6 * summary_mean.max(1.0),
        "{mean_e2e} vs {summary_mean}"
    );
    let seen = v(last, "batchbench_requests_ok_total{}");
    assert!(seen <= ok && seen >= 0.5 * ok, "{seen} of {ok}");
    // The endpoint closed after its lingering, before the run returned.
    assert!(TcpStream::connect(&addr).is_err());
}

/// A lingering that is not a number of seconds, 0 or more, is bad input named
/// by its flag (or its field, from a run spec), and nothing is sent.
#[test]
fn a_linger_that_is_not_a_number_of_seconds_names_the_flag() {
    let tok = tokenizer_path("qwen").display().to_string();
    let addr = free_addr();
    let base = [
        "--host",
        "sim://",
        "--tokenizer-model",
        &tok,
        "--users",
        "1",
        "--metrics-listen",
        &addr,
    ];
    for v in ["nan", "-1", "inf", "soon"] {
        let mut args = base.to_vec();
        args.extend(["--metrics-linger", v]);
        let message = batchbench_tests::refused_batchbench(&args);
        assert!(message.contains("--metrics-linger"), "{v}: {message}");
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let config = dir.path().join("run.toml");
    std::fs::write(
        &config,
        "[workload]\nname = \"finite_batch\"\n\n[workload.config]\nusers = 1\nrequests_per_user = 1\n\n[output]\nmetrics_linger_secs = nan\n",
    )
        .unwrap_or_else(|e| panic!("{e}"));
    let mut args = base.to_vec();
    let config = config.display().to_string();
    args.extend(["--config", &config]);
    let message = batchbench_tests::refused_batchbench(&args);
    assert!(
        message.contains("output.metrics_linger_secs (--metrics-linger)"),
        "{message}"
    );
}
