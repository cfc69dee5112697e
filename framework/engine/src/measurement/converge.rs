//! Runs that stop once their figures are sure enough, rather than at a fixed
//! length: `load.target_ci` (every watched figure's 95% interval within that
//! many percent of it) and `load.until_decided` (every percentile bound of the
//! SLO decided: its interval wholly on one side of the bound). The duration
//! is the cap; a run that reaches it says what kept it from converging.
//!
//! The watched figures are the percentile bounds of the SLO, or e2e p50 and
//! p99 without one. A figure whose batch means drift over the run by more
//! than the target has not converged, however narrow its interval: its
//! interval describes a moving target.

use crate::measurement::interval::{Span, Trend};
use crate::measurement::metrics::{Latency, Metrics};
use crate::measurement::slo::distribution;
use batchbench_contract::record::{Convergence, WatchedFigure};
use batchbench_contract::slo::{SloBound, SloMetric, SloResult};
use batchbench_contract::spec::LoadSpec;
use std::time::Duration;

/// One figure a converging run watches.
struct Watched {
    /// The bound it comes from (none: the default figures).
    bound: Option<SloBound>,
    metric: SloMetric,
    /// The percentile, 0 to 100.
    percentile: f64,
    /// The SLO's bound on it, in milliseconds.
    max_ms: Option<f64>,
}

/// `e2e_p99`: the figure's name as a bound writes it, `percentile` 0 to 100.
fn name(metric: SloMetric, percentile: f64) -> String {
    format!("{}_p{percentile}", metric.name())
}

/// The figures a run with this SLO watches: its percentile bounds, or e2e
/// p50 and p99 without one.
fn watched(slo: &[SloBound]) -> Vec<Watched> {
    let bounded: Vec<Watched> = slo
        .iter()
        .filter_map(|b| {
            Some(Watched {
                bound: Some(b.clone()),
                metric: b.metric,
                percentile: b.percentile?,
                max_ms: Some(b.max.as_secs_f64() * 1000.0),
            })
        })
        .collect();
    if !bounded.is_empty() {
        return bounded;
    }
    [50.0, 99.0]
        .into_iter()
        .map(|percentile| Watched {
            bound: None,
            metric: SloMetric::E2e,
            percentile,
            max_ms: None,
        })
        .collect()
}

/// Where a converging run's figures stand.
pub(crate) struct Standing {
    /// The figures, as they stand.
    pub(crate) figures: Vec<WatchedFigure>,
    /// What keeps the run from stopping (`None`: it may stop).
    pub(crate) pending: Option<String>,
}

/// The rule in words.
fn rule(load: &LoadSpec) -> String {
    let mut says = Vec::new();
    if let Some(t) = load.target_ci {
        says.push(format!("every figure within ±{t}%"));
    }
    if load.until_decided {
        says.push("every SLO bound decided".to_owned());
    }
    if let Some(n) = load.min_requests {
        says.push(format!("at least {n} requests"));
    }
    says.join(", ")
}

/// Whether the run's figures are sure enough to stop (`load` converges).
pub(crate) fn standing(m: &Metrics, load: &LoadSpec, slo: &[SloBound]) -> Standing {
    let mut pending: Vec<String> = Vec::new();
    let mut figures = Vec::new();
    for w in watched(slo) {
        let d: &Latency = match &w.bound {
            Some(b) => crate::measurement::slo::distribution_for(b, m),
            None => distribution(w.metric, m),
        };
        let q = w.percentile / 100.0;
        let figure = match w.bound.as_ref().and_then(|b| b.model.as_deref()) {
            Some(model) => format!("{}{{model={model}}}", name(w.metric, w.percentile)),
            None => name(w.metric, w.percentile),
        };
        let Some(value_ms) = d.quantile_ms(q) else {
            pending.push(format!("{figure} has no samples"));
            continue;
        };
        let interval_ms = d.quantile_interval_ms(q);
        let half_width_pct = interval_ms.map(|[lo, hi]| {
            if value_ms > 0.0 {
                (hi - lo) / 2.0 / value_ms * 100.0
            } else {
                0.0
            }
        });
        if let Some(target) = load.target_ci {
            match half_width_pct {
                None => pending.push(format!("{figure} has no interval yet: {}", too_few(d, q))),
                Some(h) if h > target => {
                    pending.push(format!("{figure} is within ±{h:.1}%, not ±{target}%"));
                }
                Some(_) => {}
            }
            if let Some(t) = d
                .trend(Span::Whole)
                .filter(|t| t.drifts(target / 100.0, Trend::WAIT_T))
            {
                pending.push(format!(
                    "{} still drifts ({:+.1}% over the run)",
                    w.metric.name(),
                    t.change * 100.0
                ));
            }
        }
        if load.until_decided
            && let Some(max_ms) = w.max_ms
        {
            let r = SloResult::percentile(
                figure.clone(),
                Some(value_ms),
                interval_ms,
                max_ms,
                d.decide(q, max_ms),
            );
            if r.undecided {
                pending.push(match interval_ms {
                    Some([lo, hi]) => format!(
                        "{figure} is undecided: {value_ms:.1} ms (interval {lo:.1}-{hi:.1}) against the bound {max_ms} ms"
                    ),
                    None => format!("{figure} is undecided: {}", too_few(d, q)),
                });
            }
        }
        figures.push(WatchedFigure {
            name: figure,
            value_ms,
            interval_ms,
            half_width_pct,
        });
    }
    if let Some(n) = load.min_requests
        && m.requests < n
    {
        pending.push(format!(
            "only {} of the at least {n} requests required were measured",
            m.requests
        ));
    }
    let mut seen = std::collections::HashSet::new();
    pending.retain(|p| seen.insert(p.clone()));
    Standing {
        figures,
        pending: (!pending.is_empty()).then(|| pending.join("; ")),
    }
}

/// Why the `q`-quantile of `d` has no interval: too few requests, or too few
/// once their correlation over time is allowed for.
fn too_few(d: &Latency, q: f64) -> String {
    let n = d.len();
    if crate::measurement::interval::quantile_ranks(n, q).is_none() {
        format!("{n} requests are too few for its interval")
    } else {
        format!(
            "{n} requests, too few once their correlation over time is allowed for (latency that moves together, as in a growing queue)"
        )
    }
}

/// When a converging run got there: measured requests, the time from the
/// clock start, and its figures then (requests in flight at the stop end
/// after it, and move them a little).
#[derive(Debug, Clone)]
pub struct Converged {
    /// Measured requests when the run stopped.
    pub requests: u64,
    /// From the clock start to the stop.
    pub at: Duration,
    /// The watched figures then.
    pub figures: Vec<WatchedFigure>,
}

/// The convergence report of a finished run: when its figures got there and
/// where they stood then, or where they stand at the end (`converged` is
/// `None`: they did not get there before the cap).
pub(crate) fn report(
    m: &Metrics,
    load: &LoadSpec,
    slo: &[SloBound],
    converged: Option<&Converged>,
) -> Option<Convergence> {
    if load.target_ci.is_none() && !load.until_decided {
        return None;
    }
    Some(match converged {
        Some(c) => Convergence {
            rule: rule(load),
            converged: true,
            requests: c.requests,
            secs: Some(c.at.as_secs_f64()),
            figures: c.figures.clone(),
            reason: None,
        },
        None => {
            let s = standing(m, load, slo);
            Convergence {
                rule: rule(load),
                converged: false,
                requests: m.requests,
                secs: None,
                figures: s.figures,
                reason: Some(s.pending.unwrap_or_else(|| {
                    "the cap came before the figures were looked at again".to_owned()
                })),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded exponential sample (mean `mean_ms`) sent at `at`.
    fn exponential(rng: &mut u64, mean_ms: f64) -> Duration {
        *rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let u = ((*rng >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        Duration::from_secs_f64(-u.ln() * mean_ms / 1000.0)
    }

    fn target(pct: f64) -> LoadSpec {
        LoadSpec {
            duration_secs: Some(600.0),
            target_ci: Some(pct),
            ..LoadSpec::default()
        }
    }

    /// Feeds `rate` samples a second of `sample(i)` until the run may stop;
    /// returns the requests it took (or `None` within `cap`).
    fn until_stop(
        load: &LoadSpec,
        slo: &[SloBound],
        rate: u64,
        cap: u64,
        mut sample: impl FnMut(u64) -> Duration,
    ) -> (Option<u64>, Standing) {
        let mut m = Metrics::default();
        for i in 0..cap {
            let at = Duration::from_secs_f64(i as f64 / rate as f64);
            m.latency_from_intended.record_at(sample(i), at);
            m.requests += 1;
            if i % 500 == 499 {
                let s = standing(&m, load, slo);
                if s.pending.is_none() {
                    return (Some(i + 1), s);
                }
            }
        }
        (None, standing(&m, load, slo))
    }

    /// The requests the binomial interval needs for ±2% of the p99 of
    /// exponential latencies: its half-width is about z sqrt(p (1 - p) / n) /
    /// density, so n = (z / 0.02)^2 p / ((1 - p) ln(1 / (1 - p))^2) = 44,800
    /// (the p50 needs fewer, 20,000).
    fn p99_at_2pct_needs() -> f64 {
        let (z, p): (f64, f64) = (1.96, 0.99);
        (z / 0.02).powi(2) * p / ((1.0 - p) * (1.0 / (1.0 - p)).ln().powi(2))
    }

    /// The figures behind the book's `--target-ci` paragraph: where 15 seeded
    /// streams of exponential samples stop against the binomial prediction
    /// (`cargo test --release -p batchbench-engine --lib converge_figures --
    /// --ignored --nocapture`).
    #[test]
    #[ignore = "prints figures; 15 runs to convergence"]
    fn converge_figures() {
        let predicted = p99_at_2pct_needs();
        let mut ratios = Vec::new();
        for seed in 1..=15u64 {
            let mut rng = seed;
            let (n, _) = until_stop(&target(2.0), &[], 1000, 400_000, |_| {
                exponential(&mut rng, 100.0)
            });
            let ratio = n.map_or(f64::NAN, |n| n as f64 / predicted);
            println!("seed {seed:>2}: stopped after {n:?} requests, {ratio:.2}x of {predicted:.0}");
            ratios.push(ratio);
        }
        ratios.sort_by(f64::total_cmp);
        println!(
            "range {:.2}x to {:.2}x, median {:.2}x",
            ratios[0], ratios[14], ratios[7]
        );
    }

    #[test]
    fn a_steady_run_converges_near_the_count_the_binomial_predicts() {
        let predicted = p99_at_2pct_needs();
        // Over seeds 1 to 15 the stop comes at 0.55x to 1.95x of it (median
        // 1.04x, `converge_figures`): the batch means' estimate of the
        // correlation, from 16 to 32 batches, varies from run to run.
        let mut rng = 12;
        let (n, s) = until_stop(&target(2.0), &[], 1000, 200_000, |_| {
            exponential(&mut rng, 100.0)
        });
        let n = n.unwrap_or_else(|| panic!("no convergence: {:?}", s.pending)) as f64;
        assert!(
            n >= 0.8 * predicted && n <= 1.5 * predicted,
            "stopped after {n} requests, predicted {predicted:.0}"
        );
        assert_eq!(s.figures.len(), 2);
        assert!(
            s.figures
                .iter()
                .all(|f| f.half_width_pct.is_some_and(|h| h <= 2.0))
        );
    }

    #[test]
    fn a_server_that_slows_down_never_converges() {
        // Latency rises by half over the run: the interval narrows, the
        // figure moves.
        let mut rng = 11;
        let (n, s) = until_stop(&target(2.0), &[], 1000, 200_000, |i| {
            exponential(&mut rng, 100.0 * (1.0 + i as f64 / 400_000.0))
        });
        assert_eq!(n, None, "{:?}", s.figures);
        let why = s.pending.unwrap_or_default();
        assert!(why.contains("e2e still drifts (+"), "{why}");
    }

    #[test]
    fn an_slo_point_stops_once_decided_and_a_p99_needs_its_sample() {
        let slo: Vec<SloBound> = vec!["e2e_p99<=1s".parse().unwrap_or_else(|e| panic!("{e}"))];
        let load = LoadSpec {
            duration_secs: Some(600.0),
            until_decided: true,
            ..LoadSpec::default()
        };
        // Every latency 10 ms, far under the bound: decided as soon as the
        // p99 has an interval at all (368 requests).
        let (n, s) = until_stop(&load, &slo, 100, 5_000, |_| Duration::from_millis(10));
        assert_eq!(n, Some(500), "{:?}", s.pending);
        let mut m = Metrics::default();
        for i in 0..300u64 {
            m.latency_from_intended
                .record_at(Duration::from_millis(10), Duration::from_millis(i * 10));
            m.requests += 1;
        }
        let why = standing(&m, &load, &slo).pending.unwrap_or_default();
        assert!(
            why.contains("e2e_p99 is undecided: 300 requests are too few"),
            "{why}"
        );
        // With a least count, not before it.
        let load = LoadSpec {
            min_requests: Some(2_000),
            ..load
        };
        let (n, _) = until_stop(&load, &slo, 100, 5_000, |_| Duration::from_millis(10));
        assert_eq!(n, Some(2_000));
    }

    #[test]
    fn a_bound_near_the_percentile_stays_undecided() {
        // Exponential with mean 100 ms: the p90 is 230 ms, the bound on it.
        let slo: Vec<SloBound> = vec!["e2e_p90<=230ms".parse().unwrap_or_else(|e| panic!("{e}"))];
        let load = LoadSpec {
            duration_secs: Some(600.0),
            until_decided: true,
            ..LoadSpec::default()
        };
        let mut rng = 3;
        let (n, s) = until_stop(&load, &slo, 1000, 20_000, |_| exponential(&mut rng, 100.0));
        assert_eq!(n, None, "{:?}", s.figures);
        let r = report(&Metrics::default(), &load, &slo, None).unwrap_or_default();
        assert!(!r.converged && r.rule == "every SLO bound decided", "{r:?}");
    }

    #[test]
    fn names_are_the_slo_names() {
        assert_eq!(name(SloMetric::E2e, 99.0), "e2e_p99");
        assert_eq!(name(SloMetric::Ttft, 50.0), "ttft_p50");
        assert_eq!(name(SloMetric::QueueWait, 99.9), "queue_wait_p99.9");
    }
}
