//! The dataset and trace workloads: each sample replays with the expected
//! request count in both admission modes, from both CLIs; a malformed line
//! or row is bad input, named by file and line, and nothing is sent.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, run_agent, run_batchbench, tokenizer};
use std::path::{Path, PathBuf};

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/datasets")
        .join(name)
}

/// `(workload, config, requests)` of every sample.
fn samples() -> Vec<(&'static str, String, u64)> {
    let cfg = |file: &str, extra: &str| {
        format!(
            r#"{{"path": {}{extra}}}"#,
            serde_json::Value::from(sample(file).display().to_string())
        )
    };
    vec![
        ("sharegpt", cfg("sharegpt.json", ""), 3),
        ("sharegpt", cfg("sharegpt.json", r#", "turns": "all""#), 6),
        ("prompts_jsonl", cfg("prompts.jsonl", ""), 4),
        ("mooncake", cfg("mooncake.jsonl", ""), 5),
        ("azure_trace", cfg("azure.csv", ""), 5),
        // One row failed in production (0 response tokens) and is left out.
        ("burstgpt", cfg("burstgpt.csv", ""), 4),
    ]
}

#[test]
fn every_sample_replays_its_requests_closed_and_open_loop_from_both_clis() {
    for (workload, config, requests) in samples() {
        for (cli, open) in [
            ("batchbench", false),
            ("batchbench-agent", false),
            ("batchbench-agent", true),
        ] {
            let sim = SimServer::recording("qwen");
            let mut args = sim.args(
                "--workload {} --workload-config {} --seed 4",
                &[workload, &config],
            );
            if open {
                // Timestamps honoured, a hundred times faster.
                args.extend(["--admission", "open-loop", "--time-scale", "100"].map(String::from));
            }
            let r = if cli == "batchbench" {
                args.extend(["--users", "2"].map(String::from));
                run_batchbench(&args)
            } else {
                run_agent(&args)
            };
            let what = format!("{workload} {config} ({cli}, open loop: {open})");
            assert_eq!(r.code, 0, "{what}");
            assert_eq!(r.count("successful_requests"), requests, "{what}");
            assert_eq!(sim.requests().len() as u64, requests, "{what}");
            assert_eq!(sim.stats().rejected, 0, "{what}");
        }
    }
}

#[test]
fn sharegpt_sends_the_recorded_text_and_its_replies_lengths() {
    let qwen_tok = tokenizer("qwen");
    let cfg = SimConfig::default();
    let sim = SimServer::recording("qwen");
    let config = format!(
        r#"{{"path": {}, "turns": "all"}}"#,
        serde_json::Value::from(sample("sharegpt.json").display().to_string())
    );
    let r = sim.agent("--workload sharegpt --workload-config {}", &[&config]);
    assert_eq!(r.code, 0);
    let count = |t: &str| qwen_tok.count(t).unwrap_or_else(|e| panic!("{e}")) as u64;
    let mut log = sim.requests();
    log.sort_by_key(|e| e.seq);
    // bench-3, three turns: the first prompt is its first user turn, verbatim.
    let first = "Give me three words that rhyme with cache.";
    let opening: Vec<_> = log
        .iter()
        .filter(|e| {
            e.messages == 1
                && e.prompt_tokens
                    == count(first)
                        + u64::from(cfg.template_overhead_tokens + cfg.message_overhead_tokens)
        })
        .collect();
    assert_eq!(opening.len(), 1, "the first turn is sent as recorded");
    // Each request's output is the recorded reply's length.
    assert_eq!(
        opening[0].completion_tokens,
        count("Stash, dash and flash.")
    );
    // Later turns carry the conversation: the model's replies and the next turn.
    let messages: Vec<u64> = log.iter().map(|e| e.messages).collect();
    for m in [1, 3, 5] {
        assert!(messages.contains(&m), "{messages:?}");
    }
    // bench-3's session: each request resends the last with the reply and the
    // next turn, so its prompts grow.
    let session: Vec<u64> = log
        .iter()
        .filter(|e| e.routing_key == opening[0].routing_key)
        .map(|e| e.prompt_tokens)
        .collect();
    assert_eq!(session.len(), 3, "{session:?}");
    assert!(session.windows(2).all(|w| w[1] > w[0]), "{session:?}");
}

#[test]
fn mooncake_hash_ids_become_shared_prefixes() {
    let sim = SimServer::recording("qwen");
    let config = format!(
        r#"{{"path": {}}}"#,
        serde_json::Value::from(sample("mooncake.jsonl").display().to_string())
    );
    let r = sim.agent(
        "--workload mooncake --workload-config {} --max-active-agents 1",
        &[&config],
    );
    assert_eq!(r.code, 0);
    let mut log = sim.requests();
    log.sort_by_key(|e| e.seq);
    // One user message per block; the planned prompt is the input length.
    assert_eq!(
        log.iter().map(|e| e.messages).collect::<Vec<_>>(),
        [3, 2, 2, 3, 1]
    );
    assert_eq!(
        r.count("planned_prompt_tokens"),
        1200 + 900 + 600 + 1500 + 512
    );
    // Hash 0 (and 1) again: the server's cache holds their blocks.
    assert_eq!(log[0].cached_tokens, 0);
    assert!(log[1].cached_tokens > 400, "{:?}", log[1]);
    assert!(log[3].cached_tokens > 900, "{:?}", log[3]);
    assert!(log[4].cached_tokens > 400, "{:?}", log[4]);
}
