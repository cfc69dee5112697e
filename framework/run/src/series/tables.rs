//! A point's figures across its trials, how its SLO bounds are decided, and
//! the lines and table a series prints.

use super::*;

/// How a point is judged: the SLO and the failures allowed.
#[derive(Debug, Clone)]
pub(super) struct Judge {
    pub(super) bounds: Vec<batchbench_contract::slo::SloBound>,
    pub(super) max_failure_rate: f64,
    pub(super) near: f64,
}

/// A point's figures, and whether one is near its bound.
pub(super) struct Figures {
    pub(super) point: Point,
    pub(super) near: bool,
}

pub(super) fn figures(value: f64, runs: &[Summary], judge: &Judge) -> Figures {
    let load = |f: fn(&batchbench_contract::record::LoadReport) -> Option<f64>| {
        Estimate::of_some(runs.iter().map(|s| s.load.as_ref().and_then(f)))
    };
    // One run's own interval of a figure (several runs have theirs over them).
    let own = |f: &dyn Fn(&Summary) -> Option<[f64; 2]>| runs.first().and_then(f);
    let e2e_stats = |s: &Summary| {
        s.load
            .as_ref()
            .and_then(|l| l.latency_from_intended)
            .or(s.latency)
    };
    let e2e = |p99: bool| {
        Estimate::of_some(
            runs.iter()
                .map(|s| e2e_stats(s).map(|l| if p99 { l.p99_ms } else { l.p50_ms })),
        )
        .map(|e| {
            e.or_own(own(&|s| {
                let ci = e2e_stats(s)?.ci?;
                if p99 { ci.p99_ms } else { ci.p50_ms }
            }))
        })
    };
    let mut p = Point {
        value,
        requests: runs.iter().map(|s| s.total_requests).sum(),
        failed_requests: runs.iter().map(|s| s.failed_requests).sum(),
        requests_per_second: Estimate::of(runs.iter().map(|s| s.requests_per_second).collect())
            .or_own(own(&|s| s.requests_per_second_ci)),
        completion_tokens_per_second: Estimate::of(
            runs.iter()
                .map(|s| s.completion_tokens_per_second)
                .collect(),
        ),
        achieved_rate: load(|l| l.target_rate.map(|_| l.achieved_rate)),
        goodput: Estimate::of_some(runs.iter().map(|s| s.slo.as_ref().map(|r| r.goodput))),
        e2e_p50_ms: e2e(false),
        e2e_p99_ms: e2e(true),
        ttft_p99_ms: load(|l| l.ttft_from_intended.map(|t| t.p99_ms))
            .map(|e| e.or_own(own(&|s| s.load.as_ref()?.ttft_from_intended?.ci?.p99_ms))),
        tpot_p99_ms: Estimate::of_some(runs.iter().map(|s| s.tpot.map(|t| t.p99_ms))),
        interrupted: runs.iter().any(|s| s.interrupted),
        ..Point::default()
    };
    let mut near = false;
    if !judge.bounds.is_empty() {
        let results: Vec<Vec<SloResult>> = runs
            .iter()
            .map(|s| s.slo.as_ref().map(|r| r.bounds.clone()).unwrap_or_default())
            .collect();
        for (i, b) in judge.bounds.iter().enumerate() {
            let of = |f: fn(&SloResult) -> Option<f64>| {
                Estimate::of_some(results.iter().map(|r| r.get(i).and_then(f)))
            };
            let max_ms = b.max.as_secs_f64() * 1000.0;
            let v = match b.percentile {
                Some(_) => {
                    let observed = of(|r| r.observed_ms);
                    let met = observed.as_ref().is_some_and(|o| o.mean <= max_ms);
                    near |= observed
                        .as_ref()
                        .is_some_and(|o| (o.mean - max_ms).abs() <= judge.near * max_ms);
                    let (interval_ms, decided) = decided_by(&observed, &results, i, max_ms);
                    let too_few = results.iter().any(|r| r.get(i).is_some_and(|r| r.too_few));
                    BoundVerdict {
                        bound: b.to_string(),
                        undecided: observed.is_some() && !decided,
                        too_few: observed.is_some() && !decided && too_few,
                        observed_ms: observed,
                        share_met: None,
                        met,
                        interval_ms,
                    }
                }
                None => {
                    let share = of(|r| r.share_met);
                    let met = results.iter().all(|r| r.get(i).is_some_and(|r| r.met));
                    near |= share
                        .as_ref()
                        .is_some_and(|s| s.mean < 1.0 && s.mean >= 1.0 - judge.near);
                    BoundVerdict {
                        bound: b.to_string(),
                        observed_ms: None,
                        share_met: share,
                        met,
                        ..BoundVerdict::default()
                    }
                }
            };
            p.bounds.push(v);
        }
        let failure_share = if p.requests > 0 {
            p.failed_requests as f64 / p.requests as f64
        } else {
            1.0
        };
        let served = failure_share <= judge.max_failure_rate
            && runs.iter().any(|s| s.successful_requests > 0);
        let missed = p.bounds.iter().any(|b| !b.met && !b.undecided);
        p.undecided = served && !missed && p.bounds.iter().any(|b| b.undecided);
        p.passed = Some(served && p.bounds.iter().all(|b| b.met && !b.undecided));
    }
    // A point whose client was the limit measured the client: it is neither
    // met nor missed, and measuring it again would not change that.
    p.client_bound = runs
        .iter()
        .find_map(|s| s.client_bound.as_ref().map(|b| b.message.clone()));
    if p.client_bound.is_some() {
        p.passed = None;
        p.undecided = false;
        near = false;
    }
    Figures { point: p, near }
}

/// A percentile bound's interval at a point, and whether it is decided. One
/// run decides by its own verdict (its share of requests over the bound).
/// Several decide when each run decided and all agree, or else by the
/// interval over their percentiles, `observed`, when every run had an
/// interval of its own: the percentile of a run too short for one is its
/// largest samples (a p99 of 22 requests is their maximum), and no mean of
/// such tells the server's.
pub(super) fn decided_by(
    observed: &Option<Estimate>,
    results: &[Vec<SloResult>],
    bound: usize,
    max_ms: f64,
) -> (Option<[f64; 2]>, bool) {
    let Some(observed) = observed.as_ref() else {
        return (None, false);
    };
    let Some(runs) = results
        .iter()
        .map(|r| r.get(bound))
        .collect::<Option<Vec<&SloResult>>>()
    else {
        return (None, false);
    };
    if let [one] = runs.as_slice() {
        return (one.interval_ms, !one.undecided);
    }
    let ci = runs
        .iter()
        .all(|r| r.interval_ms.is_some())
        .then_some(observed.interval)
        .flatten();
    let agree = !runs.is_empty()
        && runs.iter().all(|r| !r.undecided)
        && runs.iter().all(|r| r.met == runs[0].met);
    let by_interval = ci.is_some_and(|[lo, hi]| hi <= max_ms || lo > max_ms);
    (ci, agree || by_interval)
}

/// A figure with its interval, for the console.
pub(super) fn show(e: Option<&Estimate>, unit: &str) -> String {
    match e {
        None => "-".into(),
        Some(e) => match e.ci95 {
            Some(ci) => format!("{:.2}±{:.2}{unit}", e.mean, ci),
            None => format!("{:.2}{unit}", e.mean),
        },
    }
}

pub(super) fn point_line(dim: &Dimension, p: &Point) -> String {
    let mut line = format!(
        "{} {} {}: {} req/s",
        dim.name,
        dim.arg(p.value),
        dim.unit,
        show(Some(&p.requests_per_second), "")
    );
    if let Some(g) = &p.goodput {
        line += &format!(", goodput {} req/s", show(Some(g), ""));
    }
    line += &format!(
        ", e2e p50 {} p99 {}",
        show(p.e2e_p50_ms.as_ref(), " ms"),
        show(p.e2e_p99_ms.as_ref(), " ms")
    );
    if p.ttft_p99_ms.is_some() {
        line += &format!(", ttft p99 {}", show(p.ttft_p99_ms.as_ref(), " ms"));
    }
    if p.failed_requests > 0 {
        line += &format!(", {} failed", p.failed_requests);
    }
    match p.passed {
        Some(true) => line += ", SLO met",
        Some(false) if p.undecided => {
            let open: Vec<String> = p
                .bounds
                .iter()
                .filter(|b| b.undecided)
                .map(|b| match b.interval_ms {
                    Some([lo, hi]) => format!("{}: interval {lo:.1}-{hi:.1} ms", b.bound),
                    None => format!("{}: too few requests for an interval", b.bound),
                })
                .collect();
            line += &format!(", SLO undecided ({})", open.join("; "));
        }
        Some(false) => {
            let missed: Vec<&str> = p
                .bounds
                .iter()
                .filter(|b| !b.met)
                .map(|b| b.bound.as_str())
                .collect();
            line += &if missed.is_empty() {
                ", SLO missed (failed requests)".to_owned()
            } else {
                format!(", SLO missed ({})", missed.join(", "))
            };
        }
        None => {}
    }
    if let Some(why) = &p.client_bound {
        line += &format!(", CLIENT-BOUND ({why})");
    }
    if p.remeasured {
        line += &format!(" [near a bound: {} runs]", p.runs.len());
    }
    line
}

/// The console table of a series.
pub(super) fn table(doc: &SeriesDoc, dim: &Dimension) -> String {
    let slo = !doc.slo.is_empty();
    let mut rows = vec![{
        let mut h = vec![
            format!("{} ({})", dim.name, dim.unit),
            "req/s".into(),
            "tok/s".into(),
        ];
        if slo {
            h.push("goodput".into());
        }
        h.extend([
            "e2e p50 ms".into(),
            "e2e p99 ms".into(),
            "ttft p99 ms".into(),
        ]);
        h.extend(["tpot p99 ms".into(), "failed".into()]);
        if slo {
            h.push("SLO".into());
        }
        h
    }];
    for p in &doc.points {
        let mut r = vec![
            dim.arg(p.value),
            show(Some(&p.requests_per_second), ""),
            show(Some(&p.completion_tokens_per_second), ""),
        ];
        if slo {
            r.push(show(p.goodput.as_ref(), ""));
        }
        r.extend([
            show(p.e2e_p50_ms.as_ref(), ""),
            show(p.e2e_p99_ms.as_ref(), ""),
            show(p.ttft_p99_ms.as_ref(), ""),
            show(p.tpot_p99_ms.as_ref(), ""),
            p.failed_requests.to_string(),
        ]);
        if slo {
            let mut v = match p.passed {
                _ if p.client_bound.is_some() => "client-bound".to_owned(),
                Some(true) => "met".to_owned(),
                _ if p.undecided => "undecided".to_owned(),
                _ => "missed".to_owned(),
            };
            if p.capacity {
                v += " <- capacity";
            }
            if p.saturated {
                v += " (saturated)";
            }
            r.push(v);
        } else if p.client_bound.is_some() {
            r.push("client-bound".into());
        } else if p.saturated {
            r.push("saturated".into());
        }
        rows.push(r);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(String::len)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:>w$}", w = widths[i]))
            .collect();
        out += "  ";
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}
