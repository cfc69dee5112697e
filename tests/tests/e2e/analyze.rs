//! `analyze` and the prefix-cache estimate that sees sharing across sessions:
//! figures computed by hand on a manifest whose sharing is known by
//! construction, the same estimate in a run against the simulator, and every
//! example workload analysed.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, read_json, run_agent, tokenizer_path, words};
use serde_json::{Value, json};
use std::path::Path;

const BLOCK: u64 = 16;
const SESSIONS: u64 = 8;

/// Eight sessions of two requests. Each opens with a shared system block of 64
/// tokens (four cache blocks) and a user block of its own of 32 (two); its
/// second request continues with a user block of 16 (one).
fn known_manifest(dir: &Path) -> std::path::PathBuf {
    let block = |seed: String, tokens: u64, role: &str| json!({"seed": seed, "tokens": tokens, "role": role});
    let mut text = String::new();
    for s in 0..SESSIONS {
        let first = vec![
            block("system-shared".into(), 64, "system"),
            block(format!("u{s}"), 32, "user"),
        ];
        let mut second = first.clone();
        second.push(block(format!("v{s}"), 16, "user"));
        let line = json!({
            "schema_version": 2,
            "trajectory_id": format!("session-{s}"),
            "requests": [
                {"prompt_tokens": 96, "output_tokens": 4, "overhead_tokens": 0, "blocks": first},
                {"prompt_tokens": 112, "output_tokens": 4, "overhead_tokens": 0, "blocks": second},
            ],
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let p = dir.join("known.jsonl");
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    p
}

pub(crate) fn analyze<S: AsRef<str>>(program: &str, args: &[S]) -> (i32, Option<Value>) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("analysis.json");
    let mut argv: Vec<String> = vec![program.into(), "analyze".into()];
    argv.extend(args.iter().map(|s| (*s).to_owned()));
    argv.extend(["--json".into(), out.display().to_string()]);
    let code = if program == "batchbench" {
        batchbench_run::commands::batchbench::run(argv)
    } else {
        batchbench_run::commands::agent::run(argv)
    };
    (code, read_json(&out))
}

fn cached(row: &Value) -> u64 {
    row["cached_tokens"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cached_tokens: {row}"))
}

#[test]
fn analyze_gives_the_hand_computed_hit_rates_for_one_and_four_ranks() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let m = known_manifest(dir.path());
    let m = m.to_str().unwrap_or_default();
    let html = dir.path().join("a.html");
    let (code, a) = analyze(
        "batchbench-agent",
        &cmd(
            "{} --cache-tokens 128,1M --html {}",
            &[m, html.to_str().unwrap_or_default()],
        ),
    );
    assert_eq!(code, 0);
    let page = std::fs::read_to_string(&html).unwrap_or_default();
    assert_eq!(page.matches("<svg").count(), 3, "three charts");
    assert!(page.contains("session-0") && page.contains("LRU 128 tokens per rank"));
    let a = a.unwrap_or_else(|| panic!("no analysis"));
    assert_eq!(a["requests"], 16);
    assert_eq!(a["sessions"], SESSIONS);
    // Prompts: 8 x 96 + 8 x 112 tokens.
    assert_eq!(a["global"]["prompt_tokens"], 8 * 96 + 8 * 112);
    // Every session but the first finds the shared 64 tokens; every second
    // request finds its first request's six blocks (96 tokens).
    let ideal = (SESSIONS - 1) * 64 + SESSIONS * 96;
    assert_eq!(cached(&a["global"]), ideal);
    assert_eq!(a["block_tokens"], BLOCK);
    let caches = a["caches"].as_array().cloned().unwrap_or_default();
    assert_eq!(caches.len(), 3, "{caches:?}");
    assert_eq!(
        cached(&caches[0]["total"]),
        ideal,
        "one rank: its ideal cache is the global one"
    );
    // An LRU of 8 blocks: the first requests go out in session order, then the
    // second ones. Each first request after session 0's finds the shared blocks
    // (its own go in, the oldest session's go out); each second request finds
    // the shared blocks only, its own having been evicted.
    assert_eq!(
        cached(&caches[1]["total"]),
        (SESSIONS - 1) * 64 + SESSIONS * 64
    );
    assert_eq!(caches[1]["capacity_tokens"], 128);
    assert_eq!(
        cached(&caches[2]["total"]),
        ideal,
        "a cache that never fills"
    );
    // Sharing: 4 blocks sent by all 8 sessions; 3 of each session's own.
    let sharing = &a["sharing"];
    assert_eq!(sharing["distinct_blocks"], 4 + SESSIONS * 3);
    assert_eq!(sharing["block_references"], SESSIONS * (6 + 7));
    let buckets = sharing["sessions_per_block"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(buckets[0]["blocks"], SESSIONS * 3, "{buckets:?}");
    assert_eq!(buckets[3]["sessions"], "5-8");
    assert_eq!(buckets[3]["blocks"], 4);
    let longest = &sharing["longest_shared_prefixes"][0];
    assert_eq!(longest["tokens"], 64);
    assert_eq!(longest["sessions"], SESSIONS);
    assert_eq!(longest["first_trajectory_id"], "session-0");
    assert_eq!(
        sharing["longest_shared_prefixes"].as_array().map(Vec::len),
        Some(1)
    );

    // Four ranks, a session to each in turn: sessions s and s+4 share a rank.
    // On each, the second session finds the shared 64 tokens and both second
    // requests their 96.
    let (code, a) = analyze(
        "batchbench-agent",
        &[m, "--ranks", "4", "--routing", "affinity"],
    );
    assert_eq!(code, 0);
    let a = a.unwrap_or_else(|| panic!("no analysis"));
    let row = &a["caches"][0];
    assert_eq!(
        cached(&a["global"]),
        ideal,
        "the global cache ignores ranks"
    );
    assert_eq!(cached(&row["total"]), 4 * (64 + 2 * 96));
    let ranks = row["ranks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ranks.len(), 4);
    for r in &ranks {
        assert_eq!(cached(r), 64 + 2 * 96, "{r}");
        assert_eq!(r["requests"], 4);
    }
    // `--endpoints` is the same flag under the name `--help` shows beside it.
    let (code, by_alias) = analyze(
        "batchbench-agent",
        &[m, "--endpoints", "4", "--routing", "affinity"],
    );
    assert_eq!(code, 0, "--endpoints");
    let by_alias = by_alias.unwrap_or_else(|| panic!("no analysis"));
    assert_eq!(by_alias["caches"], a["caches"], "--endpoints is --ranks");
    // The same through the run's own router: slot % 4, all sessions at once.
    let (code, b) = analyze(
        "batchbench-agent",
        &cmd(
            "{} --dp-rank-perfect-routing --dp-rank-perfect-routing-num 4",
            &[m],
        ),
    );
    assert_eq!(code, 0);
    let b = b.unwrap_or_else(|| panic!("no analysis"));
    assert_eq!(b["routing"], "run");
    assert_eq!(b["ranks"], 4);
    assert_eq!(cached(&b["caches"][0]["total"]), 4 * (64 + 2 * 96));
}

#[test]
fn a_run_reports_the_global_estimate_the_simulator_serves() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let m = known_manifest(dir.path());
    let sim = SimServer::start(
        SimConfig {
            workers: 1,
            cache_block_tokens: BLOCK as u32,
            cache_capacity_tokens: 10_000_000,
            ..SimConfig::default()
        },
        "qwen",
    );
    let tok = tokenizer_path("qwen").display().to_string();
    let url = sim.url();
    let reqs = dir.path().join("requests.jsonl");
    let r = run_agent(&cmd(
        "--host {} --tokenizer-model {} --agent-plans-jsonl {} --max-active-agents 2 --requests-jsonl {}",
        &[
            &url,
            &tok,
            m.to_str().unwrap_or_default(),
            reqs.to_str().unwrap_or_default(),
        ],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 16);
    let global = r.count("global_estimated_cached_input_tokens");
    let server = r.count("server_cached_tokens");
    // What analyze computes by hand above, and what the server served: its
    // role markers shift blocks by a token per message at most.
    assert_eq!(global, (SESSIONS - 1) * 64 + SESSIONS * 96);
    assert!(
        server.abs_diff(global) <= 16 * BLOCK,
        "server {server}, estimate {global}"
    );
    // The spec's per-trajectory estimate sees only the second requests.
    assert!(r.count("estimated_cached_input_tokens") < global);
    assert_eq!(r.count("cache_block_tokens"), BLOCK);
    assert!(r.summary("rank_estimated_cached_input_tokens").is_null());
    // The CSV carries the new columns after the legacy ones; the request
    // records carry the per-request figure.
    let row = &r.csv[0];
    assert_eq!(
        row["global_estimated_cached_input_tokens"],
        global.to_string()
    );
    let per: u64 = std::fs::read_to_string(&reqs)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap_or_default()["global_estimated_cached_tokens"]
                .as_u64()
                .unwrap_or_else(|| panic!("no estimate: {l}"))
        })
        .sum();
    assert_eq!(per, global);
}

#[test]
fn a_routed_run_reports_the_estimate_per_rank() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let m = known_manifest(dir.path());
    let tok = tokenizer_path("qwen").display().to_string();
    let r = run_agent(&cmd(
        "--host sim://?workers=4 --tokenizer-model {} --agent-plans-jsonl {} --dp-rank-perfect-routing --dp-rank-perfect-routing-num 4",
        &[&tok, m.to_str().unwrap_or_default()],
    ));
    assert_eq!(r.code, 0);
    // Eight sessions in eight slots, slot % 4: as analyze computes for four
    // ranks with affinity.
    assert_eq!(
        r.count("rank_estimated_cached_input_tokens"),
        4 * (64 + 2 * 96)
    );
    assert_eq!(
        r.count("global_estimated_cached_input_tokens"),
        (SESSIONS - 1) * 64 + SESSIONS * 96
    );
}

#[test]
fn every_example_workload_is_analysed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for m in ["plans.jsonl", "plans-v2.jsonl"] {
        let p = root.join("examples/trajectory-replay").join(m);
        let (code, a) = analyze("batchbench-agent", &[p.to_str().unwrap_or_default()]);
        assert_eq!(code, 0, "{m}");
        let a = a.unwrap_or_else(|| panic!("{m}: no analysis"));
        assert!(a["requests"].as_u64().unwrap_or(0) > 0, "{m}: {a}");
        assert!(
            a["prompt_tokens"]["p50"].as_u64().unwrap_or(0) > 0,
            "{m}: {a}"
        );
    }
    // The v2 example shares its tool and system blocks between sessions.
    let p = root.join("examples/trajectory-replay/plans-v2.jsonl");
    let (_, a) = analyze("batchbench-agent", &[p.to_str().unwrap_or_default()]);
    let a = a.unwrap_or_default();
    assert!(cached(&a["global"]) > 0, "{a}");
    // The synthetic workloads of both commands, with no manifest.
    let (code, a) = analyze(
        "batchbench",
        &words("--users 4 --requests-per-user 3 --input-tokens 64 --input-prefix-overlap 0.5"),
    );
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    assert_eq!(a["requests"], 12);
    assert!(cached(&a["global"]) > 0, "a shared prefix: {a}");
    let (code, a) = analyze(
        "batchbench-agent",
        &words("--agents 3 --tool-invocations 4 --input-tokens 200 --output-tokens 20"),
    );
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    assert_eq!(a["sessions"], 3);
    assert!(cached(&a["global"]) > 0, "growing conversations: {a}");
}

#[test]
fn bad_input_is_named_by_file_and_line_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = dir.path().join("bad.jsonl");
    let good = r#"{"schema_version":2,"trajectory_id":"a","requests":[{"prompt_tokens":20,"overhead_tokens":0,"blocks":[{"seed":"s","tokens":20,"role":"user"}]}]}"#;
    std::fs::write(&p, format!("{good}\n{{\"schema_version\":2,\"trajectory_id\":\"b\",\"requests\":[{{\"prompt_tokens\":\"many\"}}]}}\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, a) = analyze("batchbench-agent", &[p.to_str().unwrap_or_default()]);
    assert_eq!(code, 2);
    assert!(a.is_none(), "nothing is written");
    let (code, _) = analyze(
        "batchbench-agent",
        &["--routing", "sideways", p.to_str().unwrap_or_default()],
    );
    assert_eq!(code, 2);
    let (code, _) = analyze(
        "batchbench-agent",
        &[
            "--routing",
            "run",
            &dir.path().join("missing.jsonl").display().to_string(),
        ],
    );
    assert_eq!(code, 2);
    let (code, _) = analyze("batchbench-agent", &["--cache-tokens", "1M,lots"]);
    assert_eq!(code, 2);
}

/// `analyze` describes what the requests carry as the run sends it: a
/// reranker's drawn documents, audio clips' durations and the formats asked
/// for, each checked against a run of the same flags.
#[test]
fn analyze_describes_documents_audio_and_formats_as_the_run_sends_them() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let sim = SimServer::recording("qwen");
    let content = |line: &str| -> Value {
        let (code, a) = analyze("batchbench", &sim.args(line, &[]));
        assert_eq!(code, 0, "{line}");
        a.map(|a| a["content"].clone()).unwrap_or_default()
    };
    // Documents: drawn per request, and the run sends those.
    let line = "--codec rerank --query-tokens 8 --batch-size 6 --batch-vary 4 --input-tokens 16 --users 3 --requests-per-user 10 --seed 5";
    let c = content(line);
    assert_eq!(c["codec"], "rerank", "{c}");
    let before = sim.requests().len();
    assert_eq!(sim.batchbench(line, &[]).code, 0);
    let sent: Vec<u64> = sim.requests()[before..]
        .iter()
        .map(|e| e.messages)
        .collect();
    let d = &c["inputs_per_request"];
    assert_eq!(d["count"], 30, "{c}");
    assert_eq!(d["total"], sent.iter().sum::<u64>(), "{c}");
    assert_eq!(d["min"], sent.iter().min().copied().unwrap_or(0), "{c}");
    assert_eq!(d["max"], sent.iter().max().copied().unwrap_or(0), "{c}");
    // Audio: each clip's duration as the run draws it.
    let line = "--codec openai_transcriptions --audio-ms 1500 --audio-vary 500 --users 2 --requests-per-user 4 --input-tokens 8 --seed 3";
    let c = content(line);
    let r = sim.batchbench(line, &[]);
    assert_eq!(r.code, 0);
    let (planned, sent) = (&c["audio"], r.summary("audio"));
    assert_eq!(planned["clips"], 8, "{c}");
    assert_eq!(planned["requests"], sent["requests"], "{c} {sent}");
    let (p, s) = (
        planned["seconds"].as_f64().unwrap_or(0.0),
        sent["seconds"].as_f64().unwrap_or(-1.0),
    );
    assert!((p - s).abs() < 1e-9, "analyze {p} s, the run {s} s");
    let ms = &planned["clip_ms"];
    assert!(
        ms["min"].as_u64() >= Some(1000) && ms["max"].as_u64() <= Some(2000),
        "{ms}"
    );
    // Formats: they rotate over requests, as the run's requests say.
    let files = crate::structured::schemas(dir.path());
    let lines = dir.path().join("requests.jsonl");
    let line = format!(
        "--users 3 --requests-per-user 3 --input-tokens 16 --output-tokens 96 --seed 2 --response-format json_schema:{files}"
    );
    let c = content(&line);
    let r = sim.batchbench(&format!("{line} --requests-jsonl {}", lines.display()), &[]);
    assert_eq!(r.code, 0);
    let mut by_schema = [0u64; 2];
    for l in batchbench_tests::read_jsonl(&lines) {
        by_schema[l["structured_schema"].as_u64().unwrap_or(0) as usize] += 1;
    }
    assert_eq!(
        c["response_formats"],
        json!([
            {"name": "pet", "requests": by_schema[0]},
            {"name": "order", "requests": by_schema[1]},
        ]),
        "{c}"
    );
    assert_eq!(by_schema, [5, 4], "(trajectory + request) mod 2");
    // Plain chat carries text alone: no content section.
    let (code, a) = analyze("batchbench", &sim.args("--users 2 --input-tokens 16", &[]));
    assert_eq!(code, 0);
    assert!(a.is_some_and(|a| a.get("content").is_none()));
}
