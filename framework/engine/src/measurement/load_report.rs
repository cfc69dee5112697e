//! The load report of a summary: how the schedule was kept, warmup, the
//! deadline, per-stage figures, and whether the client decided the figures.

use crate::measurement::metrics::{Metrics, Summary};
use batchbench_contract::record::{LoadReport, StageReport};
use batchbench_contract::spec::LoadSpec;
use std::time::Duration;

/// Adds the load report to `summary`: how the schedule was kept, warmup, the
/// deadline, and per-stage figures. The closed loop without a cap, warmup or
/// duration has none. With warmup, rates count from the first measured request.
pub(super) fn report(
    summary: &mut Summary,
    m: &Metrics,
    load: &LoadSpec,
    arrivals: u64,
    elapsed: Duration,
    client_cpu: Option<Duration>,
) {
    let warmup =
        load.warmup_requests.is_some() || load.warmup_secs.is_some() || load.warmup.is_some();
    if !(load.is_open() || load.max_concurrency.is_some() || warmup || load.duration_secs.is_some())
    {
        return;
    }
    if warmup && let Some(from) = m.measured_from {
        let window = elapsed.saturating_sub(from).as_secs_f64();
        let per_s = |x: u64| if window > 0.0 { x as f64 / window } else { 0.0 };
        summary.total_duration_seconds = window;
        summary.requests_per_second = per_s(m.successes);
        summary.prompt_tokens_per_second = per_s(m.prompt_tokens);
        summary.completion_tokens_per_second = per_s(m.completion_tokens);
    }
    let stages = load
        .stages
        .iter()
        .zip(
            m.stages
                .iter()
                .chain(std::iter::repeat(&Default::default())),
        )
        .enumerate()
        .map(|(i, (st, sm))| StageReport {
            stage: i,
            secs: st.secs,
            rate: st.rate,
            requests: sm.requests,
            successful_requests: sm.successes,
            requests_per_second: sm.successes as f64 / st.secs,
            latency: sm.latency.stats(),
            latency_from_intended: sm.latency_from_intended.stats(),
            ttft: sm.ttft.stats(),
        })
        .collect();
    // From when arrivals really went out, not when they were released: a
    // client that sends late shows in it.
    let achieved_rate = m.achieved_arrival_rate().unwrap_or(0.0);
    let mut r = LoadReport {
        arrival: if load.is_open() {
            load.arrival.as_str().to_owned()
        } else {
            "closed_loop".to_owned()
        },
        release: match load.release {
            batchbench_contract::spec::Release::Requests => "requests",
            batchbench_contract::spec::Release::Sessions => "sessions",
        }
        .to_owned(),
        target_rate: load.rate,
        achieved_rate,
        arrivals,
        latency_from_intended: m.latency_from_intended.stats(),
        ttft_from_intended: m.ttft_from_intended.stats(),
        queue_wait: load.max_concurrency.and_then(|_| m.queue_wait.stats()),
        send_lag: m.send_lag.stats(),
        late_sends: m.late_sends,
        warmup_requests: m.warmup_requests,
        warmup_latency: m.warmup_latency.stats(),
        duration_secs: load.duration_secs,
        at_deadline: load
            .duration_secs
            .map(|_| load.at_deadline.as_str().to_owned()),
        cut_at_deadline: m.cut_at_deadline,
        dropped_arrivals: m.dropped_arrivals,
        dropped_waiting: m.dropped_waiting,
        stages,
        verdict: None,
        convergence: None,
        steady: None,
    };
    let cpu_share = client_cpu.map(|c| crate::telemetry::cpu::share_of_cores(c, elapsed));
    r.verdict = verdict(&r, m.requests, load.max_concurrency, cpu_share, summary);
    summary.load = Some(r);
}

/// How the load verdict's sentence on the client's own CPU begins (a merge
/// carries each shard's into the merged verdict).
pub const CLIENT_CPU_VERDICT: &str = "the client kept";

/// Above this share of its cores busy, the client itself may be the limit.
const CLIENT_CPU_BUSY: f64 = 0.9;

/// The client fell behind when its send lag's p99 was over 10 ms, or when
/// more than one send in this many was late by over a millisecond and its
/// lag's p99 was over [`LAG_SHARE`] of the server's median latency: one stall
/// of a few milliseconds, which makes a handful of consecutive sends late, is
/// not a client that could not keep its schedule (against a server of 40
/// requests/s sent 200/s, 6 late sends of 588 from one stall had the run
/// blame its client), nor is a busy machine's 4 ms against replies of seconds.
pub(super) const LATE_SHARE_DENOMINATOR: u64 = 20;
pub(super) const LAG_SHARE: f64 = 0.05;

/// One line when the client, not the server, decided the figures: its
/// concurrency queue held requests back, it fell behind its schedule, or it
/// kept its cores busy (each is said when it holds).
fn verdict(
    r: &LoadReport,
    measured: u64,
    cap: Option<u64>,
    cpu_share: Option<f64>,
    s: &Summary,
) -> Option<String> {
    let mut says = Vec::new();
    if let (Some(q), Some(cap)) = (r.queue_wait, cap) {
        let served = s.latency.map_or(0.0, |l| l.mean_ms);
        if q.mean_ms > 1.0 && q.mean_ms > 0.1 * served {
            says.push(format!(
                "the client queue (max concurrency {cap}), not the server, held requests back: queue wait p50 {:.1} ms, p99 {:.1} ms against a served latency of {served:.1} ms mean; latency from the intended send time includes it",
                q.p50_ms, q.p99_ms
            ));
        }
    }
    // Many late sends matter where their lag is a material part of what is
    // measured: 4 ms late against replies of seconds is not.
    let served_p50 = s.latency.map_or(0.0, |l| l.p50_ms);
    if let Some(lag) = r.send_lag
        && measured > 0
        && (lag.p99_ms > 10.0
            || (r.late_sends * LATE_SHARE_DENOMINATOR > measured
                && lag.p99_ms > LAG_SHARE * served_p50))
    {
        says.push(format!(
            "the client fell behind its schedule (send lag p99 {:.2} ms; {} of {} requests sent over 1 ms late): these figures measure the client as well as the server",
            lag.p99_ms, r.late_sends, measured
        ));
    }
    if r.dropped_arrivals > 0 {
        says.push(format!(
            "{} arrivals due before the deadline were not sent by it and were dropped (the client was behind its schedule; nothing is sent after the deadline): the load asked for was not the load sent",
            r.dropped_arrivals
        ));
    }
    if r.dropped_waiting > 0 {
        says.push(format!(
            "{} arrivals waited over the bound (--max-queue-wait-secs) for one of the {} concurrency slots and were dropped, unsent: the server, through the cap, could not take the load asked for",
            r.dropped_waiting,
            cap.unwrap_or_default()
        ));
    }
    if let Some(share) = cpu_share
        && share > CLIENT_CPU_BUSY
    {
        says.push(format!(
            "{CLIENT_CPU_VERDICT} {:.0}% of its cores busy: its CPU, not the server, may limit this run (with sim:// the simulator shares the process)",
            share * 100.0
        ));
    }
    (!says.is_empty()).then(|| says.join("; "))
}
