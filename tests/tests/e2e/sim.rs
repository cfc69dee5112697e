//! The simulator behaves like an LLM server: token constraints, streaming format,
//! per-worker prefix caching, metrics and faults.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, tokenizer};
use serde_json::{Value, json};

fn post(sim: &SimServer, body: Value, headers: &[(&str, &str)]) -> (u16, String) {
    let url = format!("{}/v1/chat/completions", sim.url());
    sim.block_on(async {
        let mut req = reqwest::Client::new().post(url).json(&body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{e}"));
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    })
}

fn get(sim: &SimServer, path: &str) -> String {
    let url = format!("{}{path}", sim.url());
    sim.block_on(async {
        reqwest::get(url)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .text()
            .await
            .unwrap_or_default()
    })
}

fn user(content: &str) -> Value {
    json!([{"role": "user", "content": content}])
}

#[test]
fn output_constraints_are_honoured() {
    let sim = SimServer::recording("qwen");
    let cases = [
        (json!({"max_tokens": 17, "min_tokens": 17}), 17),
        (json!({"max_new_tokens": 9, "min_new_tokens": 9}), 9),
        (json!({"max_tokens": 12, "ignore_eos": true}), 12),
        (json!({"max_completion_tokens": 5, "ignore_eos": true}), 5),
    ];
    for (extra, want) in cases {
        let mut body = json!({"model": "m", "messages": user("hi")});
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let (status, text) = post(&sim, body, &[]);
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(v["usage"]["completion_tokens"], want, "{extra}");
        // The content really is that many tokens.
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(tokenizer("qwen").count(content).unwrap_or(0), want as usize);
    }
    // Without ignore_eos and with room between min and max, a seeded early stop.
    let lens: Vec<u64> = (0..20)
        .map(|i| {
            let body = json!({"model": "m", "messages": user(&format!("hi {i}")), "max_tokens": 50, "min_tokens": 10});
            let (_, text) = post(&sim, body, &[]);
            serde_json::from_str::<Value>(&text).unwrap_or_default()["usage"]["completion_tokens"]
                .as_u64()
                .unwrap_or(0)
        })
        .collect();
    assert!(lens.iter().all(|l| (10..=50).contains(l)), "{lens:?}");
    assert!(lens.iter().any(|l| *l != lens[0]), "lengths vary: {lens:?}");
    // The same request gets the same reply, as with greedy decoding.
    let content = |_| {
        let (_, t) = post(
            &sim,
            json!({"model": "m", "messages": user("same"), "max_tokens": 50}),
            &[],
        );
        serde_json::from_str::<Value>(&t).unwrap_or_default()["choices"][0]["message"]["content"]
            .clone()
    };
    let replies: Vec<Value> = (0..3).map(content).collect();
    assert!(replies.iter().all(|r| *r == replies[0] && r.is_string()));
}

#[test]
fn prompt_count_is_tokenizer_exact_plus_template_overhead() {
    let sim = SimServer::start(
        SimConfig {
            template_overhead_tokens: 4,
            message_overhead_tokens: 6,
            ..SimConfig::default()
        },
        "qwen",
    );
    let tok = tokenizer("qwen");
    let a = "The quick brown fox jumps over the lazy dog.";
    let b = "Sphinx of black quartz, judge my vow!";
    let body = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": a}, {"role": "user", "content": b}]});
    let (_, text) = post(&sim, body, &[]);
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    let want = tok.count(a).unwrap_or(0) + tok.count(b).unwrap_or(0) + 4 + 2 * 6;
    assert_eq!(v["usage"]["prompt_tokens"], want as u64);
}

#[test]
fn stream_has_role_chunk_content_finish_usage_and_done() {
    let sim = SimServer::recording("qwen");
    let body = json!({"model": "m", "messages": user("hi"), "max_tokens": 6, "min_tokens": 6, "stream": true, "stream_options": {"include_usage": true}});
    let (status, text) = post(&sim, body, &[]);
    assert_eq!(status, 200);
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(
        events[0].contains("\"role\":\"assistant\""),
        "{}",
        events[0]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.contains("\"content\":\" "))
            .count(),
        6,
        "one token per chunk"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("\"finish_reason\":\"length\""))
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("\"usage\"") && e.contains("\"completion_tokens\":6"))
    );
    assert_eq!(*events.last().unwrap_or(&""), "data: [DONE]");
}

#[test]
fn prefix_cache_is_per_worker_and_reported() {
    let sim = SimServer::start(
        SimConfig {
            workers: 2,
            cache_block_tokens: 4,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let tok = tokenizer("qwen");
    let long = tok.exact_text(5, 200, &|| "t".into()).unwrap_or_default();
    let body = json!({"model": "m", "messages": user(&long), "max_tokens": 1});
    let cached = |hdr: &[(&str, &str)]| {
        let (_, text) = post(&sim, body.clone(), hdr);
        serde_json::from_str::<Value>(&text).unwrap_or_default()["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(99)
    };
    assert_eq!(cached(&[("X-SMG-Target-Worker", "0")]), 0);
    assert_eq!(
        cached(&[("X-SMG-Target-Worker", "0")]),
        200,
        "second identical prompt on worker 0 hits"
    );
    assert_eq!(
        cached(&[("X-SMG-Target-Worker", "1")]),
        0,
        "worker 1 has its own cache"
    );
    let a = cached(&[("X-SMG-Routing-Key", "agent-a")]);
    let b = cached(&[("X-SMG-Routing-Key", "agent-a")]);
    assert_eq!(
        b, 200,
        "a routing key always picks the same worker (first: {a})"
    );
    let log = sim.requests();
    assert_eq!(log[0].worker, 0);
    assert_eq!(log[2].worker, 1);
    assert_eq!(log[3].worker, log[4].worker);
    let metrics = get(&sim, "/metrics");
    assert!(metrics.contains("sim_requests_total 5"), "{metrics}");
    let on_zero: u64 = log
        .iter()
        .filter(|e| e.worker == 0)
        .map(|e| e.cached_tokens)
        .sum();
    assert!(
        metrics.contains(&format!(
            "sim_cached_tokens_total{{worker=\"0\"}} {on_zero}"
        )),
        "{metrics}"
    );
}

#[test]
fn bad_requests_get_400() {
    let sim = SimServer::start(
        SimConfig {
            max_context_tokens: 10,
            ..SimConfig::default()
        },
        "qwen",
    );
    assert_eq!(post(&sim, json!({"model": "m"}), &[]).0, 400);
    let (status, text) = post(
        &sim,
        json!({"model": "m", "messages": user(&"word ".repeat(50))}),
        &[],
    );
    assert_eq!(status, 400);
    assert!(text.contains("context limit"), "{text}");
    assert!(get(&sim, "/v1/models").contains("batchbench-sim"));
    assert_eq!(sim.stats().rejected, 2);
}

#[test]
fn faults_are_injected_at_the_configured_rate() {
    let sim = SimServer::start(
        SimConfig {
            fault_rate: 0.5,
            fault_status: vec![503, 429],
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let codes: Vec<u16> = (0..200)
        .map(|_| {
            post(
                &sim,
                json!({"model": "m", "messages": user("x"), "max_tokens": 1}),
                &[],
            )
            .0
        })
        .collect();
    let faults = codes.iter().filter(|c| **c != 200).count();
    assert!((60..=140).contains(&faults), "{faults} faults of 200");
    assert!(codes.contains(&503) && codes.contains(&429));
    assert_eq!(
        sim.stats().faults.get("status").copied(),
        Some(faults as u64)
    );
}

/// A continuous-batching simulator: one worker, a batch of at most 4.
fn batching(step_base_ms: f64) -> SimServer {
    SimServer::start(
        SimConfig {
            max_running: 4,
            step_base_ms,
            step_ms_per_seq: 0.0,
            ..SimConfig::default()
        },
        "qwen",
    )
}

fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

#[test]
fn a_full_batch_queues_the_rest_and_metrics_say_so_under_vllm_names() {
    // 50 ms steps, 10 tokens each: a batch lasts about half a second.
    let sim = batching(50.0);
    let url = format!("{}/v1/chat/completions", sim.url());
    let body = json!({"model": "m", "messages": user("hello there"), "max_tokens": 10, "ignore_eos": true});
    let (during, texts) = sim.block_on(async {
        let client = reqwest::Client::new();
        let sends: Vec<_> = (0..10)
            .map(|_| {
                let req = client.post(&url).json(&body).send();
                tokio::spawn(async move {
                    req.await
                        .unwrap_or_else(|e| panic!("{e}"))
                        .text()
                        .await
                        .unwrap_or_default()
                })
            })
            .collect();
        // Once all ten have arrived (none can finish before its ten 50 ms
        // steps): four in the batch, six queued.
        let start = std::time::Instant::now();
        let during = loop {
            let m = reqwest::get(format!("{}/metrics", client_base(&url)))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .text()
                .await
                .unwrap_or_default();
            let seen =
                gauge(&m, "vllm:num_requests_running") + gauge(&m, "vllm:num_requests_waiting");
            if seen >= 10.0 {
                break m;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(30),
                "the ten requests never all arrived:\n{m}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        };
        let mut texts = Vec::new();
        for s in sends {
            texts.push(s.await.unwrap_or_default());
        }
        (during, texts)
    });
    assert_eq!(gauge(&during, "vllm:num_requests_running"), 4.0, "{during}");
    assert_eq!(gauge(&during, "vllm:num_requests_waiting"), 6.0, "{during}");
    for t in &texts {
        let v: Value = serde_json::from_str(t).unwrap_or_default();
        assert_eq!(v["usage"]["completion_tokens"], 10, "{t}");
    }
    let after = get(&sim, "/metrics");
    assert_eq!(gauge(&after, "vllm:num_requests_running"), 0.0);
    assert_eq!(gauge(&after, "vllm:generation_tokens_total"), 100.0);
    assert_eq!(gauge(&after, "vllm:num_preemptions_total"), 0.0);
}

fn client_base(url: &str) -> &str {
    url.trim_end_matches("/v1/chat/completions")
}

#[test]
fn a_closed_loop_above_the_batch_gets_the_documented_saturation_rate() {
    // Saturation: 1 / (O x (step_base / max_running + step_per_seq)) with
    // O = 8 output tokens, 20 ms steps, a batch of 4: 25 requests/s.
    let sim = batching(20.0);
    let tok = batchbench_tests::tokenizer_path("qwen")
        .display()
        .to_string();
    let url = sim.url();
    let r = batchbench_tests::run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 12 --requests-per-user 5 --input-tokens 16 --output-tokens 8",
        &[&url, &tok],
    ));
    let rate = r.summary("successful_requests").as_f64().unwrap_or(0.0)
        / r.summary("total_duration_seconds").as_f64().unwrap_or(1.0);
    assert!(
        (rate / 25.0 - 1.0).abs() < 0.1,
        "{rate:.1} requests/s against 25/s"
    );
}

#[test]
fn batching_flags_that_do_not_go_together_are_refused() {
    for (cfg, needle) in [
        (
            SimConfig {
                max_running: 4,
                decode_ms_per_token: 1.0,
                ..SimConfig::default()
            },
            "decode-ms-per-token",
        ),
        (
            SimConfig {
                step_base_ms: 1.0,
                ..SimConfig::default()
            },
            "need max-running",
        ),
    ] {
        let e = cfg.validate().unwrap_err();
        assert!(e.contains(needle), "{e}");
    }
}

#[test]
fn an_instant_simulator_answers_without_reading_the_prompt() {
    let sim = SimServer::start(
        SimConfig {
            instant: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let body = json!({"model": "m", "max_tokens": 5, "ignore_eos": true, "messages": user("The quick brown fox jumps over the lazy dog.")});
    let (status, text) = post(&sim, body, &[]);
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["usage"]["prompt_tokens"], 0, "the prompt is not counted");
    assert_eq!(v["usage"]["completion_tokens"], 5, "the reply is as asked");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{text}"
    );
    let e = SimConfig {
        instant: true,
        decode_ms_per_token: 1.0,
        ..SimConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.contains("instant answers at once"), "{e}");
}
