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
            // Each phase decodes at the simulator's 2 ms a token, by its
            // time per output token and by its inter-token gaps.
            for phase in [
                "tpot_reasoning",
                "tpot_answer",
                "itl_reasoning",
                "itl_answer",
            ] {
                let p50 = r.summary(phase)["p50_ms"].as_f64().unwrap_or(f64::NAN);
                assert!((p50 - 2.0).abs() < 0.6, "{what}: {phase} p50 {p50} ms");
            }
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

/// An agent loop against a simulator that reasons, with each history choice
/// of the two codecs that can keep reasoning: what goes back decides what the
/// server finds in its prefix cache, and the estimate follows it.
#[test]
fn an_agent_loop_keeps_or_drops_its_reasoning_and_the_cache_estimate_follows() {
    let cfg = SimConfig {
        reasoning_tokens: 32,
        record_requests: true,
        ..SimConfig::default()
    };
    let workload = "--agents 3 --tool-invocations 5 --input-tokens 200 --output-tokens 48 --environment-tokens 64 --ignore-eos --seed 3";
    for codec in ["openai_chat", "anthropic_messages"] {
        let mut cached = Vec::new();
        let mut analyzed = Vec::new();
        for history in ["keep", "drop"] {
            let what = format!("{codec}, --reasoning-history {history}");
            let sim = SimServer::start(cfg.clone(), "qwen");
            let r = sim.agent(
                &format!("--codec {{}} --reasoning-history {{}} {workload}"),
                &[codec, history],
            );
            assert_eq!(r.code, 0, "{what}");
            assert_eq!(r.count("successful_requests"), 15, "{what}");
            assert_eq!(r.count("total_reasoning_tokens"), 15 * 32, "{what}");
            let estimate = r.count("estimated_cached_input_tokens");
            let server = r.summary("server_cached_tokens").as_u64().unwrap_or(0);
            // The simulator caches in whole blocks of token ids: a request's
            // template tokens (counted, never cached) and its last partial
            // block are all it can fall short of the estimate by, and it
            // never finds more than the estimate.
            let short: u64 = sim
                .requests()
                .iter()
                .filter(|e| e.messages > 1)
                .map(|e| {
                    u64::from(cfg.template_overhead_tokens)
                        + e.messages * u64::from(cfg.message_overhead_tokens)
                        + u64::from(cfg.cache_block_tokens)
                })
                .sum();
            eprintln!("{what}: estimate {estimate}, server {server}, bound {short}");
            assert!(
                server <= estimate,
                "{what}: server {server} over the estimate {estimate}"
            );
            assert!(
                estimate - server <= short,
                "{what}: server {server} under the estimate {estimate} by more than {short}"
            );
            cached.push((estimate, server));
            // analyze, told of the 32 reasoning tokens a reply makes, gives
            // both choices; each is the run's estimate across trajectories
            // (one ideal cache in whole blocks) under that choice.
            let tok = batchbench_tests::tokenizer_path("qwen")
                .display()
                .to_string();
            let (code, a) = crate::analyze::analyze(
                "batchbench-agent",
                &batchbench_tests::cmd(
                    &format!(
                        "--host {{}} --tokenizer-model {{}} --codec {{}} --reasoning-history {{}} {workload} --assume-reasoning-tokens 32"
                    ),
                    &[&sim.url(), &tok, codec, history],
                ),
            );
            assert_eq!(code, 0, "{what}: analyze");
            let choices = &a.unwrap_or_default()["reasoning_history"];
            assert_eq!(choices["run"], history, "{what}: {choices}");
            assert_eq!(
                choices[history]["cached_tokens"].as_u64(),
                Some(r.count("global_estimated_cached_input_tokens")),
                "{what}: {choices}"
            );
            analyzed.push(choices.clone());
        }
        // Both analyses agree on both choices, whichever the run made.
        assert_eq!(analyzed[0]["keep"], analyzed[1]["keep"], "{codec}");
        assert_eq!(analyzed[0]["drop"], analyzed[1]["drop"], "{codec}");
        // Kept, each turn's reply (32 reasoning tokens, then 16 of answer:
        // the cap counts both) is found again after the prompt it answered.
        let (keep, drop) = (cached[0], cached[1]);
        assert!(
            keep.0 >= drop.0 + 12 * 48,
            "{codec}: {keep:?} against {drop:?}"
        );
        assert!(
            keep.1 >= drop.1 + 12 * 32,
            "{codec}: {keep:?} against {drop:?}"
        );
    }
}
