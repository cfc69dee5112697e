//! The report formats are pinned: the CSV header and row and the JSON summary of
//! fixed-seed simulator runs of both commands, with measured times and machine
//! paths masked (`<t>` for a measured figure, `<sim>`, `<tokenizer>`, `<tmp>`).
//! The files under `tests/golden/` are the contract; an intended change re-records
//! them with `BATCHBENCH_BLESS=1 cargo test -p batchbench-tests --test e2e snapshots`.
//! Every CSV column is filled unless the shape of the run leaves it empty by
//! design (listed per scenario): a column that silently lost its value fails here.

use batchbench_tests::{SimServer, cmd, run_agent, run_batchbench, tokenizer_path, words};
use serde_json::Value;
use std::path::Path;

/// Whether a field (CSV column or JSON key) holds a measured figure that varies
/// from run to run.
fn is_measured(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "timestamp",
        "started_unix",
        "p50_ms",
        "p90_ms",
        "p99_ms",
        "mean_ms",
        "max_ms",
        "count",
    ];
    EXACT.contains(&key)
        || key.ends_with("_ms") && !key.starts_with("tool_call_latency") && key != "retry_delay_ms"
        || key.ends_with("_seconds") && key != "request_timeout_secs"
        || key.ends_with("_per_second")
        || key == "max_active_observed"
        || key == "late_admissions"
        || key == "max_active_agents"
        || key == "effective_count"
        || key == "batches"
        || key.ends_with("busy_share")
        || key == "cpu_share"
        || is_interval(key)
}

/// Whether a CSV column is a 95% interval's bound: empty where the figure has
/// too few samples for a bound on both sides, which the scenario's size
/// decides (the JSON snapshot pins which).
fn is_interval(key: &str) -> bool {
    key.ends_with("_ci_low") || key.ends_with("_ci_high")
}

fn mask_str(s: &str, subs: &[(&str, &str)]) -> String {
    let mut out = s.to_owned();
    for (from, to) in subs {
        if !from.is_empty() {
            out = out.replace(from, to);
        }
    }
    out
}

fn mask_json(v: &mut Value, key: &str, subs: &[(&str, &str)]) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                mask_json(x, k, subs);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| mask_json(x, key, subs)),
        Value::Number(_) if is_measured(key) => *v = Value::String("<t>".into()),
        Value::String(s) if key == "timestamp" => *s = "<t>".into(),
        Value::String(s) => *s = mask_str(s, subs),
        _ => {}
    }
}

fn check(name: &str, got: &str) {
    batchbench_tests::check_snapshot(name, got);
}

/// Runs one scenario and checks its CSV and JSON snapshots; `empty` lists the
/// columns this shape leaves empty by design. Every scenario is a closed loop:
/// the load model's columns are empty too, and so are the SLO's (none is given),
/// the server timings' (the simulator reports none without --stamps) and the
/// energy's (no GPU exporter is scraped).
fn snapshot<S: AsRef<str>>(name: &str, agent: bool, flags: &[S], empty: &[&str]) {
    let flags: Vec<&str> = flags.iter().map(AsRef::as_ref).collect();
    let flags = flags.as_slice();
    // No request is retried and the simulator reports no timings of its own
    // (it does with --stamps): those figures stay empty.
    use batchbench_run::view::{ENERGY_COLUMNS, LOAD_COLUMNS, SLO_COLUMNS, TRUTH_COLUMNS, names};
    let truthful = names(TRUTH_COLUMNS).into_iter().filter(|c| {
        c.starts_with("latency_all_attempts")
            || c.starts_with("server_p")
            || c.starts_with("client_minus_server")
    });
    // The simulator does not reason here: the reasoning figures stay empty
    // (the time to first answer token is the TTFT, where a run streams).
    let unreasoned = [
        "reasoning_duration_p50_ms",
        "reasoning_duration_p99_ms",
        "total_reasoning_tokens",
        "reasoning_tokens_source",
        "total_answer_tokens",
        "tpot_reasoning_p50_ms",
        "tpot_reasoning_p99_ms",
        "tpot_answer_p50_ms",
        "tpot_answer_p99_ms",
        "itl_reasoning_p50_ms",
        "itl_reasoning_p99_ms",
        "itl_answer_p50_ms",
        "itl_answer_p99_ms",
    ];
    // No response format was asked for.
    let free_text = [
        "response_format",
        "structured_checked",
        "structured_valid_share",
        "structured_valid_share_ci_low",
        "structured_valid_share_ci_high",
        // One model: no mix.
        "models",
    ];
    let closed_loop = ["request_rate", "session_rate"]
        .into_iter()
        .chain(names(LOAD_COLUMNS))
        .chain(names(SLO_COLUMNS))
        // No GPU exporter is scraped.
        .chain(names(ENERGY_COLUMNS))
        .chain(truthful)
        .chain(unreasoned)
        .chain(free_text)
        // The client was not the limit of these short runs; a closed loop
        // has no load report, so none of its arrivals waited too long.
        .chain(["client_bound", "dropped_waiting"]);
    let empty: Vec<&str> = empty.iter().copied().chain(closed_loop).collect();
    let empty = empty.as_slice();
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = tokenizer_path("qwen").display().to_string();
    let mut args = vec!["--host", &url, "--tokenizer-model", &tok];
    args.extend_from_slice(flags);
    let r = if agent {
        run_agent(&args)
    } else {
        run_batchbench(&args)
    };
    assert_eq!(r.code, 0, "{name}");
    let tmp = std::env::temp_dir().display().to_string();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let out_dir = r
        .csv_path
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let subs = [
        (out_dir.as_str(), "<out>"),
        (url.as_str(), "<sim>"),
        (tok.as_str(), "<tokenizer>"),
        (repo.as_str(), "<repo>"),
        (tmp.as_str(), "<tmp>"),
    ];

    let row = r
        .csv
        .first()
        .unwrap_or_else(|| panic!("{name}: no CSV row"));
    let text = std::fs::read_to_string(&r.csv_path).unwrap_or_default();
    let header: Vec<&str> = text.lines().next().unwrap_or_default().split(',').collect();
    let mut csv = format!("{}\n", header.join(","));
    for col in &header {
        let v = row.get(*col).map_or("", String::as_str);
        let shown = if v.is_empty() {
            assert!(
                empty.contains(col) || is_interval(col),
                "{name}: CSV column {col} is empty (a promised column lost its value)"
            );
            String::new()
        } else if is_measured(col) {
            assert!(
                !empty.contains(col),
                "{name}: {col} is listed empty but has {v}"
            );
            "<t>".into()
        } else {
            assert!(
                !empty.contains(col),
                "{name}: {col} is listed empty but has {v}"
            );
            mask_str(v, &subs)
        };
        csv.push_str(&format!("{col}={shown}\n"));
    }
    check(&format!("{name}.csv.snap"), &csv);

    let mut json = r.json.clone().unwrap_or_else(|| panic!("{name}: no JSON"));
    // Whether other work on this machine ran the client late is the
    // machine's, not the run's.
    if let Some(c) = json["summary"]["client"].as_object_mut() {
        c.remove("note");
    }
    mask_json(&mut json, "", &subs);
    let text = serde_json::to_string_pretty(&json).unwrap_or_default() + "\n";
    check(&format!("{name}.json.snap"), &text);
}

#[test]
fn batchbench_csv_and_json_are_pinned() {
    snapshot(
        "batchbench",
        false,
        &words(
            "--users 2 --requests-per-user 3 --input-tokens 32 --output-tokens 4 --stream --seed 21",
        ),
        &[
            "dataset_path",
            "dataset_size",
            "output_lognorm_mu",
            "output_lognorm_sigma",
            "output_lognorm_max",
            "input_lognorm_mu",
            "input_lognorm_sigma",
            "input_lognorm_max",
            "failures_by_kind",
            "rank_estimated_cached_input_tokens",
        ],
    );
}

#[test]
fn batchbench_lognormal_csv_and_json_are_pinned() {
    snapshot(
        "batchbench-lognormal",
        false,
        &words(
            "--users 2 --requests-per-user 2 --input-lognorm-median 40 --input-lognorm-sigma 0.2 --input-lognorm-max 60 --output-lognorm-mu 1.5 --output-lognorm-sigma 0.3 --output-lognorm-max 9 --seed 22",
        ),
        &[
            "dataset_path",
            "dataset_size",
            "output_tokens",
            "failures_by_kind",
            "rank_estimated_cached_input_tokens",
            "ttft_p50_ms",
            "ttft_p90_ms",
            "ttft_p99_ms",
            "itl_p50_ms",
            "itl_p90_ms",
            "itl_p99_ms",
            "tpot_p50_ms",
            "tpot_p90_ms",
            "tpot_p99_ms",
            "ttfat_p50_ms",
            "ttfat_p90_ms",
            "ttfat_p99_ms",
        ],
    );
}

#[test]
fn agent_csv_and_json_are_pinned() {
    snapshot(
        "agent",
        true,
        &words(
            "--agents 2 --tool-invocations 3 --input-tokens 48 --environment-tokens 16 --output-tokens 4 --tool-call-latency-ms 2 --dp-rank-perfect-routing --dp-rank-perfect-routing-num 2 --stream --seed 23",
        ),
        &[
            "agent_plans_jsonl",
            "agent_plans_sha256",
            "trajectory_schema_version",
            "requested_max_active_agents",
            "replay_initial_overhead_tokens",
            "replay_turn_overhead_tokens",
            "agent_events_jsonl",
            "tool_call_latency_lognorm_mu",
            "tool_call_latency_lognorm_median_ms",
            "tool_call_latency_lognorm_sigma",
            "tool_call_latency_lognorm_max_ms",
            "failures_by_kind",
        ],
    );
}

#[test]
fn agent_replay_csv_and_json_are_pinned() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/trajectory-replay/plans-v2.jsonl")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let m = manifest.display().to_string();
    snapshot(
        "agent-replay",
        true,
        &cmd(
            "--agent-plans-jsonl {} --admission open-loop --time-scale 20 --seed 24",
            &[&m],
        ),
        &[
            "requested_max_active_agents",
            "dp_rank_perfect_routing_num",
            "agent_events_jsonl",
            "tool_call_latency_ms",
            "tool_call_latency_lognorm_mu",
            "tool_call_latency_lognorm_median_ms",
            "tool_call_latency_lognorm_sigma",
            "tool_call_latency_lognorm_max_ms",
            "failures_by_kind",
            "rank_estimated_cached_input_tokens",
        ],
    );
}
