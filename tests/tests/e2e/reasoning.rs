//! Reasoning models on the simulator: the time to the first answer token,
//! reasoning counted apart from the answer (from the usage, or counted by the
//! client), in every streamed API's own shape.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, read_jsonl, run_batchbench};

/// The codecs, and the codec config that reads their reasoning: the tags in
/// the text of the two APIs without a reasoning field.
const CODECS: [(&str, &str); 5] = [
    ("openai_chat", "{}"),
    ("openai_completions", r#"{"reasoning_tags": true}"#),
    ("openai_responses", "{}"),
    ("anthropic_messages", "{}"),
    ("sglang_generate", r#"{"reasoning_tags": true}"#),
];

fn thinking_sim(omit_usage: bool) -> SimServer {
    SimServer::start(
        SimConfig {
            reasoning_tokens: 64,
            decode_ms_per_token: 2.0,
            omit_reasoning_usage: omit_usage,
            ..SimConfig::default()
        },
        "qwen",
    )
}

#[test]
fn every_streamed_codec_tells_the_first_answer_token_from_the_first_token() {
    for omit_usage in [false, true] {
        let sim = thinking_sim(omit_usage);
        for (codec, config) in CODECS {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let lines = dir.path().join("requests.jsonl");
            let path = lines.display().to_string();
            // 64 reasoning tokens, then 32 answer tokens: the output cap
            // counts both.
            let r = run_batchbench(&sim.args(
                "--codec {} --codec-config {} --stream --users 2 --requests-per-user 3 --input-tokens 32 --output-tokens 96 --requests-jsonl {}",
                &[codec, config, &path],
            ));
            let what = format!("{codec} (usage count omitted: {omit_usage})");
            assert_eq!(r.code, 0, "{what}");
            assert_eq!(r.count("successful_requests"), 6, "{what}");
            // Anthropic's usage has no reasoning count: the client counts.
            let counted = omit_usage || codec == "anthropic_messages";
            assert_eq!(r.count("total_reasoning_tokens"), 6 * 64, "{what}");
            assert_eq!(r.count("total_answer_tokens"), 6 * 32, "{what}");
            assert_eq!(
                r.summary("reasoning_tokens_source"),
                if counted { "counted" } else { "usage" },
                "{what}"
            );
            for l in read_jsonl(&lines) {
                assert_eq!(l["reasoning_tokens"], 64, "{what}: {l}");
                assert_eq!(
                    l["reasoning_counted"].as_bool().unwrap_or(false),
                    counted,
                    "{what}: {l}"
                );
                let (ttft, ttfrt, ttfat) = (
                    l["ttft_ms"].as_f64().unwrap_or(f64::NAN),
                    l["ttfrt_ms"].as_f64().unwrap_or(f64::NAN),
                    l["ttfat_ms"].as_f64().unwrap_or(f64::NAN),
                );
                // The first token is the reasoning's; the answer waits for
                // 64 decode steps of 2 ms (held to the millisecond by the
                // timing suite; here, to the order of it on a busy machine).
                assert_eq!(ttft, ttfrt, "{what}: {l}");
                assert!(
                    (ttfat - ttft - 128.0).abs() < 40.0,
                    "{what}: TTFAT - TTFT = {}: {l}",
                    ttfat - ttft
                );
            }
            assert!(r.summary("ttfat").is_object(), "{what}");
            assert!(r.summary("reasoning_duration").is_object(), "{what}");
        }
    }
}

#[test]
fn a_cap_spent_on_reasoning_leaves_no_answer_and_no_first_answer_token() {
    let sim = thinking_sim(false);
    let r = sim.batchbench(
        "--stream --users 2 --requests-per-user 2 --input-tokens 32 --output-tokens 40",
        &[],
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 4);
    assert_eq!(r.count("reasoning_only_replies"), 4);
    assert_eq!(r.count("total_reasoning_tokens"), 4 * 40);
    assert_eq!(r.count("total_answer_tokens"), 0);
    assert!(r.summary("ttfat").is_null(), "{:?}", r.summary("ttfat"));
}

#[test]
fn a_ttfat_bound_judges_the_answer_not_the_first_token() {
    let sim = thinking_sim(false);
    // TTFT is one step; the answer starts after 64 more (128 ms).
    let r = sim.batchbench(
        "--stream --users 1 --requests-per-user 4 --input-tokens 32 --output-tokens 80 --slo ttft_p99<=100ms,ttfat_p99<=60ms",
        &[],
    );
    let slo = &r.json.as_ref().unwrap_or_else(|| panic!("no summary"))["summary"]["slo"];
    let verdicts: Vec<(String, bool)> = slo["bounds"]
        .as_array()
        .unwrap_or_else(|| panic!("{slo}"))
        .iter()
        .map(|b| {
            (
                b["bound"].as_str().unwrap_or("").to_owned(),
                b["met"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("ttft_p99<=100ms".to_owned(), true),
            ("ttfat_p99<=60ms".to_owned(), false)
        ],
        "{slo}"
    );
}

/// The reasoning tokens of one closed-loop run of `flags` against a
/// simulator that would reason for `tokens`, and the requests it saw.
fn knob_run(
    tokens: u32,
    flags: &str,
) -> (
    batchbench_tests::RunResult,
    Vec<batchbench_simulator::RequestLog>,
) {
    let sim = SimServer::start(
        SimConfig {
            reasoning_tokens: tokens,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let r = sim.batchbench(
        &format!("--stream --users 2 --requests-per-user 2 --input-tokens 32 {flags}"),
        &[],
    );
    (r, sim.requests())
}

#[test]
fn the_reasoning_knobs_go_out_in_each_apis_own_fields() {
    // Chat: reasoning_effort low halves the simulator's reasoning.
    let (r, log) = knob_run(64, "--output-tokens 96 --reasoning-effort low");
    assert_eq!(r.code, 0);
    assert_eq!(r.count("total_reasoning_tokens"), 4 * 32);
    assert_eq!(log.len(), 4);
    // Thinking off (the chat template's switch): no reasoning at all.
    let (r, _) = knob_run(64, "--output-tokens 96 --no-thinking");
    assert_eq!(r.code, 0);
    assert!(r.summary("ttfrt").is_null(), "{:?}", r.summary("ttfrt"));
    assert_eq!(r.count("total_completion_tokens"), 4 * 96);
    // Anthropic: a thinking budget caps it (and the client counts it: the
    // usage has no reasoning detail).
    let (r, _) = knob_run(
        1500,
        "--codec anthropic_messages --output-tokens 1100 --thinking-budget 1024",
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.count("total_reasoning_tokens"), 4 * 1024);
    assert_eq!(r.summary("reasoning_tokens_source"), "counted");
    // Responses: the effort as reasoning.effort.
    let (r, _) = knob_run(
        64,
        "--codec openai_responses --output-tokens 200 --reasoning-effort high",
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.count("total_reasoning_tokens"), 4 * 128);
}
