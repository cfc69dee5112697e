//! `batchbench export --format llm-d`: the report of a simulator run and of an
//! open-loop agent run validated by the schema's own package
//! (`llmd-benchmark-report` from PyPI).
//!
//! The first run scrapes the simulator's own metrics and a DCGM exporter (the
//! recorded page of `tests/golden/dcgm-exporter.prom`, its energy counters
//! rising), so that `results.observability` is filled and validated too.
//!
//! Ignored by default (it needs that package): `.ci/run` runs it with
//! `BATCHBENCH_LLMD_PYTHON` naming a Python that has it (`.ci/llmd.sh python`).

use batchbench_tests::{cmd, http, tokenizer_path};
use std::path::Path;
use std::process::{Command, Stdio};

fn run<S: AsRef<str>>(program: &str, args: &[S]) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let exe = Path::new(env!("CARGO_BIN_EXE_batchbench"));
    // The multi-call executable runs the agent under that name.
    let o = if program == "batchbench-agent" {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let link = tmp.path().join("batchbench-agent");
        std::os::unix::fs::symlink(exe, &link).unwrap_or_else(|e| panic!("{e}"));
        Command::new(&link).args(args).stdin(Stdio::null()).output()
    } else {
        Command::new(exe).args(args).stdin(Stdio::null()).output()
    }
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        o.status.success(),
        "{program} {args:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

fn validate(python: &str, file: &Path) -> String {
    let o = Command::new(python)
        .arg("-c")
        .arg(
            "import sys\n\
             from llmd_benchmark_report import import_benchmark_report\n\
             r = import_benchmark_report(sys.argv[1])\n\
             a = r.results.request_performance.aggregate\n\
             print(r.version, a.requests.total, a.requests.failures, a.latency.request_latency.p99, r.scenario.load.standardized.tool)\n",
        )
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        o.status.success(),
        "{} does not validate:\n{}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// `results.observability` of `file` as the schema package reads it, as JSON.
fn observability(python: &str, file: &Path) -> serde_json::Value {
    let o = Command::new(python)
        .arg("-c")
        .arg(
            "import sys, json\n\
             from llmd_benchmark_report import import_benchmark_report\n\
             r = import_benchmark_report(sys.argv[1])\n\
             print(json.dumps(r.results.observability.model_dump(mode='json', exclude_none=True)))\n",
        )
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
#[ignore = "needs the llmd-benchmark-report package: .ci/run runs it"]
fn llm_d_reports_of_a_run_and_an_agent_run_validate_with_the_schema_package() {
    let python = std::env::var("BATCHBENCH_LLMD_PYTHON").unwrap_or_else(|_| "python3".into());
    let tok = tokenizer_path("qwen").display().to_string();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run_dir = tmp.path().join("run").display().to_string();
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/dcgm-exporter.prom"),
    )
    .unwrap_or_else(|e| panic!("the recorded DCGM page: {e}"));
    // 512 W and 398 W, the page's power, as energy counters in mJ.
    let exporter = http::serve_metrics(move |t| {
        page.replace(
            "98231447121",
            &format!("{}", 98_231_447_121 + (t * 512_347.0) as u64),
        )
        .replace(
            "87110093004",
            &format!("{}", 87_110_093_004 + (t * 398_112.0) as u64),
        )
    });
    run(
        "batchbench",
        &cmd(
            "--quiet --host sim://?decode-ms-per-token=1&fault-rate=0.1 --max-retries 0 --max-failure-rate 0.9 --tokenizer-model {} --users 4 --requests-per-user 10 --input-tokens 32 --input-vary 16 --output-tokens 8 --stream --server-metrics target --server-metrics {} --metrics-interval 0.1 --output-dir {}",
            &[&tok, &exporter, &run_dir],
        ),
    );
    let yaml = tmp.path().join("run.yaml");
    run(
        "batchbench",
        &cmd(
            "export --format llm-d {} -o {}",
            &[&run_dir, &yaml.display().to_string()],
        ),
    );
    let got = validate(&python, &yaml);
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(Path::new(&run_dir).join("run.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let s = &summary["summary"];
    let want = format!("0.2.1 {} {}", s["total_requests"], s["failed_requests"]);
    assert!(got.starts_with(&want), "{got} vs {want}");
    // The p99 in seconds is the summary's, in milliseconds.
    let p99: f64 = got
        .split_whitespace()
        .nth(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let want_p99 = s["latency"]["p99_ms"].as_f64().unwrap_or(f64::NAN) / 1000.0;
    assert!((p99 - want_p99).abs() < 1e-9, "{p99} vs {want_p99}");
    assert!(got.ends_with("batchbench"), "{got}");
    // The server's and the GPUs' series are in `observability`, as the
    // schema package reads it: every common name, and the schema's own
    // resource metrics per URL and per GPU.
    let obs = observability(&python, &yaml);
    for name in [
        "gpu_power_watts",
        "gpu_energy_joules",
        "gpu_utilization",
        "gpu_memory_used_bytes",
        "sm_clock_mhz",
        "gpu_temperature_c",
        "gpu_xid_error",
        "gpu_power_watts{gpu=\"1\"}",
        "requests_running",
    ] {
        assert!(
            obs[name]["components"][0]["time_series"]
                .as_array()
                .is_some_and(|s| !s.is_empty()),
            "{name}: {obs}"
        );
    }
    let components = obs["components"].as_array().cloned().unwrap_or_default();
    let of = |label: &str, replica: Option<&str>| {
        components
            .iter()
            .find(|c| c["component_label"] == label && c["replica_id"].as_str() == replica)
            .unwrap_or_else(|| panic!("no component {label} {replica:?}: {obs}"))
            .clone()
    };
    let gpus = of(&exporter, None);
    let power = &gpus["aggregate"]["power_consumption"];
    assert_eq!(power["units"], "Watts");
    // 512.347 W and 398.112 W, summed.
    assert!(
        (power["mean"].as_f64().unwrap_or_default() - 910.459).abs() < 1e-6,
        "{power}"
    );
    assert!(gpus["time_series"]["gpu_memory_usage"]["series"][0]["value"].as_f64() > Some(1e9));
    let gpu1 = of(&exporter, Some("gpu 1"));
    assert!(
        (gpu1["aggregate"]["power_consumption"]["max"]
            .as_f64()
            .unwrap_or_default()
            - 398.112)
            .abs()
            < 1e-6
    );
    // The simulator's own page: the other URL scraped.
    let server = components
        .iter()
        .find(|c| c["component_label"] != exporter.as_str())
        .unwrap_or_else(|| panic!("no component for the simulator: {obs}"));
    assert_eq!(
        server["aggregate"]["running_requests"]["units"], "count",
        "{server}"
    );
    assert!(server.get("replica_id").is_none());
    assert_eq!(obs["gpu_energy"]["source"], "counter", "{obs}");

    let agent_dir = tmp.path().join("agents").display().to_string();
    run(
        "batchbench-agent",
        &cmd(
            "--quiet --host sim://?reasoning-tokens=8 --tokenizer-model {} --agents 3 --tool-invocations 3 --input-tokens 64 --environment-tokens 16 --output-tokens 12 --session-rate 20 --stream --output-dir {}",
            &[&tok, &agent_dir],
        ),
    );
    let yaml = tmp.path().join("agents.yaml");
    run(
        "batchbench",
        &cmd(
            "export --format llm-d {} -o {}",
            &[&agent_dir, &yaml.display().to_string()],
        ),
    );
    let got = validate(&python, &yaml);
    assert!(got.starts_with("0.2.1 9 0"), "{got}");
    let text = std::fs::read_to_string(&yaml).unwrap_or_default();
    assert!(
        text.contains("\"multi_turn\":") && text.contains("\"rate_qps\": 20.0"),
        "{text}"
    );
    // Its replies reasoned: the description says where the answer began.
    assert!(
        text.contains("the first answer token (TTFAT, no field in schema 0.2.1) came at p50"),
        "{text}"
    );
}
