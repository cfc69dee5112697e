//! Sharded runs (`--shard I/N`) and `merge`: N shards of one seed send exactly
//! the unsharded run's request bodies (compared through the simulator's
//! request log), their arrivals together are the unsharded schedule, and the
//! merge of their results directories adds counts and histograms exactly and
//! refuses a shard that is missing, doubled or of another run.

use batchbench_engine::measurement::metrics::Latency;
use batchbench_run::exit::EXIT_BAD_INPUT;
use batchbench_tests::{
    SimServer, cmd, qwen, read_json, read_jsonl, run_agent, run_batchbench, words,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

const SHARDS: u32 = 4;

#[derive(Clone, Copy)]
enum Tool {
    Batch,
    Agent,
}

fn run<S: AsRef<str>>(tool: Tool, args: &[S]) -> batchbench_tests::RunResult {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    match tool {
        Tool::Batch => run_batchbench(args),
        Tool::Agent => run_agent(args),
    }
}

/// A v2 replay manifest of 12 sessions: the example's two, repeated with
/// their own ids, seeds and start offsets (the tool and system blocks stay
/// shared).
fn replay_manifest(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("examples/trajectory-replay/plans-v2.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = String::new();
    for k in 0..12 {
        let line = lines[k % lines.len()]
            .replace("\"7f3a-", &format!("\"7f3a{k}-"))
            .replace("\"9c1d-", &format!("\"9c1d{k}-"));
        let mut v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}"));
        v["trajectory_id"] = Value::from(format!("session-{k}"));
        v["start_after_ms"] = Value::from(k * 40);
        out.push_str(&v.to_string());
        out.push('\n');
    }
    let p = dir.join("plans-v2-12.jsonl");
    std::fs::write(&p, out).unwrap_or_else(|e| panic!("{e}"));
    p
}

/// The request bodies `args` sends against a recording simulator: once
/// unsharded, and over four shards run one after another against another.
fn bodies<S: AsRef<str>>(tool: Tool, args: &[S]) -> (Vec<String>, Vec<String>) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let tok = qwen();
    let whole = SimServer::recording("qwen");
    let url = whole.url();
    let mut argv = vec!["--host", &url, "--tokenizer-model", &tok];
    argv.extend(args);
    assert_eq!(run(tool, &argv).code, 0, "unsharded {args:?}");

    let sharded = SimServer::recording("qwen");
    let url = sharded.url();
    for i in 0..SHARDS {
        let shard = format!("{i}/{SHARDS}");
        let mut argv = vec!["--host", &url, "--tokenizer-model", &tok, "--shard", &shard];
        argv.extend(args);
        assert_eq!(run(tool, &argv).code, 0, "shard {shard} {args:?}");
    }
    (whole.sorted_body_hashes(), sharded.sorted_body_hashes())
}

#[test]
fn four_shards_send_exactly_the_unsharded_runs_request_bodies() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let manifest = replay_manifest(tmp.path());
    let manifest = manifest.display().to_string();
    let scenarios: Vec<(&str, Tool, Vec<&str>)> = vec![
        (
            "64 users, closed loop",
            Tool::Batch,
            words(
                "--users 64 --requests-per-user 2 --input-tokens 48 --input-prefix-overlap 0.5 --output-tokens 4 --seed 21",
            ),
        ),
        (
            "64 users at a request rate",
            Tool::Batch,
            words(
                "--users 64 --requests-per-user 2 --input-tokens 40 --output-tokens 4 --request-rate 3000 --seed 22",
            ),
        ),
        (
            "synthetic agents routed to DP ranks",
            Tool::Agent,
            words(
                "--agents 16 --tool-invocations 3 --input-tokens 64 --environment-tokens 24 --output-tokens 6 --dp-rank-perfect-routing --dp-rank-perfect-routing-num 4 --seed 23",
            ),
        ),
        (
            "a v2 replay at its offsets",
            Tool::Agent,
            vec![
                "--agent-plans-jsonl",
                &manifest,
                "--admission",
                "open-loop",
                "--time-scale",
                "20",
                "--replay-initial-overhead-tokens",
                "3",
                "--seed",
                "24",
            ],
        ),
        (
            "a v2 replay at a session rate",
            Tool::Agent,
            vec![
                "--agent-plans-jsonl",
                &manifest,
                "--session-rate",
                "500",
                "--replay-initial-overhead-tokens",
                "3",
                "--seed",
                "25",
            ],
        ),
    ];
    for (name, tool, args) in scenarios {
        let (whole, sharded) = bodies(tool, &args);
        assert!(whole.len() >= 24, "{name}: {} requests", whole.len());
        assert_eq!(
            whole, sharded,
            "{name}: the shards' bodies are not the unsharded run's"
        );
    }
}

/// Runs the four shards of `args` (and the unsharded run) into results
/// directories under `root`.
fn shard_dirs<S: AsRef<str>>(root: &Path, args: &[S]) -> (PathBuf, Vec<PathBuf>) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let tok = qwen();
    let whole = root.join("whole");
    let w = whole.display().to_string();
    let mut argv = cmd(
        "--host sim:// --tokenizer-model {} --output-dir {}",
        &[&tok, &w],
    );
    argv.extend(args.iter().map(|a| a.to_string()));
    assert_eq!(run_batchbench(&argv).code, 0);
    let dirs: Vec<PathBuf> = (0..SHARDS)
        .map(|i| root.join(format!("shard-{i}")))
        .collect();
    for (i, d) in dirs.iter().enumerate() {
        let shard = format!("{i}/{SHARDS}");
        let d = d.display().to_string();
        let mut argv = cmd(
            "--host sim:// --tokenizer-model {} --shard {} --output-dir {}",
            &[&tok, &shard, &d],
        );
        argv.extend(args.iter().map(|a| a.to_string()));
        assert_eq!(run_batchbench(&argv).code, 0, "shard {shard}");
    }
    (whole, dirs)
}

fn merge(dirs: &[PathBuf], out: &Path) -> Result<batchbench_run::merge::Merged, String> {
    let output = batchbench_contract::spec::OutputSpec {
        output_dir: Some(out.to_owned()),
        ..Default::default()
    };
    batchbench_run::merge::merge(
        dirs,
        output,
        batchbench_run::commands::batchbench::FRONT.profile,
        false,
    )
    .map_err(|f| {
        assert!(f.is_bad_input(), "{f:?}");
        format!("{f:?}")
    })
}

fn family(dir: &Path, name: &str) -> Latency {
    let h = read_json(&dir.join("histograms.json")).unwrap_or_default();
    let buckets: Vec<[u64; 2]> =
        serde_json::from_value(h["families"][name].clone()).unwrap_or_default();
    Latency::from_buckets(&buckets)
}

#[test]
fn a_merge_adds_counts_and_histograms_and_works_with_report_and_compare() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (whole, dirs) = shard_dirs(
        tmp.path(),
        &words(
            "--users 64 --requests-per-user 3 --input-tokens 32 --output-tokens 12 --stream --seed 31",
        ),
    );
    let out = tmp.path().join("merged");
    let m = merge(&dirs, &out).unwrap_or_else(|e| panic!("{e}"));
    let docs: Vec<Value> = dirs
        .iter()
        .map(|d| read_json(&d.join("run.json")).unwrap_or_default())
        .collect();
    let sum = |k: &str| -> u64 {
        docs.iter()
            .map(|d| d["summary"][k].as_u64().unwrap_or_default())
            .sum()
    };
    // Counts add, and make the unsharded run's.
    let s = &m.summary;
    assert_eq!(s.total_requests, sum("total_requests"));
    assert_eq!(s.total_requests, 192);
    assert_eq!(s.successful_requests, sum("successful_requests"));
    assert_eq!(s.total_prompt_tokens, sum("total_prompt_tokens"));
    assert_eq!(s.total_completion_tokens, sum("total_completion_tokens"));
    assert_eq!(s.trajectories_completed, 64);
    let unsharded = read_json(&whole.join("run.json")).unwrap_or_default();
    assert_eq!(
        s.total_prompt_tokens,
        unsharded["summary"]["total_prompt_tokens"]
            .as_u64()
            .unwrap_or(0)
    );

    // The merged percentiles are those of one histogram of every shard's
    // per-request records.
    let mut all = Latency::default();
    let mut ttft = Latency::default();
    for d in &dirs {
        for l in read_jsonl(&d.join("requests.jsonl")) {
            all.record_us((l["latency_ms"].as_f64().unwrap_or(0.0) * 1000.0).round() as u64);
            ttft.record_us((l["ttft_ms"].as_f64().unwrap_or(0.0) * 1000.0).round() as u64);
        }
    }
    let close = |a: f64, b: f64, what: &str| {
        // HDR precision of three significant figures, and a microsecond.
        assert!((a - b).abs() <= b.abs() * 2e-3 + 1e-3, "{what}: {a} vs {b}");
    };
    let lat = s.latency.unwrap_or_default();
    let want = all.stats().unwrap_or_default();
    assert_eq!(lat.count, want.count);
    for (a, b, what) in [
        (lat.p50_ms, want.p50_ms, "p50"),
        (lat.p90_ms, want.p90_ms, "p90"),
        (lat.p99_ms, want.p99_ms, "p99"),
        (lat.max_ms, want.max_ms, "max"),
    ] {
        close(a, b, what);
    }
    close(
        s.ttft.unwrap_or_default().p99_ms,
        ttft.stats().unwrap_or_default().p99_ms,
        "ttft p99",
    );
    // Inter-token latency, which no record carries, adds bucket by bucket.
    let mut itl = Latency::default();
    for d in &dirs {
        itl.add(&family(d, "itl"));
    }
    assert!(!itl.is_empty());
    assert_eq!(family(&out, "itl").buckets(), itl.buckets());
    assert_eq!(s.itl.unwrap_or_default().count, itl.len());

    // The merged directory is a run's: it records its shards, its spec is the
    // unsharded run's, and its files add up.
    let doc = read_json(&out.join("run.json")).unwrap_or_default();
    let held: Vec<u64> = doc["run"]["merged_shards"]
        .as_array()
        .unwrap_or_else(|| panic!("{doc}"))
        .iter()
        .map(|m| m["index"].as_u64().unwrap_or(99))
        .collect();
    assert_eq!(held, [0, 1, 2, 3]);
    assert!(doc["run"]["spec"].get("shard").is_none(), "{doc}");
    assert_eq!(read_jsonl(&out.join("requests.jsonl")).len(), 192);
    assert_eq!(read_jsonl(&out.join("trajectories.jsonl")).len(), 64);
    let ts = read_json(&out.join("timeseries.json")).unwrap_or_default();
    let w = ts["interval_secs"].as_f64().unwrap_or_default();
    let sent: f64 = ts["send_rate"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_f64).sum::<f64>())
        .unwrap_or_default()
        * w;
    assert!((sent - 192.0).abs() < 1e-6, "{sent}");
    // report and compare read it as a single run's.
    let html = tmp.path().join("report.html");
    let written = batchbench_run::report::write(&[out.clone(), whole.clone()], &html)
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(written.charts > 0);
    let base = batchbench_results::load_run(&whole).unwrap_or_else(|e| panic!("{e}"));
    let new = batchbench_results::load_run(&out).unwrap_or_else(|e| panic!("{e}"));
    let rows = batchbench_results::compare::rows(&base, &new);
    assert!(!rows.is_empty());
}

#[test]
fn a_merge_refuses_a_missing_doubled_or_foreign_shard_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let args = words("--users 8 --input-tokens 16 --output-tokens 2 --seed 41");
    let (whole, dirs) = shard_dirs(tmp.path(), &args);
    let out = tmp.path().join("merged");
    let e = merge(&dirs[..3], &out).unwrap_err();
    assert!(e.contains("1 of the 4 shards is missing: 3"), "{e}");
    let doubled = [
        dirs[0].clone(),
        dirs[1].clone(),
        dirs[1].clone(),
        dirs[2].clone(),
    ];
    let e = merge(&doubled, &out).unwrap_err();
    assert!(e.contains("shard 1/4 is given twice"), "{e}");
    let e = merge(&[whole.clone(), dirs[1].clone()], &out).unwrap_err();
    assert!(e.contains("not a shard's results"), "{e}");
    // Shard 3 of a run with another seed.
    let foreign = tmp.path().join("foreign");
    let f = foreign.display().to_string();
    let tok = qwen();
    let mut argv = vec![
        "--host",
        "sim://",
        "--tokenizer-model",
        &tok,
        "--shard",
        "3/4",
        "--output-dir",
        &f,
    ];
    argv.extend(args.iter().map(|a| if *a == "41" { "42" } else { a }));
    assert_eq!(run_batchbench(&argv).code, 0);
    let mixed = [dirs[0].clone(), dirs[1].clone(), dirs[2].clone(), foreign];
    let e = merge(&mixed, &out).unwrap_err();
    assert!(e.contains("of another run") && e.contains("seed"), "{e}");
    assert!(!out.exists(), "a refused merge wrote {}", out.display());
    // A shard whose requests.jsonl was cut short names the file and the
    // line, and leaves nothing behind.
    let cut = dirs[2].join("requests.jsonl");
    let text = std::fs::read_to_string(&cut).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&cut, &text[..text.len() - 5]).unwrap_or_else(|e| panic!("{e}"));
    let e = merge(&dirs, &out).unwrap_err();
    assert!(
        e.contains("requests.jsonl:") && e.contains("truncated"),
        "{e}"
    );
    assert!(!out.exists(), "a failed merge left {}", out.display());
    let staged = std::fs::read_dir(tmp.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("merging"))
        .count();
    assert_eq!(staged, 0, "a failed merge left its staging directory");
    // A missing directory names itself.
    let e = merge(&[tmp.path().join("nowhere")], &out).unwrap_err();
    assert!(e.contains("nowhere"), "{e}");
}

/// Kolmogorov-Smirnov statistic of `xs` against the exponential of `rate`.
fn ks_exponential(xs: &[f64], rate: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len() as f64;
    v.iter()
        .enumerate()
        .map(|(i, x)| {
            let f = 1.0 - (-rate * x).exp();
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

fn intended(dir: &Path) -> Vec<f64> {
    let mut t: Vec<f64> = read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .map(|l| l["intended_ms"].as_f64().unwrap_or(f64::NAN))
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

#[test]
fn four_poisson_shards_at_a_quarter_rate_are_the_one_stream() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rate = 2000.0;
    let (whole, dirs) = shard_dirs(
        tmp.path(),
        &words(
            "--users 2000 --input-tokens 16 --output-tokens 2 --request-rate 2000 --arrival poisson --seed 51",
        ),
    );
    let mut union = Vec::new();
    for d in &dirs {
        let mine = intended(d);
        // Each shard releases a quarter of the rate.
        let span = (mine[mine.len() - 1] - mine[0]) / 1000.0;
        let r = (mine.len() - 1) as f64 / span;
        assert!(
            (r / (rate / 4.0) - 1.0).abs() < 0.15,
            "{}: {r}/s",
            d.display()
        );
        union.extend(mine);
    }
    union.sort_by(f64::total_cmp);
    let one = intended(&whole);
    assert_eq!(union.len(), one.len());
    // The union is the unsharded schedule, arrival for arrival...
    for (a, b) in union.iter().zip(&one) {
        assert!((a - b).abs() < 1e-3, "{a} vs {b}");
    }
    // ...so its gaps pass the one stream's Kolmogorov-Smirnov test.
    let gaps: Vec<f64> = std::iter::once(union[0])
        .chain(union.windows(2).map(|w| w[1] - w[0]))
        .map(|ms| ms / 1000.0)
        .collect();
    let critical = 1.628 / (gaps.len() as f64).sqrt();
    let d = ks_exponential(&gaps, rate);
    assert!(d < critical, "D = {d}, critical {critical}");
    assert!(ks_exponential(&gaps, rate / 4.0) > critical);
}

#[test]
fn a_start_time_starts_the_clock_and_records_the_skew() {
    let tok = qwen();
    // A start 1.5 s ahead, else (a machine busy enough that the run was not
    // ready by then: 1.5 s late with both cores busy beside the suite) one
    // further ahead. Whichever: the clock starts at the stamp or, late, at
    // once with the skew recorded.
    let mut waited = false;
    for lead in [1.5, 6.0, 20.0] {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let stamp = batchbench_contract::timefmt::rfc3339(now + lead);
        let d = tmp.path().join("run");
        let ds = d.display().to_string();
        let r = run_batchbench(&cmd(
            "--host sim:// --tokenizer-model {} --start-at {} --output-dir {}",
            &[&tok, &stamp, &ds],
        ));
        assert_eq!(r.code, 0);
        let doc = read_json(&d.join("run.json")).unwrap_or_default();
        let started = doc["run"]["started_unix"].as_f64().unwrap_or(0.0);
        let skew = doc["run"]["start_skew_ms"].as_f64().unwrap_or(f64::NAN);
        // Millisecond stamps: the clock starts at the stamp, not before it.
        let stamped = batchbench_contract::timefmt::parse_ms(&stamp).unwrap_or(0) as f64 / 1000.0;
        assert!(started >= stamped, "{started} < {stamped}");
        assert!(skew >= 0.0, "skew {skew} ms");
        assert!((started - stamped - skew / 1000.0).abs() < 1e-6);
        // Ready before the stamp: it waited for it, and started on time.
        if skew < 1000.0 {
            waited = true;
            break;
        }
        eprintln!("not ready {lead} s ahead (started {skew:.0} ms late): further ahead");
    }
    assert!(waited, "no run was ready 20 s ahead of its start time");
    // A stamp without a zone is refused before anything is sent.
    let r = run_batchbench(&cmd(
        "--host sim:// --tokenizer-model {} --start-at 2026-01-01T00:00:00",
        &[&tok],
    ));
    assert_eq!(r.code, EXIT_BAD_INPUT);
}

/// A mix's shards pick each conversation's model as the unsharded run does
/// (by the global agent), and a merge tallies each model again from the
/// records: the merged models are the unsharded run's.
#[test]
fn a_mixs_shards_merge_into_the_unsharded_runs_models() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (whole, dirs) = shard_dirs(
        tmp.path(),
        &words(
            "--users 32 --requests-per-user 4 --input-tokens 16 --output-tokens 3 --seed 31 --model-mix base=0.6,lora@base=0.4 --stream --slo itl_p90{model=lora}<=10s",
        ),
    );
    let out = tmp.path().join("merged");
    let m = merge(&dirs, &out).unwrap_or_else(|e| panic!("{e}"));
    let counts = |models: &[Value]| -> Vec<(String, u64)> {
        models
            .iter()
            .map(|x| {
                (
                    x["model"].as_str().unwrap_or_default().to_owned(),
                    x["successful_requests"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    let unsharded = read_json(&whole.join("run.json")).unwrap_or_default();
    let want = counts(
        unsharded["summary"]["models"]
            .as_array()
            .map_or(&[], Vec::as_slice),
    );
    let merged = serde_json::to_value(&m.summary.models).unwrap_or_default();
    let got = counts(merged.as_array().map_or(&[], Vec::as_slice));
    assert_eq!(want.len(), 2, "{unsharded}");
    assert_eq!(got, want);
    assert_eq!(want.iter().map(|(_, n)| n).sum::<u64>(), 128);
    // Each model's inter-token latency (the records do not hold the gaps):
    // the merged family is the shards' together, and the bound naming the
    // model is judged on it.
    let lora = batchbench_engine::measurement::metrics::model_itl_family("lora");
    let shards: u64 = dirs.iter().map(|d| family(d, &lora).len() as u64).sum();
    assert!(shards >= 100, "{shards} gaps of lora");
    assert_eq!(family(&out, &lora).len() as u64, shards);
    assert_eq!(family(&whole, &lora).len() as u64, shards);
    let verdict = serde_json::to_value(&m.summary.slo).unwrap_or_default();
    assert_eq!(verdict["bounds"][0]["met"], true, "{verdict}");
}
