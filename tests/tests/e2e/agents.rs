//! `batchbench-agent` end to end against the simulator.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, qwen, run_agent, tokenizer};

#[test]
fn each_turn_grows_by_output_environment_and_framing() {
    let sim = SimServer::recording("qwen");
    let r = sim.agent("--agents 16 --tool-invocations 8 --input-tokens 256 --output-tokens 64 --environment-tokens 128 --seed 7", &[]);
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 128);
    let cfg = SimConfig::default();
    let qwen = tokenizer("qwen");
    // One assistant message carrying our synthetic tool call, and one tool message.
    let call = qwen.count("environment").unwrap_or(0) + qwen.count("{}").unwrap_or(0);
    let framing = 2 * u64::from(cfg.message_overhead_tokens) + call as u64;
    let agents = sim.requests_by_key();
    assert_eq!(agents.len(), 16, "one routing key per agent");
    let mut estimate = 0;
    for (key, turns) in &agents {
        assert_eq!(turns.len(), 8, "{key}");
        assert_eq!(
            turns[0].prompt_tokens,
            256 + u64::from(cfg.message_overhead_tokens + cfg.template_overhead_tokens)
        );
        assert_eq!(turns[0].cached_tokens, 0);
        for w in turns.windows(2) {
            assert_eq!(
                w[1].prompt_tokens - w[0].prompt_tokens,
                w[0].completion_tokens + 128 + framing,
                "{key}"
            );
            assert!(
                w[1].cached_tokens > 0,
                "{key}: the simulator reports cached tokens from the second turn"
            );
            assert_eq!(w[1].messages, w[0].messages + 2);
            // The previous prompt and its reply, sent back whole, as the
            // server holds them.
            estimate += (w[0].prompt_tokens + w[0].completion_tokens).min(w[1].prompt_tokens);
        }
        assert!(turns.iter().all(|t| t.completion_tokens == 64));
    }
    assert_eq!(r.count("estimated_cached_input_tokens"), estimate);
    let server: u64 = sim.requests().iter().map(|e| e.cached_tokens).sum();
    assert_eq!(r.summary("server_cached_tokens"), server);
    let row = &r.csv[0];
    assert_eq!(row["workload_mode"], "synthetic");
    assert_eq!(row["completed_agents"], "16");
    assert_eq!(row["planned_tool_invocations"], "128");
    assert_eq!(row["estimated_cached_input_tokens"], estimate.to_string());
    assert_eq!(row["user_tagging"], "true");
}

#[test]
fn same_seed_sends_identical_bodies_and_user_tags() {
    let run = |seed: &str| {
        let sim = SimServer::recording("qwen");
        let r = sim.agent("--agents 4 --seed {} --input-lognorm-median 100 --input-lognorm-sigma 0.5 --environment-lognorm-median 40 --environment-lognorm-sigma 0.5 --tool-invocations-lognorm-median 3 --tool-invocations-lognorm-sigma 0.3 --output-tokens 8", &[seed]);
        assert_eq!(r.code, 0);
        let mut bodies: Vec<u64> = sim.requests().iter().map(|e| e.body_hash).collect();
        bodies.sort_unstable();
        let mut users: Vec<String> = sim
            .requests()
            .iter()
            .filter_map(|e| e.user.clone())
            .collect();
        users.sort_unstable();
        users.dedup();
        (bodies, users)
    };
    let a = run("21");
    assert_eq!(a.1.len(), 4, "a stable user tag per agent: {:?}", a.1);
    assert_eq!(a, run("21"));
    let b = run("22");
    assert_ne!(a.0, b.0);
    assert_ne!(a.1, b.1);
}

#[test]
fn dp_ranks_pin_agents_to_workers_and_balance_them() {
    let sim = SimServer::workers(4);
    let r = sim.agent("--agents 16 --tool-invocations 5 --input-tokens 32 --output-tokens 4 --environment-tokens 8 --dp-rank-perfect-routing --dp-rank-perfect-routing-num 4 --seed 4", &[]);
    assert_eq!(r.code, 0);
    let agents = sim.requests_by_key();
    assert_eq!(agents.len(), 16);
    for (key, turns) in &agents {
        assert!(
            turns.iter().all(|t| t.worker == turns[0].worker),
            "{key} always hits one worker"
        );
    }
    let agents_per_worker: Vec<usize> = (0..4)
        .map(|w| agents.values().filter(|t| t[0].worker == w).count())
        .collect();
    assert_eq!(
        agents_per_worker,
        vec![4, 4, 4, 4],
        "slot % 4 spreads agents evenly"
    );
    let per_worker: Vec<u64> = sim.stats().workers.iter().map(|w| w.requests).collect();
    let (min, max) = (
        per_worker.iter().min().copied().unwrap_or(0),
        per_worker.iter().max().copied().unwrap_or(0),
    );
    assert!(
        max - min <= 5,
        "request counts differ by at most one agent's worth: {per_worker:?}"
    );
    assert_eq!(per_worker.iter().sum::<u64>(), 80);
}

#[test]
fn rolling_admission_reuses_slots_and_reports_events() {
    let sim = SimServer::workers(4);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let events = dir.path().join("events.jsonl");
    let ev = events.display().to_string();
    let r = sim.agent("--agents 12 --max-active-agents 8 --tool-invocations 3 --input-tokens 32 --output-tokens 4 --environment-tokens 8 --dp-rank-perfect-routing --dp-rank-perfect-routing-num 4 --user-prefix bench --agent-events-jsonl {}", &[&ev]);
    assert_eq!(r.code, 0);
    for (key, turns) in sim.requests_by_key() {
        assert!(key.starts_with("bench-"), "{key}");
        assert!(
            turns.iter().all(|t| t.worker == turns[0].worker),
            "{key} always hits one worker"
        );
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&events)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 12);
    for l in &lines {
        let slot = l["routing_slot"].as_u64().unwrap_or(99);
        assert!(slot < 8, "8 slots for 8 active agents");
        assert_eq!(l["dp_rank"].as_u64(), Some(slot % 4));
        assert_eq!(l["completed"], true);
        for k in [
            "agent_id",
            "trajectory_id",
            "scheduled_at_seconds",
            "admitted_at_seconds",
            "queue_wait_seconds",
            "finished_at_seconds",
            "runtime_seconds",
        ] {
            assert!(!l[k].is_null(), "{k} in {l}");
        }
    }
    let slots: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter_map(|l| l["routing_slot"].as_u64())
        .collect();
    assert_eq!(
        slots.len(),
        8,
        "the 4 replacements took slots freed by earlier agents"
    );
    assert_eq!(r.count("max_active_observed"), 8);
    // The final admission time is the latest admission in the events, replacements'
    // preparation included.
    let latest = lines
        .iter()
        .filter_map(|l| l["admitted_at_seconds"].as_f64())
        .fold(0.0, f64::max);
    assert_eq!(r.summary("last_admitted_seconds").as_f64(), Some(latest));
}

#[test]
fn tool_latency_is_slept_and_counted_in_end_to_end_time() {
    let tok = qwen();
    let r = run_agent(&cmd(
        "--host sim:// --tokenizer-model {} --agents 2 --tool-invocations 3 --input-tokens 16 --output-tokens 2 --environment-tokens 4 --tool-call-latency-ms 100",
        &[&tok],
    ));
    assert_eq!(r.code, 0);
    let total = r.summary("total_delay_seconds").as_f64().unwrap_or(0.0);
    assert!(
        (0.6..0.9).contains(&total),
        "2 agents x 3 x 100 ms, got {total}"
    );
    // End-to-end runs through the final tool delay: at least 3 x 100 ms.
    assert!(
        r.summary("trajectory_e2e")["p50_ms"]
            .as_f64()
            .unwrap_or(0.0)
            >= 300.0
    );
}

#[test]
fn a_failed_request_ends_its_agent_and_is_reported() {
    let tok = qwen();
    let r = run_agent(&cmd(
        "--host sim://?fault-rate=0.3&fault-status=500 --tokenizer-model {} --agents 6 --tool-invocations 6 --input-tokens 16 --output-tokens 2 --environment-tokens 4 --max-retries 0",
        &[&tok],
    ));
    assert_eq!(r.code, 0);
    let failed = r.count("failed_requests");
    assert!(failed > 0);
    assert_eq!(
        r.count("trajectories_failed"),
        failed,
        "one failure ends one agent"
    );
    assert_eq!(
        r.count("trajectories_completed") + r.count("trajectories_failed"),
        6
    );
    let f = &r.summary("failures")[0];
    assert!(
        f["trajectory_id"]
            .as_str()
            .is_some_and(|t| t.starts_with("agent-"))
            && f["request_index"].is_u64(),
        "{f}"
    );
}
