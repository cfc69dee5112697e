//! The fault matrix: every fault kind the simulator injects, streamed and not,
//! with and without retries. For each: the requests are classified as the kind
//! says (or succeed, for the faults a correct client reads through), nothing
//! hangs past the request timeout, and the counts add up.

use batchbench_simulator::{FaultKind, SimConfig};
use batchbench_tests::{SimServer, run_batchbench, tokenizer_path};
use std::time::Duration;

/// A fault, and what the client must make of it: `None` is success.
const MATRIX: &[(FaultKind, Option<&str>)] = &[
    (FaultKind::Status, Some("http_503")),
    (FaultKind::Reset, Some("connect")),
    (FaultKind::Stall, Some("timeout")),
    (FaultKind::Truncate, Some("decode")),
    (FaultKind::Malformed, Some("decode")),
    (FaultKind::Split, None),
    (FaultKind::Drip, Some("timeout")),
    (FaultKind::Comments, None),
    (FaultKind::Error200, Some("decode")),
    (FaultKind::Html, Some("decode")),
    (FaultKind::Oversized, Some("decode")),
    (FaultKind::Close, Some("connect")),
];

const REQUESTS: u64 = 4;
const OUTPUT: u64 = 8;
const TIMEOUT_SECS: u64 = 1;

#[test]
fn every_fault_kind_streamed_or_not_with_and_without_retries() {
    let tok = tokenizer_path("qwen").display().to_string();
    for &(kind, want) in MATRIX {
        let sim = SimServer::start(
            SimConfig {
                fault_rate: 1.0,
                fault_kinds: vec![kind],
                stall_secs: 5.0,
                drip_ms: 20.0,
                oversize_bytes: 2 << 20,
                ..SimConfig::default()
            },
            "qwen",
        );
        let url = sim.url();
        for stream in [false, true] {
            for retries in [0u64, 2] {
                let case = format!("{kind:?} stream={stream} retries={retries}");
                let r_flag = retries.to_string();
                let mut args = vec![
                    "--host",
                    url.as_str(),
                    "--tokenizer-model",
                    &tok,
                    "--users",
                    "4",
                    "--requests-per-user",
                    "1",
                    "--output-tokens",
                    "8",
                    "--request-timeout-secs",
                    "1",
                    "--max-retries",
                    &r_flag,
                    "--retry-delay-ms",
                    "1",
                    "--max-response-bytes",
                    "1048576",
                ];
                if stream {
                    args.push("--stream");
                }
                let r = run_batchbench(&args);
                // Users run at once: each request's attempts end within their
                // timeouts. The run's own clock, which starts after the
                // tokenizer is loaded, is what the timeouts bound.
                let elapsed = Duration::from_secs_f64(
                    r.summary("total_duration_seconds")
                        .as_f64()
                        .unwrap_or_else(|| panic!("{case}: no total_duration_seconds")),
                );
                let bound = Duration::from_secs(TIMEOUT_SECS * (retries + 1) + 3);
                assert!(elapsed < bound, "{case}: took {elapsed:?}, bound {bound:?}");
                let total = r.count("total_requests");
                let ok = r.count("successful_requests");
                let failed = r.count("failed_requests");
                assert_eq!(total, REQUESTS, "{case}");
                assert_eq!(ok + failed, total, "{case}");
                let kinds = r.summary("failures_by_kind").clone();
                match want {
                    None => {
                        assert_eq!(r.code, 0, "{case}: {kinds}");
                        assert_eq!(failed, 0, "{case}: {kinds}");
                        assert_eq!(r.count("retries"), 0, "{case}");
                        assert_eq!(
                            r.count("total_completion_tokens"),
                            REQUESTS * OUTPUT,
                            "{case}"
                        );
                    }
                    Some(kind_name) => {
                        assert_eq!(r.code, 1, "{case}: no request succeeded");
                        assert_eq!(failed, REQUESTS, "{case}: {kinds}");
                        assert_eq!(kinds[kind_name], REQUESTS, "{case}: {kinds}");
                        // A response over the bound is never retried: it
                        // would be the same again.
                        let attempts = if kind == FaultKind::Oversized {
                            0
                        } else {
                            retries
                        };
                        assert_eq!(r.count("retries"), REQUESTS * attempts, "{case}");
                    }
                }
                if kind == FaultKind::Error200 {
                    let first = r.summary("failures")[0]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    assert!(
                        first.contains("HTTP 200 with an error: injected error"),
                        "{case}: {first}"
                    );
                }
                if kind == FaultKind::Oversized {
                    let first = r.summary("failures")[0]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    assert!(first.contains("--max-response-bytes"), "{case}: {first}");
                }
            }
        }
    }
}
