//! Trajectory replay end to end against the simulator.

use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, qwen, replay_example, run_agent, tokenizer};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, lines: &[Value]) -> String {
    let p: PathBuf = dir.join(name);
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    p.display().to_string()
}

fn events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn both_examples_run_in_both_admission_modes_and_dry_run() {
    for manifest in ["plans.jsonl", "plans-v2.jsonl"] {
        let m = replay_example(manifest);
        for admission in ["closed-loop", "open-loop"] {
            let sim = SimServer::recording("qwen");
            let r = sim.agent(
                "--agent-plans-jsonl {} --admission {} --time-scale 5",
                &[&m, admission],
            );
            assert_eq!(r.code, 0, "{manifest} {admission}");
            assert_eq!(r.count("failed_requests"), 0);
            assert_eq!(
                r.count("successful_requests") as usize,
                sim.requests().len()
            );
            let row = &r.csv[0];
            assert_eq!(row["workload_mode"], "trajectory_replay");
            assert_eq!(row["admission_mode"], admission);
            assert_eq!(row["agent_plans_jsonl"], m);
            assert_eq!(row["agent_plans_sha256"].len(), 64);
            assert_eq!(
                row["trajectory_schema_version"],
                if manifest == "plans.jsonl" { "1" } else { "2" }
            );
            assert_eq!(row["time_scale"], "5.0");
        }
        let sim = SimServer::recording("qwen");
        let r = sim.agent("--agent-plans-jsonl {} --dry-run", &[&m]);
        assert_eq!(r.code, 0);
        assert_eq!(sim.stats().requests, 0, "a dry run sends nothing");
    }
}

#[test]
fn shared_blocks_send_identical_prefixes_and_hit_across_sessions() {
    let sim = SimServer::recording("qwen");
    let m = replay_example("plans-v2.jsonl");
    // Open loop: the second session starts 500 ms after the first.
    let r = sim.agent("--agent-plans-jsonl {} --admission open-loop", &[&m]);
    assert_eq!(r.code, 0);
    let log = sim.requests();
    let first_of_second = log
        .iter()
        .find(|e| e.user.as_deref().is_some() && e.seq == 2)
        .cloned();
    let second = first_of_second.unwrap_or_else(|| panic!("{log:?}"));
    // The 140-token tool definition and 80-token system prompt are byte-identical, so
    // the second session's first request hits the first session's cache.
    assert!(
        second.cached_tokens >= 200,
        "cross-session cached tokens: {}",
        second.cached_tokens
    );
    assert!(second.cached_tokens < 265);
    // Exact: every request's server count equals its plan.
    assert_eq!(
        r.count("counted_prompt_tokens"),
        r.count("planned_prompt_tokens")
    );
    assert_eq!(r.summary("worst_prompt_drift_tokens"), 0);
    assert_eq!(r.count("live_block_fallbacks"), 0);
}

/// The simulator's template: 3 per request, 5 per message, plus each synthetic
/// tool call's name.
fn sim_overhead(messages: u32, calls: u32) -> u32 {
    let cfg = SimConfig::default();
    let name = tokenizer("qwen")
        .count(batchbench_engine::synthesis::blocks::TOOL_CALL_NAME)
        .unwrap_or(0) as u32;
    cfg.template_overhead_tokens + messages * cfg.message_overhead_tokens + calls * name
}

#[test]
fn a_consistent_v2_manifest_replays_exactly() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let block =
        |seed: &str, tokens: u32, role: &str| json!({"seed": seed, "tokens": tokens, "role": role});
    let live = |seed: &str, tokens: u32| json!({"seed": seed, "tokens": tokens, "role": "assistant", "live": true});
    let mut lines = Vec::new();
    for s in 0..3 {
        let (u, a1, c1, t1, a2) = (
            format!("u{s}"),
            format!("a{s}"),
            format!("c{s}"),
            format!("t{s}"),
            format!("b{s}"),
        );
        let tools = [
            block("tools-A", 90, "tool_definition"),
            block("tools-B", 57, "tool_definition"),
        ];
        let mut b0: Vec<Value> = tools.to_vec();
        b0.extend([block("sys", 61, "system"), block(&u, 40 + s, "user")]);
        let mut b1 = b0.clone();
        b1.extend([
            live(&a1, 16),
            block(&c1, 25, "tool_call"),
            block(&t1, 33, "tool"),
        ]);
        let mut b2 = b1.clone();
        b2.extend([live(&a2, 8), block(&format!("v{s}"), 21, "user")]);
        let sum = |bs: &[Value]| {
            bs.iter()
                .map(|b| b["tokens"].as_u64().unwrap_or(0) as u32)
                .sum::<u32>()
        };
        let req = |bs: &Vec<Value>, out: u32, msgs: u32, calls: u32| {
            let overhead = sim_overhead(msgs, calls);
            json!({"prompt_tokens": sum(bs) + overhead, "output_tokens": out, "overhead_tokens": overhead, "stream": s % 2 == 0, "blocks": bs})
        };
        lines.push(
            json!({"schema_version": 2, "trajectory_id": format!("s-{s}"), "start_after_ms": 30 * s,
            "requests": [req(&b0, 16, 2, 0), req(&b1, 8, 4, 1), req(&b2, 5, 6, 1)]}),
        );
    }
    let m = write(dir.path(), "exact.jsonl", &lines);
    for admission in ["closed-loop", "open-loop"] {
        let sim = SimServer::recording("qwen");
        let r = sim.agent("--agent-plans-jsonl {} --admission {}", &[&m, admission]);
        assert_eq!(r.code, 0);
        assert_eq!(r.count("successful_requests"), 9);
        assert_eq!(
            r.count("counted_prompt_tokens"),
            r.count("planned_prompt_tokens"),
            "{admission}"
        );
        assert_eq!(r.summary("worst_prompt_drift_tokens"), 0, "{admission}");
        assert_eq!(r.count("live_block_fallbacks"), 0);
    }
}

#[test]
fn a_calibrated_v1_manifest_replays_exactly() {
    let qwen_tok = tokenizer("qwen");
    let cfg = SimConfig::default();
    // First request: one user message. Each appended turn: an assistant message with
    // our synthetic call and a tool message.
    let initial = cfg.template_overhead_tokens + cfg.message_overhead_tokens;
    let call = qwen_tok.count("environment").unwrap_or(0) + qwen_tok.count("{}").unwrap_or(0);
    let turn = 2 * cfg.message_overhead_tokens + call as u32;
    let sim = SimServer::recording("qwen");
    let m = replay_example("plans.jsonl");
    let (i, t) = (initial.to_string(), turn.to_string());
    let r = sim.agent("--agent-plans-jsonl {} --replay-initial-overhead-tokens {} --replay-turn-overhead-tokens {}", &[&m, &i, &t]);
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 7);
    assert_eq!(
        r.count("counted_prompt_tokens"),
        r.count("planned_prompt_tokens")
    );
    assert_eq!(r.summary("worst_prompt_drift_tokens"), 0);
    assert_eq!(r.csv[0]["replay_initial_overhead_tokens"], i);
}

#[test]
fn open_loop_admits_at_scaled_offsets_and_counts_late_admissions() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let one = |id: &str, start: u64| {
        json!({"schema_version": 2, "trajectory_id": id, "start_after_ms": start,
            "requests": [{"prompt_tokens": 40, "output_tokens": 4, "delay_after_ms": 400}]})
    };
    // File order differs from start order on purpose.
    let m = write(
        dir.path(),
        "open.jsonl",
        &[
            one("late", 1600),
            one("first", 0),
            one("mid", 800),
            one("also-mid", 800),
        ],
    );
    let ev = dir.path().join("events.jsonl");
    let ev_s = ev.display().to_string();
    let tok = qwen();
    let r = run_agent(&cmd(
        "--host sim:// --tokenizer-model {} --agent-plans-jsonl {} --admission open-loop --time-scale 4 --agent-events-jsonl {}",
        &[&tok, &m, &ev_s],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(r.count("late_admissions"), 0);
    for e in events(&ev) {
        let want = match e["trajectory_id"].as_str().unwrap_or("") {
            "first" => 0.0,
            "mid" | "also-mid" => 0.2,
            _ => 0.4,
        };
        let (sched, adm) = (
            e["scheduled_at_seconds"].as_f64().unwrap_or(-1.0),
            e["admitted_at_seconds"].as_f64().unwrap_or(-1.0),
        );
        assert!((sched - want).abs() < 1e-6, "{e}");
        assert!(
            adm >= want && adm < want + 0.1,
            "admitted at a quarter of the offset: {e}"
        );
    }
    // Equal start times are admitted, and slotted, in manifest order.
    let ev_all = events(&ev);
    let agent = |id: &str| {
        ev_all
            .iter()
            .find(|e| e["trajectory_id"] == id)
            .map(|e| e["agent_id"].as_u64().unwrap_or(99))
    };
    assert!(agent("mid") < agent("also-mid"));

    // A cap of one: each trajectory waits for the previous one (100 ms think time at
    // scale 4), so admissions slip and are counted.
    let r = run_agent(&cmd(
        "--host sim:// --tokenizer-model {} --agent-plans-jsonl {} --admission open-loop --time-scale 4 --max-active-agents 1",
        &[&tok, &m],
    ));
    assert_eq!(r.code, 0);
    assert!(r.count("late_admissions") >= 1, "{:?}", r.json);
    assert!(r.summary("max_admission_lag_ms").as_f64().unwrap_or(0.0) >= 50.0);
    assert_eq!(r.count("max_active_observed"), 1);
}

#[test]
fn live_blocks_without_a_reply_fall_back_and_are_counted() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let b = |seed: &str, tokens: u32, role: &str, live: bool| json!({"seed": seed, "tokens": tokens, "role": role, "live": live});
    let line = json!({"schema_version": 2, "trajectory_id": "t", "requests": [
        // First request: no previous reply.
        {"prompt_tokens": 50, "output_tokens": 4, "overhead_tokens": 0, "blocks": [b("u", 20, "user", false), b("a", 30, "assistant", true)]},
        // Second request: the first live block carries the reply, the second falls back.
        {"prompt_tokens": 80, "output_tokens": 4, "overhead_tokens": 0, "blocks": [b("u", 20, "user", false), b("a", 30, "assistant", false), b("x", 10, "assistant", true), b("y", 20, "assistant", true)]},
        // After a reset: no reply to carry.
        {"prompt_tokens": 40, "output_tokens": 4, "overhead_tokens": 0, "reset_before": true, "blocks": [b("z", 20, "user", false), b("w", 20, "assistant", true)]}
    ]});
    let m = write(dir.path(), "live.jsonl", &[line]);
    let tok = qwen();
    let r = run_agent(&cmd(
        "--host sim:// --tokenizer-model {} --agent-plans-jsonl {}",
        &[&tok, &m],
    ));
    assert_eq!(r.code, 0);
    assert_eq!(r.count("live_block_fallbacks"), 3);
    assert_eq!(r.csv[0]["live_block_fallbacks"], "3");
}

#[test]
fn any_registered_workload_runs_under_either_admission_through_the_build_context() {
    let tok = qwen();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/trajectory-replay/plans-v2.jsonl")
        .display()
        .to_string();
    let replay = json!({ "path": manifest }).to_string();
    // A config without order_by_start: the open-loop order comes from the context,
    // and a plugin that has no such field is not handed one.
    let synthetic = json!({
        "agents": 2,
        "input": {"kind": "fixed", "value": 32},
        "output": {"kind": "fixed", "value": 4},
        "environment": {"kind": "fixed", "value": 8},
        "tool_invocations": {"kind": "fixed", "value": 2},
        "tool_call_latency_ms": {"kind": "fixed", "value": 0},
    })
    .to_string();
    for (name, cfg, requests) in [
        ("replay_jsonl", &replay, None),
        ("synthetic_agents", &synthetic, Some(4)),
    ] {
        for admission in ["closed-loop", "open-loop"] {
            let r = run_agent(&cmd(
                "--host sim:// --tokenizer-model {} --workload {} --workload-config {} --admission {} --time-scale 100",
                &[&tok, name, cfg, admission],
            ));
            assert_eq!(r.code, 0, "{name} {admission}");
            assert_eq!(r.count("failed_requests"), 0, "{name} {admission}");
            if let Some(n) = requests {
                assert_eq!(r.count("total_requests"), n, "{name} {admission}");
            }
        }
    }
}
