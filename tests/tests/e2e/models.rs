//! Several models in one run on the simulator: a weighted mix at its
//! weights, each model's prompts exact by its own tokenizer, results per
//! model that add up to the run's, LoRA adapter churn against `analyze`'s
//! prediction and its cost in TTFT, sessions kept on one model, adapters
//! named in each API's field, and bad mixes refused before anything is sent.

use super::analyze::analyze;
use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, read_jsonl, refused_batchbench, tokenizer_path};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The simulator's template tokens around one user message (its defaults:
/// 3 for the request, 5 for the message).
const SIM_OVERHEAD: u64 = 8;

#[test]
fn a_weighted_mix_gets_its_shares_and_each_model_its_own_tokenizer() {
    // Two tokenizers: a base on Qwen's, a model on DeepSeek's, and an
    // adapter of the base (its base's tokenizer). DeepSeek's, not Llama
    // 3.2's: text made with Qwen's tokenizer has Llama 3.2's counts too (seen
    // over 40,000 tokens), so only a tokenizer that counts it otherwise
    // (+573 tokens over the same 40,000) shows which one made a prompt.
    let sim = SimServer::with_model_tokenizers(
        SimConfig {
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
        &[("deepseek", "deepseek")],
    );
    let deepseek = tokenizer_path("deepseek").display().to_string();
    let r = sim.batchbench(
        "--users 20 --requests-per-user 100 --input-tokens 128 --output-tokens 2 --seed 5 --model-mix {} --model-tokenizer {}",
        &["qwen-base=0.5,deepseek=0.3,sql@qwen-base=0.2", &format!("deepseek={deepseek}")],
    );
    assert_eq!(r.code, 0);
    let models = r.summary("models").as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = models.iter().filter_map(|m| m["model"].as_str()).collect();
    assert_eq!(names, ["qwen-base", "deepseek", "sql"]);
    // Each share within the binomial 99% bounds of its weight.
    let n: f64 = 2_000.0;
    for (m, p) in models.iter().zip([0.5f64, 0.3, 0.2]) {
        let k = m["requests"].as_f64().unwrap_or(0.0);
        let bound = 2.576 * (n * p * (1.0 - p)).sqrt();
        assert!((k - n * p).abs() <= bound, "{m}: {k} of {n}, weight {p}");
    }
    // The models add up to the run.
    for field in [
        "requests",
        "successful_requests",
        "prompt_tokens",
        "completion_tokens",
    ] {
        let sum: u64 = models.iter().filter_map(|m| m[field].as_u64()).sum();
        let total = match field {
            "requests" => r.count("successful_requests") + r.count("failed_requests"),
            "prompt_tokens" => r.count("total_prompt_tokens"),
            "completion_tokens" => r.count("total_completion_tokens"),
            f => r.count(f),
        };
        assert_eq!(sum, total, "{field}");
    }
    // Every prompt is its target by the tokenizer of its model: the
    // simulator counts each model's with that model's.
    let log = sim.requests();
    assert_eq!(log.len(), 2_000);
    let mut seen = BTreeMap::new();
    for e in &log {
        *seen.entry(e.model.clone().unwrap_or_default()).or_insert(0) += 1;
        assert_eq!(e.prompt_tokens, 128 + SIM_OVERHEAD, "{e:?}");
    }
    let by_summary: BTreeMap<String, u64> = models
        .iter()
        .map(|m| {
            (
                m["model"].as_str().unwrap_or_default().to_owned(),
                m["requests"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        seen, by_summary,
        "the server saw the models the summary counts"
    );
    // The CSV keeps one row, the models in a column of their own.
    let row = &r.csv[0];
    assert_eq!(
        row["models"],
        format!(
            "qwen-base={};deepseek={};sql={}",
            by_summary["qwen-base"], by_summary["deepseek"], by_summary["sql"]
        )
    );
}

/// Eight adapters in turn at random, one user at a time (so that the
/// order of requests is the plan's): `(mix, the flags of the run)`.
fn adapters() -> (String, Vec<String>) {
    let mix = (1..=8)
        .map(|i| format!("a{i}@base=1"))
        .collect::<Vec<_>>()
        .join(",");
    let flags = batchbench_tests::cmd(
        "--tokenizer-model {} --users 1 --requests-per-user 400 --input-tokens 32 --output-tokens 2 --seed 9 --model-mix {}",
        &[&tokenizer_path("qwen").display().to_string(), &mix],
    );
    (mix, flags)
}

#[test]
fn adapter_churn_is_what_analyze_predicts_and_costs_its_load_time() {
    const LOAD_MS: f64 = 20.0;
    let (_, flags) = adapters();
    let (code, a) = analyze(
        "batchbench",
        &[flags.clone(), vec!["--max-loras".into(), "2,8".into()]].concat(),
    );
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    let predicted: Vec<u64> = a["adapter_loads"]
        .as_array()
        .map(|v| v.iter().filter_map(|l| l["loads"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(predicted.len(), 2, "{a}");
    let mut mean_ttft = Vec::new();
    let mut loads = Vec::new();
    for (slots, want) in [(2u32, predicted[0]), (8, predicted[1])] {
        let sim = SimServer::start(
            SimConfig {
                record_requests: true,
                lora_adapters: (1..=8).map(|i| format!("a{i}")).collect(),
                max_loras: slots,
                lora_load_ms: LOAD_MS,
                ttft_base_ms: 5.0,
                ..SimConfig::default()
            },
            "qwen",
        );
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lines = dir.path().join("requests.jsonl");
        let mut args = vec!["--host".to_owned(), sim.url(), "--stream".into()];
        args.extend(flags.iter().cloned());
        args.extend(["--requests-jsonl".into(), lines.display().to_string()]);
        let r = batchbench_tests::run_batchbench(&args);
        assert_eq!(r.code, 0);
        let swaps: u64 = sim.stats().workers.iter().map(|w| w.lora_loads).sum();
        let off = (swaps as f64 - want as f64).abs() / want.max(1) as f64;
        assert!(
            off <= 0.05,
            "max-loras {slots}: {swaps} loads, analyze said {want}"
        );
        // Swapped requests wait the load before their first token.
        let log = sim.requests();
        let client = read_jsonl(&lines);
        let ttft = |l: &Value| l["ttft_ms"].as_f64().unwrap_or(f64::NAN);
        let mut by_index: Vec<&Value> = client.iter().collect();
        by_index.sort_by_key(|l| l["request_index"].as_u64());
        let mut entries = log.clone();
        entries.sort_by_key(|e| e.seq);
        assert_eq!(entries.len(), by_index.len());
        let (mut swapped, mut kept) = (Vec::new(), Vec::new());
        for (e, l) in entries.iter().zip(&by_index) {
            assert_eq!(e.adapter.as_deref(), l["model"].as_str(), "{e:?}");
            if e.adapter_loaded {
                swapped.push(ttft(l));
            } else {
                kept.push(ttft(l));
            }
        }
        if slots == 2 {
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let gap = median(&mut swapped) - median(&mut kept);
            assert!(
                (gap - LOAD_MS).abs() <= 1.0,
                "swapped TTFT p50 exceeds the others' by {gap:.2} ms, not {LOAD_MS}"
            );
        }
        mean_ttft.push(r.summary("ttft")["mean_ms"].as_f64().unwrap_or(0.0));
        loads.push(swaps);
    }
    // The mean TTFT at 2 is higher by the load time times the share of
    // requests that loaded (beyond those at 8).
    let want = LOAD_MS * (loads[0] - loads[1]) as f64 / 400.0;
    let got = mean_ttft[0] - mean_ttft[1];
    assert!(
        (got - want).abs() <= 0.1 * want,
        "mean TTFT higher by {got:.2} ms at max-loras 2, expected {want:.2}"
    );
}

#[test]
fn a_session_keeps_its_model_and_adapters_go_where_each_api_names_them() {
    let sim = SimServer::start(
        SimConfig {
            record_requests: true,
            lora_adapters: vec!["sql".into(), "chat".into()],
            max_loras: 2,
            ..SimConfig::default()
        },
        "qwen",
    );
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let lines = dir.path().join("requests.jsonl");
    let p = lines.display().to_string();
    let r = sim.batchbench(
        "--users 30 --requests-per-user 5 --input-tokens 16 --output-tokens 2 --model-mix {} --model-selection session --requests-jsonl {}",
        &["base=1,sql@base=1,chat@base=1", &p],
    );
    assert_eq!(r.code, 0);
    let mut per_agent: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for l in read_jsonl(&lines) {
        per_agent
            .entry(l["agent_id"].as_u64().unwrap_or(u64::MAX))
            .or_default()
            .insert(l["model"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(per_agent.len(), 30);
    assert!(per_agent.values().all(|m| m.len() == 1), "{per_agent:?}");
    let used: BTreeSet<&String> = per_agent.values().flatten().collect();
    assert_eq!(used.len(), 3, "{per_agent:?}");

    // SGLang's lora_path and llama.cpp's lora ids name the adapter, the
    // base in `model`: the server finds the adapter the client chose.
    for field in ["lora_path", "lora_id"] {
        let before = sim.requests().len();
        let r = sim.batchbench(
            "--users 4 --requests-per-user 10 --input-tokens 16 --output-tokens 2 --model-mix {} --adapter-field {} --requests-jsonl {}",
            &["base=1,sql@base=1,chat@base=1", field, &p],
        );
        assert_eq!(r.code, 0, "{field}");
        let log = &sim.requests()[before..];
        let sent: BTreeMap<Option<String>, usize> = log.iter().fold(BTreeMap::new(), |mut m, e| {
            assert_eq!(e.model.as_deref(), Some("base"), "{field}: {e:?}");
            *m.entry(e.adapter.clone()).or_insert(0) += 1;
            m
        });
        let mut asked: BTreeMap<Option<String>, usize> = BTreeMap::new();
        for l in read_jsonl(&lines) {
            let m = l["model"]
                .as_str()
                .filter(|m| *m != "base")
                .map(str::to_owned);
            *asked.entry(m).or_insert(0) += 1;
        }
        assert_eq!(sent, asked, "{field}");
    }
}

#[test]
fn bad_mixes_are_refused_naming_the_model_and_nothing_is_sent() {
    let sim = SimServer::recording("qwen");
    let tok = tokenizer_path("qwen").display().to_string();
    let url = sim.url();
    let base = ["--host", &url, "--tokenizer-model", &tok, "--users", "2"];
    for (mix, extra, says) in [
        (
            "a=0.5,b=0",
            vec![],
            "model 'b': weight 0 is not a positive number",
        ),
        ("a=1,b=x", vec![], "the weight 'x' is not a number"),
        ("a=1,a=2", vec![], "model 'a' is named twice"),
        (
            "a=1",
            vec!["--adapter-field", "lora_path"],
            "no model of the mix is an adapter",
        ),
        (
            "a=1",
            vec!["--model-tokenizer", "b=x"],
            "'b' is not a model of --model-mix",
        ),
    ] {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(["--model-mix", mix]);
        args.extend(extra);
        let e = refused_batchbench(&args);
        assert!(e.contains(says), "{mix}: {e}");
    }
    let e = refused_batchbench(&[&base[..], &["--model-selection", "session"]].concat());
    assert!(e.contains("give --model-mix too"), "{e}");
    // A tokenizer that cannot be loaded for one model.
    let mut args: Vec<&str> = base.to_vec();
    args.extend([
        "--model-mix",
        "a=1,b=1",
        "--model-tokenizer",
        "b=/no/such/tokenizer.json",
    ]);
    let r = batchbench_tests::run_batchbench(&args);
    assert_eq!(r.code, 2);
    assert_eq!(sim.stats().requests, 0, "nothing is sent");
}

#[test]
fn check_models_refuses_a_model_an_endpoint_does_not_list_before_sending() {
    let sim = SimServer::start(
        SimConfig {
            served_models: vec!["base".into()],
            lora_adapters: vec!["sql".into()],
            ..SimConfig::default()
        },
        "qwen",
    );
    let line = "--users 2 --requests-per-user 2 --input-tokens 16 --output-tokens 2 --check-models --model-mix {}";
    let r = sim.batchbench(line, &["base=1,sql@base=1,chat@base=1"]);
    assert_eq!(r.code, 2, "chat is not listed");
    assert_eq!(sim.stats().requests, 0, "nothing is sent");
    let r = sim.batchbench(line, &["base=1,sql@base=1"]);
    assert_eq!(r.code, 0, "base and its adapter sql are listed");
    assert_eq!(sim.stats().requests, 4);
    // With lora_path the requests carry the base alone: that is what must be listed.
    let r = sim.batchbench(
        &format!("{line} --adapter-field lora_path"),
        &["base=1,sql@base=1"],
    );
    assert_eq!(r.code, 0);
}

/// A base model and three adapters on a server that holds one adapter at a
/// time: nearly every adapter request loads its adapter (20 ms), no base
/// request does. A bound naming a model judges its requests alone.
#[test]
fn an_slo_bound_may_name_a_model_and_judges_its_requests_alone() {
    let sim = SimServer::start(
        SimConfig {
            lora_adapters: vec!["a".into(), "b".into(), "c".into()],
            max_loras: 1,
            lora_load_ms: 20.0,
            ttft_base_ms: 2.0,
            ..SimConfig::default()
        },
        "qwen",
    );
    let r = sim.batchbench(
        "--users 1 --requests-per-user 200 --input-tokens 16 --output-tokens 2 --stream --seed 4 --model-mix {} --slo {}",
        &[
            "base=1,a@base=1,b@base=1,c@base=1",
            "ttft_p50{model=base}<=15ms,ttft_p50{model=a}<=15ms,ttft{model=base}<=15ms,ttft_p50<=15ms",
        ],
    );
    let slo = r.summary("slo");
    let verdict = |i: usize| {
        (
            slo["bounds"][i]["bound"].clone(),
            slo["bounds"][i]["met"].clone(),
        )
    };
    assert_eq!(
        verdict(0),
        ("ttft_p50{model=base}<=15ms".into(), true.into()),
        "{slo}"
    );
    assert_eq!(
        verdict(1),
        ("ttft_p50{model=a}<=15ms".into(), false.into()),
        "{slo}"
    );
    assert_eq!(
        verdict(2),
        ("ttft{model=base}<=15ms".into(), true.into()),
        "{slo}"
    );
    assert_eq!(slo["bounds"][2]["share_met"], 1.0, "{slo}");
    // Three requests in four are an adapter's: the run's median loads.
    assert_eq!(verdict(3).1, false, "{slo}");
    assert_eq!(slo["passed"], false);

    // Bad bounds: a model not in the mix, a model without a mix.
    let tok = tokenizer_path("qwen").display().to_string();
    let url = sim.url();
    let base = [
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--users",
        "1",
        "--stream",
    ];
    for (extra, says) in [
        (
            vec![
                "--model-mix",
                "base=1,a@base=1",
                "--slo",
                "ttft_p99{model=z}<=1s",
            ],
            "names model 'z', which is not in --model-mix (base, a)",
        ),
        (
            vec!["--slo", "e2e{model=a}<=1s"],
            "the run sends one model: give --model-mix",
        ),
    ] {
        let e = refused_batchbench(&[&base[..], &extra[..]].concat());
        assert!(e.contains(says), "{extra:?}: {e}");
    }
}

#[test]
fn the_report_draws_a_line_and_a_row_per_model() {
    let sim = SimServer::start(
        SimConfig {
            lora_adapters: vec!["a".into(), "b".into()],
            ..SimConfig::default()
        },
        "qwen",
    );
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("run");
    let r = sim.batchbench(
        "--users 4 --requests-per-user 30 --input-tokens 16 --output-tokens 2 --seed 3 --model-mix {} --output-dir {}",
        &["base=0.5,a@base=0.25,b@base=0.25", &dir.display().to_string()],
    );
    assert_eq!(r.code, 0);
    let counts: Vec<(String, u64)> = r
        .summary("models")
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["model"].as_str().unwrap_or_default().to_owned(),
                m["requests"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(counts.len(), 3);
    let html = tmp.path().join("report.html");
    batchbench_run::report::write(std::slice::from_ref(&dir), &html)
        .unwrap_or_else(|f| panic!("{f:?}"));
    let page = std::fs::read_to_string(&html).unwrap_or_default();
    let section = page
        .split("id=\"models\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no models section"));
    // A row per model with its requests, as the summary counts them.
    for (model, n) in &counts {
        assert!(
            section.contains(&format!("<tr><td>{model}</td><td>{n}</td>")),
            "{model}: {n} requests"
        );
    }
    // A line per model in the completions chart, each in its own colour.
    let colours = batchbench_tests::chart_colours(section, "model-throughput");
    assert_eq!(colours.len(), 3, "{colours:?}");
    // A run of one model has no such section.
    let one = tmp.path().join("one");
    let r = sim.batchbench(
        "--users 2 --input-tokens 16 --output-tokens 2 --output-dir {}",
        &[&one.display().to_string()],
    );
    assert_eq!(r.code, 0);
    batchbench_run::report::write(std::slice::from_ref(&one), &html)
        .unwrap_or_else(|f| panic!("{f:?}"));
    let page = std::fs::read_to_string(&html).unwrap_or_default();
    assert!(!page.contains("id=\"models\""));
}

/// `compare` per model: a second run whose adapters load on every request
/// (one resident at a time) fails a gate on an adapter's TTFT, and passes
/// the same gate on the base model, whose requests need no adapter.
#[test]
fn compare_gates_each_models_own_figures() {
    let tok = batchbench_tests::tokenizer_path("qwen")
        .display()
        .to_string();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |name: &str, max_loras: u32| {
        let d = tmp.path().join(name).display().to_string();
        let host = format!(
            "sim://?lora-adapters=a,b&max-loras={max_loras}&lora-load-ms=40&ttft-base-ms=10"
        );
        let r = batchbench_tests::run_batchbench(&batchbench_tests::cmd(
            "--host {} --tokenizer-model {} --users 1 --requests-per-user 60 --input-tokens 16 --output-tokens 2 --stream --seed 4 --model-mix {} --output-dir {}",
            &[&host, &tok, "base=1,a@base=1,b@base=1", &d],
        ));
        assert_eq!(r.code, 0, "{name}");
        d
    };
    let (base, churn) = (run("base", 2), run("churn", 1));
    let compare = |fail_if: &str| {
        batchbench_run::commands::batchbench::run(batchbench_tests::cmd(
            "batchbench compare {} {} --fail-if {}",
            &[&base, &churn, fail_if],
        ))
    };
    assert_eq!(
        compare("ttft_mean{model=base}>+50%"),
        0,
        "the base loads nothing"
    );
    assert_eq!(compare("ttft_mean{model=a}>+50%"), 1, "adapter a loads");
    // A model neither run served, and a figure no model has, are bad input.
    assert_eq!(compare("ttft_p50{model=c}>+50%"), 2);
    assert_eq!(compare("goodput{model=a}<-5%"), 2);
}

/// Each served model its own latency: `big` four times as slow as
/// configured, `small` as configured, one user at a time; and a model the
/// simulator does not serve is answered 404 (as vLLM answers it), counted
/// as that failure.
#[test]
fn each_served_model_has_its_own_latency_and_an_unknown_one_is_a_404() {
    let sim = SimServer::start(
        SimConfig {
            served_models: vec!["big".into(), "small".into()],
            strict_models: true,
            model_slowdown: vec!["big=4".into()],
            ttft_base_ms: 10.0,
            decode_ms_per_token: 1.0,
            ..SimConfig::default()
        },
        "qwen",
    );
    let r = sim.batchbench(
        "--users 1 --requests-per-user 40 --input-tokens 16 --output-tokens 5 --stream --seed 2 --model-mix big=1,small=1 --slo {}",
        &["itl_p50{model=small}<=2.5ms,itl_p50{model=big}<=2.5ms,itl{model=big}<=2.5ms"],
    );
    // Inter-token latency per model: 1 ms a token against 4 (a busy machine
    // only lengthens gaps: no gap of big's is under 4 ms).
    let slo = r.summary("slo");
    let met: Vec<Value> = (0..3).map(|i| slo["bounds"][i]["met"].clone()).collect();
    assert_eq!(met, [true, false, false], "{slo}");
    assert_eq!(slo["bounds"][2]["share_met"], 0.0, "{slo}");
    let observed = |i: usize| slo["bounds"][i]["observed_ms"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (observed(1) - 4.0).abs() < 1.0 && (observed(0) - 1.0).abs() < 0.8,
        "{slo}"
    );
    let rows = r.summary("models").as_array().cloned().unwrap_or_default();
    let ttft = |i: usize| rows[i]["ttft"]["p50_ms"].as_f64().unwrap_or(f64::NAN);
    let e2e = |i: usize| rows[i]["latency"]["p50_ms"].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows[0]["model"], "big");
    // TTFT 40 ms against 10; the four decode intervals 16 ms against 4.
    assert!(
        (ttft(0) - ttft(1) - 30.0).abs() < 3.0,
        "{} {}",
        ttft(0),
        ttft(1)
    );
    assert!(
        (e2e(0) - e2e(1) - 42.0).abs() < 4.0,
        "{} {}",
        e2e(0),
        e2e(1)
    );
    let r = sim.batchbench(
        "--users 1 --requests-per-user 4 --input-tokens 16 --output-tokens 2 --model-mix big=1,other=1 --seed 2 --max-retries 0",
        &[],
    );
    let failures = r.summary("failures_by_kind");
    let rows = r.summary("models").as_array().cloned().unwrap_or_default();
    assert_eq!(rows[1]["model"], "other");
    assert!(rows[1]["requests"].as_u64() > Some(0), "{rows:?}");
    assert_eq!(failures["http_404"], rows[1]["requests"], "{failures}");
    assert_eq!(rows[1]["successful_requests"], 0);
    // A factor that is not a positive number, and one with the batch model.
    for q in [
        "model_slowdown=big=0",
        "model_slowdown=big",
        "max_running=4&model_slowdown=big=2",
    ] {
        let e = refused_batchbench(&[
            "--host",
            &format!("sim://?{q}"),
            "--users",
            "1",
            "--requests-per-user",
            "1",
        ]);
        assert!(e.contains("model-slowdown"), "{q}: {e}");
    }
}

/// A v2 manifest's trajectories may name their model: each conversation
/// goes to it (a reset's too), a trajectory without one to the mix's pick,
/// `analyze` counts the same, and a model that is not in the mix is refused
/// naming the file, line, trajectory and field. Without a mix, the run's one
/// model takes every request, as before.
#[test]
fn a_replayed_trajectory_goes_to_the_model_it_names() {
    let sim = SimServer::recording("qwen");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let req = |prompt: u32, reset: bool| serde_json::json!({"prompt_tokens": prompt, "output_tokens": 3, "reset_before": reset});
    let line = |id: &str, model: Option<&str>| {
        let mut l = serde_json::json!({
            "schema_version": 2,
            "trajectory_id": id,
            "requests": [req(40, false), req(60, false), req(40, true), req(60, false)],
        });
        if let Some(m) = model {
            l["model"] = m.into();
        }
        l.to_string()
    };
    let lines = [
        line("t-a", Some("sql")),
        line("t-b", Some("chat")),
        line("t-c", Some("sql")),
        line("t-pick", None),
    ];
    let m = dir.path().join("plans.jsonl");
    std::fs::write(&m, lines.join("\n") + "\n").unwrap_or_else(|e| panic!("{e}"));
    let m = m.display().to_string();
    let jsonl = dir.path().join("requests.jsonl").display().to_string();
    let mix = "base=1,sql@base=1,chat@base=1";
    let r = sim.agent(
        "--agent-plans-jsonl {} --model-mix {} --seed 4 --requests-jsonl {}",
        &[&m, mix, &jsonl],
    );
    assert_eq!(r.code, 0);
    let mut by_trajectory: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in read_jsonl(std::path::Path::new(&jsonl)) {
        by_trajectory
            .entry(l["trajectory_id"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .insert(l["model"].as_str().unwrap_or_default().to_owned());
    }
    let one = |t: &str| by_trajectory[t].iter().cloned().collect::<Vec<_>>();
    assert_eq!(one("t-a"), ["sql"], "both conversations of t-a");
    assert_eq!(one("t-b"), ["chat"]);
    assert_eq!(one("t-c"), ["sql"]);
    // The server was sent the same names.
    let mut sent: BTreeMap<String, u64> = BTreeMap::new();
    for q in sim.requests() {
        *sent.entry(q.model.unwrap_or_default()).or_default() += 1;
    }
    assert!(sent["sql"] >= 8 && sent["chat"] >= 4, "{sent:?}");
    // analyze counts each model's requests as the run sent them.
    let mut args = sim.args("--agent-plans-jsonl {} --model-mix {} --seed 4", &[&m, mix]);
    let (code, a) = analyze("batchbench-agent", &args);
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    let predicted: BTreeMap<String, u64> = a["models"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|x| {
            (
                x["model"].as_str().unwrap_or_default().to_owned(),
                x["requests"].as_u64().unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(predicted, sent, "analyze's per-model requests");

    // A model the mix does not have: exit 2, nothing sent (the message,
    // naming the line, trajectory and field, is the run crate's unit test).
    let before = sim.stats().requests;
    args = sim.args(
        "--agent-plans-jsonl {} --model-mix base=1,sql@base=1",
        &[&m],
    );
    let r = batchbench_tests::run_agent(&args);
    assert_eq!(r.code, 2);
    assert_eq!(sim.stats().requests, before, "nothing is sent");
    // An empty model is a broken line.
    std::fs::write(
        dir.path().join("empty.jsonl"),
        line("t-x", Some(" ")) + "\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let empty = dir.path().join("empty.jsonl").display().to_string();
    let r = sim.agent("--agent-plans-jsonl {}", &[&empty]);
    assert_eq!(r.code, 2);
    // Without a mix, every request goes to the run's one model.
    let before = sim.requests().len();
    let r = sim.agent("--agent-plans-jsonl {} --model one", &[&m]);
    assert_eq!(r.code, 0);
    assert!(
        sim.requests()[before..]
            .iter()
            .all(|q| q.model.as_deref() == Some("one"))
    );
}

/// Each model's "own perfect cache" is a cache of its requests alone, as a
/// server's prefix cache does not cross models: with a prefix every prompt
/// shares, each model's first request misses it. The run's figure per model
/// is `analyze`'s, and the models' together are the shared cache's less the
/// prefix once for each model but the first.
#[test]
fn each_models_perfect_cache_is_its_own() {
    let sim = SimServer::start(SimConfig::default(), "qwen");
    let line = "--users 1 --requests-per-user 30 --input-tokens 128 --input-prefix-overlap 0.5 --output-tokens 2 --seed 6 --model-mix a=1,b=1,c=1";
    let r = sim.batchbench(line, &[]);
    assert_eq!(r.code, 0);
    let rows = r.summary("models").as_array().cloned().unwrap_or_default();
    let own: Vec<u64> = rows
        .iter()
        .map(|m| m["estimated_cached_tokens"].as_u64().unwrap_or(u64::MAX))
        .collect();
    let (code, a) = analyze("batchbench", &sim.args(line, &[]));
    assert_eq!(code, 0);
    let a = a.unwrap_or_default();
    let predicted: Vec<u64> = a["models"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| m["cache"]["cached_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(own, predicted, "the run's per-model caches are analyze's");
    // 64 shared tokens: four blocks of 16.
    let shared = r.count("global_estimated_cached_input_tokens");
    assert_eq!(
        own.iter().sum::<u64>(),
        shared - 2 * 64,
        "{own:?} against {shared}"
    );
}

/// A reasoning model that does not report its reasoning tokens: the client
/// counts each reply's reasoning text with the tokenizer of the reply's own
/// model, as the simulator writes each model's replies with that model's.
#[test]
fn reasoning_is_counted_with_the_tokenizer_of_its_model() {
    let sim = SimServer::with_model_tokenizers(
        SimConfig {
            reasoning_tokens: 24,
            omit_reasoning_usage: true,
            ..SimConfig::default()
        },
        "qwen",
        &[("deepseek", "deepseek")],
    );
    let deepseek = tokenizer_path("deepseek").display().to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("requests.jsonl").display().to_string();
    let r = sim.batchbench(
        "--users 4 --requests-per-user 10 --input-tokens 32 --output-tokens 40 --stream --seed 8 --model-mix {} --model-tokenizer {} --requests-jsonl {}",
        &["qwen-base=1,deepseek=1", &format!("deepseek={deepseek}"), &jsonl],
    );
    assert_eq!(r.code, 0);
    let lines = read_jsonl(std::path::Path::new(&jsonl));
    assert_eq!(lines.len(), 40);
    let mut models = BTreeSet::new();
    for l in &lines {
        models.insert(l["model"].as_str().unwrap_or_default().to_owned());
        assert_eq!(l["reasoning_tokens"], 24, "{l}");
        assert_eq!(l["reasoning_counted"], true, "{l}");
    }
    assert_eq!(models.len(), 2, "both models answered");
    // The client's side alone: a server that writes every reply with Qwen's
    // tokenizer, counted with DeepSeek's for the model that has it, differs
    // from 24 (and Qwen's own model's stays 24).
    let qwen_only = SimServer::start(
        SimConfig {
            reasoning_tokens: 24,
            omit_reasoning_usage: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let r = qwen_only.batchbench(
        "--users 4 --requests-per-user 10 --input-tokens 32 --output-tokens 40 --stream --seed 8 --model-mix {} --model-tokenizer {} --requests-jsonl {}",
        &["qwen-base=1,deepseek=1", &format!("deepseek={deepseek}"), &jsonl],
    );
    assert_eq!(r.code, 0);
    let lines = read_jsonl(std::path::Path::new(&jsonl));
    let of = |m: &str| -> Vec<u64> {
        lines
            .iter()
            .filter(|l| l["model"] == m)
            .map(|l| l["reasoning_tokens"].as_u64().unwrap_or(0))
            .collect()
    };
    assert!(of("qwen-base").iter().all(|&n| n == 24));
    assert!(
        of("deepseek").iter().any(|&n| n != 24),
        "{:?}",
        of("deepseek")
    );
}
