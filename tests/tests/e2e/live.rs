//! The client's own metrics endpoint (`--metrics-listen`): read during a run
//! with the same exposition reader the server scrapes use.

use batchbench_tests::{run_batchbench, tokenizer_path};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    l.local_addr().unwrap_or_else(|e| panic!("{e}")).to_string()
}

/// The samples of `/metrics` at `addr`, by series (`name{labels}`).
fn scrape(addr: &str) -> Option<std::collections::BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    let (samples, skipped) = batchbench_engine::server_metrics::parse(body);
    assert_eq!(skipped, 0, "every line parses: {body}");
    Some(
        samples
            .into_iter()
            .map(|(name, labels, v)| {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (format!("{name}{{{}}}", l.join(",")), v)
            })
            .collect(),
    )
}

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
        ])
    });
    let mut pages = Vec::new();
    while !run.is_finished() {
        if let Some(p) = scrape(&addr) {
            pages.push(p);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = run.join().unwrap_or_else(|_| panic!("the run panicked"));
    assert_eq!(r.code, 0);
    let v = |p: &std::collections::BTreeMap<String, f64>, k: &str| {
        *p.get(k).unwrap_or_else(|| panic!("no {k}: {p:?}"))
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
    // The last page read is at most the run's summary, and not far from it.
    let ok = r.count("successful_requests") as f64;
    let seen = v(last, "batchbench_requests_ok_total{}");
    assert!(seen <= ok && seen >= 0.7 * ok, "{seen} of {ok}");
    let tokens = v(last, "batchbench_completion_tokens_total{}");
    assert!(tokens <= r.count("total_completion_tokens") as f64);
    // The endpoint closed with the run.
    assert!(TcpStream::connect(&addr).is_err());
}
