//! Structured outputs on the simulator: answers asked for in each API's own
//! field, every answer validated against its schema, the valid share with
//! its interval, a gate on it, and bad input refused before anything is sent.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, read_jsonl, refused_batchbench, run_batchbench};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Two schemas: strings from an enum or bounded by `maxLength`, a boolean,
/// an array of bounded items and a bounded integer.
pub(crate) fn schemas(dir: &std::path::Path) -> String {
    let pet = batchbench_tests::pet_schema();
    let order = json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3},
            "total": {"type": "integer", "minimum": 1, "maximum": 500},
        },
        "required": ["items", "total"],
    });
    let mut paths = Vec::new();
    for (name, schema) in [("pet", pet), ("order", order)] {
        let p = dir.join(format!("{name}.json"));
        std::fs::write(&p, schema.to_string()).unwrap_or_else(|e| panic!("{e}"));
        paths.push(p.display().to_string());
    }
    paths.join(",")
}

#[test]
fn every_answer_is_validated_and_the_valid_share_has_its_interval() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = schemas(dir.path());
    let sim = SimServer::start(
        SimConfig {
            invalid_json_rate: 0.1,
            ..SimConfig::default()
        },
        "qwen",
    );
    for (codec, stream) in [
        ("openai_chat", ""),
        ("openai_chat", "--stream"),
        ("openai_responses", "--stream"),
        ("sglang_generate", ""),
    ] {
        let what = format!("{codec} {stream}");
        let lines = dir.path().join("requests.jsonl");
        let r = sim.batchbench(
            &format!("--codec {{}} {stream} --users 4 --requests-per-user 100 --input-tokens 32 --output-tokens 96 --seed 11 --response-format {{}} --requests-jsonl {{}}"),
            &[codec, &format!("json_schema:{files}"), &lines.display().to_string()],
        );
        assert_eq!(r.code, 0, "{what}");
        let s = r.summary("structured");
        assert_eq!(s["format"], "json_schema", "{what}: {s}");
        assert_eq!(s["schemas"], json!(["pet", "order"]), "{what}: {s}");
        assert_eq!(s["checked"], 400, "{what}: {s}");
        // One answer in ten is broken, drawn per request: the interval of
        // the share holds the rate, and every invalid answer is not JSON.
        let share = s["valid_share"].as_f64().unwrap_or(0.0);
        let ci = &s["valid_share_ci"];
        let (lo, hi) = (ci[0].as_f64().unwrap_or(1.0), ci[1].as_f64().unwrap_or(0.0));
        assert!(
            lo <= 0.9 && 0.9 <= hi && lo < share && share < hi,
            "{what}: {s}"
        );
        assert_eq!(
            s["invalid"]["not_json"].as_u64(),
            Some(400 - s["valid"].as_u64().unwrap_or(0)),
            "{what}: {s}"
        );
        // Each request names its schema, in rotation, and its verdict.
        let mut per_schema = [0u64; 2];
        for l in read_jsonl(&lines) {
            let k = l["structured_schema"].as_u64().unwrap_or(9) as usize;
            let rotation = (l["agent_id"].as_u64().unwrap_or(0)
                + l["request_index"].as_u64().unwrap_or(0))
                % 2;
            assert_eq!(k as u64, rotation, "{what}: {l}");
            per_schema[k] += 1;
            match l.get("structured_invalid") {
                None => {}
                Some(v) => assert_eq!(v, "not_json", "{what}: {l}"),
            }
        }
        assert_eq!(per_schema, [200, 200], "{what}");
        // The CSV has the share.
        let row = r
            .csv
            .first()
            .unwrap_or_else(|| panic!("{what}: no CSV row"));
        assert_eq!(
            row.get("response_format").map(String::as_str),
            Some("json_schema")
        );
        assert_eq!(
            row.get("structured_valid_share")
                .and_then(|v| v.parse::<f64>().ok()),
            Some(share),
            "{what}"
        );
    }
}

#[test]
fn a_schema_run_sends_its_format_and_no_forced_length() {
    // A server that answers every request with one valid answer, keeping
    // the bodies it was sent.
    let bodies: Arc<Mutex<Vec<Value>>> = Arc::default();
    let kept = bodies.clone();
    let addr = batchbench_tests::http::serve(move |req| {
        if let Ok(v) = serde_json::from_slice::<Value>(&req.body) {
            kept.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(v);
        }
        let body = json!({
            "id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "{\"kind\": \"cat\", \"name\": \"Tom\", \"friendly\": true}"}}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
        });
        ("200 OK", "application/json", body.to_string().into_bytes())
    });
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = schemas(dir.path());
    let pet = files.split(',').next().unwrap_or_default().to_owned();
    let tok = batchbench_tests::tokenizer_path("qwen")
        .display()
        .to_string();
    let r = run_batchbench(&cmd(
        "--host {} --tokenizer-model {} --users 1 --requests-per-user 3 --input-tokens 32 --output-tokens 64 --response-format {}",
        &[
            &format!("http://{addr}"),
            &tok,
            &format!("json_schema:{pet}"),
        ],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(r.summary("structured")["valid"], 3);
    let bodies = bodies
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!(bodies.len(), 3);
    for b in bodies.iter() {
        assert_eq!(b["response_format"]["type"], "json_schema", "{b}");
        assert_eq!(b["response_format"]["json_schema"]["name"], "pet", "{b}");
        assert_eq!(
            b["response_format"]["json_schema"]["schema"]["required"][0], "kind",
            "{b}"
        );
        // The cap, and nothing that forces the answer past its JSON.
        assert_eq!(b["max_tokens"], 64, "{b}");
        assert!(
            b.get("min_tokens").is_none() && b.get("ignore_eos").is_none(),
            "{b}"
        );
    }
}

#[test]
fn a_gate_fails_a_run_whose_valid_share_fell() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let files = schemas(dir.path());
    let mut outs = Vec::new();
    for (i, rate) in ["0", "0.2"].into_iter().enumerate() {
        let out = dir.path().join(format!("run-{i}"));
        let r = run_batchbench(&cmd(
            "--host {} --tokenizer-model {} --users 2 --requests-per-user 50 --input-tokens 32 --output-tokens 96 --seed 5 --response-format {} --output-dir {}",
            &[
                &format!("sim://?invalid-json-rate={rate}"),
                &batchbench_tests::tokenizer_path("qwen")
                    .display()
                    .to_string(),
                &format!("json_schema:{files}"),
                &out.display().to_string(),
            ],
        ));
        assert_eq!(r.code, 0);
        outs.push(out.display().to_string());
    }
    let compare = |a: &str, b: &str| {
        batchbench_run::commands::batchbench::run(
            [
                "batchbench",
                "compare",
                a,
                b,
                "--fail-if",
                "structured_valid_share<-5%",
            ]
            .map(std::ffi::OsString::from)
            .to_vec(),
        )
    };
    assert_eq!(compare(&outs[0], &outs[0]), 0, "the same run passes");
    // The report's summary table says it too.
    let page = dir.path().join("report.html");
    let code = batchbench_run::commands::batchbench::run(
        [
            "batchbench",
            "report",
            &outs[1],
            "-o",
            &page.display().to_string(),
        ]
        .map(std::ffi::OsString::from)
        .to_vec(),
    );
    assert_eq!(code, 0);
    let html = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        html.contains("structured outputs valid"),
        "a row of its own"
    );
    assert!(
        html.contains("invalid: not_json"),
        "and why the rest failed"
    );
    assert_eq!(
        compare(&outs[0], &outs[1]),
        1,
        "a fifth of the answers broken fails"
    );
}

#[test]
fn bad_formats_are_refused_naming_the_file_or_flag() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let not_json = dir.path().join("broken.json");
    std::fs::write(&not_json, "{\"type\": \"object\",\n  oops}").unwrap_or_else(|e| panic!("{e}"));
    let not_schema = dir.path().join("weird.json");
    std::fs::write(&not_schema, r#"{"type": "no-such-type"}"#).unwrap_or_else(|e| panic!("{e}"));
    let fine = schemas(dir.path());
    let fine = fine.split(',').next().unwrap_or_default().to_owned();
    let missing = dir.path().join("missing.json").display().to_string();
    let sim = SimServer::start(SimConfig::default(), "qwen");
    for (extra, expect) in [
        (
            format!("--response-format json_schema:{}", not_json.display()),
            "line 2, column 3: not JSON",
        ),
        (
            format!("--response-format json_schema:{}", not_schema.display()),
            "weird.json: not a valid JSON Schema",
        ),
        (
            format!("--response-format json_schema:{missing}"),
            "missing.json",
        ),
        (
            "--response-format yaml".to_owned(),
            "is not a response format",
        ),
        (
            format!("--response-format json_schema:{fine} --ignore-eos"),
            "--ignore-eos",
        ),
    ] {
        let line = format!("--users 1 --requests-per-user 1 {extra}");
        let msg = refused_batchbench(&sim.args(&line, &[]));
        assert!(msg.contains(expect), "{extra}: {msg}");
    }
    // An API without structured outputs: refused once its codec is built.
    let r = run_batchbench(&sim.args(
        &format!("--users 1 --requests-per-user 1 --codec anthropic_messages --response-format json_schema:{fine}"),
        &[],
    ));
    assert_eq!(r.code, 2);
    assert!(sim.requests().is_empty(), "nothing was sent");
}
