//! The summary of a run: its figures, the load report, the SLO verdicts and
//! whether it failed, from what the run (or merged shards) tallied.

use crate::measurement::interval::{Span, Trend};
use crate::measurement::metrics::{Metrics, Summary};
use batchbench_contract::spec::LoadSpec;
use std::time::Duration;

pub use super::load_report::CLIENT_CPU_VERDICT;
use crate::measurement::client_bound::ClientFigures;
use crate::measurement::converge::Converged;

/// What a run's summary is made of: its metrics and what admission saw.
#[derive(Debug)]
pub struct Tally<'a> {
    /// Every request's and trajectory's figures.
    pub metrics: &'a Metrics,
    /// From the clock start to the end.
    pub elapsed: Duration,
    /// The load the run was given.
    pub load: &'a LoadSpec,
    /// Its latency bounds.
    pub slo: &'a [batchbench_contract::slo::SloBound],
    /// Its allowed failure share.
    pub max_failure_rate: Option<f64>,
    /// The run fails when the client limited it (`--fail-if-client-bound`).
    pub fail_if_client_bound: bool,
    /// Arrivals released by a rate schedule.
    pub arrivals: u64,
    /// The client's CPU time over the run, when known.
    pub client_cpu: Option<Duration>,
    /// The client's runtime: its worker threads and their busy time over
    /// the run, when known (merged shards know neither).
    pub client_runtime: Option<(usize, Duration)>,
    /// Stopped by Ctrl+C (or its host).
    pub interrupted: bool,
    /// Peak trajectories active at once.
    pub max_active_observed: u64,
    /// Admissions the active cap held back.
    pub late_admissions: u64,
    /// Admission lag behind the schedule.
    pub admission_lag: &'a crate::measurement::metrics::Latency,
    /// When a converging run's figures were sure enough (`None`: not, or
    /// not converging).
    pub converged: Option<&'a Converged>,
}

/// The summary of a run (or of merged shards) from its tally: the figures,
/// the load report, the SLO verdicts and whether the run failed.
pub fn summarize(t: &Tally<'_>) -> Summary {
    let mut summary = t.metrics.summary(t.elapsed);
    super::load_report::report(
        &mut summary,
        t.metrics,
        t.load,
        t.arrivals,
        t.elapsed,
        t.client_cpu,
    );
    summary.requests_per_second_ci = t.metrics.latency.rate_half_share().map(|h| {
        let r = summary.requests_per_second;
        [(r * (1.0 - h)).max(0.0), r * (1.0 + h)]
    });
    if let Some(l) = summary.load.as_mut() {
        l.convergence = crate::measurement::converge::report(t.metrics, t.load, t.slo, t.converged);
    }
    let figures = match t.client_runtime {
        Some((threads, busy)) => ClientFigures {
            threads: u32::try_from(threads).unwrap_or(u32::MAX),
            busy_share: crate::telemetry::probe::busy_share(busy, threads, t.elapsed),
            cpu_share: t
                .client_cpu
                .and_then(|c| crate::telemetry::probe::busy_share(c, threads, t.elapsed)),
            secs: t.elapsed.as_secs_f64(),
        },
        None => ClientFigures {
            secs: t.elapsed.as_secs_f64(),
            ..ClientFigures::default()
        },
    };
    super::client_bound::report(&mut summary, t.metrics, figures);
    // A schedule that changes the rate on purpose drifts on purpose.
    if t.load.stages.is_empty() && t.load.ramp_up_secs.is_none() {
        summary.trend = trend(t.metrics, t.load.warmup.is_some());
        if summary.client_bound.is_none() {
            server_bound(&mut summary, t.metrics);
        }
    }
    if !t.slo.is_empty() {
        summary.slo = Some(crate::measurement::slo::report(
            t.slo,
            t.metrics,
            summary.requests_per_second,
        ));
    }
    summary.interrupted = t.interrupted;
    if !summary.interrupted {
        summary.run_failed = summary.failure_verdict(t.max_failure_rate);
        if summary.run_failed.is_none()
            && t.fail_if_client_bound
            && let Some(b) = &summary.client_bound
        {
            summary.run_failed = Some(format!(
                "the client, not the server, limited this run ({}) and --fail-if-client-bound was given",
                b.reasons.join(", ")
            ));
        }
    }
    summary.max_active_observed = t.max_active_observed;
    summary.final_drain_seconds =
        (t.elapsed.as_secs_f64() - summary.last_admitted_seconds).max(0.0);
    summary.late_admissions = t.late_admissions;
    summary.admission_lag = t.admission_lag.stats();
    summary.max_admission_lag_ms = summary.admission_lag.map_or(0.0, |l| l.max_ms);
    summary
}

/// The share of its mean by which a figure may drift over the second half of
/// a run before the summary says so.
const TREND_SHARE: f64 = 0.1;

/// Says who the bottleneck was when it was the server: an open loop whose
/// client kept its schedule (no load note of its own) while latency from the
/// intended send grew through the run and the server completed fewer
/// requests a second than were sent. A fixed rate, not stages or a ramp.
fn server_bound(summary: &mut Summary, m: &Metrics) {
    let served = summary.requests_per_second;
    let Some(l) = summary.load.as_mut() else {
        return;
    };
    if l.arrival == "closed_loop" || l.verdict.is_some() || l.achieved_rate <= 0.0 {
        return;
    }
    let Some(t) = m
        .latency_from_intended
        .trend(Span::SecondHalf)
        .filter(|t| t.change > 0.0 && t.drifts(TREND_SHARE, Trend::WARN_T))
    else {
        return;
    };
    if served >= 0.9 * l.achieved_rate {
        return;
    }
    let lag = l.send_lag.map_or(0.0, |s| s.p99_ms);
    l.verdict = Some(format!(
        "the server, not the client, was the bottleneck: it completed {served:.1} requests/s of the {:.1}/s sent, and latency from the intended send grew {:+.0}% over the second half of the run while the client kept its schedule (send lag p99 {lag:.2} ms)",
        l.achieved_rate,
        t.change * 100.0
    ));
}

/// One line when latency or throughput still drifted over the second half of
/// the run, by more than [`TREND_SHARE`] and far beyond chance.
fn trend(m: &Metrics, found_warmup: bool) -> Option<String> {
    let drifts = |t: &Trend| t.drifts(TREND_SHARE, Trend::WARN_T);
    let e2e = &m.latency_from_intended;
    let mut says = Vec::new();
    if let Some(t) = e2e.trend(Span::SecondHalf).filter(drifts) {
        says.push(format!("e2e latency {:+.0}%", t.change * 100.0));
    }
    if let Some(t) = e2e.count_trend(Span::SecondHalf).filter(drifts) {
        says.push(format!(
            "requests sent per second {:+.0}%",
            t.change * 100.0
        ));
    }
    // With the warmup found, what drifts is past it: only a longer run helps.
    let remedy = if found_warmup {
        "run longer"
    } else {
        "run longer, or leave the transient out with warmup (`auto` finds it)"
    };
    (!says.is_empty()).then(|| {
        format!(
            "still drifting over the second half of the run ({}): the figures describe a moving target, not a steady state; {remedy}",
            says.join(", ")
        )
    })
}
