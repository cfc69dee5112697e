//! Against a real llama.cpp server (SmolLM2-135M, 4 slots of 2048 tokens), started by
//! `bash .ci/llamacpp.sh start`, which prints the two variables these tests read:
//! `BATCHBENCH_LLAMACPP_URL` and `BATCHBENCH_LLAMACPP_MODEL` (the `.gguf` file).
//!
//! The tests are ignored by a plain `cargo test` (they need the server); `.ci/run`
//! starts the server and runs them with `--ignored`, where a missing server fails.
//! Each run is a few short requests: on two shared cores the server does about one
//! per second.

use batchbench_engine::tokens::TokenizerHandle;
use batchbench_tests::{RunResult, cmd, run_agent, run_batchbench, run_series};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

const NEEDS: &str = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\"";

struct Server {
    url: String,
    model: PathBuf,
    /// `model`, as the --tokenizer-model argument.
    model_str: String,
    tokenizer: Arc<TokenizerHandle>,
    /// Prompt tokens the chat template adds around one user message.
    overhead: u64,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let var = |k: &str| {
            std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set: this test {NEEDS}"))
        };
        let url = var("BATCHBENCH_LLAMACPP_URL");
        let model = PathBuf::from(var("BATCHBENCH_LLAMACPP_MODEL"));
        let tokenizer = Arc::new(
            TokenizerHandle::from_file(&model.display().to_string(), &model)
                .unwrap_or_else(|e| panic!("{e}")),
        );
        // The template's fixed overhead, measured once through the server: a user
        // message of known length, and the prompt tokens the server counts for it.
        let text = "hello world";
        let content = tokenize(&url, text).len() as u64;
        let reply = post(
            &url,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": text}], "max_tokens": 1}),
        );
        let counted = reply["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        assert!(counted > content, "usage: {reply}");
        let overhead = counted - content;
        eprintln!("chat template overhead around one user message: {overhead} tokens");
        Server {
            url,
            model_str: model.display().to_string(),
            model,
            tokenizer,
            overhead,
        }
    })
}

fn post(url: &str, path: &str, body: &Value) -> Value {
    batchbench_engine::transport::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{url}{path}"))
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = r.status();
        let v: Value = r.json().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(status.is_success(), "{path}: HTTP {status}: {v}");
        v
    })
}

/// The server's own token ids for `text` (no special tokens added).
fn tokenize(url: &str, text: &str) -> Vec<u64> {
    let v = post(
        url,
        "/tokenize",
        &json!({"content": text, "add_special": false}),
    );
    v["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("/tokenize: {v}"))
        .iter()
        .map(|t| t.as_u64().expect("token ids are integers"))
        .collect()
}

fn model_arg(s: &Server) -> String {
    s.model.display().to_string()
}

/// One JSON line per request, from `--requests-jsonl`.
fn request_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn run_with_requests<S: AsRef<str>>(
    agent: bool,
    args: &[S],
) -> (RunResult, Vec<Value>, tempfile::TempDir) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("requests.jsonl");
    let p = path.display().to_string();
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend(["--requests-jsonl", &p]);
    let out = if agent {
        run_agent(&argv)
    } else {
        run_batchbench(&argv)
    };
    let lines = request_lines(&path);
    (out, lines, dir)
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn the_gguf_tokenizer_matches_the_servers_tokenize() {
    let s = server();
    let mut texts: Vec<String> = [
        "Hello, world! It's 2026: 12345 apples, 3.14159 pies.",
        "  leading spaces, trailing spaces  ",
        "line one\nline two\n\n\ttabbed\r\nwindows",
        "naïve café déjà vu — “quotes” ‘single’ …",
        "日本語のテキストと中文文本 and emoji 🚀🔥",
        "fn main() { println!(\"{}\", x + 1); } // code",
        "I'm sure they'll say we've done what you'd do, don't you?",
        "<|im_start|> is special only when parsed as such",
    ]
    .iter()
    .map(|t| (*t).to_owned())
    .collect();
    // And the synthetic text batchbench sends.
    for (key, n) in [(1u64, 17usize), (2, 100), (3, 333)] {
        texts.push(
            s.tokenizer
                .exact_text(key, n, &|| "test".into())
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    for t in &texts {
        let ours: Vec<u64> = s
            .tokenizer
            .ids(t)
            .unwrap()
            .into_iter()
            .map(u64::from)
            .collect();
        assert_eq!(ours, tokenize(&s.url, t), "text: {t:?}");
    }
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn the_proof_holds_for_the_gguf_tokenizer_and_agrees_with_full_encoding_and_the_server() {
    let s = server();
    let name = s.model.display().to_string();
    let proven =
        TokenizerHandle::from_file_uncached(&name, &s.model).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        proven.synthesis_path(),
        batchbench_engine::tokens::SynthesisPath::Proven,
        "SmolLM2 (GGUF)"
    );
    let checked = TokenizerHandle::from_file_uncached(&name, &s.model)
        .and_then(TokenizerHandle::without_proof)
        .unwrap_or_else(|e| panic!("{e}"));
    batchbench_tests::check_synthesis_property("SmolLM2 (GGUF)", &proven, &checked, 300);
    // And the server's own tokenizer counts proven prompts exactly.
    for (key, n) in [(11u64, 1usize), (12, 64), (13, 1500)] {
        let text = proven
            .exact_text(key, n, &|| "proof".into())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tokenize(&s.url, &text).len(), n, "{n} tokens");
    }
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn prompts_are_exact_and_outputs_exact_with_ignore_eos() {
    let s = server();
    let (out, lines, _dir) = run_with_requests(
        false,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --input-tokens 100 --output-tokens 8 --ignore-eos --users 2 --requests-per-user 2 --seed 7",
            &[&s.url, &model_arg(s)],
        ),
    );
    assert_eq!(out.code, 0);
    assert_eq!(lines.len(), 4);
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        assert_eq!(l["prompt_tokens"], 100 + s.overhead, "{l}");
        assert_eq!(l["prompt_drift_tokens"], s.overhead, "{l}");
        assert_eq!(l["completion_tokens"], 8, "{l}");
    }
    // The report states planned against server-counted prompt tokens.
    assert_eq!(out.count("planned_prompt_tokens"), 400);
    assert_eq!(out.count("counted_prompt_tokens"), 400 + 4 * s.overhead);
}

/// The special tokens (BOS) the server adds around a plain prompt.
fn plain_prompt_specials(url: &str) -> u64 {
    let with = post(
        url,
        "/tokenize",
        &json!({"content": "hello world", "add_special": true}),
    );
    let n = with["tokens"].as_array().map_or(0, Vec::len) as u64;
    n.checked_sub(tokenize(url, "hello world").len() as u64)
        .unwrap_or_else(|| panic!("/tokenize with specials gave fewer tokens: {with}"))
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn completions_prompts_are_exact_with_no_template() {
    let s = server();
    let specials = plain_prompt_specials(&s.url);
    eprintln!("special tokens around a plain prompt: {specials}");
    for stream in [false, true] {
        let mut args = vec![
            "--host",
            &s.url,
            "--model",
            "smollm2",
            "--tokenizer-model",
            &s.model_str,
            "--codec",
            "openai_completions",
            "--input-tokens",
            "100",
            "--output-tokens",
            "8",
            "--ignore-eos",
            "--users",
            "2",
            "--requests-per-user",
            "2",
            "--seed",
            "7",
        ];
        if stream {
            args.push("--stream");
        }
        let (out, lines, _dir) = run_with_requests(false, &args);
        assert_eq!(out.code, 0, "stream: {stream}");
        assert_eq!(lines.len(), 4);
        for l in &lines {
            assert_eq!(l["ok"], true, "{l}");
            assert_eq!(l["prompt_tokens"], 100 + specials, "{l}");
            assert_eq!(l["completion_tokens"], 8, "{l}");
            assert_eq!(l["ttft_ms"].is_number(), stream, "{l}");
        }
    }
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn embeddings_count_every_input_exactly() {
    let s = server();
    let url = std::env::var("BATCHBENCH_LLAMACPP_EMBEDDINGS_URL").unwrap_or_else(|_| {
        panic!("BATCHBENCH_LLAMACPP_EMBEDDINGS_URL is not set: this test {NEEDS}")
    });
    // The server's own count of one input: no special tokens added, or some.
    let one = post(&url, "/v1/embeddings", &json!({"input": ["hello world"]}));
    let specials = one["usage"]["prompt_tokens"]
        .as_u64()
        .and_then(|n| n.checked_sub(tokenize(&s.url, "hello world").len() as u64))
        .unwrap_or_else(|| panic!("embeddings usage below the text's tokens: {one}"));
    let (out, lines, _dir) = run_with_requests(
        false,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --codec openai_embeddings --batch-size 3 --input-tokens 40 --users 2 --requests-per-user 2 --seed 7",
            &[&url, &s.model_str],
        ),
    );
    assert_eq!(out.code, 0);
    assert_eq!(lines.len(), 4);
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        assert_eq!(l["prompt_tokens"], 3 * (40 + specials), "{l}");
        assert_eq!(l["items"], 3, "{l}");
    }
    assert_eq!(out.count("total_items"), 12);
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn agent_turns_hit_the_servers_prefix_cache() {
    let s = server();
    let (out, lines, _dir) = run_with_requests(
        true,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --agents 2 --tool-invocations 3 --input-tokens 200 --output-tokens 16 --environment-tokens 50 --tool-call-latency-ms 0 --ignore-eos --seed 3",
            &[&s.url, &model_arg(s)],
        ),
    );
    assert_eq!(out.code, 0);
    assert_eq!(lines.len(), 6);
    eprintln!("agent turn  server prompt  server cached  our estimate");
    // Server-cached and estimated tokens of the turns after the first.
    let mut continued = (0u64, 0u64);
    for agent in 0..2u64 {
        let mut turns: Vec<&Value> = lines.iter().filter(|l| l["agent_id"] == agent).collect();
        turns.sort_by_key(|l| l["request_index"].as_u64());
        let mut last_cached = 0;
        for (i, l) in turns.iter().enumerate() {
            let cached = l["server_cached_tokens"].as_u64().unwrap_or(0);
            let prompt = l["prompt_tokens"].as_u64().unwrap_or(0);
            let estimate = l["estimated_cached_tokens"].as_u64().unwrap_or(0);
            eprintln!("{agent:>5} {i:>4}  {prompt:>13}  {cached:>13}  {estimate:>12}");
            assert_eq!(l["completion_tokens"], 16, "{l}");
            if i > 0 {
                // Each turn resends the conversation: the server reuses more
                // every turn, up to what we estimate (the previous prompt and
                // the reply it generated, sent back whole). Not all of it:
                // llama.cpp never evaluated the reply's last token, and a
                // sampled reply can re-tokenize differently when it comes back.
                assert!(cached > last_cached, "turn {i}: {l}");
                assert!(2 * cached >= estimate, "turn {i}: {l}");
                assert!(cached <= estimate, "turn {i}: over the estimate: {l}");
                assert!(cached < prompt, "turn {i}: {l}");
                continued = (continued.0 + cached, continued.1 + estimate);
            }
            last_cached = cached;
        }
    }
    // The estimate is an upper bound again: over the turns that continue a
    // conversation the server never beats it, and falls short of it by about
    // its reply's last token per turn. (A first turn's few cached tokens are
    // the chat template's opening, shared with the other agent's.)
    assert!(
        100 * continued.0 >= 95 * continued.1 && continued.0 <= continued.1,
        "server {}, estimate {}",
        continued.0,
        continued.1
    );
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn streamed_runs_report_ttft_and_inter_token_latency() {
    let s = server();
    let (out, lines, _dir) = run_with_requests(
        false,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --input-tokens 64 --output-tokens 16 --ignore-eos --stream --users 2 --requests-per-user 1",
            &[&s.url, &model_arg(s)],
        ),
    );
    assert_eq!(out.code, 0);
    for l in &lines {
        let ttft = l["ttft_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
        let latency = l["latency_ms"].as_f64().unwrap();
        assert!(ttft > 0.0 && ttft < latency, "{l}");
        // Usage arrives in the stream (include_usage).
        assert_eq!(l["completion_tokens"], 16, "{l}");
        assert_eq!(l["prompt_tokens"], 64 + s.overhead, "{l}");
    }
    assert_eq!(out.summary("ttft")["count"], 2);
    // 16 tokens per request: 15 gaps each.
    assert!(out.summary("itl")["count"].as_u64().unwrap_or(0) >= 2 * 10);
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn a_v2_replay_with_tools_and_tool_calls_is_accepted() {
    let s = server();
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/trajectory-replay/plans-v2.jsonl"
    );
    let (out, lines, _dir) = run_with_requests(
        true,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --agent-plans-jsonl {} --time-scale 100",
            &[&s.url, &model_arg(s), manifest],
        ),
    );
    assert_eq!(out.code, 0);
    assert_eq!(out.count("failed_requests"), 0);
    assert_eq!(lines.len() as u64, out.count("total_requests"));
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        // Tool definitions (140 tokens here) reach the prompt: a template that
        // dropped them would count far fewer tokens than planned.
        let drift = l["prompt_drift_tokens"].as_i64().unwrap();
        assert!(
            drift >= 0,
            "the server counted fewer tokens than planned: {l}"
        );
    }
    // The two trajectories share their tool and system blocks: the second to
    // arrive finds them in the server's cache.
    assert!(out.count("server_cached_tokens") > 0);
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn a_prompt_over_the_context_is_an_http_400_failure_counted_by_kind() {
    let s = server();
    let out = run_batchbench(&cmd(
        "--host {} --model smollm2 --tokenizer-model {} --input-tokens 3000 --output-tokens 4 --users 1 --requests-per-user 1 --max-retries 0",
        &[&s.url, &model_arg(s)],
    ));
    assert_eq!(out.count("failed_requests"), 1);
    assert_eq!(out.summary("failures_by_kind")["http_400"], 1);
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn a_three_point_sweep_over_users_writes_a_record_per_run() {
    let s = server();
    let model = model_arg(s);
    let r = run_series(
        "batchbench",
        "sweep",
        &cmd(
            "--over users --values 1,2,4 --no-early-stop --host {} --model smollm2 --tokenizer-model {} --input-tokens 32 --output-tokens 8 --ignore-eos --stream --slo e2e_p99<=60s",
            &[&s.url, &model],
        ),
    );
    assert_eq!(r.code, 0);
    let points = r.points();
    assert_eq!(points.len(), 3);
    for (p, users) in points.iter().zip([1u64, 2, 4]) {
        assert_eq!(p["value"], users as f64);
        let run = p["runs"][0].as_str().unwrap_or_default();
        let (summary, lines) = r.run(run);
        assert_eq!(summary["summary"]["successful_requests"], users, "{run}");
        assert_eq!(lines.len() as u64, users, "{run}: a line per request");
        for l in &lines {
            assert_eq!(l["completion_tokens"], 8, "{l}");
            assert!(l["tpot_ms"].as_f64().is_some_and(|t| t > 0.0), "{l}");
        }
        // A p99 of 1 to 4 requests is their slowest: however far under the
        // bound, it decides nothing, and the point is never counted as met.
        assert_eq!(
            (&p["passed"], &p["undecided"], &p["bounds"][0]["too_few"]),
            (&false.into(), &true.into(), &true.into()),
            "{p}"
        );
    }
    let csv = batchbench_tests::read_csv(&r.dir.join("results.csv"));
    assert_eq!(csv.len(), 3, "a CSV row per run");
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn server_metrics_are_scraped_into_the_results_directory() {
    let s = server();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out_dir = dir.path().join("run");
    let d = out_dir.display().to_string();
    let out = run_batchbench(&cmd(
        "--host {} --model smollm2 --tokenizer-model {} --input-tokens 64 --output-tokens 24 --ignore-eos --users 2 --requests-per-user 2 --server-metrics target --metrics-interval 0.25 --output-dir {}",
        &[&s.url, &model_arg(s), &d],
    ));
    assert_eq!(out.code, 0);
    let m = out.summary("server_metrics");
    assert_eq!(m["failed_scrapes"], 0, "{m}");
    assert!(m["scrapes"].as_u64().unwrap_or(0) >= 2, "{m}");
    let lines = request_lines(&out_dir.join("server_metrics.jsonl"));
    assert_eq!(lines.len() as u64, m["scrapes"].as_u64().unwrap_or(0));
    // llama.cpp's own names, kept raw, and mapped to the common ones.
    let last = lines.last().cloned().unwrap_or_default();
    let predicted = last["raw"]["llamacpp:tokens_predicted_total"]
        .as_f64()
        .unwrap_or_else(|| panic!("no llamacpp counter: {last}"));
    let first = lines[0]["raw"]["llamacpp:tokens_predicted_total"]
        .as_f64()
        .unwrap_or_default();
    // The server generated at least this run's tokens between the first and the
    // last scrape (the last one follows the run's end).
    assert!(
        predicted - first >= 4.0 * 24.0 - 24.0,
        "{first} -> {predicted}"
    );
    assert!(last["common"].get("requests_running").is_some(), "{last}");
    assert!(
        m["metrics"]["generation_tokens_per_second"]["max"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0,
        "{m}"
    );
}

/// Timing sanity against a server that is not ours. llama.cpp closes the
/// connection after each streamed response although its headers advertise
/// keep-alive: each request after a connection's first finds its kept
/// connection closed and goes out at once on a new one (a reconnect, never a
/// retry with backoff), and the summary says the server closes connections.
/// Per request, the server's own `timings` are recorded and agree with the
/// client's clock: the TTFT covers the server's prompt time, the latency its
/// whole time, and every token after the first has its inter-token latency.
#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn streamed_runs_reconnect_without_retries_and_agree_with_the_servers_timings() {
    let s = server();
    let (users, per_user, output) = (8u64, 4u64, 8u64);
    let (out, lines, _dir) = run_with_requests(
        false,
        &[
            "--host",
            &s.url,
            "--model",
            "smollm2",
            "--tokenizer-model",
            &model_arg(s),
            "--input-tokens",
            "32",
            "--output-tokens",
            &output.to_string(),
            "--ignore-eos",
            "--stream",
            "--users",
            &users.to_string(),
            "--requests-per-user",
            &per_user.to_string(),
            // A retry would wait 30 s: one would show in the run's time.
            "--retry-delay-ms",
            "30000",
        ],
    );
    assert_eq!(out.code, 0);
    let n = users * per_user;
    assert_eq!(out.count("total_requests"), n);
    assert_eq!(out.count("failed_requests"), 0);
    assert_eq!(out.count("retries"), 0, "no request was retried");
    // One reconnect for each request after a connection's first: each user's
    // next request takes a kept connection the server has closed.
    assert_eq!(out.count("reconnects"), n - users);
    assert_eq!(out.summary("server_closes_connections"), true);
    let mut per_token = 0;
    for l in &lines {
        assert_eq!(l["retries"], 0, "{l}");
        assert_eq!(l["completion_tokens"], output, "{l}");
        per_token += output - 1;
        let t = &l["server_timing"];
        let prompt = t["prompt_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
        let predicted = t["predicted_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
        let ttft = l["ttft_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
        let latency = l["latency_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
        // The server reports to the microsecond, the client measures around it.
        assert!(
            ttft >= prompt - 0.5,
            "TTFT under the server's prompt time: {l}"
        );
        assert!(
            latency >= prompt + predicted - 0.5,
            "latency under the server's own time: {l}"
        );
        let gap = l["client_minus_server_ms"]
            .as_f64()
            .unwrap_or_else(|| panic!("{l}"));
        assert!((gap - (latency - prompt - predicted)).abs() < 1e-6, "{l}");
    }
    // One inter-token latency for each token after a request's first chunk's
    // tokens: one, unless the server held a token back and sent it with the
    // next (a character split over two tokens is written once whole), when
    // the first chunk's share is two. Never more samples than tokens.
    let count = out.summary("itl")["count"].as_u64().unwrap_or(0);
    assert!(
        count <= per_token && count * 10 >= per_token * 9,
        "itl samples {count} of {per_token} tokens after the first"
    );
    let st = out.summary("server_timing");
    assert_eq!(st["requests"], n, "{st}");
    assert_eq!(st["server_over_client"], 0, "{st}");
}

#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn a_fleet_of_two_servers_keeps_conversations_on_their_cache_with_session_affinity() {
    let s = server();
    let second = std::env::var("BATCHBENCH_LLAMACPP_SECOND_URL")
        .unwrap_or_else(|_| panic!("BATCHBENCH_LLAMACPP_SECOND_URL is not set: this test {NEEDS}"));
    let model = model_arg(s);
    let run = |policy: &str| {
        run_with_requests(
            true,
            &[
                "--host",
                &s.url,
                "--host",
                &second,
                "--router",
                policy,
                "--model",
                "smollm2",
                "--tokenizer-model",
                &model,
                // Three conversations on two servers: round robin cannot keep
                // one on a server by chance of the count.
                "--agents",
                "3",
                "--tool-invocations",
                "4",
                "--input-tokens",
                "200",
                "--output-tokens",
                "16",
                "--environment-tokens",
                "50",
                "--tool-call-latency-ms",
                "0",
                "--ignore-eos",
                // A seed whose session hashing puts conversations on both.
                "--seed",
                "4",
            ],
        )
    };
    let mut cached = Vec::new();
    for policy in ["round_robin", "session_affinity"] {
        let (out, lines, _dir) = run(policy);
        assert_eq!(out.code, 0, "{policy}");
        assert_eq!(lines.len(), 12, "{policy}");
        let es = out
            .summary("endpoints")
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(es.len(), 2, "{policy}");
        let sum = |k: &str| es.iter().map(|e| e[k].as_u64().unwrap_or(0)).sum::<u64>();
        assert_eq!(sum("requests"), 12, "{policy}");
        assert_eq!(
            sum("server_cached_tokens"),
            out.count("server_cached_tokens")
        );
        assert!(
            es.iter().all(|e| e["requests"].as_u64() > Some(0)),
            "{policy}"
        );
        // Every first turn's prompt is exact, whichever server counted it:
        // the planned prompt in the template's framing. (A later turn resends
        // a sampled reply, which may tokenize differently on its way back.)
        for l in &lines {
            assert_eq!(l["ok"], true, "{policy}: {l}");
            assert_eq!(l["completion_tokens"], 16, "{policy}: {l}");
            if l["request_index"] == 0 {
                assert_eq!(l["prompt_drift_tokens"], s.overhead, "{policy}: {l}");
            }
        }
        eprintln!(
            "{policy}: {} cached of {} prompt tokens; per endpoint {:?}",
            out.count("server_cached_tokens"),
            out.count("total_prompt_tokens"),
            es.iter()
                .map(|e| (e["requests"].clone(), e["server_cached_tokens"].clone()))
                .collect::<Vec<_>>()
        );
        cached.push(out.count("server_cached_tokens"));
    }
    assert!(
        cached[1] > cached[0],
        "session affinity {} against round robin {} cached tokens",
        cached[1],
        cached[0]
    );
}

/// A reasoning model on a real server: llama.cpp with a chat template that
/// has a thinking section (so its reasoning parser is on) and a grammar per
/// request that makes SmolLM2 think first: `<think>`, at least 16 characters
/// of words, `</think>`, then the answer. Every reply reasons then answers: its
/// reasoning tokens are counted apart from the answer's (llama.cpp's usage
/// has no reasoning count: the client counts with the model's tokenizer), and
/// its first answer token comes after its first token.
#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn a_thinking_template_and_a_grammar_give_reasoning_then_an_answer() {
    let s = server();
    let url = std::env::var("BATCHBENCH_LLAMACPP_THINK_URL")
        .unwrap_or_else(|_| panic!("BATCHBENCH_LLAMACPP_THINK_URL is not set: this test {NEEDS}"));
    // Words, not just spaces: llama.cpp trims the reasoning it splits out,
    // and a reasoning of spaces alone would be none.
    let grammar = r#"root ::= "<think>" [a-z]{4,10} (" " [a-z]{3,10}){3,6} "</think>" [a-z]{2,10} (" " [a-z]{2,10}){0,4}"#;
    let body = json!({
        "messages": [{"role": "user", "content": "Say hello to the world."}],
        "max_tokens": 96,
        "grammar": grammar,
    });
    // Which side splits the reasoning: llama.cpp's parser when it fills
    // reasoning_content, else the client's tag split.
    let probe = post(&url, "/v1/chat/completions", &body);
    let message = &probe["choices"][0]["message"];
    let server_splits = message["reasoning_content"]
        .as_str()
        .is_some_and(|r| !r.is_empty());
    let codec_config = if server_splits {
        eprintln!("llama.cpp's reasoning parser split the reply: {message}");
        "{}"
    } else {
        eprintln!("llama.cpp left the tags in the content, the client splits them: {message}");
        r#"{"reasoning_tags": true}"#
    };
    assert!(
        server_splits
            || message["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("<think>")),
        "the grammar made no reasoning: {probe}"
    );
    let workload = json!({"users": 2, "requests_per_user": 4, "requests": [{"body": body}]});
    let (out, lines, _dir) = run_with_requests(
        false,
        &cmd(
            "--host {} --model smollm2 --tokenizer-model {} --workload request_bodies --workload-config {} --codec-config {} --stream --seed 5",
            &[&url, &model_arg(s), &workload.to_string(), codec_config],
        ),
    );
    assert_eq!(out.code, 0);
    assert_eq!(lines.len(), 8);
    for l in &lines {
        assert_eq!(l["ok"], true, "{l}");
        let reasoning = l["reasoning_tokens"].as_u64().unwrap_or(0);
        let completion = l["completion_tokens"].as_u64().unwrap_or(0);
        // At least 16 characters of lowercase words: a few tokens.
        assert!(reasoning >= 3, "reasoning counted: {l}");
        assert!(completion > reasoning, "an answer after the reasoning: {l}");
        assert_eq!(l["reasoning_counted"], true, "{l}");
        let (ttft, ttfat) = (
            l["ttft_ms"].as_f64().unwrap_or(f64::NAN),
            l["ttfat_ms"].as_f64().unwrap_or(f64::NAN),
        );
        assert!(
            ttfat > ttft,
            "the first answer token after the first token: {l}"
        );
    }
    assert_eq!(out.summary("reasoning_tokens_source"), "counted");
    assert_eq!(
        out.count("total_reasoning_tokens") + out.count("total_answer_tokens"),
        lines
            .iter()
            .map(|l| l["completion_tokens"].as_u64().unwrap_or(0))
            .sum::<u64>()
    );
    assert!(out.summary("ttfat").is_object());
}

/// An agent loop against a reasoning model on a real server, keeping or
/// dropping its reasoning: the server's template renders kept reasoning
/// back as the model wrote it (`<think>...</think>` before the answer), so a
/// reply sent back whole is the prefix the server cached after its prompt,
/// and a reply without its reasoning is not. The cache estimate follows the
/// choice and is an upper bound: the server's cached tokens reach it, short
/// by the reply's last token (never evaluated) and, where llama.cpp puts a
/// turn on another slot, by what that slot lacks.
///
/// A grammar makes SmolLM2 reason (`<think>`, some `think`s, `</think>`,
/// more of them), with a bias towards the token `think` and `</`: under a
/// grammar a model may spell a word in pieces (`t`, `h`, `ink`) that the
/// text sent back does not tokenize to, and the server's cache would then
/// stop at the reply's first token whatever the client sends.
#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn an_agent_loop_keeps_or_drops_its_reasoning_and_the_servers_cache_follows() {
    let s = server();
    let url = std::env::var("BATCHBENCH_LLAMACPP_THINK_URL")
        .unwrap_or_else(|_| panic!("BATCHBENCH_LLAMACPP_THINK_URL is not set: this test {NEEDS}"));
    let piece = |text: &str| -> u64 {
        match tokenize(&url, text).as_slice() {
            [id] => *id,
            ids => panic!("{text:?} is not one token: {ids:?}"),
        }
    };
    let fields = json!({"fields": {
        "grammar": r#"root ::= "<think>" "think"{4,8} "</think>" "think"{2,4}"#,
        "logit_bias": [[piece("think"), 12], [piece("</"), 12]],
    }});
    // Per choice: (cached tokens beyond the previous prompt, the reply tokens
    // that went back), over the turns that continue a conversation.
    let mut beyond = Vec::new();
    for (history, seed) in [("keep", "3"), ("drop", "4")] {
        let (out, lines, _dir) = run_with_requests(
            true,
            &cmd(
                "--host {} --model smollm2 --tokenizer-model {} --reasoning-history {} --router body_fields --router-config {} --agents 2 --tool-invocations 3 --input-tokens 200 --output-tokens 32 --environment-tokens 50 --tool-call-latency-ms 0 --seed {}",
                &[&url, &model_arg(s), history, &fields.to_string(), seed],
            ),
        );
        assert_eq!(out.code, 0, "{history}");
        assert_eq!(lines.len(), 6, "{history}");
        let (mut server, mut estimate, mut past_prompt, mut replies, mut continued) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        eprintln!("{history}: agent turn  prompt  reasoning  server cached  estimate");
        for agent in 0..2u64 {
            let mut turns: Vec<&Value> = lines.iter().filter(|l| l["agent_id"] == agent).collect();
            turns.sort_by_key(|l| l["request_index"].as_u64());
            for (i, l) in turns.iter().enumerate() {
                let n = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("{k}: {l}"));
                assert!(n("reasoning_tokens") >= 4, "{history}: it reasoned: {l}");
                eprintln!(
                    "{agent:>5} {i:>4}  {:>6}  {:>9}  {:>13}  {:>8}",
                    n("prompt_tokens"),
                    n("reasoning_tokens"),
                    n("server_cached_tokens"),
                    n("estimated_cached_tokens")
                );
                if i > 0 {
                    let before = turns[i - 1];
                    let prompt = before["prompt_tokens"].as_u64().unwrap_or(0);
                    server += n("server_cached_tokens");
                    estimate += n("estimated_cached_tokens");
                    past_prompt += n("server_cached_tokens").saturating_sub(prompt);
                    replies += before["completion_tokens"].as_u64().unwrap_or(0);
                    continued += 1;
                }
            }
        }
        // Never above the estimate; short of it by at most the template's
        // tokens and one cache block per request, or 2%.
        let slack = (continued * (s.overhead + 16)).max(estimate / 50);
        assert!(
            server <= estimate && estimate - server <= slack,
            "{history}: server {server}, estimate {estimate}, slack {slack}"
        );
        beyond.push((past_prompt, replies, continued));
    }
    // Kept, the server found each reply after the prompt it answered (all
    // but its last token on an idle server; a quarter at least, where the
    // tests beside this one took a conversation's slot between two turns);
    // dropped, none of it (the answer alone starts differently).
    let (keep, drop) = (beyond[0], beyond[1]);
    assert!(4 * keep.0 >= keep.1, "keep: {keep:?}");
    assert!(drop.0 <= drop.2, "drop: {drop:?}");
}

/// Structured outputs on a real server: llama.cpp enforces the JSON Schema
/// of `response_format` by grammar, so every answer of a small schema (its
/// strings an enum or bounded by `maxLength`, a boolean) is valid, with no
/// output length forced and a cap above the schema's longest answer. That
/// answer is longer in tokens than it looks: the grammar lets the model put
/// newlines and up to 20 spaces between the members, and twelve characters
/// of a name may be escapes of several tokens each (a cap of 96 cut one
/// answer in eight in CI), so the cap is 256.
#[test]
#[ignore = "needs a llama.cpp server: eval \"$(bash .ci/llamacpp.sh start)\""]
fn structured_outputs_under_the_servers_grammar_are_all_valid() {
    let s = server();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let schema = dir.path().join("pet.json");
    std::fs::write(&schema, batchbench_tests::pet_schema().to_string())
        .expect("the schema written");
    let format = format!("json_schema:{}", schema.display());
    for stream in ["", "--stream"] {
        let (out, lines, _dir) = run_with_requests(
            false,
            &cmd(
                &format!(
                    "--host {{}} --model smollm2 --tokenizer-model {{}} --users 2 --requests-per-user 4 --input-tokens 64 --output-tokens 256 --response-format {{}} --seed 9 {stream}"
                ),
                &[&s.url, &model_arg(s), &format],
            ),
        );
        assert_eq!(out.code, 0, "{stream}");
        let st = out.summary("structured");
        assert_eq!(
            (st["checked"].as_u64(), st["valid"].as_u64()),
            (Some(8), Some(8)),
            "{stream}: {st}"
        );
        for l in &lines {
            assert_eq!(l["structured_schema"], 0, "{l}");
            assert!(l.get("structured_invalid").is_none(), "{l}");
            // The answer ended where its JSON did, under the cap.
            assert!(l["completion_tokens"].as_u64().unwrap_or(256) < 256, "{l}");
        }
    }
}
