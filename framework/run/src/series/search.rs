//! The two searches: a sweep over its values (stopped at saturation) and
//! the capacity search (bracketing, then bisection).

use super::points::Series;
use super::tables::Judge;
use super::*;

/// Saturation: the throughput rose by less than a quarter of the load's rise
/// while the median latency rose by more than 10%.
pub fn saturated(prev: &Point, cur: &Point) -> bool {
    let load_gain = cur.value / prev.value - 1.0;
    let before = prev.requests_per_second.mean;
    if load_gain <= 0.0 || before <= 0.0 {
        return false;
    }
    let gain = cur.requests_per_second.mean / before - 1.0;
    let rise = match (&prev.e2e_p50_ms, &cur.e2e_p50_ms) {
        (Some(a), Some(b)) if a.mean > 0.0 => b.mean / a.mean - 1.0,
        // No latency at all: nothing succeeded.
        (Some(_), None) => f64::INFINITY,
        _ => 0.0,
    };
    gain < 0.25 * load_gain && rise > 0.10
}

pub(super) fn run_sweep(
    s: &mut Series<'_>,
    values: &[f64],
    judge: &Judge,
    early: bool,
) -> Result<(), Failure> {
    for (i, v) in values.iter().enumerate() {
        let spec = match s.spec(*v) {
            Ok(spec) => spec,
            Err(f) => return Err(s.abort(f)),
        };
        let mut p = match s.measure(*v, &spec, judge, false) {
            Ok(p) => p,
            Err(f) => return Err(s.abort(f)),
        };
        // The client's ceiling is not the server's saturation.
        let stop = early
            && p.client_bound.is_none()
            && s.doc.points.last().is_some_and(|prev| saturated(prev, &p));
        p.saturated = stop;
        let interrupted = p.interrupted;
        s.record(p, Some(values.len()))?;
        if interrupted {
            s.doc.interrupted = true;
            s.doc.skipped = values[i + 1..].to_vec();
            break;
        }
        if stop {
            s.doc.skipped = values[i + 1..].to_vec();
            s.doc.stopped_early = Some(format!(
                "saturated at {} {}: throughput rose by less than a quarter of the load's rise while the median latency rose by more than 10% (--no-early-stop runs every point)",
                s.dim.arg(*v),
                s.dim.unit
            ));
            break;
        }
    }
    Ok(())
}

pub(super) fn run_capacity(
    s: &mut Series<'_>,
    c: &CapacityArgs,
    judge: &Judge,
) -> Result<(), Failure> {
    let dim = s.dim;
    let snap = |v: f64| {
        if dim.whole {
            v.round().max(1.0)
        } else {
            round_sig(v)
        }
    };
    let start = snap(c.start.unwrap_or(1.0));
    let max = c.max_load.map(snap);
    let lowest = if dim.whole { 1.0 } else { start / 1024.0 };
    let mut lo: Option<f64> = None;
    let mut hi: Option<f64> = None;
    let mut missed: Option<f64> = None;
    let mut undecided: Vec<f64> = Vec::new();
    let mut short_of: Option<(String, u64)> = None;
    let mut verdict = "out_of_points";
    let mut limit: Option<String> = None;
    let mut client: Option<(f64, String)> = None;
    let mut next = Some(start);
    while let Some(v) = next.take() {
        if s.doc.points.len() as u64 >= c.max_points {
            break;
        }
        // A load the run cannot take (past a documented limit) ends the
        // search where it is, before anything of it is sent.
        let spec = match s.spec(v) {
            Ok(spec) => spec,
            Err(f) => {
                verdict = "at_limit";
                limit = Some(format!("{:#}", f.error));
                break;
            }
        };
        let p = match s.measure(v, &spec, judge, true) {
            Ok(p) => p,
            Err(f) => return Err(s.abort(f)),
        };
        let passed = p.passed == Some(true);
        let interrupted = p.interrupted;
        // Undecided for want of requests (not for a percentile near its
        // bound, nor for latencies that move together): a lower load has
        // fewer still, so the search cannot go on.
        let too_short = p
            .bounds
            .iter()
            .zip(&judge.bounds)
            .find(|(b, _)| p.undecided && b.undecided && b.too_few)
            .map(|(b, j)| (b.bound.clone(), min_requests(j.percentile.unwrap_or(50.0))));
        let undecided_point = p.undecided;
        let bound = p.client_bound.clone();
        s.record(p, None)?;
        if interrupted {
            s.doc.interrupted = true;
            verdict = "interrupted";
            break;
        }
        // The client could not give this load: whether the server meets
        // the SLO at it is unknown, and at any higher load too.
        if let Some(why) = bound {
            client = Some((v, why));
            verdict = "client_bound";
            break;
        }
        if undecided_point {
            undecided.push(v);
        } else if !passed {
            missed = Some(missed.map_or(v, |m: f64| m.min(v)));
        }
        // An undecided point counts as not met: the capacity reported is
        // one the SLO was seen to hold at.
        if passed {
            lo = Some(lo.map_or(v, |l: f64| l.max(v)));
        } else {
            hi = Some(hi.map_or(v, |h: f64| h.min(v)));
        }
        if let Some(short) = too_short {
            short_of = Some(short);
            verdict = "too_short";
            break;
        }
        next = match (lo, hi) {
            // Bracketing upwards, to --max-load at most.
            (Some(l), None) => {
                let up = snap(max.map_or(l * 2.0, |m| (l * 2.0).min(m)));
                if up <= l {
                    verdict = "at_max_load";
                    None
                } else {
                    Some(up)
                }
            }
            // Bracketing downwards.
            (None, Some(h)) => {
                let down = snap((h / 2.0).max(lowest));
                if down >= h {
                    verdict = "below_lowest";
                    None
                } else {
                    Some(down)
                }
            }
            (Some(l), Some(h)) => {
                let done = if dim.whole {
                    h - l <= 1.0
                } else {
                    (h - l) / l <= c.tolerance
                };
                let mid = snap(f64::midpoint(l, h));
                if done || mid <= l || mid >= h {
                    verdict = "found";
                    None
                } else {
                    Some(mid)
                }
            }
            (None, None) => None,
        };
    }
    let unit = dim.unit;
    let arg = |v: f64| dim.arg(v);
    let mut message = match (verdict, lo, hi) {
        ("interrupted", _, _) => "capacity: interrupted, so none is reported".to_owned(),
        ("client_bound", l, h) => {
            let (at, why) = client.as_ref().map_or((0.0, ""), |(v, w)| (*v, w.as_str()));
            // The run's line without its preamble and its advice: the reasons.
            let why = why.split_once("limited this run: ").map_or(why, |(_, r)| r);
            let why = why.split("; its figures").next().unwrap_or(why);
            format!(
                "capacity: client-bound: at {} {unit} the client, not the server, was the limit ({why}), so no capacity is reported; {}; give the client more threads (--client-threads) or split the load over shards (--shard I/N, joined by merge)",
                arg(at),
                bracket(l, h, &arg, unit)
            )
        }
        ("too_short", l, h) => format!(
            "capacity: undecided: the point at {} {unit} had too few requests for any interval of {} (it needs {} at least), so whether it meets the SLO is unknown; give --min-requests with --point-max-secs, or a longer --duration-secs{}",
            h.map_or_else(|| "?".to_owned(), arg),
            short_of.as_ref().map_or("its percentile", |s| s.0.as_str()),
            short_of.as_ref().map_or(0, |s| s.1),
            l.map_or_else(String::new, |l| format!(
                "; at least {} {unit} met the SLO",
                arg(l)
            ))
        ),
        ("found", Some(l), Some(h)) => format!(
            "capacity: {} {unit} meets the SLO; {} {unit} does not (the capacity lies within {:.1}% above)",
            arg(l),
            arg(h),
            100.0 * (h - l) / l
        ),
        ("at_max_load", Some(l), _) => format!(
            "capacity: at least {} {unit}: --max-load met the SLO",
            arg(l)
        ),
        ("below_lowest", None, Some(h)) => format!(
            "capacity: none: even {} {unit}, the lowest load tried, misses the SLO",
            arg(h)
        ),
        ("at_limit", l, h) => format!(
            "capacity: the search stopped at a load the run cannot take ({}); {}",
            limit.as_deref().unwrap_or("?"),
            bracket(l, h, &arg, unit)
        ),
        (_, l, h) => format!(
            "capacity: the search ran out of points (--max-points {}); {}",
            c.max_points,
            bracket(l, h, &arg, unit)
        ),
    };
    if undecided.is_empty() && verdict == "found" {
        message +=
            ": every point was decided at the 95% level, so this is also the statistical bracket";
    }
    // The statistical bracket, where undecided points widen it (a search
    // that stopped on a point too short to decide has said so already).
    if !undecided.is_empty() && !matches!(verdict, "interrupted" | "too_short" | "client_bound") {
        let list = undecided
            .iter()
            .map(|v| arg(*v))
            .collect::<Vec<_>>()
            .join(", ");
        message += &match (lo, missed) {
            (Some(l), Some(m)) => format!(
                ". Statistically the capacity lies between {} and {} {unit}: the SLO stayed undecided at {list} {unit}",
                arg(l),
                arg(m)
            ),
            (Some(l), None) => format!(
                ". Statistically the capacity is at least {} {unit}, and no load was seen to miss the SLO for sure: it stayed undecided at {list} {unit}",
                arg(l)
            ),
            (None, Some(m)) => format!(
                ". Statistically the capacity lies under {} {unit}: the SLO stayed undecided at {list} {unit}",
                arg(m)
            ),
            (None, None) => format!(". The SLO stayed undecided at {list} {unit}"),
        };
    }
    // The answer's point: the highest load that met the SLO, unless the
    // search was interrupted (then nothing is claimed).
    let claims = !matches!(verdict, "interrupted" | "client_bound");
    if claims
        && let Some(l) = lo
        && let Some(p) = s
            .doc
            .points
            .iter_mut()
            .find(|p| p.value == l && p.passed == Some(true))
    {
        p.capacity = true;
    }
    s.doc.capacity = Some(Capacity {
        load: lo.filter(|_| claims),
        unit: unit.into(),
        dimension: dim.name.into(),
        lowest_failing: hi,
        lowest_missed: missed,
        undecided,
        relative_width: lo.zip(hi).map(|(l, h)| (h - l) / l),
        tolerance: c.tolerance,
        verdict: verdict.into(),
        message,
    });
    Ok(())
}

/// The fewest independent samples with an interval of the `percentile`
/// (0 to 100) on both sides: 368 for a p99, 36 for a p90 (where the more
/// likely side's chance of holding every sample drops under 2.5%, as
/// [`quantile_ranks`](batchbench_engine::measurement::interval::quantile_ranks) asks).
pub(super) fn min_requests(percentile: f64) -> u64 {
    let q = (percentile / 100.0).clamp(1e-9, 1.0 - 1e-9);
    let n = (0.025_f64.ln() / q.max(1.0 - q).ln()).floor() + 1.0;
    debug_assert!(batchbench_engine::measurement::interval::quantile_ranks(n as u64, q).is_some());
    n as u64
}

/// What a search that stopped short knows.
pub(super) fn bracket(
    lo: Option<f64>,
    hi: Option<f64>,
    arg: &dyn Fn(f64) -> String,
    unit: &str,
) -> String {
    match (lo, hi) {
        (Some(l), Some(h)) => format!("{} {unit} met the SLO, {} {unit} did not", arg(l), arg(h)),
        (Some(l), None) => format!("at least {} {unit} met the SLO", arg(l)),
        (None, Some(h)) => format!("no load met it, down to {} {unit}", arg(h)),
        (None, None) => "nothing was measured".to_owned(),
    }
}
