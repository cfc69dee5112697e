//! Request bodies are pinned: fixed-seed runs of both commands and of trajectory
//! replay send exactly the bodies recorded in `tests/golden/request-bodies.txt`
//! (SHA-256 of every body, sorted per scenario). A change that alters a body, or
//! how many are sent, fails here; an intended change re-records the file with
//! `BATCHBENCH_BLESS=1 cargo test -p batchbench-tests --test e2e bodies`.
//!
//! The recorded list predates the run-spec refactor: this test, run against
//! the tree before it (commit 08ae3f6, its own binaries and simulator, with
//! only a SHA-256 added to that simulator's request log), wrote a file
//! identical to this one. Re-record it only for a change that means to alter
//! bodies, and say so in the commit.

use batchbench_tests::{
    SimServer, replay_example, run_agent, run_batchbench, tokenizer_path, words,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/request-bodies.txt")
}

/// Which command a scenario runs.
#[derive(Clone, Copy)]
enum Tool {
    Batch,
    Agent,
}

/// The fixed-seed scenarios: each name maps to its command and flags (the
/// simulator's URL and the Qwen tokenizer are added).
fn scenarios() -> Vec<(&'static str, Tool, Vec<String>)> {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    vec![
        (
            "batchbench-exact-prompts",
            Tool::Batch,
            s(&words(
                "--users 4 --requests-per-user 3 --input-tokens 48 --input-vary 8 --input-prefix-overlap 0.25 --output-tokens 6 --seed 11",
            )),
        ),
        (
            "batchbench-stream-sglang-lognormal-output",
            Tool::Batch,
            s(&words(
                "--users 3 --requests-per-user 2 --stream --sglang --ignore-eos --output-lognorm-median 8 --output-lognorm-sigma 0.5 --output-lognorm-max 20 --seed 12",
            )),
        ),
        (
            "agent-synthetic-prefix-dp",
            Tool::Agent,
            s(&words(
                "--agents 3 --tool-invocations 3 --input-tokens 64 --environment-tokens 24 --output-tokens 6 --user-prefix bench --dp-rank-perfect-routing --dp-rank-perfect-routing-num 2 --seed 5",
            )),
        ),
        (
            "agent-synthetic-lognormal-stream",
            Tool::Agent,
            s(&words(
                "--agents 2 --max-active-agents 1 --input-lognorm-median 40 --input-lognorm-sigma 0.3 --tool-invocations-lognorm-median 3 --tool-invocations-lognorm-sigma 0.4 --tool-invocations-lognorm-max 5 --environment-tokens 16 --output-tokens 5 --stream --seed 6",
            )),
        ),
        (
            "agent-replay-v1",
            Tool::Agent,
            vec![
                "--agent-plans-jsonl".into(),
                replay_example("plans.jsonl"),
                "--seed".into(),
                "7".into(),
                "--time-scale".into(),
                "50".into(),
            ],
        ),
        (
            "agent-replay-v2",
            Tool::Agent,
            vec![
                "--agent-plans-jsonl".into(),
                replay_example("plans-v2.jsonl"),
                "--seed".into(),
                "8".into(),
                "--time-scale".into(),
                "50".into(),
                "--replay-initial-overhead-tokens".into(),
                "3".into(),
            ],
        ),
    ]
}

/// Runs every scenario and returns its sorted body hashes.
fn record() -> BTreeMap<String, Vec<String>> {
    let tok = tokenizer_path("qwen").display().to_string();
    let mut out = BTreeMap::new();
    for (name, tool, flags) in scenarios() {
        let sim = SimServer::recording("qwen");
        let url = sim.url();
        let mut args: Vec<&str> = vec!["--host", &url, "--tokenizer-model", &tok];
        args.extend(flags.iter().map(String::as_str));
        let r = match tool {
            Tool::Batch => run_batchbench(&args),
            Tool::Agent => run_agent(&args),
        };
        assert_eq!(r.code, 0, "{name}: exit code");
        let mut hashes: Vec<String> = sim.requests().into_iter().map(|l| l.body_sha256).collect();
        assert!(!hashes.is_empty(), "{name}: nothing was sent");
        hashes.sort();
        out.insert(name.to_owned(), hashes);
    }
    out
}

fn render(m: &BTreeMap<String, Vec<String>>) -> String {
    let mut s = String::from(
        "# SHA-256 of every request body of fixed-seed runs, sorted per scenario.\n\
         # Written by tests/tests/e2e/bodies.rs with BATCHBENCH_BLESS=1.\n",
    );
    for (name, hashes) in m {
        s.push_str(&format!("[{name}]\n"));
        for h in hashes {
            s.push_str(h);
            s.push('\n');
        }
    }
    s
}

#[test]
fn fixed_seed_runs_send_the_recorded_bodies() {
    let got = render(&record());
    let path = golden_path();
    if std::env::var_os("BATCHBENCH_BLESS").is_some() {
        std::fs::write(&path, &got).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if got != want {
        let diff: Vec<String> = want
            .lines()
            .zip(got.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}: recorded {a}, now {b}", i + 1))
            .collect();
        panic!(
            "request bodies changed ({} recorded lines, {} now):\n{}",
            want.lines().count(),
            got.lines().count(),
            diff.join("\n")
        );
    }
}
