//! The console samples in the book are what the console really prints: every
//! line of every ```text block that starts with `batchbench summary` must have
//! the shape of a line the real renderer writes (the same label, and the same
//! words and punctuation around the figures).

use batchbench_contract::plugin::WorkloadInfo;
use batchbench_contract::record::{
    Convergence, FailureExample, LatencyStats, LoadReport, RunInfo, StageReport, SteadySeries,
    SteadyState, Summary, WatchedFigure,
};
use batchbench_contract::slo::{SloReport, SloResult};
use batchbench_contract::spec::Arrival;
use std::collections::BTreeSet;
use std::path::Path;

/// A line with its figures replaced by `#` and its spacing folded; the label
/// alone for lines whose text is free (model, endpoint, workload, failures, a
/// note).
fn shape(line: &str) -> String {
    let body = line.trim_start();
    if body.starts_with("note: ") {
        return "label:note".into();
    }
    let label = body.split("  ").next().unwrap_or_default().trim();
    if ["model", "endpoint", "workload", "failures", ""].contains(&label) && line.starts_with("  ")
    {
        return format!("label:{label}");
    }
    let mut out = String::new();
    let mut in_num = false;
    for c in body.chars() {
        if c.is_ascii_digit() || (in_num && c == '.') {
            if !in_num {
                out.push('#');
                in_num = true;
            }
        } else {
            in_num = false;
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn stats() -> Option<LatencyStats> {
    Some(LatencyStats {
        count: 16,
        p50_ms: 5.5,
        p90_ms: 12.2,
        p99_ms: 12.7,
        mean_ms: 7.5,
        max_ms: 12.7,
        ci: None,
    })
}

/// Every line shape the renderer writes, over summaries that switch on each
/// optional section and each wording.
fn rendered_shapes() -> BTreeSet<String> {
    let info = RunInfo {
        model: "m".into(),
        url: "http://127.0.0.1:1/v1/chat/completions".into(),
        seed: 1,
        started_unix: 0.0,
        max_active: 1,
        workload: WorkloadInfo {
            mode: "finite_batch".into(),
            ..WorkloadInfo::default()
        },
        config: serde_json::Value::Null,
        spec: None,
        start_skew_ms: None,
        merged_shards: Vec::new(),
    };
    let full = Summary {
        total_requests: 16,
        successful_requests: 15,
        failed_requests: 1,
        failures_by_kind: [("http_503".to_owned(), 1)].into_iter().collect(),
        failures: vec![FailureExample {
            agent_id: 0,
            trajectory_id: "t".into(),
            request_index: 0,
            kind: "http_503".into(),
            message: "unavailable".into(),
        }],
        planned_prompt_tokens: 4096,
        counted_prompt_tokens: 4224,
        worst_prompt_drift_tokens: 8,
        estimated_cached_input_tokens: 100,
        server_cached_tokens: Some(90),
        total_delay_seconds: 1.5,
        latency: stats(),
        ttft: stats(),
        ttfrt: stats(),
        ttfat: stats(),
        reasoning_duration: stats(),
        total_reasoning_tokens: Some(12),
        reasoning_tokens_source: Some("usage".into()),
        total_answer_tokens: Some(20),
        reasoning_only_replies: 1,
        total_items: Some(24),
        items_per_second: Some(8.0),
        images_sent: Some(32),
        total_image_bytes: Some(4_179_085),
        audio: Some(batchbench_contract::record::AudioSummary {
            requests: 20,
            seconds: 93.1,
            seconds_per_request: 4.65,
            seconds_per_second: 17.1,
            rtf_mean: 9.2,
            rtf_p50: 9.3,
            rtf_p10: 8.6,
            rtf_min: 8.4,
            rtf_samples: 20,
        }),
        itl: stats(),
        tpot: stats(),
        trajectory_e2e: stats(),
        ..Summary::default()
    };
    let load = LoadReport {
        arrival: "poisson".into(),
        release: "requests".into(),
        target_rate: Some(40.0),
        achieved_rate: 39.9,
        arrivals: 120,
        latency_from_intended: stats(),
        ttft_from_intended: stats(),
        queue_wait: stats(),
        send_lag: stats(),
        late_sends: 3,
        warmup_requests: 10,
        warmup_latency: stats(),
        duration_secs: Some(3.0),
        at_deadline: Some("finish".into()),
        cut_at_deadline: 0,
        dropped_arrivals: 0,
        dropped_waiting: 2,
        stages: vec![StageReport {
            stage: 0,
            secs: 1.0,
            rate: 10.0,
            requests: 10,
            successful_requests: 10,
            requests_per_second: 10.0,
            latency: stats(),
            latency_from_intended: stats(),
            ttft: stats(),
        }],
        verdict: Some("the client queue".into()),
        convergence: Some(Convergence {
            rule: "every figure within ±2%".into(),
            converged: true,
            requests: 5000,
            secs: Some(12.5),
            figures: vec![WatchedFigure {
                name: "e2e_p99".into(),
                value_ms: 12.7,
                interval_ms: Some([12.5, 12.9]),
                half_width_pct: Some(1.6),
            }],
            reason: None,
        }),
        steady: Some(SteadyState {
            method: "MSER-5".into(),
            from_secs: 3.5,
            to_secs: 60.0,
            cut_requests: 120,
            set_by: Some("prefix-cache hits".into()),
            series: vec![
                SteadySeries {
                    name: "prefix-cache hits".into(),
                    unit: "share".into(),
                    cut_secs: 3.5,
                    transient_mean: Some(0.55),
                    steady_mean: 0.79,
                },
                SteadySeries {
                    name: "requests sent".into(),
                    unit: "per s".into(),
                    cut_secs: 0.0,
                    transient_mean: None,
                    steady_mean: 40.0,
                },
            ],
            decided_secs: None,
            note: None,
        }),
    };
    // Every arrival process and release kind, at one rate and over stages.
    let mut loads = Vec::new();
    for arrival in [Arrival::Poisson, Arrival::Constant, Arrival::Gamma] {
        for release in ["requests", "sessions"] {
            for target_rate in [Some(40.0), None] {
                loads.push(LoadReport {
                    arrival: arrival.as_str().into(),
                    release: release.into(),
                    target_rate,
                    ..load.clone()
                });
            }
        }
    }
    let mut variants: Vec<Summary> = loads
        .into_iter()
        .map(|l| Summary {
            load: Some(l),
            ..full.clone()
        })
        .collect();
    // A run that did not converge; its figure still without an interval.
    let mut unconverged = load.clone();
    unconverged.convergence = Some(Convergence {
        converged: false,
        secs: None,
        figures: vec![WatchedFigure {
            interval_ms: None,
            half_width_pct: None,
            ..WatchedFigure::default()
        }],
        reason: Some("e2e still drifts".into()),
        ..Convergence::default()
    });
    // A steady state found from the start, and one decided early with a note.
    let mut no_transient = load.clone();
    no_transient.steady = Some(SteadyState {
        from_secs: 0.0,
        set_by: None,
        series: Vec::new(),
        ..load.steady.clone().unwrap_or_default()
    });
    let mut decided_early = load.clone();
    decided_early.steady = Some(SteadyState {
        decided_secs: Some(400.0),
        note: Some("a transient reaches half the run".into()),
        ..load.steady.clone().unwrap_or_default()
    });
    // Every SLO verdict: met, missed, undecided with and without an interval.
    let slo = SloReport {
        bounds: vec![
            SloResult::percentile(
                "e2e_p99<=20ms".into(),
                Some(12.7),
                Some([12.0, 13.0]),
                20.0,
                Some(true),
            ),
            SloResult::percentile(
                "e2e_p99<=10ms".into(),
                Some(12.7),
                Some([12.0, 13.0]),
                10.0,
                Some(false),
            ),
            SloResult::percentile(
                "e2e_p99<=12.8ms".into(),
                Some(12.7),
                Some([12.0, 13.0]),
                12.8,
                None,
            ),
            SloResult::percentile("e2e_p99<=12.6ms".into(), Some(12.7), None, 12.6, None),
            SloResult {
                bound: "ttft<=500ms".into(),
                share_met: Some(0.99),
                ..SloResult::default()
            },
        ],
        passed: false,
        good_requests: 15,
        goodput: 3.0,
    };
    variants.extend([
        Summary {
            load: Some(unconverged),
            slo: Some(slo),
            trend: Some("still drifting".into()),
            requests_per_second_ci: Some([2.9, 3.1]),
            ..full.clone()
        },
        full.clone(),
        // Spans to a collector: all delivered, and some dropped.
        Summary {
            deliveries: vec![
                batchbench_contract::record::Delivery {
                    reporter: "otlp_spans".into(),
                    items: "spans".into(),
                    destination: "http://127.0.0.1:4318/v1/traces".into(),
                    delivered: 10,
                    ..Default::default()
                },
                batchbench_contract::record::Delivery {
                    reporter: "otlp_spans".into(),
                    items: "spans".into(),
                    destination: "http://127.0.0.1:4318/v1/traces".into(),
                    delivered: 10,
                    dropped: 2,
                    error: Some("HTTP 503: overloaded".into()),
                },
            ],
            ..full.clone()
        },
        Summary {
            load: Some(no_transient),
            ..full.clone()
        },
        Summary {
            load: Some(decided_early),
            ..full.clone()
        },
        Summary {
            interrupted: true,
            server_cached_tokens: None,
            ..full.clone()
        },
        Summary {
            estimated_cached_input_tokens: 0,
            ..full
        },
    ]);
    // A shard's run and a merge of shards add a line each.
    let mut sharded = info.clone();
    let mut spec = batchbench_run::commands::batchbench::default_spec();
    spec.shard = Some(batchbench_contract::shard::Shard { index: 1, count: 4 });
    sharded.spec = Some(spec);
    sharded.start_skew_ms = Some(0.25);
    let mut merged = info.clone();
    merged.merged_shards = (0..4)
        .map(|i| batchbench_contract::record::MergedShard {
            index: i,
            offset_seconds: f64::from(i) * 1e-4,
            ..Default::default()
        })
        .collect();
    [info, sharded, merged]
        .iter()
        .flat_map(|info| {
            variants.iter().flat_map(move |s| {
                batchbench_plugins::reporters::console_summary::render(info, s)
                    .lines()
                    .map(shape)
                    .collect::<Vec<_>>()
            })
        })
        .collect()
}

#[test]
fn console_samples_in_the_book_match_the_renderer() {
    let known = rendered_shapes();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../book/src");
    let mut samples = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    entries.sort();
    for page in entries {
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{e}"));
        let mut in_sample = false;
        let mut block_start = false;
        for (i, line) in text.lines().enumerate() {
            if line.starts_with("```") {
                in_sample = false;
                block_start = line.trim() == "```text";
                continue;
            }
            if block_start {
                block_start = false;
                in_sample = line.starts_with("batchbench summary");
                samples += usize::from(in_sample);
            }
            if in_sample {
                let s = shape(line);
                assert!(
                    known.contains(&s),
                    "{}:{}: this console line is not what the renderer prints:\n  {line}\n(shape {s:?})",
                    page.file_name()
                        .map(|f| f.to_string_lossy())
                        .unwrap_or_default(),
                    i + 1
                );
            }
        }
    }
    assert!(
        samples >= 2,
        "the book shows console samples ({samples} found)"
    );
}
