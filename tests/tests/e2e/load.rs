//! The load model end to end against the simulator: a rate changes when
//! requests are released, never what they are; warmup, duration, stages and the
//! concurrency queue; bad load flags are exit 2 with nothing sent.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, qwen, read_jsonl, run_agent, run_batchbench, words};
use serde_json::Value;

fn slow(decode_ms: f64) -> SimServer {
    SimServer::start(
        SimConfig {
            decode_ms_per_token: decode_ms,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    )
}

fn load(r: &batchbench_tests::RunResult) -> &Value {
    r.summary("load")
}

#[test]
fn a_request_rate_sends_the_same_bodies_as_the_closed_loop() {
    let tok = qwen();
    let base = [
        "--tokenizer-model",
        &tok,
        "--users",
        "3",
        "--requests-per-user",
        "4",
        "--input-tokens",
        "40",
        "--input-prefix-overlap",
        "0.25",
        "--output-tokens",
        "4",
        "--seed",
        "11",
    ];
    let closed = SimServer::recording("qwen");
    let url = closed.url();
    let r = run_batchbench(&[&["--host", url.as_str()], &base[..]].concat());
    assert_eq!(r.code, 0);
    assert!(load(&r).is_null(), "the closed loop has no load report");

    let open = SimServer::recording("qwen");
    let url = open.url();
    let r = run_batchbench(
        &[
            &["--host", url.as_str(), "--request-rate", "200"],
            &base[..],
        ]
        .concat(),
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 12);
    assert_eq!(load(&r)["arrivals"], 12);
    assert_eq!(load(&r)["release"], "requests");
    assert_eq!(closed.sorted_body_hashes(), open.sorted_body_hashes());
}

#[test]
fn warmup_requests_reach_the_server_and_stay_out_of_the_figures() {
    let sim = slow(0.0);
    let r = sim.batchbench(
        "--users 2 --requests-per-user 10 --output-tokens 2 --request-rate 100 --warmup-requests 5",
        &[],
    );
    assert_eq!(r.code, 0);
    assert_eq!(sim.stats().requests, 20, "warmup requests are sent");
    assert_eq!(r.count("total_requests"), 15);
    assert_eq!(r.count("successful_requests"), 15);
    assert_eq!(load(&r)["warmup_requests"], 5);
    assert_eq!(load(&r)["warmup_latency"]["count"], 5, "reported apart");
    assert_eq!(r.summary("latency")["count"], 15);
    assert_eq!(r.csv[0]["warmup_requests"], "5");
}

#[test]
fn a_duration_run_stops_on_time_and_cancels_or_finishes_what_is_in_flight() {
    // Each request decodes for about 2 s: at the 1 s deadline some are in flight.
    let sim = slow(100.0);
    let url = sim.url();
    let tok = qwen();
    let args = |policy: &'static str| {
        vec![
            "--host".to_owned(),
            url.clone(),
            "--tokenizer-model".into(),
            tok.clone(),
            "--users".into(),
            "2".into(),
            "--output-tokens".into(),
            "20".into(),
            "--request-rate".into(),
            "8".into(),
            "--arrival".into(),
            "constant".into(),
            "--duration-secs".into(),
            "1".into(),
            "--at-deadline".into(),
            policy.into(),
        ]
    };
    let cancel = args("cancel");
    let r = run_batchbench(&cancel.iter().map(String::as_str).collect::<Vec<_>>());
    // A deadline is not an interruption; but every request was cut, so the
    // run measured nothing, and a run that measured nothing failed.
    assert_eq!(r.code, 1);
    assert_eq!(r.summary("interrupted"), false);
    assert!(
        r.summary("run_failed")
            .as_str()
            .is_some_and(|s| s.starts_with("no request was measured (")),
        "{}",
        r.summary("run_failed")
    );
    let d = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
    assert!((1.0..2.5).contains(&d), "stopped at the deadline: {d}");
    assert_eq!(
        r.count("failed_requests"),
        0,
        "cut requests are not failures"
    );
    assert!(load(&r)["cut_at_deadline"].as_u64().unwrap_or(0) >= 7);
    assert_eq!(load(&r)["at_deadline"], "cancel");
    assert_eq!(r.csv[0]["at_deadline"], "cancel");

    let finish = args("finish");
    let r = run_batchbench(&finish.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(r.code, 0);
    let d = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
    assert!(d >= 2.5, "in-flight requests finished: {d}");
    assert!(r.count("successful_requests") >= 7);
    assert_eq!(load(&r)["cut_at_deadline"], 0);
}

/// Asked for far more than one client thread can send (200,000 requests/s
/// for a second against the instant simulator), a run still ends at its
/// deadline: nothing is sent after it, the arrivals it could not send are
/// dropped and counted (never sent late), and the run says so. (Against an
/// instant server, 400,000/s for 3 s once ran for 693 s.)
#[test]
fn a_rate_past_the_clients_ceiling_ends_at_the_deadline_and_counts_what_it_dropped() {
    let sim = slow(0.0);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("requests.jsonl");
    let r = sim.batchbench(
        "--users 16 --output-tokens 1 --request-rate 200000 --arrival constant --client-threads 1 --duration-secs 1 --slo e2e_p50<=60s --requests-jsonl {}",
        &[&jsonl.display().to_string()],
    );
    assert_eq!(r.code, 0);
    let l = load(&r);
    let (sent, dropped) = (
        l["arrivals"].as_u64().unwrap_or(0),
        l["dropped_arrivals"].as_u64().unwrap_or(0),
    );
    assert!(dropped > 0 && sent > 0, "{l}");
    // Every arrival due in the second is sent or dropped, none twice.
    assert!(
        (199_999..=200_000).contains(&(sent + dropped)),
        "{sent} sent + {dropped} dropped: {l}"
    );
    // Nothing went out after the deadline (beyond the microseconds between
    // the last check and the send, on a machine that may be busy).
    let records = read_jsonl(&jsonl);
    assert_eq!(records.len() as u64, sent, "one record per arrival sent");
    let last = records
        .iter()
        .filter_map(|x| x["sent_ms"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        last < 1250.0,
        "a request sent at {last} ms, after the deadline"
    );
    // The server saw no more than was sent (an open loop this far past its
    // ceiling opens connections faster than a listener takes them: some
    // fail to connect, and are counted as failures).
    let seen = sim.requests().len() as u64;
    assert!(seen <= sent, "the server saw {seen}, {sent} were sent");
    assert!(r.count("successful_requests") <= seen);
    assert_eq!(
        r.count("successful_requests") + r.count("failed_requests"),
        sent
    );
    // The run ends once what was in flight at the deadline finished: seconds,
    // not the minutes its schedule would take at this client's pace.
    let d = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
    assert!(d < 15.0, "ran for {d} s");
    let verdict = l["verdict"].as_str().unwrap_or("");
    assert!(
        verdict.contains(&format!("{dropped} arrivals due before the deadline")),
        "{verdict}"
    );
    assert_eq!(r.csv[0]["dropped_arrivals"], dropped.to_string());
    // Dropping never flatters a run: it did not serve the load it was given.
    assert_eq!(r.summary("slo")["passed"], false, "{}", r.summary("slo"));
    // Its client was the limit, and the summary says why.
    let bound = r.summary("client_bound");
    assert!(
        bound["reasons"]
            .as_array()
            .is_some_and(|r| r.contains(&"dropped".into())),
        "{bound}"
    );
    assert!(
        bound["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("it dropped {dropped} arrivals"))),
        "{bound}"
    );
    assert!(
        r.csv[0]["client_bound"].contains("dropped"),
        "{:?}",
        r.csv[0]
    );
}

/// With a concurrency cap the server cannot keep up with (2 slots of 200 ms
/// requests, 10/s, asked for 40/s), `--max-queue-wait-secs` drops the
/// arrivals that waited too long for a slot, unsent: every arrival is sent or
/// dropped, none waited much over the bound, the run does not pass its SLO,
/// and its client is not the limit (the server, through the cap, is).
#[test]
fn arrivals_that_wait_too_long_for_a_slot_are_dropped_and_counted() {
    let sim = slow(20.0);
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path().join("run");
    let r = sim.batchbench(
        "--users 8 --output-tokens 10 --request-rate 40 --arrival constant --max-concurrency 2 --max-queue-wait-secs 0.05 --duration-secs 1.5 --slo e2e_p50<=60s --output-dir {}",
        &[&dir.display().to_string()],
    );
    assert_eq!(r.code, 0);
    let l = load(&r);
    let waiting = l["dropped_waiting"].as_u64().unwrap_or(0);
    let arrivals = l["arrivals"].as_u64().unwrap_or(0);
    assert!(waiting >= 10, "{l}");
    let sent = r.count("successful_requests") + r.count("failed_requests");
    assert_eq!(sent, sim.requests().len() as u64, "{l}");
    assert_eq!(
        sent + waiting + l["cut_at_deadline"].as_u64().unwrap_or(0),
        arrivals,
        "every arrival is sent, dropped waiting or cut: {l}"
    );
    // The bound held: no request waited much over 50 ms for its slot.
    let q = l["queue_wait"]["max_ms"].as_f64().unwrap_or(f64::MAX);
    assert!(q < 50.0 + 50.0, "{l}");
    let verdict = l["verdict"].as_str().unwrap_or("");
    assert!(
        verdict.contains(&format!("{waiting} arrivals waited over the bound")),
        "{verdict}"
    );
    assert_eq!(r.csv[0]["dropped_waiting"], waiting.to_string());
    assert_eq!(r.summary("slo")["passed"], false, "{}", r.summary("slo"));
    assert!(
        r.summary("client_bound").is_null(),
        "{}",
        r.summary("client_bound")
    );
    // The report's summary table says it too.
    let out = tmp.path().join("report.html");
    let argv: Vec<String> = ["batchbench", "report", &dir.display().to_string(), "-o"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([out.display().to_string()])
        .collect();
    assert_eq!(batchbench_run::commands::batchbench::run(argv), 0);
    let html = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        html.contains(&format!("{waiting} after waiting for a slot")),
        "the report's dropped arrivals row"
    );

    // The bound needs a cap and arrivals to drop.
    for (line, says) in [
        (
            "--users 1 --request-rate 5 --duration-secs 1 --max-queue-wait-secs 1",
            "--max-concurrency",
        ),
        (
            "--users 1 --requests-per-user 2 --max-concurrency 1 --max-queue-wait-secs 1",
            "arrival rate",
        ),
        (
            "--users 1 --request-rate 5 --duration-secs 1 --max-concurrency 1 --max-queue-wait-secs 0",
            "--max-queue-wait",
        ),
    ] {
        let e = batchbench_tests::refused_batchbench(&sim.args(line, &[]));
        assert!(e.contains(says), "{line}: {e}");
    }
}

/// A closed loop against the in-process instant simulator on one thread
/// keeps that thread busy all the time: the client (with the simulator it
/// runs) is the limit, and `--fail-if-client-bound` makes that exit 1.
#[test]
fn a_client_that_keeps_its_threads_busy_is_the_limit_and_can_fail_the_run() {
    let tok = qwen();
    let mut args = words(
        "--host sim:// --users 32 --output-tokens 2 --client-threads 1 --duration-secs 1.5 --fail-if-client-bound --tokenizer-model",
    );
    args.push(&tok);
    let r = run_batchbench(&args);
    assert_eq!(r.code, 1);
    let client = r.summary("client");
    assert_eq!(client["threads"], 1, "{client}");
    let busy = client["busy_share"].as_f64().unwrap_or(0.0);
    assert!(busy > 0.9, "{client}");
    assert!(
        client["scheduling_delay"]["count"].as_u64() > Some(10),
        "{client}"
    );
    let bound = r.summary("client_bound");
    assert!(
        bound["reasons"]
            .as_array()
            .is_some_and(|r| r.contains(&"busy".into())),
        "{bound}"
    );
    let failed = r.summary("run_failed").as_str().unwrap_or_default();
    assert!(failed.contains("--fail-if-client-bound"), "{failed}");
    assert!(r.csv[0]["client_bound"].contains("busy"), "{:?}", r.csv[0]);
    assert!(
        r.csv[0]["client_busy_share"]
            .parse::<f64>()
            .is_ok_and(|b| b > 0.9)
    );
}

/// Sent 200 requests/s, a server of 40/s (4 sequences at a time, 100 ms a
/// step) is the bottleneck, and the run says so without blaming its client;
/// at 20/s, under its capacity, it blames neither.
#[test]
fn a_server_that_cannot_keep_up_is_named_the_bottleneck_not_the_client() {
    let sim = SimServer::start(
        SimConfig {
            max_running: 4,
            step_base_ms: 100.0,
            step_ms_per_seq: 0.0,
            ..SimConfig::default()
        },
        "qwen",
    );
    let line = "--users 64 --input-tokens 16 --output-tokens 1 --arrival poisson --duration-secs 3 --seed 3 --request-rate {}";
    let r = sim.batchbench(line, &["200"]);
    assert_eq!(r.code, 0);
    let v = load(&r)["verdict"].as_str().unwrap_or_default().to_owned();
    assert!(
        v.starts_with("the server, not the client, was the bottleneck: it completed"),
        "{v}"
    );
    assert!(!v.contains("fell behind"), "{v}");
    assert!(
        r.summary("client_bound").is_null(),
        "{}",
        r.summary("client_bound")
    );
    let r = sim.batchbench(line, &["20"]);
    assert_eq!(r.code, 0);
    assert!(load(&r)["verdict"].is_null(), "{}", load(&r));
    assert!(
        r.summary("client_bound").is_null(),
        "{}",
        r.summary("client_bound")
    );
}

#[test]
fn stages_change_the_rate_when_they_should_and_are_reported_apart() {
    let sim = slow(0.0);
    let r = sim.batchbench("--users 4 --requests-per-user 100 --output-tokens 2 --stages 1s@10,1s@40 --arrival constant", &[]);
    assert_eq!(r.code, 0);
    // Arrivals end with the last stage, not with the plan.
    let n = r.count("successful_requests");
    assert!((49..=50).contains(&n), "{n}");
    let stages = load(&r)["stages"].as_array().cloned().unwrap_or_default();
    assert_eq!(stages.len(), 2);
    let count = |i: usize| stages[i]["requests"].as_u64().unwrap_or(0);
    assert!((9..=10).contains(&count(0)), "{stages:?}");
    assert!((39..=41).contains(&count(1)), "{stages:?}");
    assert_eq!(r.csv[0]["stages"], "1s@10,1s@40");
}

/// Mean of `key` over a slice of request records.
fn mean(rows: &[Value], key: &str) -> f64 {
    rows.iter().filter_map(|r| r[key].as_f64()).sum::<f64>() / rows.len().max(1) as f64
}

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Runs `batchbench` against `url` with the Qwen tokenizer, `args` and
/// `--requests-jsonl`; returns the result and the per-request lines.
fn run_with_records<S: AsRef<str>>(
    url: &str,
    args: &[S],
) -> (batchbench_tests::RunResult, Vec<Value>) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let tok = qwen();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("requests.jsonl");
    let p = path.display().to_string();
    let mut all = vec![
        "--host",
        url,
        "--tokenizer-model",
        &tok,
        "--requests-jsonl",
        &p,
    ];
    all.extend_from_slice(args);
    let r = run_batchbench(&all);
    let rows = records(&path);
    (r, rows)
}

#[test]
fn the_client_queue_not_the_server_holds_requests_above_capacity() {
    // One request at a time, each about 100 ms: capacity is about 10/s.
    let sim = slow(10.0);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = |rate: &str, name: &str| {
        let path = dir.path().join(name);
        let p = path.display().to_string();
        let r = sim.batchbench("--users 2 --requests-per-user 12 --output-tokens 10 --request-rate {} --arrival constant --max-concurrency 1 --requests-jsonl {}", &[rate, &p]);
        assert_eq!(r.code, 0);
        let mut rows = records(&path);
        rows.sort_by(|a, b| {
            a["intended_ms"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b["intended_ms"].as_f64().unwrap_or(0.0))
        });
        (r, rows)
    };
    // Above capacity: latency from the intended send time grows through the run,
    // latency from the actual send stays flat, and the summary names the queue.
    let (r, rows) = run("40", "over.jsonl");
    assert_eq!(rows.len(), 24);
    let (head, tail) = (&rows[..8], &rows[16..]);
    assert!(
        mean(tail, "latency_from_intended_ms") > 2.0 * mean(head, "latency_from_intended_ms"),
        "queueing grows"
    );
    let served = (mean(head, "latency_ms"), mean(tail, "latency_ms"));
    assert!(
        served.1 < 1.5 * served.0 && served.0 < 1.5 * served.1,
        "the server's latency stays flat: {served:?}"
    );
    let verdict = load(&r)["verdict"].as_str().unwrap_or_default().to_owned();
    assert!(verdict.contains("client queue"), "{verdict}");
    assert!(load(&r)["queue_wait"]["p99_ms"].as_f64().unwrap_or(0.0) > 200.0);

    // Below capacity the two agree and the queue is not blamed.
    let (r, rows) = run("4", "under.jsonl");
    let gap = mean(&rows, "latency_from_intended_ms") - mean(&rows, "latency_ms");
    assert!(
        gap < 20.0,
        "from intended and from sent agree: {gap} ms apart"
    );
    let verdict = load(&r)["verdict"].as_str().unwrap_or_default().to_owned();
    assert!(!verdict.contains("client queue"), "{verdict}");
}

#[test]
fn a_session_rate_starts_agents_on_schedule_and_their_turns_follow_replies() {
    let sim = slow(0.0);
    let r = sim.agent("--agents 6 --tool-invocations 3 --input-tokens 32 --output-tokens 4 --session-rate 30 --arrival gamma --burstiness 4", &[]);
    assert_eq!(r.code, 0);
    assert_eq!(sim.stats().requests, 18);
    assert_eq!(load(&r)["release"], "sessions");
    assert_eq!(load(&r)["arrivals"], 6);
    assert_eq!(load(&r)["arrival"], "gamma");
    assert_eq!(r.count("trajectories_completed"), 6);
    assert_eq!(r.csv[0]["session_rate"], "30.0");
    assert_eq!(r.csv[0]["admission_mode"], "open-loop");
}

#[test]
fn an_endless_agent_run_lasts_its_duration() {
    let sim = slow(1.0);
    let r = sim.agent("--max-active-agents 2 --tool-invocations 2 --input-tokens 32 --output-tokens 4 --duration-secs 1", &[]);
    assert_eq!(r.code, 0);
    let started = r.count("trajectories_started");
    assert!(
        started > 2,
        "agents kept coming until the deadline: {started}"
    );
    let d = r.summary("total_duration_seconds").as_f64().unwrap_or(0.0);
    assert!((1.0..3.0).contains(&d), "{d}");
}

#[test]
fn a_duration_over_a_finite_workload_or_a_zero_session_rate_is_exit_2_and_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = qwen();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifest = dir.path().join("plans.jsonl");
    std::fs::write(
        &manifest,
        "{\"schema_version\":1,\"trajectory_id\":\"t\",\"requests\":[{\"prompt_tokens\":10,\"output_tokens\":2}]}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let m = manifest.display().to_string();
    for args in [
        vec!["--session-rate", "0"],
        vec!["--agent-plans-jsonl", m.as_str(), "--duration-secs", "5"],
        vec!["--duration-secs", "5", "--agents", "3"],
        vec!["--session-rate", "2", "--burstiness", "3"],
        vec!["--duration-secs", "2"],
    ] {
        let mut argv = vec!["--host", url.as_str(), "--tokenizer-model", tok.as_str()];
        argv.extend(args.iter().copied());
        let r = run_agent(&argv);
        assert_eq!(r.code, 2, "{args:?}");
        assert!(r.json.is_none(), "{args:?}: no report");
    }
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

#[test]
fn load_flags_round_trip_through_a_config_file_and_flags_override_it() {
    use batchbench_run::commands::{agent, batchbench};
    let spec = batchbench::resolve_args([
        "batchbench",
        "--stages",
        "30s@10,2m@20",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--max-concurrency",
        "8",
        "--warmup-secs",
        "5",
    ])
    .unwrap_or_else(|f| panic!("{}", f.error));
    assert_eq!(spec.load.stages.len(), 2);
    assert!((spec.load.stages[1].secs - 120.0).abs() < 1e-9);
    let toml = batchbench_run::config::to_toml(&spec).unwrap_or_else(|f| panic!("{}", f.error));
    assert!(toml.contains("[load]"), "{toml}");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("run.toml");
    std::fs::write(&path, &toml).unwrap_or_else(|e| panic!("{e}"));
    let p = path.display().to_string();
    let back = batchbench::resolve_args(["batchbench", "--config", p.as_str()])
        .unwrap_or_else(|f| panic!("{}", f.error));
    assert_eq!(back.load, spec.load);
    // A flag over the file replaces its own field only.
    let over = batchbench::resolve_args([
        "batchbench",
        "--config",
        p.as_str(),
        "--max-concurrency",
        "2",
    ])
    .unwrap_or_else(|f| panic!("{}", f.error));
    assert_eq!(over.load.max_concurrency, Some(2));
    assert_eq!(over.load.stages, spec.load.stages);
    // The agent's rate releases sessions and opens the admission.
    let a = agent::resolve_args(["batchbench-agent", "--session-rate", "3"])
        .unwrap_or_else(|f| panic!("{}", f.error));
    assert_eq!(a.load.rate, Some(3.0));
    assert_eq!(a.load.release, batchbench_contract::spec::Release::Sessions);
    assert_eq!(
        a.admission.mode,
        batchbench_contract::spec::AdmissionMode::OpenLoop
    );
}

#[test]
fn a_retried_request_is_not_client_lag_and_every_timeline_is_in_order() {
    // Half the requests get a 503 and are retried after a 40 ms backoff.
    let sim = SimServer::start(
        SimConfig {
            fault_rate: 0.5,
            seed: 3,
            decode_ms_per_token: 1.0,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let (r, rows) = run_with_records(
        &sim.url(),
        &words(
            "--users 4 --requests-per-user 5 --output-tokens 4 --stream --request-rate 50 --arrival constant --max-retries 4 --retry-delay-ms 40",
        ),
    );
    assert_eq!(r.code, 0);
    assert_eq!(rows.len(), 20);
    let f = |row: &Value, k: &str| {
        row[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} missing in {row}"))
    };
    let retried: Vec<&Value> = rows.iter().filter(|r| f(r, "retries") > 0.0).collect();
    assert!(!retried.is_empty(), "the fault rate retried some requests");
    for row in &rows {
        if row["ok"] != true {
            continue;
        }
        let (intended, sent) = (f(row, "intended_ms"), f(row, "sent_ms"));
        let (head, token, end) = (
            f(row, "first_byte_ms"),
            f(row, "first_token_ms"),
            f(row, "end_ms"),
        );
        assert!(
            intended <= sent && sent <= head && head <= token && token <= end,
            "timeline out of order: {row}"
        );
        // Latency from the intended time spans the retries; latency alone is the
        // last attempt's.
        let from_intended = f(row, "latency_from_intended_ms");
        assert!((from_intended - (end - intended)).abs() < 0.01, "{row}");
        if f(row, "retries") > 0.0 {
            assert!(end - sent >= 40.0 + f(row, "latency_ms") - 0.01, "{row}");
        }
    }
    // The backoff (40 ms and more) is not the client falling behind its
    // schedule: no send lag comes near it.
    let lag_max = load(&r)["send_lag"]["max_ms"].as_f64().unwrap_or(f64::MAX);
    assert!(
        lag_max < 35.0,
        "send lag max {lag_max} ms counts the backoff"
    );
}

#[test]
fn warmup_seconds_leave_out_what_was_due_in_them() {
    let sim = slow(0.0);
    // 40/s, evenly spaced from 25 ms: the 11 requests due before 0.3 s (at 25,
    // 50, ..., 275 ms) are warmup.
    let (r, rows) = run_with_records(
        &sim.url(),
        &words(
            "--users 4 --requests-per-user 8 --output-tokens 2 --request-rate 40 --arrival constant --warmup-secs 0.3",
        ),
    );
    assert_eq!(r.code, 0);
    assert_eq!(sim.stats().requests, 32, "warmup requests are sent");
    let warm: Vec<&Value> = rows.iter().filter(|r| r["warmup"] == true).collect();
    assert_eq!(warm.len(), 11, "due before 0.3 s at 40/s");
    assert!(
        warm.iter()
            .all(|r| r["intended_ms"].as_f64().unwrap_or(f64::MAX) < 300.0)
    );
    assert_eq!(load(&r)["warmup_requests"], 11);
    assert_eq!(r.count("total_requests"), 21);
    assert_eq!(r.summary("latency")["count"], 21);
}

#[test]
fn a_ramp_rises_linearly_to_its_rate() {
    let sim = slow(0.0);
    // A linear ramp from 0 to 40/s over 2 s, then 40/s: 40 arrivals fill the
    // ramp (the area under it), the rest follow at the full rate.
    let (r, rows) = run_with_records(
        &sim.url(),
        &words(
            "--users 4 --requests-per-user 15 --output-tokens 2 --request-rate 40 --arrival constant --ramp-up-secs 2",
        ),
    );
    assert_eq!(r.code, 0);
    let mut due: Vec<f64> = rows
        .iter()
        .filter_map(|r| r["intended_ms"].as_f64())
        .collect();
    due.sort_by(f64::total_cmp);
    assert_eq!(due.len(), 60);
    let in_first_second = due.iter().filter(|&&t| t < 1000.0).count();
    let in_second_second = due
        .iter()
        .filter(|&&t| (1000.0..2000.0).contains(&t))
        .count();
    // Area under the ramp: 10 arrivals in its first second, 30 in its second.
    assert!((8..=12).contains(&in_first_second), "{in_first_second}");
    assert!((28..=32).contains(&in_second_second), "{in_second_second}");
    // After the ramp, 25 ms apart.
    let gaps: Vec<f64> = due.windows(2).skip(45).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| (g - 25.0).abs() < 0.5), "{gaps:?}");
}

#[test]
fn a_session_rate_replaces_recorded_offsets_in_a_replay() {
    let sim = slow(0.0);
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/trajectory-replay/plans.jsonl")
        .display()
        .to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let events = dir.path().join("events.jsonl");
    let e = events.display().to_string();
    let r = sim.agent(
        "--agent-plans-jsonl {} --session-rate 20 --arrival constant --agent-events-jsonl {}",
        &[&manifest, &e],
    );
    assert_eq!(r.code, 0);
    assert_eq!(load(&r)["release"], "sessions");
    let trajectories = r.count("trajectories_completed");
    assert_eq!(load(&r)["arrivals"].as_u64(), Some(trajectories));
    // Sessions start 50 ms apart (in the order of their recorded offsets), whatever
    // the offsets' spacing was.
    let mut starts: Vec<f64> = records(&events)
        .iter()
        .filter_map(|l| l["scheduled_at_seconds"].as_f64())
        .collect();
    starts.sort_by(f64::total_cmp);
    assert_eq!(starts.len() as u64, trajectories);
    for w in starts.windows(2) {
        assert!(((w[1] - w[0]) - 0.05).abs() < 1e-6, "{starts:?}");
    }
}

#[test]
fn sessions_held_by_the_active_cap_are_late_admissions_not_client_lag() {
    // One agent at a time, each about 60 ms (two turns of 3 tokens at 10 ms),
    // started at 50 per second: most sessions wait for the cap.
    let sim = slow(10.0);
    let r = sim.agent("--agents 8 --tool-invocations 2 --input-tokens 16 --output-tokens 3 --session-rate 50 --arrival constant --max-active-agents 1", &[]);
    assert_eq!(r.code, 0);
    assert_eq!(sim.stats().requests, 16);
    assert!(
        r.count("late_admissions") >= 4,
        "the cap held sessions back"
    );
    // The cap's waits grow by about 40 ms a session (up to 280 ms); none of
    // that is the client's own lag.
    let lag = load(&r)["send_lag"]["max_ms"].as_f64().unwrap_or(f64::MAX);
    assert!(
        lag < 40.0,
        "the cap's wait counted as send lag: max {lag} ms"
    );
}

#[test]
fn client_threads_auto_runs_and_is_recorded_as_asked_and_bad_counts_are_exit_2() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = qwen();
    let base = [
        "--host",
        url.as_str(),
        "--tokenizer-model",
        tok.as_str(),
        "--users",
        "2",
        "--requests-per-user",
        "3",
        "--input-tokens",
        "8",
        "--output-tokens",
        "2",
    ];
    let r = run_batchbench(
        &[
            &base[..],
            &["--request-rate", "500", "--client-threads", "auto"],
        ]
        .concat(),
    );
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 6);
    let json = r.json.as_ref().expect("a JSON summary");
    assert_eq!(json["run"]["spec"]["target"]["client_threads"], "auto");
    let sent = sim.stats().requests;
    for bad in ["0", "1025", "many"] {
        let r = run_batchbench(&[&base[..], &["--client-threads", bad]].concat());
        assert_eq!(r.code, 2, "--client-threads {bad}");
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "[target]\nclient_threads = \"fast\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let r = run_batchbench(&[&base[..], &["--config", &config.display().to_string()]].concat());
    assert_eq!(r.code, 2, "a word that is not auto");
    assert_eq!(sim.stats().requests, sent, "nothing was sent");
}
