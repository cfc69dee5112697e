//! Sweeps and capacity search end to end, against the continuous-batching
//! simulator, whose saturation rate has a closed form (book: Simulator).
//!
//! The simulator of every test: one worker, at most 8 sequences in a batch,
//! steps of 10 ms + 1 ms per sequence, prefill free. Requests have 16-token
//! prompts and exactly 10 output tokens, so a full batch finishes 8 requests
//! every 10 steps of 18 ms: X = 1 / (10 x (10/8 + 1) ms) = 44.4 requests/s.

use batchbench_run::commands::{agent, batchbench};
use batchbench_run::series::{self, Kind};
use batchbench_tests::{SimServer, core_share, qwen, run_batchbench, run_series, words};
use serde_json::Value;
use std::ffi::OsString;

const SIM: &str = "sim://?max-running=8&step-base-ms=10&step-ms-per-seq=1";
/// The analytic saturation rate of [`SIM`], requests per second.
const CAPACITY: f64 = 1000.0 / (10.0 * (10.0 / 8.0 + 1.0));

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A run's flags: constant arrivals for `secs` seconds, streamed, judged by
/// the TTFT p99.
fn run_flags<'a>(tok: &'a str, secs: &'a str) -> Vec<&'a str> {
    vec![
        "--host",
        SIM,
        "--tokenizer-model",
        tok,
        "--input-tokens",
        "16",
        "--output-tokens",
        "10",
        "--stream",
        "--arrival",
        "constant",
        "--duration-secs",
        secs,
        "--seed",
        "7",
        "--slo",
        "ttft_p99<=100ms",
    ]
}

/// A simulator 2.5 times as fast (steps of 4 ms + 0.4 ms per sequence), so
/// that points of hundreds of requests take seconds: 111.1 requests/s.
const FAST_SIM: &str = "sim://?max-running=8&step-base-ms=4&step-ms-per-seq=0.4";
const FAST_CAPACITY: f64 = 1000.0 / (4.0 * (10.0 / 8.0 + 1.0));

/// [`run_flags`] against [`FAST_SIM`], judged by `slo` (see [`ttft_bound`]).
fn fast_flags<'a>(tok: &'a str, secs: &'a str, slo: &'a str) -> Vec<&'a str> {
    let mut flags = run_flags(tok, secs);
    flags[1] = FAST_SIM;
    *flags.last_mut().unwrap_or_else(|| unreachable!()) = slo;
    flags
}

/// The TTFT p99 bound of the capacity tests against [`FAST_SIM`]: 40 ms (ten
/// of its steps), or more where this machine, busy with the tests beside this
/// one, adds delay of its own to every request at every load: twice the p99
/// that an unloaded run (20 requests/s) measures now, plus 10 ms. A batching
/// server's knee is sharp under constant arrivals (its queue stays short
/// until the rate reaches the capacity, then grows without bound), so any
/// bound above the unloaded TTFT finds the same capacity.
fn ttft_bound(tok: &str) -> String {
    let mut flags = fast_flags(tok, "3", "ttft_p99<=1s");
    flags.extend(["--request-rate", "20"]);
    let r = run_batchbench(&flags);
    assert_eq!(r.code, 0);
    let p99 = f(&r.summary("ttft")["p99_ms"]);
    let bound = (2.0 * p99 + 10.0).max(40.0).ceil();
    eprintln!("unloaded TTFT p99 {p99:.1} ms: the bound is {bound} ms");
    format!("ttft_p99<={bound}ms")
}

#[test]
fn capacity_finds_the_analytic_saturation_rate_and_the_slo_holds_under_it_but_not_at_1_2x() {
    let tok = qwen();
    // Each point runs until its p99 is decided, 500 requests at least.
    let mut args = words("--over request-rate --start 64 --min-requests 500 --point-max-secs 30");
    let slo = ttft_bound(&tok);
    args.extend(fast_flags(&tok, "2", &slo));
    // With both cores busy beside the suite (a busy loop on each), this
    // thread got half a core: the simulator's 4 ms steps ran late at every
    // load, every point's p99 sat on the bound, undecided, and the search
    // reported 16 req/s. Such a machine's knee is not the analytic one: the
    // search's bracket and its upper bound are still judged, its place is not.
    let (r, busy) = found_capacity(&args);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    assert_eq!(cap["unit"], "req/s");
    let load = f(&cap["load"]);
    // A point far under the knee left undecided: its p99 sat on the bound
    // at a load this server's queue never grows at, so the machine stalled
    // the simulator's steps during the search, between the probes before
    // and after it (a fresh-clone CI run: 64, 48 and 40 req/s undecided, none
    // missed, the capacity 39).
    let stalled: Vec<f64> = index["capacity"]["undecided"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .filter(|&u| u < 0.7 * FAST_CAPACITY)
        .collect();
    if !stalled.is_empty() {
        eprintln!(
            "loads {stalled:?} req/s, under 0.7 of the knee, stayed undecided: the machine stalled the search, the capacity's distance under the analytic rate is not judged"
        );
    }
    let busy = busy || !stalled.is_empty();
    // The simulator's steps run on this machine's clock: a loaded 2-core
    // machine runs them late, and the knee it really has sits under the
    // analytic one (92 and 104 req/s in loaded CI runs against 111; 62 with
    // the whole test suite beside it). The capacity never lies above it.
    let lowest = if busy { 0.0 } else { 0.5 * FAST_CAPACITY };
    assert!(
        (lowest..=1.05 * FAST_CAPACITY).contains(&load),
        "capacity {load} req/s against the analytic {FAST_CAPACITY:.1}: {cap}"
    );
    // A point just under the knee may stay undecided within its budget (its
    // p99 sits on the bound): the statistical bracket then reaches the next
    // point that missed for sure, or stays open above.
    let missed = cap["lowest_missed"].as_f64().unwrap_or(f64::INFINITY);
    assert!(load < missed, "[{load}, {missed}]: {cap}");
    let marked: Vec<f64> = r
        .points()
        .iter()
        .filter(|p| p["capacity"] == true)
        .map(|p| f(&p["value"]))
        .collect();
    assert_eq!(marked, [load], "one point is the capacity");
    for p in r.points() {
        assert!(p["requests"].as_u64() >= Some(500), "{p}");
        let value = f(&p["value"]);
        if value <= load || value >= missed {
            if !busy {
                assert_eq!(p["bounds"][0]["undecided"], Value::Null, "decided: {p}");
            }
        } else {
            // Inside the bracket: decided as missed, or undecided and then
            // never counted as met.
            assert_eq!(p["passed"], false, "{p}");
        }
    }
    // The search measured the SLO holding at the reported rate. Fresh runs
    // check the verdict: under the rate (at the rate itself a fresh run sits
    // within the tolerance of the knee by construction, where scheduling noise
    // decides, and the machine's load moves the knee between runs) and at 1.2
    // times the analytic saturation, which no machine reaches.
    for (rate, holds) in [(0.8 * load, true), (1.2 * FAST_CAPACITY, false)] {
        if busy && holds {
            continue; // a busy machine's p99 sits on the bound at any load
        }
        let rate = format!("{rate:.1}");
        let mut flags = fast_flags(&tok, "6", &slo);
        flags.extend(["--request-rate", &rate]);
        let run = run_batchbench(&flags);
        assert_eq!(run.code, 0);
        assert_eq!(
            run.summary("slo")["passed"],
            holds,
            "at {rate} req/s: {}",
            run.summary("slo")
        );
    }
}

/// A capacity search of `tool` over `args`. A search that says its own
/// client was the limit measured this machine's other work (the suite's other
/// tests share two cores), as it says: it is searched again, twice at most.
fn capacity_search<S: AsRef<str>>(tool: &str, args: &[S]) -> batchbench_tests::SeriesResult {
    let mut r = run_series(tool, "capacity", args);
    for _ in 0..2 {
        let cap = &r.index.as_ref().unwrap_or(&Value::Null)["capacity"];
        if cap["verdict"] != "client_bound" {
            break;
        }
        eprintln!(
            "the search ended client-bound (this machine's other work); searching again: {cap}"
        );
        r = run_series(tool, "capacity", args);
    }
    r
}

/// A capacity search over `args` that found a capacity, its bracket within
/// the search's 5% resolution, and whether this machine was busy with other
/// work meanwhile (this thread got under 70% of a core before or after):
/// the simulator's steps then run late, and its knee is not the analytic one.
fn found_capacity<S: AsRef<str>>(args: &[S]) -> (batchbench_tests::SeriesResult, bool) {
    let probe = std::time::Duration::from_millis(500);
    let before = core_share(probe);
    let r = capacity_search("batchbench", args);
    let share = before.min(core_share(probe));
    let busy = share < 0.7;
    if busy {
        eprintln!(
            "this machine gave the test {:.0}% of a core: the capacity's distance under the analytic rate is not judged",
            100.0 * share
        );
    }
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    assert_eq!(cap["verdict"], "found", "{cap}");
    assert!(f(&cap["relative_width"]) <= 0.05, "{cap}");
    (r, busy)
}

/// Points of 2 s at 20 requests/s hold 40 requests: a p99 of them is their
/// largest, which says nothing of the server's. The search reports the point
/// undecided, never met, and stops: a lower load holds fewer still.
#[test]
fn a_capacity_search_on_points_too_short_for_their_p99_claims_nothing() {
    let tok = qwen();
    let mut args = vec!["--over", "request-rate", "--start", "20"];
    args.extend(run_flags(&tok, "2"));
    let r = run_series("batchbench", "capacity", &args);
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    assert_eq!(cap["verdict"], "too_short", "{cap}");
    assert!(cap["load"].is_null(), "{cap}");
    assert_eq!(cap["undecided"], serde_json::json!([20.0]));
    let message = cap["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("undecided") && message.contains("--min-requests"),
        "{message}"
    );
    let points = r.points();
    assert_eq!(points.len(), 1);
    let p = &points[0];
    assert_eq!(
        (&p["passed"], &p["undecided"]),
        (&false.into(), &true.into()),
        "{p}"
    );
    // The run itself met the bound on its 40 requests, and says how little
    // that tells.
    let (summary, _) = r.run(p["runs"][0].as_str().unwrap_or_default());
    let b = &summary["summary"]["slo"]["bounds"][0];
    assert_eq!(
        (&b["met"], &b["undecided"]),
        (&true.into(), &true.into()),
        "{b}"
    );
    assert!(b["interval_ms"].is_null(), "{b}");
}

/// The agents: 4 turns each (16-token first prompt, 10 output tokens, 16-token
/// tool results, no think time), started at a constant session rate. Every
/// turn is one request of 10 output tokens, so the sessions' capacity is the
/// requests' over 4: 27.8 sessions/s on [`FAST_SIM`].
#[test]
fn agent_capacity_over_session_rate_is_the_request_capacity_over_the_turns() {
    let tok = qwen();
    // Judged by the p90: a session's turns move their latencies together, and
    // on a machine busy with other work a p99 of them was still undecided
    // after 30 s at 60% of the capacity, which the search then took as missed.
    let slo = ttft_bound(&tok).replace("ttft_p99", "ttft_p90");
    let args = [
        "--over",
        "session-rate",
        "--start",
        "16",
        "--min-requests",
        "400",
        "--point-max-secs",
        "30",
        "--host",
        FAST_SIM,
        "--tokenizer-model",
        &tok,
        "--input-tokens",
        "16",
        "--output-tokens",
        "10",
        "--environment-tokens",
        "16",
        "--tool-invocations",
        "4",
        "--stream",
        "--arrival",
        "constant",
        "--duration-secs",
        "6",
        "--seed",
        "7",
        "--slo",
        &slo,
    ];
    let r = capacity_search("batchbench-agent", &args);
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    assert_eq!(
        (&cap["verdict"], &cap["unit"]),
        (&"found".into(), &"sessions/s".into()),
        "{cap}"
    );
    let load = f(&cap["load"]);
    let sessions = FAST_CAPACITY / 4.0;
    // A point near the knee may stay undecided within its 30 s (multi-turn
    // sessions move their latencies together), and counts as not met: the
    // answer is then conservative, never above the capacity, and the
    // statistical bracket still holds it.
    let missed = cap["lowest_missed"].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        load <= sessions * 1.05 && load >= sessions * 0.75 && missed >= sessions,
        "capacity {load} sessions/s, missed from {missed}, against the analytic {sessions:.2}: {cap}"
    );
    if cap["undecided"].is_null() {
        assert!(
            (load - sessions).abs() / sessions < 0.10,
            "every point decided: capacity {load} sessions/s against the analytic {sessions:.2}: {cap}"
        );
    }
    let point = r.points().into_iter().find(|p| p["capacity"] == true);
    assert_eq!(point.map(|p| p["passed"].clone()), Some(true.into()));
    // Just under the answer the SLO holds; at 1.2 times the analytic
    // capacity it does not.
    for (rate, holds) in [(load * 0.95, true), (sessions * 1.2, false)] {
        let rate = format!("{rate}");
        let mut flags: Vec<&str> = args[8..].to_vec();
        flags.extend(["--session-rate", &rate]);
        let run = batchbench_tests::run_agent(&flags);
        assert_eq!(run.code, 0);
        assert_eq!(
            run.summary("slo")["passed"],
            holds,
            "at {rate} sessions/s: {}",
            run.summary("slo")
        );
    }
}

/// A reasoning model: 64 reasoning tokens before an answer of 16, sixteen
/// tokens to a streamed chunk, at most 128 sequences in a batch, steps of
/// 2 ms + 0.025 ms per sequence. The first answer token comes 64 steps after
/// the first token: TTFT (a join wait of half a step on average, then a
/// chunk of sixteen steps) plus the reasoning, 80.5 steps in all, which is
/// also how long a request holds its place in the batch.
const REASONING_SIM: &str = "sim://?max-running=128&step-base-ms=2&step-ms-per-seq=0.025&reasoning-tokens=64&tokens-per-chunk=16";
const TTFAT_STEPS: f64 = 80.5;
const STEP_PER_SEQ_MS: f64 = 0.025;

/// Under the saturation of the batch, `n` sequences run at a rate `x`
/// (Little: n = x x TTFAT_STEPS x step(n)), each step taking `base` +
/// 0.025 ms x n: the rate at which the first answer token's wait, TTFT and
/// the 64 reasoning steps, reaches `bound_ms`.
fn rate_at_ttfat(bound_ms: f64, base_ms: f64) -> f64 {
    let step = bound_ms / TTFAT_STEPS;
    let running = (step - base_ms) / STEP_PER_SEQ_MS;
    running / (TTFAT_STEPS * step / 1000.0)
}

/// The capacity under a bound on the time to the first answer token is the
/// analytic rate at which TTFT and the 64 reasoning steps reach it, far under
/// the rate a bound on the first token of either kind gives.
///
/// The bound is on the p90. A p99 of TTFAT from a batching server is one of
/// samples that share the batch (about 64 requests at once here): against
/// this simulator a p99 20% under its bound stayed undecided after 2,500
/// requests, as honest intervals must, where a p90 is decided in 500. The
/// search treats every percentile alike: which one changes how long its
/// points run, not what it finds.
#[test]
fn capacity_under_a_ttfat_bound_is_the_rate_at_which_the_reasoning_reaches_it() {
    let tok = qwen();
    // [`run_flags`] against the reasoning simulator, 80 output tokens.
    let flags = |secs: &'static str, slo: &'static str| -> Vec<String> {
        let mut f = run_flags(&tok, secs);
        f[1] = REASONING_SIM;
        f[7] = "80";
        *f.last_mut().unwrap_or_else(|| unreachable!()) = slo;
        f.into_iter().map(str::to_owned).collect()
    };
    // The step this machine really gives the simulator (its timer's lateness
    // and the scheduling of both ends included), from the TTFAT p90 of a
    // light load: 20 requests/s keep about 3 sequences running.
    let mut light = flags("3", "ttfat_p90<=1s");
    light.extend(["--request-rate".into(), "20".into()]);
    let r = run_batchbench(&light);
    assert_eq!(r.code, 0);
    let p90 = f(&r.summary("ttfat")["p90_ms"]);
    let ttft = f(&r.summary("ttft")["p90_ms"]);
    assert!(
        p90 > ttft + 64.0 * 2.0,
        "the answer waits for the reasoning: {p90} against {ttft}"
    );
    let running = 20.0 * p90 / 1000.0;
    let base = p90 / TTFAT_STEPS - STEP_PER_SEQ_MS * running;
    // The bound: about halfway between the first answer token's wait with an
    // empty batch and with a full one (80.5 steps of 2 ms and of 5.2 ms).
    let slo = "ttfat_p90<=290ms";
    let analytic = rate_at_ttfat(290.0, base);
    // On an idle machine's clock (steps of 2 ms exactly) the rate is higher:
    // a machine that runs the steps late only lowers it.
    let idle = rate_at_ttfat(290.0, 2.0);
    // Judged by the TTFT, the same bound would hold up to the batch's
    // saturation: 128 sequences of 80 steps of 5.2 ms.
    let saturation = 128.0 / (80.0 * 5.2 / 1000.0);
    eprintln!(
        "light load: TTFAT p90 {p90:.1} ms, a step of {base:.3} ms + 0.025 ms a sequence: the analytic rate at {slo} is {analytic:.1} requests/s ({idle:.1} on exact steps; saturation {saturation:.1})"
    );
    let mut args: Vec<String> =
        words("--over request-rate --start 128 --min-requests 500 --point-max-secs 20")
            .into_iter()
            .map(str::to_owned)
            .collect();
    args.extend(flags("2", slo));
    let (r, busy) = found_capacity(&args);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    let load = f(&cap["load"]);
    // The lowest load that missed: a point left undecided below it (its
    // runs disagreed, as a stall of a shared machine during one of them makes
    // them; the probes before and after the search do not see it) bounds
    // nothing either way.
    let missed = cap["lowest_missed"].as_f64().unwrap_or(f64::INFINITY);
    // Far under the rate a bound on the first token of either kind would
    // give, and never over the rate of exact steps.
    assert!(
        load <= 1.02 * idle && load < 0.8 * saturation,
        "capacity {load} req/s against the analytic {idle:.1} on exact steps (saturation {saturation:.1}): {cap}"
    );
    // Within the search's resolution: the analytic rate lies between the
    // capacity and the lowest load that missed (2% for the calibration).
    if !busy {
        assert!(
            load <= 1.02 * analytic && missed >= 0.98 * analytic,
            "capacity {load} req/s, missed from {missed}, against the analytic {analytic:.1}: {cap}"
        );
    }
}

#[test]
fn a_sweep_stops_at_saturation_and_its_goodput_is_the_per_request_records() {
    let tok = qwen();
    let mut args = vec!["--over", "request-rate", "--values", "10..320"];
    let mut flags = run_flags(&tok, "2");
    // A per-request bound, so that goodput is not the success rate.
    *flags.last_mut().unwrap_or_else(|| unreachable!()) = "ttft<=60ms";
    args.extend(flags);
    let r = run_series("batchbench", "sweep", &args);
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let points = r.points();
    let values: Vec<f64> = points.iter().map(|p| f(&p["value"])).collect();
    assert_eq!(values, [10.0, 20.0, 40.0, 80.0], "{index}");
    assert_eq!(index["skipped"], serde_json::json!([160.0, 320.0]));
    assert_eq!(points[3]["saturated"], true);
    assert!(
        index["stopped_early"]
            .as_str()
            .is_some_and(|s| s.contains("saturated at 80"))
    );
    assert!(
        f(&points[3]["requests_per_second"]["mean"]) < CAPACITY * 1.05,
        "throughput stays under the capacity: {}",
        points[3]
    );
    let csv = batchbench_tests::read_csv(&r.dir.join("results.csv"));
    assert_eq!(csv.len(), 4, "a CSV row per run");
    let mut below_one = false;
    for p in &points {
        let run = p["runs"][0].as_str().unwrap_or_default();
        let (summary, lines) = r.run(run);
        let measured: Vec<&Value> = lines.iter().filter(|l| l["warmup"] == false).collect();
        let good = measured
            .iter()
            .filter(|l| l["ok"] == true && f(&l["first_token_ms"]) - f(&l["intended_ms"]) <= 60.0)
            .count() as u64;
        let flagged = measured.iter().filter(|l| l["slo_met"] == true).count() as u64;
        assert_eq!(flagged, good, "{run}");
        let s = &summary["summary"];
        assert_eq!(s["slo"]["good_requests"].as_u64(), Some(good), "{run}");
        let recomputed = good as f64 / f(&s["total_duration_seconds"]);
        let reported = f(&p["goodput"]["mean"]);
        assert!(
            (recomputed - reported).abs() <= 1e-9 * reported.max(1.0),
            "{run}: goodput {reported} reported, {recomputed} from the records"
        );
        below_one |= good < measured.len() as u64;
    }
    assert!(below_one, "past the knee some requests miss the bound");
}

/// The simulator at its defaults answers at once: a closed loop of users
/// meets `e2e<=10s` at any load here, and nothing meets `e2e_p99<=1us`.
#[test]
fn capacity_stops_at_its_limits_and_trials_give_intervals() {
    let tok = qwen();
    let base = |slo: &'static str| {
        vec![
            "--host",
            "sim://",
            "--tokenizer-model",
            tok.as_str(),
            "--input-tokens",
            "8",
            "--output-tokens",
            "2",
            "--requests-per-user",
            "2",
            "--slo",
            slo,
        ]
    };
    let mut args = vec!["--over", "users", "--max-load", "6", "--trials", "2"];
    args.extend(base("e2e<=10s"));
    let r = run_series("batchbench", "capacity", &args);
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let values: Vec<f64> = r.points().iter().map(|p| f(&p["value"])).collect();
    assert_eq!(
        values,
        [1.0, 2.0, 4.0, 6.0],
        "doubling, capped by --max-load"
    );
    assert_eq!(index["capacity"]["verdict"], "at_max_load");
    assert_eq!(f(&index["capacity"]["load"]), 6.0);
    for p in r.points() {
        assert_eq!(p["runs"].as_array().map(Vec::len), Some(2), "{p}");
        assert!(p["requests_per_second"]["ci95"].as_f64().is_some(), "{p}");
        assert_eq!(p["requests"], 2 * 2 * f(&p["value"]) as u64, "{p}");
    }

    let mut args = vec!["--over", "users", "--start", "2"];
    args.extend(base("e2e_p99<=1us"));
    let r = run_series("batchbench", "capacity", &args);
    assert_eq!(r.code, 0, "no capacity is a finding, not a failure");
    let index = r.index.clone().unwrap_or_default();
    let values: Vec<f64> = r.points().iter().map(|p| f(&p["value"])).collect();
    assert_eq!(values, [2.0, 1.0], "halving down to one user");
    assert_eq!(index["capacity"]["verdict"], "below_lowest");
    assert!(index["capacity"]["load"].is_null());
    assert!(r.points().iter().all(|p| p["capacity"] == false));

    // A whole dimension's limits snap to whole numbers, or are refused.
    let mut args = vec!["--over", "users", "--max-load", "10.4"];
    args.extend(base("e2e<=10s"));
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let e = series::check(&batchbench::FRONT, Kind::Capacity, &args).unwrap_err();
    assert!(
        format!("{:#}", e.error).contains("--max-load"),
        "{:#}",
        e.error
    );
}

fn check<S: AsRef<str>>(front: &series::Front, kind: Kind, args: &[S]) -> String {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let args = args.as_slice();
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    match series::check(front, kind, &args) {
        Ok(p) => panic!("accepted: {p:?}"),
        Err(e) => {
            assert_eq!(e.code, 2, "{:#}", e.error);
            format!("{:#}", e.error)
        }
    }
}

#[test]
fn bad_series_input_names_the_flag_and_is_exit_2_with_nothing_sent() {
    let sim = SimServer::recording("qwen");
    let url = sim.url();
    let tok = qwen();
    let base = [
        "--host",
        &url,
        "--tokenizer-model",
        &tok,
        "--input-tokens",
        "8",
    ];
    let with = |extra: &[&'static str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend(extra);
        v
    };
    for (kind, extra, needle) in [
        (
            Kind::Sweep,
            &["--over", "speed", "--values", "1,2"][..],
            "--over speed",
        ),
        (
            Kind::Sweep,
            &["--over", "users", "--values", "8..2"],
            "--values 8..2",
        ),
        (
            Kind::Sweep,
            &["--over", "users", "--values", ","],
            "no values",
        ),
        (
            Kind::Sweep,
            &["--over", "users", "--values", "1,2", "--users", "3"],
            "--users is what the sweep varies",
        ),
        (
            Kind::Sweep,
            &words("--over users --values 1,2 --slo ttft_p99<500ms"),
            "--slo",
        ),
        (
            Kind::Sweep,
            &["--over", "users", "--values", "1,2", "--dry-run"],
            "--dry-run",
        ),
        (
            Kind::Capacity,
            &["--over", "request-rate"],
            "capacity needs --slo",
        ),
        (
            Kind::Capacity,
            &["--over", "request-rate", "--slo", "latency_p99<=1s"],
            "unknown metric",
        ),
        (
            Kind::Capacity,
            &["--over", "users", "--slo", "e2e_p99<=1s", "--start", "1.5"],
            "--start 1.5",
        ),
        (
            Kind::Capacity,
            &words("--over request-rate --slo e2e_p99<=1s --tolerance 2"),
            "--tolerance",
        ),
        (
            Kind::Capacity,
            &words("--over request-rate --slo e2e<=1s --min-requests 100"),
            "percentile bounds of its SLO",
        ),
        (
            Kind::Capacity,
            &words("--over request-rate --slo e2e_p99<=1s --min-requests 100"),
            "give --point-max-secs",
        ),
    ] {
        let msg = check(&batchbench::FRONT, kind, &with(extra));
        assert!(msg.contains(needle), "{extra:?}: {msg}");
        // And the command itself: exit 2.
        let name = if kind == Kind::Sweep {
            "sweep"
        } else {
            "capacity"
        };
        let mut argv: Vec<String> = vec!["batchbench".into(), name.into()];
        argv.extend(with(extra).iter().map(|s| (*s).to_owned()));
        assert_eq!(batchbench::run(argv), 2, "{extra:?}");
    }
    let msg = check(
        &agent::FRONT,
        Kind::Sweep,
        &with(&["--over", "request-rate", "--values", "1,2"]),
    );
    assert!(
        msg.contains("session-rate"),
        "the agent's dimensions are listed: {msg}"
    );
    assert_eq!(sim.stats().requests, 0, "nothing was sent");
}

/// A capacity search whose client cannot give the load it asks for (400,000
/// requests/s from one client thread) stops at that point, "client-bound",
/// and reports no capacity: the client's ceiling is not the server's.
#[test]
fn a_capacity_search_whose_client_is_the_bottleneck_ends_client_bound() {
    let tok = qwen();
    let args = [
        "--over",
        "request-rate",
        "--start",
        "400000",
        "--host",
        "sim://",
        "--tokenizer-model",
        &tok,
        "--users",
        "16",
        "--output-tokens",
        "1",
        "--client-threads",
        "1",
        "--arrival",
        "constant",
        "--duration-secs",
        "1",
        "--slo",
        "e2e_p99<=10s",
    ];
    let r = run_series("batchbench", "capacity", &args);
    assert_eq!(r.code, 0);
    let index = r.index.clone().unwrap_or_default();
    let cap = &index["capacity"];
    assert_eq!(cap["verdict"], "client_bound", "{cap}");
    assert!(cap["load"].is_null(), "{cap}");
    let message = cap["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "capacity: client-bound: at 400000 req/s the client, not the server, was the limit (it dropped"
        ),
        "{message}"
    );
    let points = r.points();
    assert_eq!(
        points.len(),
        1,
        "the search stopped at the point: {points:?}"
    );
    assert!(points[0]["client_bound"].is_string(), "{}", points[0]);
    assert!(points[0]["passed"].is_null(), "{}", points[0]);
}
