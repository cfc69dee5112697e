//! The run spec end to end: `--print-config`, `--config` with flags over it, an
//! exact rerun from the spec a run recorded, and bad output paths refused before
//! anything is sent.

use batchbench_contract::plan::{PlannedRequest, Trajectory};
use batchbench_contract::plugin::{PluginError, WorkloadInfo, WorkloadSource};
use batchbench_contract::registry::BuildContext;
use batchbench_simulator::SimConfig;
use batchbench_tests::{SimServer, cmd, qwen, run_agent, run_batchbench, words};
use std::path::Path;

/// A workload that does not say how many trajectories it has (as a loaded
/// plugin may not): each session is one request.
mod unplanned {
    use super::*;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Config {
        sessions: u64,
    }

    pub struct Sessions {
        left: u64,
        next: u64,
    }

    impl WorkloadSource for Sessions {
        fn info(&self) -> WorkloadInfo {
            WorkloadInfo {
                mode: "unplanned_sessions".into(),
                ..WorkloadInfo::default()
            }
        }

        fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
            if self.left == 0 {
                return None;
            }
            self.left -= 1;
            self.next += 1;
            let req = PlannedRequest {
                prompt_tokens: Some(16),
                output_tokens: Some(8),
                ..PlannedRequest::default()
            };
            Some(Ok(Trajectory::from_vec(
                format!("session-{}", self.next),
                vec![req],
            )))
        }
    }

    batchbench_contract::register_workload! {
        name: "unplanned_sessions",
        description: "test: sessions of one request, count not announced",
        example: r#"{"sessions": 2}"#,
        config: Config,
        build: |c: Config, _ctx: &BuildContext| Ok::<_, PluginError>(Sessions { left: c.sessions, next: 0 }),
    }
}

#[test]
fn a_recorded_spec_reruns_the_same_bodies_and_flags_override_it() {
    let first = SimServer::recording("qwen");
    let r = first.agent("--agents 3 --tool-invocations 3 --input-tokens 40 --environment-tokens 12 --output-tokens 4 --dp-rank-perfect-routing --dp-rank-perfect-routing-num 2 --seed 99", &[]);
    assert_eq!(r.code, 0);
    let json = r.json.clone().unwrap_or_default();
    let spec = &json["run"]["spec"];
    assert_eq!(spec["seed"], 99);
    assert_eq!(spec["workload"]["name"], "synthetic_agents");
    let want = first.sorted_body_hashes();
    assert_eq!(want.len(), 9);

    // The summary JSON itself is a config file; --host points it at a new server.
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let recorded = dir.path().join("recorded.json");
    std::fs::write(&recorded, json.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let second = SimServer::recording("qwen");
    let url2 = second.url();
    let r2 = run_agent(&["--config", &recorded.display().to_string(), "--host", &url2]);
    assert_eq!(r2.code, 0);
    assert_eq!(
        second.sorted_body_hashes(),
        want,
        "the rerun sends the same bodies"
    );
    let spec2 = &r2.json.as_ref().expect("the rerun writes its JSON summary")["run"]["spec"];
    assert_eq!(spec2["routers"], spec["routers"]);
    assert_eq!(spec2["workload"], spec["workload"]);

    // A flag given over the file overrides only its own field.
    let third = SimServer::recording("qwen");
    let url3 = third.url();
    let r3 = run_agent(&cmd(
        "--config {} --host {} --agents 2",
        &[&recorded.display().to_string(), &url3],
    ));
    assert_eq!(r3.code, 0);
    assert_eq!(third.requests().len(), 6, "2 agents x 3 turns");
    let spec3 = &r3
        .json
        .as_ref()
        .expect("the third run writes its JSON summary")["run"]["spec"];
    assert_eq!(
        spec3["workload"]["config"]["input"],
        spec["workload"]["config"]["input"]
    );
    assert_eq!(spec3["routers"], spec["routers"]);
}

#[test]
fn print_config_writes_toml_that_runs_as_given() {
    let tok = qwen();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("print.txt");
    // --print-config prints to stdout; run in process and capture through a file
    // is not possible, so resolve the same flags through the library.
    let args = cmd(
        "batchbench --host sim:// --tokenizer-model {} --users 2 --requests-per-user 2 --input-tokens 24 --output-tokens 3 --stream --sglang --seed 5",
        &[&tok],
    );
    let spec = batchbench_run::commands::batchbench::resolve_args(args)
        .unwrap_or_else(|f| panic!("{:#}", f.error));
    let toml = batchbench_run::config::to_toml(&spec).unwrap_or_else(|f| panic!("{:#}", f.error));
    assert!(toml.contains("name = \"finite_batch\""), "{toml}");
    assert!(toml.contains("sglang = true"), "{toml}");
    std::fs::write(&out, &toml).unwrap_or_else(|e| panic!("{e}"));
    let back = batchbench_run::config::load(&out).unwrap_or_else(|f| panic!("{:#}", f.error));
    assert_eq!(back, spec);

    // The file runs against a server, with its own bodies.
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let r = run_batchbench(&["--config", &out.display().to_string(), "--host", &url]);
    assert_eq!(r.code, 0);
    assert_eq!(sim.requests().len(), 4);
    assert_eq!(r.csv[0]["users"], "2");
    assert_eq!(r.csv[0]["input_tokens"], "24");
    assert_eq!(r.csv[0]["sglang"], "true");
    assert_eq!(r.csv[0]["seed"], "5");
}

#[test]
fn a_workload_that_does_not_count_its_trajectories_runs_them_all_at_once() {
    let sim = SimServer::start(
        SimConfig {
            record_requests: true,
            ttft_base_ms: 150.0,
            ..SimConfig::default()
        },
        "qwen",
    );
    let (url, tok) = (sim.url(), qwen());
    let r = run_agent(&[
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--workload",
        "unplanned_sessions",
        "--workload-config",
        r#"{"sessions": 6}"#,
    ]);
    assert_eq!(r.code, 0);
    assert_eq!(r.count("successful_requests"), 6);
    assert_eq!(
        r.count("max_active_observed"),
        6,
        "every session is active at once unless --max-active-agents caps it"
    );
}

#[test]
fn an_output_path_that_cannot_be_written_is_bad_input_and_nothing_is_sent() {
    let sim = SimServer::recording("qwen");
    let (url, tok) = (sim.url(), qwen());
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let missing = dir.path().join("no-such-dir").join("r.csv");
    let code = batchbench_run::commands::batchbench::run(cmd(
        "batchbench -q --host {} --tokenizer-model {} --results-csv {}",
        &[&url, &tok, &missing.display().to_string()],
    ));
    assert_eq!(code, 2);
    // A CSV whose header belongs to other columns: the csv reporter refuses at
    // start, the others still start, and nothing is sent.
    let other = dir.path().join("other.csv");
    std::fs::write(&other, "a,b\n1,2\n").unwrap_or_else(|e| panic!("{e}"));
    let json = dir.path().join("s.json");
    let code = batchbench_run::commands::batchbench::run(cmd(
        "batchbench -q --host {} --tokenizer-model {} --results-csv {} --summary-json {}",
        &[
            &url,
            &tok,
            &other.display().to_string(),
            &json.display().to_string(),
        ],
    ));
    assert_eq!(code, 2);
    assert!(sim.requests().is_empty(), "nothing was sent");
    assert!(!Path::new(&json).exists());
}

#[test]
fn a_native_codec_loaded_with_plugin_sends_the_built_in_bodies_and_keeps_stream_timing() {
    let tok = qwen();
    let lib = batchbench_tests::plugin_artifact("native_codec")
        .display()
        .to_string();
    let flags = words(
        "--agents 2 --tool-invocations 3 --input-tokens 32 --environment-tokens 8 --output-tokens 6 --stream --seed 41",
    );
    let run = |extra: &[&str]| {
        let sim = SimServer::recording("qwen");
        let url = sim.url();
        let mut args = vec!["--host", url.as_str(), "--tokenizer-model", tok.as_str()];
        args.extend_from_slice(&flags);
        args.extend_from_slice(extra);
        let r = run_agent(&args);
        assert_eq!(r.code, 0, "{extra:?}");
        (sim.sorted_body_hashes(), r)
    };
    let (builtin, _) = run(&[]);
    let (native, r) = run(&["--plugin", &lib, "--codec", "openai_chat_native"]);
    assert_eq!(native, builtin, "the native codec writes the same bodies");
    assert_eq!(r.count("successful_requests"), 6);
    let ttft = &r.summary("ttft");
    assert_eq!(ttft["count"], 6, "every streamed reply has a TTFT: {ttft}");
    assert!(r.summary("itl")["count"].as_u64().unwrap_or(0) > 0);
    let spec = &r.json.as_ref().unwrap_or(&serde_json::Value::Null)["run"]["spec"];
    assert_eq!(spec["codec"]["name"], "openai_chat_native");
}

#[test]
fn flags_over_a_file_keep_the_workload_consistent() {
    use batchbench_run::commands::{agent, batchbench};
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/trajectory-replay/plans-v2.jsonl")
        .display()
        .to_string();
    let replay = agent::resolve_args(["batchbench-agent", "--agent-plans-jsonl", &manifest])
        .unwrap_or_else(|f| panic!("{:#}", f.error));
    let file = dir.path().join("replay.toml");
    let text = batchbench_run::config::to_toml(&replay).unwrap_or_else(|f| panic!("{:#}", f.error));
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let f = file.display().to_string();

    // Admission and overheads given over a replay file reach the replay's own
    // checks as well as the engine.
    let s = agent::resolve_args(cmd(
        "batchbench-agent --config {} --admission open-loop --replay-initial-overhead-tokens 3",
        &[&f],
    ))
    .unwrap_or_else(|f| panic!("{:#}", f.error));
    assert_eq!(s.template.initial_overhead_tokens, 3);
    assert_eq!(s.workload.config["initial_overhead_tokens"], 3);
    assert_eq!(s.workload.config["order_by_start"], true);

    // A shape flag of another workload is refused, the log-normal ones too.
    for flag in [
        ["--input-tokens", "9", "--seed", "1"],
        [
            "--input-lognorm-median",
            "9",
            "--input-lognorm-sigma",
            "0.5",
        ],
    ] {
        let e = agent::resolve_args([
            "batchbench-agent",
            "--config",
            &f,
            flag[0],
            flag[1],
            flag[2],
            flag[3],
        ])
        .err()
        .unwrap_or_else(|| panic!("{flag:?} was accepted"));
        assert!(e.is_bad_input());
        assert!(format!("{:#}", e.error).contains(flag[0]), "{:#}", e.error);
    }

    // --users over a file whose workload is a plugin sets its concurrency.
    let plugin = batchbench::resolve_args([
        "batchbench",
        "--workload",
        "request_bodies",
        "--workload-config",
        r#"{"users": 2, "requests_per_user": 1, "requests": []}"#,
    ])
    .unwrap_or_else(|f| panic!("{:#}", f.error));
    let pfile = dir.path().join("plugin.toml");
    let text = batchbench_run::config::to_toml(&plugin).unwrap_or_else(|f| panic!("{:#}", f.error));
    std::fs::write(&pfile, text).unwrap_or_else(|e| panic!("{e}"));
    let p = pfile.display().to_string();
    let s = batchbench::resolve_args(["batchbench", "--config", &p, "--users", "7"])
        .unwrap_or_else(|f| panic!("{:#}", f.error));
    assert_eq!(s.admission.max_active, Some(7));
}

#[test]
fn a_dry_run_builds_every_plugin_so_a_bad_codec_is_refused() {
    let code = batchbench_run::commands::batchbench::run([
        "batchbench",
        "--dry-run",
        "--codec",
        "no_such_codec",
    ]);
    assert_eq!(code, 2);
}
