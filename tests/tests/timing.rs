//! Timing conformance: the client's time to first token and every inter-token
//! latency against the simulator's own stamps of when it received each request
//! and wrote each chunk (`--stamps`), for every streamed codec, on fresh and on
//! kept connections, with one and four client threads, in a closed loop and at
//! 1,000 requests per second.
//!
//! The bound is loose enough for a busy two-core machine running a debug build
//! (a few milliseconds), and tight enough to catch what the simulator's missing
//! TCP_NODELAY did: tokens held back by the client's delayed ACK, about 40 ms,
//! on every request after a connection's first. `bench/timing.sh` prints the
//! error's distribution from a release build against the 0.5 ms target.
//!
//! A binary of its own whose cases run beside nothing: a timing figure
//! measured while other tests share the two cores measures them. They are
//! left out of `cargo test --workspace` (ignored) and `.ci/run` runs them
//! alone, one at a time, after the suite, ahead of other work on the machine
//! where the system allows:
//!
//! ```text
//! nice -n -10 cargo test -p batchbench-tests --test timing -- --ignored --test-threads 1
//! ```
//!
//! (A lock inside the binary kept its two cases from overlapping, yet the
//! open loop at 1,000 requests/s failed under the workspace's default thread
//! count on a slower two-core machine, 2 runs of 2, and passed alone, 3 of 3.)
//!
//! A case that finds the machine busy with other work (CPU-bound probes, one
//! per core, just before or after its run get under 85% of each
//! core) says so and judges nothing: its figures would be the machine's
//! scheduler. A run that says its own client fell behind has its tails
//! judged by that verdict, not by the bounds: its medians still are.
//!
//! Here too: the time to the first answer token of a reasoning model against
//! its schedule, and where `--warmup auto` cuts real runs. A run steady from
//! the start, timed while both cores were busy with other work, showed a 7%
//! TTFT transient over its first seconds (the machine's, not the server's),
//! and the cut followed it.

use batchbench_simulator::SimConfig;
use batchbench_tests::{
    SimServer, cmd, machine_share, read_jsonl, run_agent, run_batchbench, tokenizer_path,
};
use serde_json::Value;
use std::collections::BTreeMap;

/// Every codec that streams.
const CODECS: [&str; 5] = [
    "openai_chat",
    "openai_completions",
    "openai_responses",
    "anthropic_messages",
    "sglang_generate",
];

/// The client's figures against the server's, in milliseconds.
#[derive(Debug, Default)]
struct Errors {
    /// |client TTFT - (first chunk written - request received)|.
    ttft: Vec<f64>,
    /// |client gap - server gap|, one per token after the first.
    itl: Vec<f64>,
    /// The server's own gaps against its configured decode interval.
    schedule: Vec<f64>,
    /// The server's mean gap over each reply against the decode interval:
    /// its schedule as a whole, whatever one late wake-up did to two gaps.
    pace: Vec<f64>,
    /// Requests sent on a connection that had carried one before.
    later_on_connection: usize,
    /// The run's own load verdict, where it said its client decided figures
    /// (fell behind its schedule, kept its cores busy).
    client_verdict: Option<String>,
    /// The run's `client_bound` message, where it said its client, not the
    /// server, was the limit, and the share of the time its threads were busy.
    client_bound: Option<(String, f64)>,
    /// The run's length in seconds (`total_duration_seconds`).
    secs: f64,
    /// Requests the run said it sent over 1 ms behind schedule.
    late_sends: u64,
    /// Where the run's verdict said its process kept its cores busy (its
    /// CPU, not the server, may have limited it): the share it said.
    cores_busy: Option<f64>,
    /// The least share of each core the probes got just before and just
    /// after the run.
    core_share: f64,
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(((s.len() as f64 - 1.0) * q).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// Runs `codec` streamed against a stamping simulator (TTFT 3 ms, 2 ms per
/// token) with `extra` flags, and compares every request's client times with
/// the server's stamps. `users` x `per_user` requests of `output` tokens; each
/// user is one routing key, whose requests go out in order.
fn measure<S: AsRef<str>>(
    codec: &str,
    users: u32,
    per_user: u32,
    output: usize,
    extra: &[S],
) -> Errors {
    let extra: Vec<&str> = extra.iter().map(AsRef::as_ref).collect();
    let extra = extra.as_slice();
    let cfg = SimConfig {
        stamps: true,
        record_requests: true,
        ttft_base_ms: 3.0,
        decode_ms_per_token: 2.0,
        ..SimConfig::default()
    };
    let sim = SimServer::start(cfg, "qwen");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("requests.jsonl");
    let (url, tok, p) = (
        sim.url(),
        tokenizer_path("qwen").display().to_string(),
        path.display().to_string(),
    );
    let (users_s, per_user_s, output_s) =
        (users.to_string(), per_user.to_string(), output.to_string());
    let mut args = vec![
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--codec",
        codec,
        "--stream",
        "--token-times",
        "--users",
        &users_s,
        "--requests-per-user",
        &per_user_s,
        "--input-tokens",
        "32",
        "--output-tokens",
        &output_s,
        "--router",
        "user_tag",
        "--router-config",
        r#"{"prefix": "u"}"#,
        "--requests-jsonl",
        &p,
    ];
    args.extend_from_slice(extra);
    let what = format!("{codec} {extra:?}");
    let before = machine_share(PROBE);
    let r = run_batchbench(&args);
    let after = machine_share(PROBE);
    assert_eq!(r.code, 0, "{what}");
    let n = u64::from(users * per_user);
    assert_eq!(r.count("successful_requests"), n, "{what}");
    assert_eq!(r.count("retries"), 0, "{what}");

    // The server's log by user, in arrival order; the client's lines by
    // agent, in request order.
    let server = sim.requests_by_key();
    let mut client: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for l in read_jsonl(&path) {
        let key = format!("u-{}", l["agent_id"]);
        client.entry(key).or_default().push(l);
    }
    for v in client.values_mut() {
        v.sort_by_key(|l| l["request_index"].as_u64());
    }
    assert_eq!(server.len(), client.len(), "{what}");

    let mut e = Errors {
        client_verdict: r.summary("load")["verdict"]
            .as_str()
            .filter(|v| v.contains("the client fell behind") || v.contains("of its cores busy"))
            .map(str::to_owned),
        client_bound: r.summary("client_bound")["message"].as_str().map(|m| {
            let dropped = r.summary("client_bound")["reasons"]
                .as_array()
                .is_some_and(|v| v.iter().any(|r| r == "dropped"));
            // Arrivals dropped are the client's whatever its threads did.
            let busy = r.summary("client")["busy_share"].as_f64().unwrap_or(0.0);
            (m.to_owned(), if dropped { 1.0 } else { busy })
        }),
        late_sends: r.summary("load")["late_sends"].as_u64().unwrap_or(0),
        secs: r.summary("total_duration_seconds").as_f64().unwrap_or(0.0),
        cores_busy: r.summary("load")["verdict"]
            .as_str()
            .and_then(|v| v.split_once("% of its cores busy"))
            .map(|(before, _)| {
                // "... kept 95% of its cores busy": the share it gives.
                let pct = before.rsplit(' ').next().unwrap_or_default();
                pct.parse::<f64>().unwrap_or(0.0) / 100.0
            }),
        core_share: before.min(after),
        ..Errors::default()
    };
    for (user, lines) in &client {
        let logs = &server[user];
        assert_eq!(logs.len(), lines.len(), "{what} {user}");
        for (l, s) in lines.iter().zip(logs) {
            let received = s.received_us.unwrap_or_else(|| panic!("{what}: {s:?}"));
            let chunks: Vec<f64> = s.chunk_us.iter().map(|us| us / 1000.0).collect();
            let tokens: Vec<f64> = l["token_ms"]
                .as_array()
                .unwrap_or_else(|| panic!("{what}: no token_ms in {l}"))
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            assert_eq!(tokens.len(), chunks.len(), "{what}: {l} {s:?}");
            assert_eq!(tokens.len(), output, "{what}: one chunk per token");
            let ttft = l["ttft_ms"].as_f64().unwrap_or_else(|| panic!("{l}"));
            assert!((ttft - tokens[0]).abs() < 1e-6, "{what}: {l}");
            e.ttft.push((ttft - (chunks[0] - received / 1000.0)).abs());
            for i in 1..tokens.len() {
                let client_gap = tokens[i] - tokens[i - 1];
                let server_gap = chunks[i] - chunks[i - 1];
                e.itl.push((client_gap - server_gap).abs());
                e.schedule.push((server_gap - 2.0).abs());
            }
            if chunks.len() > 1 {
                let mean = (chunks[chunks.len() - 1] - chunks[0]) / (chunks.len() - 1) as f64;
                e.pace.push((mean - 2.0).abs());
            }
            if l["reconnects"] == 0 && l["request_index"].as_u64() > Some(0) {
                e.later_on_connection += 1;
            }
        }
    }
    e
}

/// How long a probe of the machine runs, before and after each measured run.
const PROBE: std::time::Duration = std::time::Duration::from_millis(300);

/// Under this share of each core for CPU-bound probes (one per core), the
/// machine is busy with other work (one busy loop on two cores leaves about
/// 0.67, two leave 0.5): what a timing case would measure is the machine's
/// scheduler, so it says so and judges nothing, as the instructions gate
/// does. (One probe thread alone still got a whole core beside one busy
/// loop, while the client and the simulator, which need both, missed the
/// TTFT median by 2 ms.)
const BUSY_SHARE: f64 = 0.85;

/// Whether a case can judge timing now; says why not where it cannot.
fn judged(what: &str, share: f64) -> bool {
    let quiet = share >= BUSY_SHARE;
    if !quiet {
        eprintln!(
            "{what}: NOT JUDGED: this machine is busy with other work (CPU-bound probes, one per core, got {share:.2} of each, under {BUSY_SHARE}); a timing figure taken now measures its scheduler"
        );
    }
    quiet
}

/// The bounds: medians that a 40 ms delayed-ACK stall anywhere in the tokens
/// of kept connections would break many times over, and tails loose enough
/// for a two-core machine running debug builds. A run that said its own
/// client decided its figures (fell behind its schedule, its cores busy), or
/// that its client, not the server, was the limit (`client_bound`), measured
/// the client, as it says: only that its verdict came from the client's own
/// load is checked.
fn check(what: &str, e: &Errors) {
    let (ttft50, itl50) = (quantile(&e.ttft, 0.5), quantile(&e.itl, 0.5));
    let (ttft99, itl99) = (quantile(&e.ttft, 0.99), quantile(&e.itl, 0.99));
    let (ttft_max, itl_max) = (quantile(&e.ttft, 1.0), quantile(&e.itl, 1.0));
    eprintln!(
        "{what}: TTFT error p50 {ttft50:.3} p99 {ttft99:.3} max {ttft_max:.3} ms; ITL error p50 {itl50:.3} p99 {itl99:.3} max {itl_max:.3} ms ({} tokens); server schedule error p50 {:.3} ms",
        e.itl.len(),
        quantile(&e.schedule, 0.5)
    );
    if !judged(what, e.core_share) {
        return;
    }
    if let Some((message, busy)) = &e.client_bound {
        // A debug build's one client thread at 1,000 requests/s on a slow
        // two-core machine is at its ceiling (busy 87% of the time, TTFT
        // 6 ms off the server's at the median, seen in CI): the run said so,
        // and what its figures measure is the client. The case checks that
        // the verdict came from the client's own load, not from nothing.
        eprintln!("{what}: NOT JUDGED: the run said its client was the limit: {message}");
        // The client weighs its threads' busy share only over a run of a
        // second or more (under that, starting up is most of what a thread
        // did, and late sends are taken as its own): a run of 100 requests
        // at 1,000/s is a tenth of that, so what grounds its verdict there is
        // that its sends were late (30 of 100 with the threads busy 16%, a
        // stall of the machine inside the run, seen in CI). Over a longer
        // run, four threads on two cores are all the cores at a busy share
        // of 0.5 (0.45 seen with its sends late): a quarter is real load.
        if e.secs < 1.0 {
            assert!(
                (e.late_sends > 0 && message.contains("sends ran late"))
                    || message.contains("dropped"),
                "{what}: a run of {:.2} s said client-bound with no send late or dropped: {e:?}",
                e.secs
            );
        } else {
            assert!(
                *busy > 0.25,
                "{what}: client-bound with its threads busy {busy:.2} of the time: {e:?}"
            );
        }
        return;
    }
    // A run that said its client fell behind its schedule, or kept its
    // cores busy, said that its figures measure the client as well as the
    // server: with the simulator in this process, a debug build's client at
    // 1,000 requests/s on a two-core machine often does (one thread: 86 of
    // 100 sends over 1 ms late, TTFT 7 ms off the server's at the median;
    // 95% of the cores busy, 3.9 ms off; both seen in CI and here). What is
    // checked is that the verdict came from that load, not from nothing.
    if let Some(v) = &e.client_verdict {
        eprintln!("{what}: NOT JUDGED: the run said {v}");
        assert!(
            e.late_sends > 0 || e.cores_busy.is_some_and(|s| s > 0.5),
            "{what}: said its client decided its figures with no send late and its cores not busy: {e:?}"
        );
        return;
    }
    assert!(ttft50 < 3.0 && itl50 < 1.0, "{what}: {e:?}");
    assert!(ttft99 < 10.0 && itl99 < 10.0, "{what}: {e:?}");
    assert!(ttft_max < 30.0 && itl_max < 30.0, "{what}: {e:?}");
    // The simulator keeps its own schedule: 2 ms a token, not 3 (the runtime
    // timer's millisecond steps). Over each reply, so that a late wake-up and
    // the catch-up after it (gaps of 4 then 0 ms, seen with both cores busy
    // beside the suite) count as what they are, a jitter of the schedule.
    let late = wake_lateness_ms();
    let (schedule, pace) = (quantile(&e.schedule, 0.5), quantile(&e.pace, 0.5));
    eprintln!(
        "{what}: server gap error p50 {schedule:.3} ms, mean gap per reply off 2 ms by {pace:.3} ms at p50, this machine's timer {late:.3} ms late"
    );
    // Half a millisecond plus the timer's own lateness, as for the reasoning
    // steps below: a millisecond tick would be 1 ms off, and one late last
    // chunk of a short reply moves its mean by a seventh of its lateness
    // (0.27 ms seen with both cores busy).
    assert!(
        pace < 0.5 + late,
        "{what}: the server's mean gap per reply is {pace:.3} ms off 2 ms at p50 (timer {late:.3} ms late): {e:?}"
    );
}

/// How late a 2 ms sleep of this process wakes, at the median of 100, in
/// milliseconds: what the machine's load adds to any timer now.
fn wake_lateness_ms() -> f64 {
    let late: Vec<f64> = (0..100)
        .map(|_| {
            let t = std::time::Instant::now();
            std::thread::sleep(std::time::Duration::from_millis(2));
            t.elapsed().as_secs_f64() * 1000.0 - 2.0
        })
        .collect();
    quantile(&late, 0.5)
}

#[test]
#[ignore = "a timing test: run beside nothing (--ignored --test-threads 1), as .ci/run does"]
fn every_codec_agrees_with_the_servers_stamps_on_kept_connections() {
    for codec in CODECS {
        for threads in ["1", "4"] {
            let e = measure(codec, 4, 3, 8, &["--client-threads", threads]);
            // Each user's second and third requests went out on kept
            // connections: the case the delayed ACK spoiled.
            assert!(e.later_on_connection >= 8, "{codec}: {e:?}");
            check(&format!("{codec}, closed loop, {threads} threads"), &e);
        }
    }
}

/// 100 requests of 4 tokens, one per user, 1 ms apart: a debug build of the
/// client and of the simulator on two cores keeps up with that at the median,
/// and often sends a few of the 100 over a millisecond late (then says so, and
/// its tails are its own).
#[test]
#[ignore = "a timing test: run beside nothing (--ignored --test-threads 1), as .ci/run does"]
fn an_open_loop_at_1000_per_second_agrees_with_the_servers_stamps() {
    for codec in ["openai_chat", "sglang_generate"] {
        for threads in ["1", "4"] {
            let e = measure(
                codec,
                100,
                1,
                4,
                &["--request-rate", "1000", "--client-threads", threads],
            );
            check(&format!("{codec}, 1,000 req/s, {threads} threads"), &e);
        }
    }
}

/// A reasoning model on the simulator (64 reasoning tokens, then 32 answer
/// tokens, 2 ms apart): for every streamed codec, on fresh and kept
/// connections, the time from the first token to the first answer token is
/// the 64 steps of the reasoning, 128 ms, within a millisecond at the median
/// (plus how late this machine's timers wake now).
#[test]
#[ignore = "a timing test: run beside nothing (--ignored --test-threads 1), as .ci/run does"]
fn the_first_answer_token_comes_after_the_reasoning_on_schedule() {
    let sim = SimServer::start(
        SimConfig {
            reasoning_tokens: 64,
            decode_ms_per_token: 2.0,
            ttft_base_ms: 3.0,
            stamps: true,
            record_requests: true,
            ..SimConfig::default()
        },
        "qwen",
    );
    let tok = tokenizer_path("qwen").display().to_string();
    let mut seen = 0;
    for codec in CODECS {
        let tags = matches!(codec, "openai_completions" | "sglang_generate");
        let config = if tags {
            r#"{"reasoning_tags": true}"#
        } else {
            "{}"
        };
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lines = dir.path().join("requests.jsonl");
        let url = sim.url();
        let prefix = format!(r#"{{"prefix": "{codec}"}}"#);
        let before = machine_share(PROBE);
        let r = run_batchbench(&[
            "--host",
            &url,
            "--tokenizer-model",
            &tok,
            "--codec",
            codec,
            "--codec-config",
            config,
            "--stream",
            "--users",
            "4",
            "--requests-per-user",
            "3",
            "--input-tokens",
            "32",
            "--output-tokens",
            "96",
            "--router",
            "user_tag",
            "--router-config",
            &prefix,
            "--requests-jsonl",
            &lines.display().to_string(),
        ]);
        assert_eq!(r.code, 0, "{codec}");
        let share = before.min(machine_share(PROBE));
        // The server's stamps of each request's token chunks, by user in
        // arrival order: the 1st is the first reasoning token's, the 65th
        // the first answer token's (with `</think>` before it, where tags).
        let server = sim.requests_by_key();
        let mut client: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for l in read_jsonl(&lines) {
            client
                .entry(format!("{codec}-{}", l["agent_id"]))
                .or_default()
                .push(l);
        }
        let (mut errors, mut server_gaps, mut schedule) = (Vec::new(), Vec::new(), Vec::new());
        for (user, mut ls) in client {
            ls.sort_by_key(|l| l["request_index"].as_u64());
            let logs = &server[&user];
            assert_eq!(logs.len(), ls.len(), "{codec} {user}");
            for (l, s) in ls.iter().zip(logs) {
                let chunks: Vec<f64> = s.chunk_us.iter().map(|us| us / 1000.0).collect();
                assert_eq!(chunks.len(), 96, "{codec}: one chunk per token: {s:?}");
                let server_gap = chunks[64] - chunks[0];
                let client_gap = l["ttfat_ms"].as_f64().unwrap_or(f64::NAN)
                    - l["ttft_ms"].as_f64().unwrap_or(0.0);
                errors.push((client_gap - server_gap).abs());
                server_gaps.push(server_gap);
                schedule.extend(chunks[..65].windows(2).map(|w| (w[1] - w[0] - 2.0).abs()));
            }
        }
        seen += errors.len();
        assert_eq!(errors.len(), 12, "{codec}");
        let (error, due, step) = (
            quantile(&errors, 0.5),
            quantile(&server_gaps, 0.5),
            quantile(&schedule, 0.5),
        );
        let late = wake_lateness_ms();
        println!(
            "{codec}: TTFAT - TTFT against the server's own 64 steps: error p50 {error:.3} ms; the server took {due:.2} ms (128 due), its steps {step:.3} ms off 2 ms at p50, this machine's timer {late:.3} ms late"
        );
        if !judged(codec, share) {
            continue;
        }
        // The client measures the wait for the answer to the millisecond.
        assert!(error <= 1.0, "{codec}: error p50 {error:.3} ms: {errors:?}");
        // And the server kept its schedule, as the machine's timer allows:
        // over the 64 steps, as the pace of the kept connections is judged
        // above (with both cores busy its steps came in pairs, 1.5 ms off
        // 2 ms at p50, while its 64 took 127.96 ms).
        let pace = (due / 64.0 - 2.0).abs();
        assert!(
            pace < 0.5 + late,
            "{codec}: the server's mean step is {pace:.3} ms off 2 ms at p50 (steps {step:.3} ms off), timer {late:.3} ms late: {server_gaps:?}"
        );
    }
    assert_eq!(seen, 60);
}

// Where --warmup auto cuts real runs.

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// When the server-reported prefix-cache hit share (cached over prompt
/// tokens, by intended send time) first reaches 95% of its final value (its
/// share over the second half of the run): the centre of the first one-second
/// span, stepped by 0.25 s, whose share does.
fn hit_share_settles_at(records: &[Value]) -> f64 {
    let ok: Vec<(f64, f64, f64)> = records
        .iter()
        .filter(|r| r["ok"] == true)
        .map(|r| {
            (
                f(&r["intended_ms"]) / 1000.0,
                f(&r["server_cached_tokens"]),
                f(&r["prompt_tokens"]),
            )
        })
        .collect();
    let end = ok.iter().map(|r| r.0).fold(0.0, f64::max);
    let share = |from: f64, to: f64| {
        let (c, p) = ok
            .iter()
            .filter(|r| r.0 >= from && r.0 < to)
            .fold((0.0, 0.0), |(c, p), r| (c + r.1, p + r.2));
        c / p.max(1.0)
    };
    let last = share(end / 2.0, end);
    let mut t = 0.0;
    while t + 1.0 < end {
        if share(t, t + 1.0) >= 0.95 * last {
            return t + 0.5;
        }
        t += 0.25;
    }
    panic!("the hit share never reached 95% of {last}");
}

#[test]
#[ignore = "a timing test: run beside nothing (--ignored --test-threads 1), as .ci/run does"]
fn a_warming_prefix_cache_is_cut_near_where_its_hits_settle() {
    let tok = tokenizer_path("qwen").display().to_string();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let jsonl = dir.path().join("requests.jsonl");
    let jsonl_s = jsonl.display().to_string();
    // Conversations of 11 turns, 400 tokens added a turn, 300 ms of tool time
    // between turns: about 4 s long, 10 starting a second.
    let r = run_agent(&cmd(
        "--host sim://?prefill-us-per-token=40&decode-ms-per-token=1&ttft-base-ms=2 --tokenizer-model {} --input-tokens 200 --environment-tokens 400 --tool-invocations 10 --tool-call-latency-ms 300 --output-tokens 20 --session-rate 10 --duration-secs 20 --warmup auto --stream --seed 2 --requests-jsonl {}",
        &[&tok, &jsonl_s],
    ));
    assert_eq!(r.code, 0);
    let load = r.summary("load");
    let s = &load["steady"];
    let cut = f(&s["from_secs"]);
    let records = read_jsonl(&jsonl);
    let settles = hit_share_settles_at(&records);
    // bench/warmup.sh holds it to 20% over many seeds; one run, on a shared
    // machine, to 40%.
    assert!(
        (0.6 * settles..=1.4 * settles).contains(&cut),
        "cut at {cut} s, the hit share settles at {settles} s: {s}"
    );
    assert!(s["set_by"].is_string(), "{s}");
    assert!(f(&s["to_secs"]) > 19.0, "{s}");
    // Every request due before the cut, and only those, is warmup: in the
    // records as in the figures.
    let warmup = records.iter().filter(|r| r["warmup"] == true).count() as u64;
    for rec in &records {
        let before = f(&rec["intended_ms"]) < cut * 1000.0;
        assert_eq!(rec["warmup"] == true, before, "{rec}");
    }
    assert!(warmup > 0);
    assert_eq!(load["warmup_requests"], warmup);
    assert_eq!(s["cut_requests"], warmup);
    assert_eq!(
        r.count("total_requests") + warmup,
        records.len() as u64,
        "nothing lost"
    );
}

#[test]
#[ignore = "a timing test: run beside nothing (--ignored --test-threads 1), as .ci/run does"]
fn a_run_steady_from_the_start_cuts_nothing() {
    let tok = tokenizer_path("qwen").display().to_string();
    // Each request's latency its own (no batching), Poisson arrivals. A first
    // token at 20 ms, not 2: on a machine busy with other tests, the first
    // second's tenth of a millisecond of contention would be a 5% transient.
    let r = run_batchbench(&cmd(
        "--host sim://?ttft-base-ms=20&decode-ms-per-token=0.5 --tokenizer-model {} --input-tokens 32 --output-lognorm-median 64 --output-lognorm-sigma 0.6 --request-rate 100 --arrival poisson --duration-secs 8 --warmup auto --stream --seed 5",
        &[&tok],
    ));
    assert_eq!(r.code, 0);
    let load = r.summary("load");
    let s = &load["steady"];
    assert_eq!(f(&s["from_secs"]), 0.0, "{s}");
    assert!(s["set_by"].is_null(), "{s}");
    assert_eq!(load["warmup_requests"], 0);
    // Latency, TTFT and the send rate; no hit share, as the simulator cached
    // nothing.
    assert_eq!(s["series"].as_array().map(Vec::len), Some(3), "{s}");
    let sent = &s["series"][2];
    assert_eq!(sent["name"], "requests sent");
    let rate = f(&sent["steady_mean"]);
    assert!((90.0..110.0).contains(&rate), "{s}");
}
