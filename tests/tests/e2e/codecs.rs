//! Every codec against the simulator: exact prompts, streaming timings, usage
//! and cached tokens, stateful Responses loops and Anthropic tool turns.

use batchbench_simulator::apis::Api;
use batchbench_simulator::{RequestLog, SimConfig};
use batchbench_tests::{SimServer, cmd, qwen, read_jsonl, run_agent, run_batchbench};
use std::collections::BTreeMap;

/// The codecs besides chat, the API the simulator saw them on, and whether
/// the API applies a chat template.
const CODECS: [(&str, Api, bool); 4] = [
    ("openai_completions", Api::Completions, false),
    ("openai_responses", Api::Responses, true),
    ("anthropic_messages", Api::Messages, true),
    ("sglang_generate", Api::Generate, false),
];

#[test]
fn every_codec_sends_exact_prompts_and_reads_usage_and_streams() {
    let cfg = SimConfig::default();
    let template = u64::from(cfg.template_overhead_tokens + cfg.message_overhead_tokens);
    for (codec, api, templated) in CODECS {
        for stream in [false, true] {
            let sim = SimServer::recording("qwen");
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let lines = dir.path().join("requests.jsonl");
            let path = lines.display().to_string();
            let mut args = sim.args(
                "--codec {} --users 3 --requests-per-user 2 --input-tokens 100 --output-tokens 16 --seed 5 --requests-jsonl {}",
                &[codec, &path],
            );
            if stream {
                args.push("--stream".into());
            }
            let r = run_batchbench(&args);
            let what = format!("{codec} (stream: {stream})");
            assert_eq!(r.code, 0, "{what}");
            assert_eq!(r.count("successful_requests"), 6, "{what}");
            let log = sim.requests();
            assert_eq!(log.len(), 6, "{what}");
            let expected = 100 + if templated { template } else { 0 };
            for e in &log {
                assert_eq!(e.api, api, "{what}");
                assert_eq!(e.prompt_tokens, expected, "{what}: {e:?}");
                assert_eq!(e.completion_tokens, 16, "{what}: {e:?}");
                assert_eq!(e.stream, stream, "{what}");
            }
            // Usage read back: the server's counts, to the token.
            assert_eq!(r.count("counted_prompt_tokens"), 6 * expected, "{what}");
            assert_eq!(r.count("total_completion_tokens"), 6 * 16, "{what}");
            let recs = read_jsonl(&lines);
            assert_eq!(recs.len(), 6, "{what}");
            for l in &recs {
                assert_eq!(l["prompt_tokens"], expected, "{what}: {l}");
                assert_eq!(
                    l["server_cached_tokens"], 0,
                    "{what}: cached tokens parsed: {l}"
                );
                assert_eq!(l["ttft_ms"].is_number(), stream, "{what}: {l}");
                assert_eq!(l["tpot_ms"].is_number(), stream, "{what}: {l}");
            }
            if stream {
                assert!(r.summary("itl").is_object(), "{what}: inter-token latency");
            }
            assert_eq!(sim.stats().rejected, 0, "{what}");
        }
    }
}

/// An agent run of `codec` against a fresh recording simulator: its log by agent.
fn agent_run(
    codec: &str,
    config: &str,
    stream: bool,
) -> (
    BTreeMap<String, Vec<RequestLog>>,
    batchbench_simulator::SimStats,
) {
    let sim = SimServer::recording("qwen");
    let mut args = sim.args("--codec {} --codec-config {} --agents 4 --tool-invocations 5 --input-tokens 200 --output-tokens 24 --environment-tokens 40 --seed 11", &[codec, config]);
    if stream {
        args.push("--stream".into());
    }
    let r = run_agent(&args);
    assert_eq!(r.code, 0, "{codec} {config}");
    assert_eq!(r.count("successful_requests"), 20, "{codec} {config}");
    (sim.requests_by_key(), sim.stats())
}

fn prompts(log: &BTreeMap<String, Vec<RequestLog>>) -> Vec<Vec<u64>> {
    log.values()
        .map(|turns| turns.iter().map(|t| t.prompt_tokens).collect())
        .collect()
}

#[test]
fn a_stateful_responses_loop_sends_only_new_items_and_the_servers_state_grows() {
    let cfg = SimConfig::default();
    for stream in [false, true] {
        let (stateless, _) = agent_run("openai_responses", "{}", stream);
        let (stateful, stats) = agent_run("openai_responses", r#"{"stateful": true}"#, stream);
        // The server counts the same prompts either way.
        assert_eq!(prompts(&stateful), prompts(&stateless), "stream: {stream}");
        assert_eq!(stats.stored_responses, 20, "every response is stored");
        for turns in stateless.values() {
            assert!(turns.iter().all(|t| t.stored_prompt_tokens == 0));
            // The whole conversation: the reply, our call and its result each turn.
            for w in turns.windows(2) {
                assert_eq!(w[1].messages, w[0].messages + 3);
            }
        }
        for (key, turns) in &stateful {
            assert_eq!(turns.len(), 5, "{key}");
            assert_eq!((turns[0].messages, turns[0].stored_prompt_tokens), (1, 0));
            for w in turns.windows(2) {
                // Only the call on the reply and its result.
                assert_eq!(w[1].messages, 2, "{key}");
                // The stored conversation is the previous prompt and its reply.
                assert_eq!(
                    w[1].stored_prompt_tokens,
                    w[0].prompt_tokens - u64::from(cfg.template_overhead_tokens)
                        + u64::from(cfg.message_overhead_tokens)
                        + w[0].completion_tokens,
                    "{key}"
                );
                assert!(w[1].stored_prompt_tokens > w[0].stored_prompt_tokens);
                assert!(
                    w[1].cached_tokens > 0,
                    "{key}: the prefix cache still works"
                );
            }
        }
    }
}

#[test]
fn an_anthropic_agent_loop_answers_every_tool_use_and_counts_as_chat_does() {
    for stream in [false, true] {
        let (chat, _) = agent_run("openai_chat", "{}", stream);
        // The simulator refuses (400) a tool_use without its tool_result: every
        // request succeeded, so every call was answered.
        let (messages, stats) = agent_run("anthropic_messages", "{}", stream);
        assert_eq!(stats.rejected, 0);
        assert_eq!(prompts(&messages), prompts(&chat), "stream: {stream}");
        for turns in messages.values() {
            assert!(turns.iter().all(|t| t.api == Api::Messages));
            assert!(turns.iter().skip(1).all(|t| t.cached_tokens > 0));
        }
    }
}

#[test]
fn embeddings_send_a_batch_of_exact_inputs_and_report_items() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let r = sim.batchbench("--codec openai_embeddings --batch-size 4 --users 2 --requests-per-user 3 --input-tokens 50 --seed 2", &[]);
    assert_eq!(r.code, 0);
    let log = sim.requests();
    assert_eq!(log.len(), 6);
    for e in &log {
        assert_eq!(e.api, Api::Embeddings);
        assert_eq!(
            (e.messages, e.prompt_tokens, e.completion_tokens),
            (4, 200, 0)
        );
    }
    // Four distinct inputs each request, and no two requests alike.
    let mut bodies: Vec<_> = log.iter().map(|e| e.body_hash).collect();
    bodies.sort_unstable();
    bodies.dedup();
    assert_eq!(bodies.len(), 6);
    assert_eq!(r.count("total_items"), 24);
    assert!(
        r.summary("items_per_second")
            .as_f64()
            .is_some_and(|x| x > 0.0)
    );
    assert_eq!(r.count("counted_prompt_tokens"), 6 * 200);
    assert_eq!(r.count("planned_prompt_tokens"), 6 * 200);
    // A batch needs a prompt length.
    let bad = run_batchbench(&cmd(
        "--host {} --codec openai_embeddings --batch-size 4",
        &[&url],
    ));
    assert_eq!(bad.code, 2);
    assert_eq!(sim.requests().len(), 6, "nothing sent");
}

#[test]
fn rerank_and_score_send_a_query_and_exact_documents_and_count_documents() {
    let sim = SimServer::recording("qwen");
    for (api, endpoint, kind) in [
        ("rerank", "/v1/rerank", Api::Rerank),
        ("rerank_v2", "/v2/rerank", Api::Rerank),
        ("score", "/v1/score", Api::Score),
    ] {
        let before = sim.requests().len();
        let r = sim.batchbench(
            "--codec rerank --codec-config {} --query-tokens 24 --batch-size 8 --input-tokens 64 --users 2 --requests-per-user 3 --seed 4",
            &[&format!(r#"{{"api": "{api}"}}"#)],
        );
        assert_eq!(r.code, 0, "{api}");
        let url = r
            .json
            .as_ref()
            .map(|j| j["run"]["url"].to_string())
            .unwrap_or_default();
        assert!(url.contains(endpoint), "{api}: {url}");
        let log = sim.requests();
        assert_eq!(log.len() - before, 6, "{api}");
        for e in &log[before..] {
            // Eight documents, and the query and each document counted once.
            assert_eq!(
                (e.api, e.messages, e.prompt_tokens),
                (kind, 8, 24 + 8 * 64),
                "{api}"
            );
        }
        // Documents per second is the documents ranked over the run's time.
        assert_eq!(r.count("total_items"), 6 * 8, "{api}");
        let per_s = r.summary("items_per_second").as_f64().unwrap_or(0.0);
        let secs = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
        assert!(
            (per_s * secs - 48.0).abs() < 1e-6,
            "{api}: {per_s} x {secs}"
        );
        assert_eq!(r.count("planned_prompt_tokens"), 6 * (24 + 8 * 64), "{api}");
    }
    // The texts, read back by the full tokenizer: a query of 24 tokens and
    // documents of 64, each its own text.
    let bodies: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
    let kept = bodies.clone();
    let addr = batchbench_tests::http::serve(move |req| {
        let v: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let n = v["documents"].as_array().map_or(0, Vec::len);
        kept.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(v);
        let results: Vec<serde_json::Value> = (0..n)
            .map(|i| serde_json::json!({"index": i, "relevance_score": 0.5}))
            .collect();
        let body =
            serde_json::json!({"id": "r", "results": results, "usage": {"total_tokens": 10}});
        ("200 OK", "application/json", body.to_string().into_bytes())
    });
    let path = batchbench_tests::tokenizer_path("qwen");
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --codec rerank --query-tokens 24 --batch-size 8 --input-tokens 64 --users 2 --requests-per-user 2 --seed 4",
        &[&format!("http://{addr}"), &path.display().to_string()],
    ));
    assert_eq!(r.code, 0);
    let full = batchbench_engine::tokens::TokenizerHandle::from_file_uncached("qwen", &path)
        .and_then(batchbench_engine::tokens::TokenizerHandle::without_proof)
        .unwrap_or_else(|e| panic!("{e}"));
    let count = |t: &serde_json::Value| full.count(t.as_str().unwrap_or_default()).unwrap_or(0);
    let bodies = bodies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(bodies.len(), 4);
    for b in bodies.iter() {
        assert_eq!(count(&b["query"]), 24, "{b}");
        let docs = b["documents"].as_array().cloned().unwrap_or_default();
        assert_eq!(docs.len(), 8, "{b}");
        assert!(docs.iter().all(|d| count(d) == 64), "{b}");
        let mut distinct = docs.clone();
        distinct.sort_by_key(ToString::to_string);
        distinct.dedup();
        assert_eq!(distinct.len(), 8, "each document its own text");
    }
    // No documents at all is bad input, and nothing is sent.
    let bad = run_batchbench(&cmd(
        "--host {} --codec rerank --query-tokens 24 --batch-size 0 --input-tokens 64",
        &[&sim.url()],
    ));
    assert_eq!(bad.code, 2);
}

#[test]
fn a_drawn_document_count_varies_per_request_and_every_document_is_counted() {
    let sim = SimServer::recording("qwen");
    let r = sim.batchbench(
        "--codec rerank --query-tokens 24 --batch-size 6 --batch-vary 4 --input-tokens 32 --users 2 --requests-per-user 20 --seed 5",
        &[],
    );
    assert_eq!(r.code, 0);
    let log = sim.requests();
    assert_eq!(log.len(), 40);
    let mut counts = std::collections::BTreeSet::new();
    let mut documents = 0;
    for e in &log {
        // From 6 - 4 to 6 + 4 documents, the query and each counted once.
        assert!((2..=10).contains(&e.messages), "{} documents", e.messages);
        assert_eq!(e.prompt_tokens, 24 + 32 * e.messages);
        counts.insert(e.messages);
        documents += e.messages;
    }
    assert!(counts.len() >= 5, "the count is drawn: {counts:?}");
    // The summary's documents are the ones sent, and its rate is theirs
    // over the run's time.
    assert_eq!(r.count("total_items"), documents);
    let per_s = r.summary("items_per_second").as_f64().unwrap_or(0.0);
    let secs = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
    assert!(
        (per_s * secs - documents as f64).abs() < 1e-6,
        "{per_s} x {secs}"
    );
    // A variation that could draw no document is bad input, nothing sent.
    for flags in [
        "--batch-size 6 --batch-vary 6",
        "--batch-size 1 --batch-vary 1",
    ] {
        let before = sim.requests().len();
        let bad = sim.batchbench(
            &format!("--codec rerank --query-tokens 24 {flags} --input-tokens 32"),
            &[],
        );
        assert_eq!(bad.code, 2, "{flags}");
        assert_eq!(sim.requests().len(), before, "{flags}: nothing sent");
    }
}

#[test]
fn images_ride_on_the_first_user_message_in_every_api_that_takes_them() {
    let cfg = SimConfig::default();
    let template = u64::from(cfg.template_overhead_tokens + cfg.message_overhead_tokens);
    // 56 x 84 pixels: 2 x 3 = 6 tokens each.
    let per_image = batchbench_simulator::apis::image_tokens(56, 84);
    assert_eq!(per_image, 6);
    for (codec, format) in [
        ("openai_chat", "png"),
        ("openai_responses", "jpeg"),
        ("anthropic_messages", "png"),
    ] {
        let mut hashes = Vec::new();
        for _ in 0..2 {
            let sim = SimServer::recording("qwen");
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let lines = dir.path().join("requests.jsonl");
            let path = lines.display().to_string();
            let r = sim.batchbench("--codec {} --images-per-request 2 --image-size 56x84 --image-format {} --users 2 --requests-per-user 2 --input-tokens 64 --output-tokens 4 --seed 9 --requests-jsonl {}", &[codec, format, &path]);
            assert_eq!(r.code, 0, "{codec}");
            for e in sim.requests() {
                assert_eq!(
                    e.prompt_tokens,
                    64 + template + 2 * per_image,
                    "{codec}: {e:?}"
                );
            }
            assert_eq!(r.count("images_sent"), 8, "{codec}");
            let bytes = r.count("total_image_bytes");
            let recs = read_jsonl(&lines);
            assert!(recs.iter().all(|l| l["images"] == 2), "{codec}");
            let sum: u64 = recs.iter().filter_map(|l| l["image_bytes"].as_u64()).sum();
            assert_eq!(sum, bytes, "{codec}");
            assert!(bytes > 8 * 100, "{codec}: {bytes} bytes");
            hashes.push(sim.sorted_body_hashes());
        }
        assert_eq!(
            hashes[0], hashes[1],
            "{codec}: seeded images give identical bodies"
        );
    }
    // A codec that cannot carry images is refused before anything is sent.
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let r = sim.batchbench(
        "--codec openai_completions --images-per-request 1 --input-tokens 8",
        &[],
    );
    assert_eq!(r.code, 2);
    let r = run_batchbench(&cmd(
        "--host {} --image-size 0x10 --images-per-request 1",
        &[&url],
    ));
    assert_eq!(r.code, 2);
    assert!(sim.requests().is_empty(), "nothing sent");
}

#[test]
fn sglang_generate_sends_token_ids_made_with_the_runs_tokenizer() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), qwen());
    let r = run_batchbench(&[
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--codec",
        "sglang_generate",
        "--codec-config",
        r#"{"input": "ids"}"#,
        "--users",
        "2",
        "--input-tokens",
        "100",
        "--output-tokens",
        "8",
        "--stream",
    ]);
    assert_eq!(r.code, 0);
    let log = sim.requests();
    assert_eq!(log.len(), 2);
    assert!(
        log.iter()
            .all(|e| e.prompt_tokens == 100 && e.completion_tokens == 8)
    );
}
