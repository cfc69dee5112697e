//! How sure a figure is: 95% confidence intervals of percentiles and means.
//!
//! A percentile's interval is distribution-free: the order statistics of the
//! sample whose ranks the binomial distribution puts around the quantile, 2.5%
//! outside on each side (so a p99 needs at least 368 samples before it has an
//! upper bound at all). The ranks are read off the exact histogram, so merged
//! shards get intervals too.
//!
//! Latencies of a loaded server are not independent: a queue that builds up
//! makes many requests in a row slow. The samples are therefore also kept in
//! batches by send time ([`Batches`]), and the variance of each batch's share
//! below the estimate (batch means) says how much less a sample tells than an
//! independent one would. The interval is then computed for the effective
//! sample size, `n / inflation`. With fewer than [`MIN_BATCHES`] batches (a
//! run of a few seconds, or merged shards that carry none) independence is
//! assumed, and the interval says so.

use hdrhistogram::Histogram;
use std::time::Duration;

/// The confidence level of every interval.
pub const LEVEL: f64 = 0.95;
/// The share of the probability outside the interval on each side.
const TAIL: f64 = (1.0 - LEVEL) / 2.0;
/// The standard normal quantile of `1 - TAIL`.
const Z: f64 = 1.959_963_984_540_054;
/// The fewest batches with samples from which batch means are trusted.
pub const MIN_BATCHES: usize = 10;
/// The most batches kept: past it, neighbours merge and each covers twice the time.
const MAX_BATCHES: usize = 32;
/// The range of a batch's coarse histogram, in microseconds: 1 us to an
/// hour, as the exact ones (larger values saturate).
const BIN_BOUNDS: (u64, u64) = (1, 3_600_000_000);
/// The time one batch covers at first.
const FIRST_WIDTH: Duration = Duration::from_millis(250);

pub use batchbench_contract::record::{IntervalMethod as Method, Intervals};

/// The ranks (1-based, inclusive) of the order statistics that bound the
/// `p`-quantile of `m` independent samples with probability at least
/// [`LEVEL`], at most 2.5% outside on each side; `None` when `m` is too
/// small for a bound on both sides (`p^m` or `(1 - p)^m` over 2.5%).
pub fn quantile_ranks(m: u64, p: f64) -> Option<(u64, u64)> {
    if m == 0 || !(0.0..1.0).contains(&p) || p == 0.0 {
        return None;
    }
    let mf = m as f64;
    let q = 1.0 - p;
    if mf * p.ln() > TAIL.ln() || mf * q.ln() > TAIL.ln() {
        return None;
    }
    let sd = (mf * p * q).sqrt();
    if sd >= 8.0 {
        // The normal approximation, with continuity correction, is within a
        // rank of the exact one here.
        let lo = (mf * p - Z * sd + 0.5).floor().max(1.0);
        let hi = (mf * p + Z * sd + 0.5).ceil().min(mf);
        return Some((lo as u64, hi as u64));
    }
    // Exact: walk the binomial's CDF in log space (the probabilities of the
    // far tails underflow to zero, which is what they are here).
    let (ln_p, ln_q) = (p.ln(), q.ln());
    let mut ln_pmf = mf * ln_q;
    let mut cdf = 0.0;
    let (mut lo, mut hi) = (1u64, m);
    let mut lo_found = false;
    for k in 0..=m {
        cdf += ln_pmf.exp();
        // cdf = P(B <= k). The lower bound X(l) is above the quantile with
        // probability P(B < l) = P(B <= l - 1).
        if !lo_found && cdf > TAIL {
            lo = k.max(1);
            lo_found = true;
        }
        // The upper bound X(u) is below it with probability P(B >= u) =
        // 1 - P(B <= u - 1).
        if 1.0 - cdf <= TAIL {
            hi = (k + 1).min(m);
            break;
        }
        let kf = k as f64;
        ln_pmf += ((mf - kf) / (kf + 1.0)).ln() + ln_p - ln_q;
    }
    Some((lo, hi))
}

/// The t distribution's `1 - TAIL` quantile for `dof` degrees of freedom (a
/// Cornish-Fisher expansion, within 0.1% from 5 up).
fn t_quantile(dof: f64) -> f64 {
    let z = Z;
    z + (z.powi(3) + z) / (4.0 * dof)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * dof * dof)
}

/// Samples in batches by time: per batch a coarse histogram (1% steps) and
/// the sum, from which the share below any value and the batch's mean are
/// read.
#[derive(Debug, Clone)]
pub struct Batches {
    width: Duration,
    bins: Vec<Option<Box<Bin>>>,
}

#[derive(Debug, Clone)]
struct Bin {
    hist: Histogram<u32>,
    sum_us: f64,
}

impl Default for Batches {
    fn default() -> Self {
        Self {
            width: FIRST_WIDTH,
            bins: Vec::new(),
        }
    }
}

impl Bin {
    fn new() -> Box<Self> {
        let (lo, hi) = BIN_BOUNDS;
        Box::new(Self {
            hist: Histogram::new_with_bounds(lo, hi, 2)
                .expect("constant histogram bounds are valid"),
            sum_us: 0.0,
        })
    }

    fn add(&mut self, other: &Bin) {
        let _ = self.hist.add(&other.hist);
        self.sum_us += other.sum_us;
    }
}

/// The batch of `width` that `at` falls in (64-bit arithmetic: a run of
/// 584 years fits, and a sample is recorded for every request or token).
fn batch_of(at: Duration, width: Duration) -> usize {
    let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    usize::try_from(ns(at) / ns(width).max(1)).unwrap_or(usize::MAX)
}

impl Batches {
    /// Records `us` sent at `at` from the clock start.
    pub fn record(&mut self, us: u64, at: Duration) {
        self.record_n(us, 1, at);
    }

    /// Records `count` samples of `us`, all sent at `at` (the tokens of one
    /// reply).
    pub fn record_n(&mut self, us: u64, count: u64, at: Duration) {
        if count == 0 {
            return;
        }
        let mut i = batch_of(at, self.width);
        while i >= MAX_BATCHES {
            self.coarsen();
            i = batch_of(at, self.width);
        }
        if self.bins.len() <= i {
            self.bins.resize_with(i + 1, || None);
        }
        let bin = self.bins[i].get_or_insert_with(Bin::new);
        let v = us.clamp(1, bin.hist.high());
        let _ = bin
            .hist
            .record_n(v, u32::try_from(count).unwrap_or(u32::MAX));
        bin.sum_us += us as f64 * count as f64;
    }

    /// Merges neighbours: each batch covers twice the time.
    fn coarsen(&mut self) {
        let old = std::mem::take(&mut self.bins);
        let mut it = old.into_iter();
        while let Some(a) = it.next() {
            let b = it.next().flatten();
            self.bins.push(match (a, b) {
                (Some(mut a), Some(b)) => {
                    a.add(&b);
                    Some(a)
                }
                (a, b) => a.or(b),
            });
        }
        self.width *= 2;
    }

    /// Adds another's batches, batch by batch on the coarser of the two widths
    /// (shards or lanes of one run share its clock).
    pub fn add(&mut self, other: &Batches) {
        if other.bins.is_empty() {
            return;
        }
        let mut other = other.clone();
        while self.width < other.width {
            self.coarsen();
        }
        while other.width < self.width {
            other.coarsen();
        }
        if self.bins.len() < other.bins.len() {
            self.bins.resize_with(other.bins.len(), || None);
        }
        for (mine, theirs) in self.bins.iter_mut().zip(other.bins) {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.add(&t),
                (None, Some(t)) => *mine = Some(t),
                (_, None) => {}
            }
        }
    }

    /// The batches that hold samples.
    fn filled(&self) -> impl Iterator<Item = &Bin> {
        self.bins
            .iter()
            .flatten()
            .map(|b| &**b)
            .filter(|b| !b.hist.is_empty())
    }

    /// How many times the variance of the share of samples at or below
    /// `value_us` exceeds an independent sample's (batch means); `None` with
    /// fewer than [`MIN_BATCHES`] batches, or when every sample is on one side.
    /// It includes the t distribution's allowance for estimating it from that
    /// many batches.
    fn share_inflation(&self, value_us: u64) -> Option<(f64, usize)> {
        let cells: Vec<(f64, f64)> = self
            .filled()
            .map(|b| {
                (
                    b.hist.len() as f64,
                    b.hist.count_between(0, value_us) as f64,
                )
            })
            .collect();
        inflation(&cells, |share, n| share * (1.0 - share) / n)
    }

    /// The same for the mean: batch sums against batch sizes, against the
    /// samples' variance.
    fn mean_inflation(&self, variance_us2: f64) -> Option<(f64, usize)> {
        let cells: Vec<(f64, f64)> = self
            .filled()
            .map(|b| (b.hist.len() as f64, b.sum_us))
            .collect();
        inflation(&cells, |_, n| variance_us2 / n)
    }
}

/// Batch means: `cells` are (samples, total) per batch, the total a count of
/// samples below a value or a sum of values. The variance of the ratio
/// estimator `sum(total) / sum(samples)` from the spread of the batches,
/// over `iid(ratio, n)`, the variance independent samples would give it
/// (below 1 as often as above for independent samples, but not below what
/// chance allows: [`chance_floor`]), with the t distribution's allowance for
/// estimating it from that many batches. `None` with fewer than
/// [`MIN_BATCHES`] batches, or nothing to vary.
fn inflation(cells: &[(f64, f64)], iid: impl Fn(f64, f64) -> f64) -> Option<(f64, usize)> {
    // Batches too short for the correlation are correlated themselves and
    // understate it: while neighbours clearly are, pairs of them (as long as
    // there are enough) are looked at too, and the largest figure is kept.
    let (mut best, mut correlated) = inflation_at(cells, &iid)?;
    let k = cells.len();
    let mut level = cells.to_vec();
    while correlated {
        level = level
            .chunks(2)
            .map(|c| (c.iter().map(|x| x.0).sum(), c.iter().map(|x| x.1).sum()))
            .collect();
        let Some((f, still)) = inflation_at(&level, &iid) else {
            break;
        };
        best = best.max(f);
        correlated = still;
    }
    Some((best, k))
}

/// [`inflation`] at one batch size, and whether neighbouring batches are
/// clearly correlated (their lag-1 correlation beyond two standard errors of
/// chance).
fn inflation_at(cells: &[(f64, f64)], iid: &impl Fn(f64, f64) -> f64) -> Option<(f64, bool)> {
    let k = cells.len();
    if k < MIN_BATCHES {
        return None;
    }
    let n: f64 = cells.iter().map(|c| c.0).sum();
    let ratio = cells.iter().map(|c| c.1).sum::<f64>() / n;
    let iid = iid(ratio, n);
    if iid <= 0.0 {
        return None;
    }
    let kf = k as f64;
    let bm = kf / (kf - 1.0)
        * cells
            .iter()
            .map(|(nk, y)| (y - ratio * nk).powi(2))
            .sum::<f64>()
        / (n * n);
    let t = t_quantile(kf - 1.0) / Z;
    // Batches shorter than the correlation (a queue near saturation holds
    // its requests' latencies together for seconds) are correlated
    // themselves, and their spread understates the variance: where the
    // lag-1 correlation of neighbouring batches is clearly positive (beyond
    // two standard errors of chance), the batch-level AR(1) factor
    // (1 + r) / (1 - r) widens it.
    let resid: Vec<f64> = cells.iter().map(|(nk, y)| y - ratio * nk).collect();
    let ss: f64 = resid.iter().map(|e| e * e).sum();
    let r = if ss > 0.0 {
        resid.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / ss
    } else {
        0.0
    };
    let correlated = r > 2.0 / kf.sqrt();
    let neighbours = if correlated {
        let r = r.min(0.9);
        (1.0 + r) / (1.0 - r)
    } else {
        1.0
    };
    // The studentized batch-means ratio: for independent samples it scatters
    // about 1, below as often as above, and with Student's t that gives 95%
    // (held at 1 or over, independent samples came out at 97.5-98% over 1,000
    // simulator runs). Batches more alike than chance could make them (a
    // regular, periodic load) are read as what a lucky independent run could
    // show at most, not as a sample worth many times its count.
    let ratio = (bm / iid).max(chance_floor(kf - 1.0));
    Some((ratio * neighbours * t * t, correlated))
}

/// The 1% quantile of `chi2(dof) / dof`, the batch-means ratio of independent
/// samples from `dof + 1` batches (Wilson and Hilferty's cube-root
/// approximation): in 99 runs of 100 the batches vary more than this.
fn chance_floor(dof: f64) -> f64 {
    const Z_01: f64 = 2.326_347_874_040_841;
    let a = 2.0 / (9.0 * dof);
    (1.0 - a - Z_01 * a.sqrt()).max(0.0).powi(3)
}

/// Above this quantile, a figure is a tail one (a p99): see [`tail_floor`].
const TAIL_FROM: f64 = 0.95;

/// The least inflation of a tail quantile's sample: that of the central
/// quantiles (p50, p90). A tail's share is carried by few samples, so most
/// batches hold none of them and their spread hardly shows the correlation;
/// but slow requests come in the same bursts as the rest (a queue's
/// excursions), and a tail is at least as correlated as the centre. Without
/// this floor, a saturated run whose p90 had too few effective samples could
/// still claim a p99 interval, and in a model of such a queue those held the
/// true p99 in 0-27% of runs. 0 (no floor) for `p` up to [`TAIL_FROM`], and
/// where the centre's inflation is under [`CORRELATED_INFLATION`].
fn tail_floor(hist: &Histogram<u64>, batches: &Batches, p: f64) -> f64 {
    if p <= TAIL_FROM {
        return 0.0;
    }
    let centre = [0.5, 0.9]
        .into_iter()
        .filter_map(|q| batches.share_inflation(hist.value_at_quantile(q)))
        .map(|(f, _)| f)
        .fold(1.0, f64::max);
    // Only where the centre is clearly correlated: for independent samples
    // the figures scatter about 1, and their largest would only widen the
    // tail's interval for nothing.
    if centre >= CORRELATED_INFLATION {
        centre
    } else {
        0.0
    }
}

/// The central quantiles' inflation from which a tail takes it as its floor:
/// their sample is worth at most half its count.
const CORRELATED_INFLATION: f64 = 2.0;

/// The 95% interval of the `p`-quantile of `hist` (microseconds), widened by
/// `batches` where they measure the correlation, in milliseconds; with the
/// batches used (0: independence assumed) and the effective sample size.
/// `None` when the effective sample is too small for a bound on both sides.
pub fn quantile_interval(
    hist: &Histogram<u64>,
    batches: &Batches,
    p: f64,
) -> (Option<[f64; 2]>, usize, f64) {
    let n = hist.len();
    if n == 0 {
        return (None, 0, 0.0);
    }
    let ms = |us: u64| us as f64 / 1000.0;
    let est = hist.value_at_quantile(p);
    let (f, k) = batches.share_inflation(est).unwrap_or((1.0, 0));
    let f = f.max(tail_floor(hist, batches, p));
    let eff = (n as f64 / f).max(1.0);
    let m = eff.floor() as u64;
    // Batches that happened to agree make a sample worth a little more than
    // its count, but never bound a percentile its count could not (a p99
    // from fewer than 368 requests). A guard: near 368 requests the few
    // samples above a p99 leave the batches' ratio at 0.99 or more.
    let Some((lo, hi)) = quantile_ranks(n, p).and(quantile_ranks(m, p)) else {
        return (None, k, eff);
    };
    // Rank r of m effective samples is the value at level r / m of the
    // whole histogram (with m = n, exactly the r-th smallest sample).
    let at = |rank: u64| ms(hist.value_at_quantile(rank as f64 / m as f64));
    (Some([at(lo).min(ms(est)), at(hi).max(ms(est))]), k, eff)
}

/// The 95% interval of the mean of `hist` (microseconds), in milliseconds,
/// widened by `batches`; with the batches used. `None` below two samples.
pub fn mean_interval(hist: &Histogram<u64>, batches: &Batches) -> Option<([f64; 2], usize)> {
    let n = hist.len();
    if n < 2 {
        return None;
    }
    let mean = hist.mean();
    let var = hist.stdev().powi(2) * n as f64 / (n as f64 - 1.0);
    let (f, k) = batches.mean_inflation(var).unwrap_or((1.0, 0));
    let half = Z * (var * f / n as f64).sqrt();
    Some(([(mean - half).max(0.0) / 1000.0, (mean + half) / 1000.0], k))
}

/// Whether the `p`-quantile of the distribution behind `hist` is at most
/// `max_us`, decided at the 95% level: `Some(true)` when it is below for sure,
/// `Some(false)` when above for sure, `None` when the sample cannot tell.
///
/// It is decided at the bound itself, for the effective sample size batch
/// means give there (or at the estimate, when every sample lies on one side
/// of the bound, whichever is smaller): with `m` effective samples and `b` of
/// them at or below the bound, the bound holds for sure when the upper
/// order statistic of the quantile's interval ([`quantile_ranks`]) is among
/// those `b`, and fails for sure when the lower one is not. For independent
/// samples this is exactly the percentile's own interval (a p99 with none
/// over the bound is decided met from 368 samples on). A sample too small for
/// the ranks is still decided missed when Wilson's interval of the share above
/// the bound lies wholly over `1 - p`: a load whose latency climbs (a queue
/// that grows) has no percentile interval, but nearly all of it over the bound.
pub fn decide(hist: &Histogram<u64>, batches: &Batches, p: f64, max_us: u64) -> Option<bool> {
    let n = hist.len();
    if n == 0 {
        return None;
    }
    let below = hist.count_between(0, max_us).min(n);
    let est = hist.value_at_quantile(p);
    // The inflation the percentile's own interval uses (1 where the batches
    // cannot tell), widened by the one at the bound.
    let f = batches
        .share_inflation(est)
        .map_or(1.0, |(f, _)| f)
        .max(batches.share_inflation(max_us).map_or(0.0, |(f, _)| f))
        .max(tail_floor(hist, batches, p));
    let m = (n as f64 / f).max(1.0);
    let b = below as f64 / n as f64 * m;
    if let Some((lo, hi)) = quantile_ranks(n, p).and(quantile_ranks(m.floor() as u64, p)) {
        if hi as f64 <= b {
            return Some(true);
        }
        if lo as f64 > b {
            return Some(false);
        }
        return None;
    }
    let above = 1.0 - below as f64 / n as f64;
    let z2 = Z * Z;
    let centre = (above + z2 / (2.0 * m)) / (1.0 + z2 / m);
    let half = Z / (1.0 + z2 / m) * (above * (1.0 - above) / m + z2 / (4.0 * m * m)).sqrt();
    (centre - half > 1.0 - p).then_some(false)
}

/// The intervals of `hist` (microseconds), widened by `batches` where they
/// measure the correlation.
pub fn intervals(hist: &Histogram<u64>, batches: &Batches) -> Option<Intervals> {
    if hist.is_empty() {
        return None;
    }
    let mut used = 0usize;
    let mut quantile = |p: f64| {
        let (ci, k, eff) = quantile_interval(hist, batches, p);
        used = used.max(k);
        (ci, eff)
    };
    let (p50, median_eff) = quantile(0.5);
    let (p90, _) = quantile(0.9);
    let (p99, _) = quantile(0.99);
    let mean_ms = mean_interval(hist, batches).map(|(ci, k)| {
        used = used.max(k);
        ci
    });
    Some(Intervals {
        level: LEVEL,
        method: if used > 0 {
            Method::BatchMeans
        } else {
            Method::Independent
        },
        batches: u32::try_from(used).unwrap_or(u32::MAX),
        effective_count: median_eff,
        p50_ms: p50,
        p90_ms: p90,
        p99_ms: p99,
        mean_ms,
    })
}

/// A drift of the batch means over time: the least-squares line through the
/// means of the batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// The line's change over the batches it was fitted on, as a share of
    /// their mean (+0.1: rose by a tenth).
    pub change: f64,
    /// The slope over its standard error.
    pub t: f64,
}

impl Trend {
    /// The slope's t above which the summary calls a drift real: far out in
    /// the tail (about 1 in 2,000 for a steady run), so that a steady run is
    /// almost never said to drift.
    pub const WARN_T: f64 = 3.5;
    /// The slope's t above which a converging run waits: a steady run that
    /// crosses it by chance only runs a little longer.
    pub const WAIT_T: f64 = 2.0;

    /// Whether the line rose or fell by more than `share` with a slope whose
    /// t is beyond `t`.
    pub fn drifts(&self, share: f64, t: f64) -> bool {
        self.t.abs() > t && self.change.abs() > share
    }
}

/// The fewest batches a trend is fitted on.
const TREND_MIN_BATCHES: usize = 6;

/// Which batches a trend is fitted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Every batch: whether the run's figures pool a moving target.
    Whole,
    /// The second half: whether the run has settled by its end.
    SecondHalf,
}

impl Batches {
    /// The drift of the batch means over `span` (the last batch left out:
    /// the run ended inside it); `None` with fewer than six batches there (a
    /// run of a few seconds) or nothing to fit.
    pub fn trend(&self, span: Span) -> Option<Trend> {
        line_trend(&self.span(span, |b| b.sum_us / b.hist.len() as f64))
    }

    /// The same for the number of samples per batch: the rate at which they
    /// were sent (throughput, in a closed loop).
    pub fn count_trend(&self, span: Span) -> Option<Trend> {
        line_trend(&self.span(span, |b| b.hist.len() as f64))
    }

    /// Half the width of the 95% interval of the rate at which samples came
    /// (samples per second, by send time), as a share of the rate: from the
    /// spread of the samples per batch, empty batches counted, the last one
    /// left out (the run ended inside it). `None` with fewer than
    /// [`MIN_BATCHES`] batches.
    pub fn rate_half_share(&self) -> Option<f64> {
        let first = self.bins.iter().position(|b| b.is_some())?;
        let last = self.bins.len().saturating_sub(1);
        let counts: Vec<f64> = self
            .bins
            .get(first..last)?
            .iter()
            .map(|b| b.as_deref().map_or(0.0, |b| b.hist.len() as f64))
            .collect();
        let k = counts.len();
        if k < MIN_BATCHES {
            return None;
        }
        let kf = k as f64;
        let mean = counts.iter().sum::<f64>() / kf;
        if mean <= 0.0 {
            return None;
        }
        let var = counts.iter().map(|c| (c - mean).powi(2)).sum::<f64>() / (kf - 1.0);
        Some(t_quantile(kf - 1.0) * (var / kf).sqrt() / mean)
    }

    fn span(&self, span: Span, y: impl Fn(&Bin) -> f64) -> Vec<(f64, f64)> {
        let whole = self.bins.len().saturating_sub(1);
        let from = match span {
            Span::Whole => 0,
            Span::SecondHalf => whole / 2,
        };
        self.bins[from..whole]
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                let b = b.as_deref()?;
                (!b.hist.is_empty()).then(|| (i as f64, y(b)))
            })
            .collect()
    }
}

/// The least-squares line through `points` (x, y): its change over the x
/// range as a share of the mean y, and the slope's t.
fn line_trend(points: &[(f64, f64)]) -> Option<Trend> {
    let k = points.len();
    if k < TREND_MIN_BATCHES {
        return None;
    }
    let kf = k as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / kf;
    let my = points.iter().map(|p| p.1).sum::<f64>() / kf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= 0.0 || my <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let resid: f64 = points
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    // Neighbouring batch means of a correlated load move together, and the
    // slope's standard error widens by their lag-1 correlation, as batch
    // means do.
    let e: Vec<f64> = points
        .iter()
        .map(|p| p.1 - my - slope * (p.0 - mx))
        .collect();
    let r = if resid > 0.0 {
        (e.windows(2).map(|w| w[0] * w[1]).sum::<f64>() / resid).clamp(0.0, 0.9)
    } else {
        0.0
    };
    let se = (resid / (kf - 2.0) / sxx * (1.0 + r) / (1.0 - r)).sqrt();
    let span = points[k - 1].0 - points[0].0;
    let t = if se > 0.0 {
        slope / se
    } else if slope == 0.0 {
        0.0
    } else {
        f64::INFINITY.copysign(slope)
    };
    Some(Trend {
        change: slope * span / my,
        t,
    })
}

/// A small seeded generator for tests (xorshift*).
#[cfg(test)]
pub(crate) struct TestRng(pub(crate) u64);

#[cfg(test)]
impl TestRng {
    /// Uniform in (0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let (a, b) = (self.uniform(), self.uniform());
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_the_exact_binomial_ones_and_absent_below_a_two_sided_sample() {
        // The textbook case: the median of 100 lies between X(40) and X(61).
        assert_eq!(quantile_ranks(100, 0.5), Some((40, 61)));
        // 0.99^367 > 2.5% > 0.99^368: a p99 needs 368 samples.
        assert_eq!(quantile_ranks(367, 0.99), None);
        let (lo, hi) = quantile_ranks(368, 0.99).expect("368 samples bound a p99");
        assert!(lo < 368 && hi == 368, "{lo} {hi}");
        assert_eq!(quantile_ranks(5, 0.5), None, "0.5^5 > 2.5%");
        assert!(quantile_ranks(6, 0.5).is_some());
        assert_eq!(quantile_ranks(0, 0.5), None);
        // The normal approximation takes over within a rank of the exact walk.
        for (m, p) in [(300, 0.5), (800, 0.9), (7000, 0.99)] {
            let exact = exact_ranks(m, p);
            let approx = quantile_ranks(m, p).expect("large");
            assert!(
                exact.0.abs_diff(approx.0) <= 1 && exact.1.abs_diff(approx.1) <= 1,
                "{m} {p}: {exact:?} {approx:?}"
            );
        }
    }

    /// The exact walk alone, for comparison with the approximation.
    fn exact_ranks(m: u64, p: f64) -> (u64, u64) {
        let mut cdf = 0.0;
        let mut lo = None;
        for k in 0..=m {
            cdf += binomial_pmf(m, k, p);
            if lo.is_none() && cdf > TAIL {
                lo = Some(k.max(1));
            }
            if 1.0 - cdf <= TAIL {
                return (lo.unwrap_or(1), (k + 1).min(m));
            }
        }
        (lo.unwrap_or(1), m)
    }

    fn binomial_pmf(m: u64, k: u64, p: f64) -> f64 {
        let ln_choose: f64 = (0..k).map(|i| ((m - i) as f64 / (i + 1) as f64).ln()).sum();
        (ln_choose + k as f64 * p.ln() + (m - k) as f64 * (1.0 - p).ln()).exp()
    }

    use super::TestRng as Rng;

    /// Share of `runs` seeded runs of `n` log-normal samples (an AR(1) process
    /// with coefficient `phi` underneath, one sample every 5 ms) whose p50 and
    /// p90 intervals hold the true quantile.
    fn coverage(runs: u64, n: u64, phi: f64) -> (f64, f64, Method) {
        coverage_of(runs, n, phi, true)
    }

    /// `n` log-normal samples (median 1 ms), one every 5 ms, of an AR(1)
    /// process with coefficient `phi` underneath (0: independent), as a
    /// histogram and batches.
    fn ar1_lognormal(rng: &mut Rng, n: u64, phi: f64) -> (Histogram<u64>, Batches) {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        let mut batches = Batches::default();
        let mut x = rng.normal();
        for i in 0..n {
            x = phi * x + (1.0 - phi * phi).sqrt() * rng.normal();
            let us = (1000.0 * x.exp()) as u64;
            hist.saturating_record(us.max(1));
            batches.record(us, Duration::from_millis(5 * i));
        }
        (hist, batches)
    }

    /// The same, with or without batch means (without: independence assumed).
    fn coverage_of(runs: u64, n: u64, phi: f64, batch_means: bool) -> (f64, f64, Method) {
        let (mut c50, mut c90) = (0, 0);
        let mut method = Method::Independent;
        for seed in 0..runs {
            let (hist, mut batches) = ar1_lognormal(&mut Rng(seed * 7919 + 17), n, phi);
            if !batch_means {
                batches = Batches::default();
            }
            let iv = intervals(&hist, &batches).expect("samples");
            method = iv.method;
            let holds = |ci: Option<[f64; 2]>, z: f64| {
                let truth = z.exp(); // ms
                ci.is_some_and(|[lo, hi]| lo <= truth && truth <= hi)
            };
            c50 += u32::from(holds(iv.p50_ms, 0.0));
            c90 += u32::from(holds(iv.p90_ms, 1.281_551_565_5));
        }
        (
            f64::from(c50) / runs as f64,
            f64::from(c90) / runs as f64,
            method,
        )
    }

    #[test]
    fn intervals_cover_the_true_quantile_for_independent_and_correlated_samples() {
        // A smaller version of bench/confidence.sh, with a wider band.
        let (p50, p90, method) = coverage(200, 3000, 0.0);
        assert_eq!(method, Method::BatchMeans);
        assert!(
            (0.89..=0.995).contains(&p50) && (0.89..=0.995).contains(&p90),
            "independent: {p50} {p90}"
        );
        // Strongly correlated: an interval that assumed independence would
        // cover about half the time.
        let (p50, p90, _) = coverage(200, 3000, 0.95);
        assert!(
            (0.87..=0.995).contains(&p50) && (0.87..=0.995).contains(&p90),
            "correlated: {p50} {p90}"
        );
    }

    /// The figures behind the book's "How sure is a figure": 1,000 seeded runs
    /// each (`cargo test --release -p batchbench-engine --lib coverage_figures
    /// -- --ignored --nocapture`).
    #[test]
    #[ignore = "prints figures; 1,000 runs of each kind"]
    fn coverage_figures() {
        for (phi, what) in [
            (0.0, "independent"),
            (0.9, "AR(1) 0.9"),
            (0.95, "AR(1) 0.95"),
        ] {
            for batch_means in [true, false] {
                let (p50, p90, method) = coverage_of(1000, 3000, phi, batch_means);
                println!(
                    "{what:<12} {:<26} p50 {:.1}%  p90 {:.1}%  ({method:?})",
                    if batch_means {
                        "with batch means"
                    } else {
                        "independence assumed"
                    },
                    p50 * 100.0,
                    p90 * 100.0
                );
            }
        }
    }

    #[test]
    fn a_tail_is_never_surer_than_the_centre_of_a_correlated_sample() {
        // Strongly correlated: the p99's own batches hardly vary (few samples
        // above it), but its effective sample is at most the median's.
        let (hist, batches) = ar1_lognormal(&mut Rng(11), 6000, 0.995);
        let (_, _, median_eff) = quantile_interval(&hist, &batches, 0.5);
        let (p99, _, tail_eff) = quantile_interval(&hist, &batches, 0.99);
        assert!(median_eff < 1000.0, "correlated: {median_eff}");
        assert!(tail_eff <= median_eff, "{tail_eff} > {median_eff}");
        assert!(
            p99.is_none(),
            "too few effective samples for a p99: {p99:?}"
        );
        // Independent samples keep their p99.
        let (h, b) = steady(6000, |i| 1000 + (i * 7919) % 1000);
        assert!(quantile_interval(&h, &b, 0.99).0.is_some());
    }

    #[test]
    fn the_chance_floor_is_the_chi_square_one_percent_point() {
        // chi2 quantiles at 1%: 2.088 (9), 10.196 (23), 15.655 (31).
        for (dof, q) in [(9.0, 2.088), (23.0, 10.196), (31.0, 15.655)] {
            let f = chance_floor(dof);
            assert!((f * dof / q - 1.0).abs() < 0.03, "{dof}: {f}");
        }
    }

    #[test]
    fn independent_samples_are_worth_their_count_not_less() {
        // The studentized ratio scatters about 1: held at 1 or over, it made
        // every effective sample smaller than the count (and the intervals
        // conservative, 97.5-98% over 1,000 runs).
        let mut shares = Vec::new();
        for seed in 0..101u64 {
            let (hist, batches) = ar1_lognormal(&mut Rng(seed * 104_729 + 3), 3000, 0.0);
            let (_, _, eff) = quantile_interval(&hist, &batches, 0.5);
            shares.push(eff / 3000.0);
        }
        shares.sort_by(f64::total_cmp);
        // About two runs in five: the ratio is as often under 1 as over, and
        // Student's t takes a few of those back over.
        let above = shares.iter().filter(|&&s| s > 1.0).count();
        assert!(
            (25..=60).contains(&above),
            "effective samples over the count in {above} of 101 runs"
        );
        let median = shares[50];
        assert!((0.85..1.15).contains(&median), "median share {median}");
    }

    #[test]
    fn a_short_run_is_taken_as_independent_and_says_so() {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        let mut batches = Batches::default();
        for i in 1..=200u64 {
            hist.saturating_record(i * 10);
            batches.record(i * 10, Duration::from_millis(i));
        }
        let iv = intervals(&hist, &batches).expect("samples");
        assert_eq!(iv.method, Method::Independent, "one second is four batches");
        assert!(iv.p99_ms.is_none(), "200 samples cannot bound a p99");
        let [lo, hi] = iv.p50_ms.expect("a median");
        assert!(lo < 1.005 && hi > 1.005, "{lo} {hi}");
        let [lo, hi] = iv.mean_ms.expect("a mean");
        assert!(lo < 1.005 && 1.005 < hi, "{lo} {hi}");
    }

    /// `n` samples of `us`, one every 10 ms, as a histogram and batches.
    fn steady(n: u64, us: impl Fn(u64) -> u64) -> (Histogram<u64>, Batches) {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut b = Batches::default();
        for i in 0..n {
            h.saturating_record(us(i));
            b.record(us(i), Duration::from_millis(i * 10));
        }
        (h, b)
    }

    #[test]
    fn a_bound_is_decided_at_it_and_a_p99_needs_368_samples_under_it() {
        // Every sample well under the bound: decided met from 368 on (the
        // batches agree perfectly, so they widen nothing).
        let (h, b) = steady(300, |_| 1_000);
        assert_eq!(decide(&h, &b, 0.99, 2_000), None);
        let (h, b) = steady(400, |_| 1_000);
        assert_eq!(decide(&h, &b, 0.99, 2_000), Some(true));
        // Half over it: missed for sure, even from a few.
        let (h, b) = steady(20, |i| if i % 2 == 0 { 1_000 } else { 3_000 });
        assert_eq!(decide(&h, &b, 0.99, 2_000), Some(false));
        // 1% over it, as the p99 itself: undecided.
        let (h, b) = steady(10_000, |i| if i % 100 == 0 { 3_000 } else { 1_000 });
        assert_eq!(decide(&h, &b, 0.99, 2_000), None);
        // A climbing latency (a growing queue) has no p99 interval, but is
        // decided on how much of it lay over the bound.
        let (h, b) = steady(3_000, |i| 1_000 + i * 100);
        assert_eq!(quantile_interval(&h, &b, 0.99).0, None);
        assert_eq!(decide(&h, &b, 0.99, 50_000), Some(false));
    }

    #[test]
    fn the_rate_interval_is_the_spread_of_the_samples_per_batch() {
        // 25 samples in every 250 ms batch: no spread at all.
        let (_, b) = steady(4_000, |_| 1_000);
        assert_eq!(b.rate_half_share(), Some(0.0));
        // Too short a run for 10 batches.
        let (_, b) = steady(200, |_| 1_000);
        assert_eq!(b.rate_half_share(), None);
        // Sends for 4 s, none for 4 s, and so on (the 40 s coarsen into
        // batches of 2 s): the rate is unsure by about t / sqrt(k) of it.
        let mut b = Batches::default();
        for i in 0..4_000u64 {
            if (i / 400) % 2 == 0 {
                b.record(1_000, Duration::from_millis(i * 10));
            }
        }
        let h = b.rate_half_share().unwrap_or_default();
        assert!(h > 0.2 && h < 0.6, "{h}");
    }

    #[test]
    fn a_trend_is_a_slope_far_beyond_the_scatter() {
        let (_, flat) = steady(6_000, |i| 1_000 + (i * 7919) % 500);
        assert!(
            flat.trend(Span::Whole)
                .is_some_and(|t| !t.drifts(0.01, Trend::WAIT_T))
        );
        let (_, rising) = steady(6_000, |i| 1_000 + i / 2 + (i * 7919) % 500);
        let t = rising
            .trend(Span::SecondHalf)
            .unwrap_or_else(|| panic!("no trend"));
        assert!(t.drifts(0.1, Trend::WARN_T), "{t:?}");
        assert!(
            rising
                .count_trend(Span::Whole)
                .is_some_and(|t| !t.drifts(0.01, Trend::WAIT_T))
        );
    }

    #[test]
    fn batches_merge_on_the_coarser_width_and_keep_every_sample() {
        let mut a = Batches::default();
        let mut b = Batches::default();
        for i in 0..100u64 {
            a.record(5, Duration::from_millis(i * 10));
            b.record(7, Duration::from_secs(i));
        }
        assert!(b.width > a.width);
        a.add(&b);
        assert_eq!(a.width, b.width);
        assert!(a.bins.len() <= MAX_BATCHES);
        assert_eq!(a.filled().map(|b| b.hist.len()).sum::<u64>(), 200);
    }
}
