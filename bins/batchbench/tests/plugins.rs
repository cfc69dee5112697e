//! External plugins through the `batchbench` command: listing, and a run whose
//! workload, router and reporter are all loaded at run time. The plugins are built
//! by `examples/plugins/build.sh`.

use batchbench_tests::process::succeeded;
use batchbench_tests::{SimServer, plugin_artifact, tokenizer_path};
use serde_json::{Value, json};
use std::process::{Command, Output, Stdio};

fn run(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_batchbench"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn s(p: &std::path::Path) -> String {
    p.display().to_string()
}

#[test]
fn plugins_lists_builtins_and_loaded_plugins_with_their_origin() {
    let wasm = plugin_artifact("header_router.wasm");
    let lib = plugin_artifact("jsonl_reporter");
    let o = run(&[
        "plugins".into(),
        "--json".into(),
        "--plugin".into(),
        s(&wasm),
        "--plugin".into(),
        s(&lib),
    ]);
    succeeded(&o);
    let list: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let find = |kind: &str, name: &str| {
        list.iter()
            .find(|p| p["kind"] == kind && p["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} is not listed"))
            .clone()
    };
    assert_eq!(find("router", "user_tag")["origin"], "built-in");
    assert_eq!(find("workload", "finite_batch")["origin"], "built-in");
    let h = find("router", "header_router");
    assert_eq!(h["origin"], s(&wasm));
    assert!(h["description"].as_str().unwrap_or("").contains("template"));
    serde_json::from_str::<Value>(h["example"].as_str().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(find("reporter", "jsonl_requests")["origin"], s(&lib));
    assert_eq!(find("router", "static_header")["origin"], s(&lib));

    // The table form names the file too.
    let o = run(&["plugins".into(), "--plugin".into(), s(&wasm)]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("from: {}", s(&wasm))), "{text}");
}

#[test]
fn a_run_of_loaded_plugins_only() {
    let sim = SimServer::recording("qwen");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/mooncake-trace/sample-trace.jsonl")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let records = dir.path().join("requests.jsonl");
    let o = run(&[
        "--host".into(),
        sim.url(),
        "--tokenizer-model".into(),
        s(&tokenizer_path("qwen")),
        "--quiet".into(),
        "--users".into(),
        "2".into(),
        "--plugin".into(),
        s(&plugin_artifact("mooncake_trace.wasm")),
        "--workload".into(),
        "mooncake_trace".into(),
        "--workload-config".into(),
        json!({"path": trace, "limit": 4, "sandbox": {"allow_read": [trace]}}).to_string(),
        "--plugin".into(),
        s(&plugin_artifact("jsonl_reporter")),
        "--router".into(),
        "static_header".into(),
        "--router-config".into(),
        json!({"header": "X-SMG-Routing-Key", "value": "native"}).to_string(),
        "--reporter".into(),
        "jsonl_requests".into(),
        "--reporter-config".into(),
        json!({"path": records}).to_string(),
    ]);
    succeeded(&o);
    let log = sim.requests();
    assert_eq!(log.len(), 4);
    assert!(
        log.iter()
            .all(|r| r.routing_key.as_deref() == Some("native"))
    );
    let lines = std::fs::read_to_string(&records).unwrap_or_default();
    assert_eq!(lines.lines().count(), 4);

    // Synthetic-shape flags do not mix with a workload plugin; configs pair with
    // their plugin.
    let o = run(&[
        "--host".into(),
        "sim://".into(),
        "--workload".into(),
        "mooncake_trace".into(),
        "--input-tokens".into(),
        "10".into(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "--workload mooncake_trace replaces the synthetic users: drop --input-tokens"
        )
    );
    let o = run(&[
        "--host".into(),
        "sim://".into(),
        "--router-config".into(),
        "{}".into(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("1 --router-config values for 0 --router plugins")
    );
    let o = run(&[
        "--host".into(),
        "sim://".into(),
        "--router".into(),
        "nope".into(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no router plugin named 'nope'"));
}
