//! External plugins end to end: the example WebAssembly and native plugins against
//! the simulator, and hostile plugins that must fail cleanly within a deadline.
//! The plugins are built by `examples/plugins/build.sh`.

use batchbench_tests::process::succeeded;
use batchbench_tests::{SimServer, cmd, plugin_artifact, tokenizer_path};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// No hostile case may take longer than this, start-up included.
const DEADLINE: Duration = Duration::from_secs(60);

struct Outcome {
    code: i32,
    stderr: String,
    elapsed: Duration,
}

/// Runs `batchbench-agent` with `args`, killing it (and failing) if it outlives
/// [`DEADLINE`].
fn agent(args: &[String]) -> Outcome {
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchbench-agent"))
        .args(args)
        .arg("--quiet")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let code = loop {
        if let Some(st) = child.try_wait().unwrap_or_else(|e| panic!("{e}")) {
            break st.code().unwrap_or(-1);
        }
        if t0.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("batchbench-agent {args:?} hung for {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome {
        code,
        stderr: reader.join().unwrap_or_default(),
        elapsed: t0.elapsed(),
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn sample_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/plugins/mooncake-trace/sample-trace.jsonl")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn base(url: &str) -> Vec<String> {
    vec![
        "--host".into(),
        url.into(),
        "--tokenizer-model".into(),
        s(&tokenizer_path("qwen")),
    ]
}

#[test]
fn mooncake_trace_header_router_and_native_reporter_run_end_to_end() {
    let sim = SimServer::recording("qwen");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let trace = sample_trace();
    let records = dir.path().join("requests.jsonl");
    let summary = dir.path().join("summary.json");
    let mut args = base(&sim.url());
    args.extend([
        "--plugin".into(),
        s(&plugin_artifact("mooncake_trace.wasm")),
        "--workload".into(),
        "mooncake_trace".into(),
        "--workload-config".into(),
        json!({"path": trace, "sandbox": {"allow_read": [trace]}}).to_string(),
        "--admission".into(),
        "open-loop".into(),
        "--time-scale".into(),
        "4".into(),
        "--disable-user-tagging".into(),
        "--plugin".into(),
        s(&plugin_artifact("header_router.wasm")),
        "--router".into(),
        "header_router".into(),
        "--router-config".into(),
        json!({"header": "X-SMG-Routing-Key", "value": "tenant-{trajectory_id}", "body_field": "user"})
            .to_string(),
        "--plugin".into(),
        s(&plugin_artifact("jsonl_reporter")),
        "--reporter".into(),
        "jsonl_requests".into(),
        "--reporter-config".into(),
        json!({"path": records}).to_string(),
        "--summary-json".into(),
        s(&summary),
    ]);
    let out = agent(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);

    // Every trace line was sent once, with the wasm router's header and body field.
    let log = sim.requests();
    assert_eq!(log.len(), 8);
    let mut keys: Vec<String> = log
        .iter()
        .map(|r| {
            assert_eq!(r.routing_key, r.user, "header and body field agree");
            r.routing_key.clone().unwrap_or_default()
        })
        .collect();
    keys.sort();
    let want: Vec<String> = (1..=8).map(|i| format!("tenant-line-{i}")).collect();
    assert_eq!(keys, want);

    // The native reporter wrote one line per request; shared hash ids were cache
    // hits on the server: lines 3 and 5 share blocks 0 and 1 with line 1,
    // line 6 shares block 3 with line 2.
    let text = std::fs::read_to_string(&records).unwrap_or_default();
    let by_id: std::collections::BTreeMap<String, Value> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (
                v["trajectory_id"].as_str().unwrap_or_default().to_owned(),
                v,
            )
        })
        .collect();
    assert_eq!(by_id.len(), 8, "{text}");
    let cached = |id: &str| by_id[id]["usage"]["cached_tokens"].as_u64().unwrap_or(0);
    let planned = |id: &str| by_id[id]["planned_prompt_tokens"].as_u64().unwrap_or(0);
    assert_eq!(planned("line-5"), 1900);
    assert_eq!(cached("line-1"), 0);
    assert!(
        cached("line-3") >= 1024,
        "line-3 cached {}",
        cached("line-3")
    );
    assert!(
        cached("line-5") >= 1024,
        "line-5 cached {}",
        cached("line-5")
    );
    assert!(
        cached("line-6") >= 512,
        "line-6 cached {}",
        cached("line-6")
    );

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report["run"]["workload"]["mode"], "mooncake_trace");
    assert_eq!(report["run"]["workload"]["planned_requests"], 8);
    assert!(
        report["summary"]["server_cached_tokens"]
            .as_u64()
            .unwrap_or(0)
            >= 3072
    );
}

/// Runs the hostile workload with `attack` and returns what happened. Nothing may
/// reach the server: the first trajectory is requested before the clock starts.
impl Outcome {
    /// The run failed (exit 1) and said `why` on stderr.
    fn failed_with(&self, why: &str) {
        assert_eq!(self.code, 1, "{}", self.stderr);
        assert!(self.stderr.contains(why), "{why}: {}", self.stderr);
    }
}

fn hostile(config: Value) -> Outcome {
    let sim = SimServer::recording("qwen");
    let mut args = base(&sim.url());
    args.extend([
        "--plugin".into(),
        s(&plugin_artifact("hostile_wasm.wasm")),
        "--workload".into(),
        "hostile_workload".into(),
        "--workload-config".into(),
        config.to_string(),
    ]);
    let out = agent(&args);
    assert_eq!(sim.requests().len(), 0, "{}", out.stderr);
    assert!(
        !out.stderr.contains("sandbox-breached"),
        "the sandbox was breached: {}",
        out.stderr
    );
    out
}

#[test]
fn an_endless_loop_is_stopped_at_its_deadline() {
    let out = hostile(json!({"attack": "loop", "sandbox": {"call_timeout_ms": 300}}));
    out.failed_with("hostile_workload: next_trajectory failed: exceeded its 300 ms deadline");
    assert!(out.elapsed < Duration::from_secs(30), "{:?}", out.elapsed);
}

#[test]
fn a_call_blocked_in_the_host_is_abandoned_at_its_deadline() {
    let out = hostile(json!({"attack": "sleep", "sandbox": {"call_timeout_ms": 300}}));
    out.failed_with("hostile_workload: next_trajectory failed: exceeded its 300 ms deadline (blocked in a host call; the instance was abandoned)");
    assert!(out.elapsed < Duration::from_secs(30), "{:?}", out.elapsed);
}

#[test]
fn a_memory_bomb_is_stopped_at_its_limit() {
    let out = hostile(json!({"attack": "memory", "sandbox": {"memory_mb": 64}}));
    out.failed_with(
        "hostile_workload: next_trajectory failed: exceeded its memory limit of 64 MiB",
    );
}

#[test]
fn files_outside_the_grant_cannot_be_read_and_grants_are_read_only() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let secret = dir.path().join("secret.txt");
    let granted = dir.path().join("granted.txt");
    for f in [&secret, &granted] {
        std::fs::write(f, "password").unwrap_or_else(|e| panic!("{e}"));
    }
    let other = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A granted file does not expose its directory; a granted directory exposes
    // nothing outside it; nothing else is visible at all.
    for (grant, target) in [
        (s(&granted), s(&secret)),
        (s(other.path()), s(&secret)),
        (s(other.path()), "/etc/passwd".to_owned()),
    ] {
        let out = hostile(json!({
            "attack": "read_file",
            "target": target,
            "sandbox": {"allow_read": [grant]},
        }));
        out.failed_with(&format!(
            "hostile_workload: next_trajectory returned an error: cannot read {target}"
        ));
    }
    // What is granted is readable (the Mooncake test reads its trace) but not
    // writable.
    for grant in [s(&granted), s(dir.path())] {
        let out = hostile(json!({
            "attack": "write_file",
            "target": s(&granted),
            "sandbox": {"allow_read": [grant]},
        }));
        out.failed_with("next_trajectory returned an error: cannot write");
    }
    assert_eq!(
        std::fs::read_to_string(&granted).unwrap_or_default(),
        "password"
    );
}

/// Runs the synthetic agents with the hostile router and returns what happened.
fn hostile_router(attack: &str) -> (Outcome, usize) {
    let sim = SimServer::recording("qwen");
    let mut args = base(&sim.url());
    args.extend([
        "--agents".into(),
        "2".into(),
        "--plugin".into(),
        s(&plugin_artifact("hostile_router.wasm")),
        "--router".into(),
        "hostile_router".into(),
        "--router-config".into(),
        json!({"attack": attack, "sandbox": {"call_timeout_ms": 300}}).to_string(),
    ]);
    let out = agent(&args);
    (out, sim.requests().len())
}

#[test]
fn a_router_that_loops_or_does_io_stops_the_run_before_sending() {
    let (out, sent) = hostile_router("loop");
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        sent, 0,
        "a request went out without its router's decoration"
    );
    assert!(
        out.stderr
            .contains("hostile_router: decorate failed: exceeded its 300 ms deadline"),
        "{}",
        out.stderr
    );
    let (out, sent) = hostile_router("log");
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(sent, 0);
    assert!(
        out.stderr.contains(
            "hostile_router: decorate failed: the plugin did I/O (console, files or sockets) on the request path, which a router may not do"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn sockets_cannot_be_opened() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let out = hostile(json!({"attack": "connect", "target": addr.to_string()}));
    out.failed_with(&format!(
        "hostile_workload: next_trajectory returned an error: cannot connect to {addr}"
    ));
    assert!(
        listener.accept().is_err(),
        "the plugin reached a socket it was not granted"
    );
}

#[test]
fn a_panicking_native_plugin_is_contained() {
    let sim = SimServer::recording("qwen");
    let lib = s(&plugin_artifact("hostile_dylib"));
    // A panic while building is caught before anything is sent; a panic in a hook
    // lets the run finish (its results are valid) and fails it at the end.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for (panic_in, sends) in [("on_request", true), ("create", false)] {
        let mut args = base(&sim.url());
        let before = sim.requests().len();
        let summary = dir.path().join(format!("{panic_in}.json"));
        args.extend([
            "--summary-json".into(),
            s(&summary),
            "--agents".into(),
            "2".into(),
            "--plugin".into(),
            lib.clone(),
            "--reporter".into(),
            "panicking_reporter".into(),
            "--reporter-config".into(),
            json!({ "panic_in": panic_in }).to_string(),
        ]);
        let out = agent(&args);
        assert_eq!(out.code, 1, "{panic_in}: {}", out.stderr);
        assert_eq!(sim.requests().len() > before, sends, "{panic_in}");
        // The other reporters still finished: nothing of the run is lost.
        assert_eq!(summary.exists(), sends, "{panic_in}");
        assert!(
            out.stderr.contains("panicking_reporter:")
                && out.stderr.contains("panicked: hostile reporter"),
            "{panic_in}: {}",
            out.stderr
        );
    }
}

/// An external reporter (`lib`, registering `reporter`) that fails the run at
/// its end unless live views came, their counters never fell, and the last
/// one agrees with the summary.
fn external_reporter_hears_live_views(lib: &str, reporter: &str) {
    let sim = SimServer::recording("qwen");
    let mut args = base(&sim.url());
    args.extend([
        "--agents".into(),
        "3".into(),
        "--plugin".into(),
        lib.to_owned(),
        "--reporter".into(),
        reporter.to_owned(),
    ]);
    let out = agent(&args);
    assert_eq!(out.code, 0, "{reporter}: {}", out.stderr);
    assert!(!sim.requests().is_empty());
}

#[test]
fn a_native_reporter_hears_the_live_views_and_the_last_is_the_summary() {
    external_reporter_hears_live_views(&s(&plugin_artifact("hostile_dylib")), "live_check");
}

#[test]
fn a_live_reporter_component_of_contract_1_1_hears_the_live_views() {
    external_reporter_hears_live_views(
        &s(&plugin_artifact("live_reporter.wasm")),
        "wasm_live_check",
    );
}

/// An external routing policy (`lib`, registering `router`) that picks the
/// endpoint its config names: against two servers, index 1 gets every request
/// and index 2 (out of range) is bad input with nothing sent.
fn external_policy_picks(lib: &str, router: &str) {
    let (a, b) = (SimServer::recording("qwen"), SimServer::recording("qwen"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for (endpoint, code) in [(1, 0), (2, 2)] {
        let summary = dir.path().join(format!("{endpoint}.json"));
        let mut args = base(&a.url());
        args.extend([
            "--host".into(),
            b.url(),
            "--summary-json".into(),
            s(&summary),
            "--agents".into(),
            "2".into(),
            "--plugin".into(),
            lib.to_owned(),
            "--router".into(),
            router.to_owned(),
            "--router-config".into(),
            json!({ "endpoint": endpoint }).to_string(),
        ]);
        let before = b.requests().len();
        let out = agent(&args);
        assert_eq!(out.code, code, "{router} {endpoint}: {}", out.stderr);
        assert!(a.requests().is_empty(), "{router} {endpoint}");
        if code == 0 {
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&summary).unwrap_or_default())
                    .unwrap_or_default();
            assert_eq!(doc["summary"]["routing"], router);
            assert_eq!(
                doc["summary"]["endpoints"][1]["requests"],
                b.requests().len() as u64
            );
            assert!(b.requests().len() > before);
        } else {
            assert!(
                out.stderr.contains(router) && out.stderr.contains("chose endpoint 2"),
                "{}",
                out.stderr
            );
            assert_eq!(b.requests().len(), before, "{router}: nothing sent");
        }
    }
}

#[test]
fn a_native_routing_policy_picks_the_endpoint_and_one_out_of_range_sends_nothing() {
    external_policy_picks(&s(&plugin_artifact("hostile_dylib")), "fixed_endpoint");
}

#[test]
fn a_component_of_contract_1_1_picks_the_endpoint_and_1_0_components_still_load() {
    external_policy_picks(
        &s(&plugin_artifact("fleet_router.wasm")),
        "wasm_fixed_endpoint",
    );
    // A 1.0.0 router decorates as before and picks nothing: with two hosts
    // the run's own default policy routes.
    let (a, b) = (SimServer::recording("qwen"), SimServer::recording("qwen"));
    let mut args = base(&a.url());
    args.extend([
        "--host".into(),
        b.url(),
        "--agents".into(),
        "2".into(),
        "--plugin".into(),
        s(&plugin_artifact("hostile_router.wasm")),
        "--router".into(),
        "hostile_router".into(),
    ]);
    let out = agent(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!a.requests().is_empty() && !b.requests().is_empty());
}

#[test]
fn a_library_of_another_abi_version_is_refused() {
    let sim = SimServer::recording("qwen");
    let lib = plugin_artifact("other_abi");
    let mut args = base(&sim.url());
    args.extend(["--plugin".into(), s(&lib)]);
    let out = agent(&args);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!(
            "cannot load plugin {}: built for plugin ABI version 999, but this batchbench speaks version 1",
            s(&lib)
        )),
        "{}",
        out.stderr
    );
    assert!(sim.requests().is_empty());
}

#[test]
#[cfg(unix)]
fn a_grant_is_readable_under_the_path_as_written_through_a_symbolic_link() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(sample_trace(), real.join("trace.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
    let trace = link.join("trace.jsonl");
    for grant in [trace.clone(), link.clone()] {
        let out = agent(&[
            "--host".into(),
            "sim://".into(),
            "--dry-run".into(),
            "--plugin".into(),
            s(&plugin_artifact("mooncake_trace.wasm")),
            "--workload".into(),
            "mooncake_trace".into(),
            "--workload-config".into(),
            json!({"path": trace, "sandbox": {"allow_read": [grant]}}).to_string(),
        ]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stderr.contains("dry run: 8 trajectories, 8 requests"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn a_workload_plugin_and_a_manifest_are_not_combined() {
    let out = agent(&[
        "--host".into(),
        "sim://".into(),
        "--workload".into(),
        "clickhouse".into(),
        "--agent-plans-jsonl".into(),
        "plans.jsonl".into(),
    ]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("--workload and --agent-plans-jsonl are two workloads: give one"),
        "{}",
        out.stderr
    );
}

/// `analyze` reads a workload plugin like a run: the Mooncake example trace.
#[test]
fn the_mooncake_example_trace_is_analysed_through_its_plugin() {
    let plugin = plugin_artifact("mooncake_trace.wasm");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let trace =
        std::fs::canonicalize(root.join("examples/plugins/mooncake-trace/sample-trace.jsonl"))
            .unwrap_or_else(|e| panic!("{e}"));
    let t = trace.display().to_string();
    let cfg = json!({"path": t, "sandbox": {"allow_read": [t]}}).to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("a.json");
    let args = cmd(
        "analyze --json {} --plugin {} --workload mooncake_trace --workload-config {} --cache-block-tokens 512",
        &[
            out.to_str().unwrap_or_default(),
            plugin.to_str().unwrap_or_default(),
            &cfg,
        ],
    );
    let o = Command::new(env!("CARGO_BIN_EXE_batchbench-agent"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    succeeded(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("longest shared prefixes"));
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}"));
    let rows = std::fs::read_to_string(&trace).unwrap_or_default();
    assert_eq!(a["requests"], rows.lines().count());
    // With blocks of the trace's own size, the ideal hit is the hash ids seen
    // before, in order, as the trace lists them.
    let mut seen = std::collections::HashSet::new();
    let mut want = 0u64;
    for l in rows.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_default();
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let input = v["input_length"].as_u64().unwrap_or(0);
        let full = (input / 512) as usize;
        let mut hit = true;
        let mut prefix = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            prefix.push(*id);
            if i < full && hit && seen.contains(&prefix) {
                want += 512;
            } else {
                hit = false;
            }
            if i < full {
                seen.insert(prefix.clone());
            }
        }
    }
    assert_eq!(a["global"]["cached_tokens"], want, "{a}");
}
