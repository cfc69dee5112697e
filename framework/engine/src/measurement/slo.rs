//! Judging a run against its service-level objectives (the bounds and the
//! per-request counts are the contract's `slo`).

use crate::measurement::metrics::{Latency, Metrics};
use batchbench_contract::slo::{SloBound, SloMetric, SloReport, SloResult};

/// The distribution bound `b` judges: the run's, or its model's.
pub(crate) fn distribution_for<'m>(b: &SloBound, m: &'m Metrics) -> &'m Latency {
    static NONE: std::sync::OnceLock<Latency> = std::sync::OnceLock::new();
    match &b.model {
        None => distribution(b.metric, m),
        Some(name) => m
            .models
            .iter()
            .find(|t| *t.name == **name)
            .and_then(|t| t.slo.of(b.metric))
            .unwrap_or_else(|| NONE.get_or_init(Latency::default)),
    }
}

/// The run's distribution of `metric`.
pub(crate) fn distribution(metric: SloMetric, m: &Metrics) -> &Latency {
    match metric {
        SloMetric::Ttft => &m.ttft_from_intended,
        SloMetric::Ttfat => &m.ttfat_from_intended,
        SloMetric::Itl => &m.itl,
        SloMetric::Tpot => &m.tpot,
        SloMetric::E2e => &m.latency_from_intended,
        SloMetric::QueueWait => &m.queue_wait,
    }
}

/// Judges the run: each aggregate bound against its percentile, each
/// per-request bound against every measured success. Goodput is the run's
/// success rate `success_rate` scaled by the share of good successes, so that
/// it counts over the same time (warmup excluded). Arrivals dropped at the
/// deadline, or after waiting too long for a concurrency slot, count as
/// misses of every per-request bound, and a run that dropped any does not
/// pass.
pub fn report(bounds: &[SloBound], m: &Metrics, success_rate: f64) -> SloReport {
    let counts = &m.slo;
    let results: Vec<SloResult> = bounds
        .iter()
        .enumerate()
        .map(|(i, b)| match b.percentile {
            Some(p) => {
                let d = distribution_for(b, m);
                let max_ms = b.max.as_secs_f64() * 1000.0;
                SloResult {
                    too_few: crate::measurement::interval::quantile_ranks(d.len(), p / 100.0)
                        .is_none(),
                    ..SloResult::percentile(
                        b.to_string(),
                        d.quantile_ms(p / 100.0),
                        d.quantile_interval_ms(p / 100.0),
                        max_ms,
                        d.decide(p / 100.0, max_ms),
                    )
                }
            }
            None => {
                // An arrival dropped at the deadline, or after waiting too
                // long for a slot, was a user not served: it counts as a
                // miss, so that dropping never flatters a run.
                let met = counts.met.get(i).copied().unwrap_or(0);
                // A bound naming a model asks of that model's successes
                // alone (a dropped arrival was sent to none).
                let (successes, asked) = match &b.model {
                    Some(name) => {
                        let n = m
                            .models
                            .iter()
                            .find(|t| *t.name == **name)
                            .map_or(0, |t| t.tally.successes);
                        (n, n)
                    }
                    None => (
                        m.successes,
                        m.successes + m.dropped_arrivals + m.dropped_waiting,
                    ),
                };
                let share = (successes > 0).then(|| met as f64 / asked as f64);
                SloResult {
                    bound: b.to_string(),
                    observed_ms: None,
                    share_met: share,
                    met: successes > 0 && met == asked,
                    ..SloResult::default()
                }
            }
        })
        .collect();
    SloReport {
        // A run that dropped arrivals did not serve the load it was asked
        // for: it does not pass, whatever its figures over what it sent.
        passed: !results.is_empty()
            && results.iter().all(|r| r.met)
            && m.dropped_arrivals + m.dropped_waiting == 0,
        bounds: results,
        good_requests: counts.good,
        goodput: if m.successes > 0 {
            success_rate * counts.good as f64 / m.successes as f64
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::slo::RequestFigures;
    use std::time::Duration;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn the_report_judges_percentiles_and_every_request() {
        let bounds: Vec<SloBound> = ["e2e_p50<=10ms", "e2e_p99<=10ms", "ttft<=5ms"]
            .iter()
            .map(|s| s.parse().unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let mut m = Metrics::default();
        for i in 1..=100u64 {
            let e2e = ms(if i <= 95 { 5 } else { 50 });
            m.successes += 1;
            m.latency_from_intended.record(e2e);
            let f = RequestFigures {
                ttft: Some(ms(1)),
                e2e,
                ..RequestFigures::default()
            };
            assert!(m.slo.record(&bounds, &f, 1, None));
        }
        let r = report(&bounds, &m, 10.0);
        assert!(
            r.bounds[0].met && !r.bounds[1].met && r.bounds[2].met,
            "{r:?}"
        );
        assert!(!r.passed);
        assert_eq!(r.bounds[2].share_met, Some(1.0));
        assert_eq!((r.good_requests, r.goodput), (100, 10.0));
        let empty = report(&bounds, &Metrics::default(), 1.0);
        assert!(
            !empty.passed && empty.bounds.iter().all(|b| !b.met),
            "no samples hold nothing"
        );
    }
}
