//! `warmup = "auto"`: where a run's transient ends, found from its own time
//! series, and the requests due before it left out as warmup.
//!
//! Every request that ends (not one cut at the deadline) is counted, by its
//! intended send time, in a window of the run ([`FIRST_WIDTH`] at first; past
//! [`MAX_WINDOWS`] neighbours merge and each covers twice the time). Once the run is over, the windows are
//! grouped in order into batches of at least [`BATCH_REQUESTS`] requests, and
//! four series are read off the batches: e2e latency from the intended send
//! time, time to first token, requests sent per second, and the share of the
//! prompt the server said it found in its prefix cache.
//!
//! On each series, MSER (White 1997), on batch means as MSER-5 takes them
//! (White, Cobb and Spratt 2000), picks the truncation `d` that minimises the
//! squared standard error of the mean of what is left,
//! `sum over i >= d of (y_i - mean_d)^2 / (m - d)^2`, with `d` in the first
//! half of the `m` batches (past it the statistic rewards cutting noise off the
//! end). A cut is kept only when the transient it leaves out differs from the
//! rest beyond chance, by more than [`DIFFER_T`] standard errors (widened for
//! correlated batches; a stationary series has a minimum somewhere too), and
//! by enough to matter: by more than [`DIFFER_SHARE`] of the steady mean, and
//! leaving it out moves the series' mean by more than [`MATERIAL_SHARE`]. MSER also cuts through a slow fluctuation just past the
//! transient, so the cut then moves back over blocks already within
//! [`SETTLED_T`] standard errors of the steady mean (passing over a lone block
//! outside). The run's cut is the latest
//! of its series' cuts.
//!
//! Until the cut is known, the records are held: not in the figures and not yet
//! handed to the reporters. Then those due before the cut are replayed as
//! warmup and the rest as measured, exactly as if `warmup_secs` had named the
//! cut. A run that holds more than [`HOLD_BYTES`] decides from the windows it
//! has so far (those older than the longest latency seen, which no request
//! still in flight can change) and goes on without holding.

use crate::measurement::metrics::{Metrics, StreamGaps};
use batchbench_contract::plugin::{FailureKind, RequestRecord};
use batchbench_contract::record::{SteadySeries, SteadyState};
use std::time::Duration;

/// The time one window covers at first.
const FIRST_WIDTH: Duration = Duration::from_millis(50);
/// The most windows kept: past it, neighbours merge.
const MAX_WINDOWS: usize = 4096;
/// The fewest requests in a batch (MSER-5's five observations).
pub const BATCH_REQUESTS: u64 = 5;
/// The fewest batches in which a transient is looked for.
pub const MIN_BATCHES: usize = 10;
/// A transient differs from the steady state by at least this many standard
/// errors of the difference.
pub const DIFFER_T: f64 = 4.0;
/// ... by at least this share of the steady mean (a figure a few percent off
/// at the start is the machine's noise, not a transient worth a cut) ...
pub const DIFFER_SHARE: f64 = 0.05;
/// ... and leaving it out moves the mean of the whole series by at least this
/// share of the steady mean: a transient too short or too small to change a
/// figure is left in.
pub const MATERIAL_SHARE: f64 = 0.005;
/// The blocks over which a cut moves back, as a share of the batches.
pub const BLOCK_SHARE: f64 = 0.02;
/// A block within this many standard errors of the steady mean has settled.
pub const SETTLED_T: f64 = 2.5;
/// Records held at most (their estimated bytes) before the cut is decided from
/// the windows so far.
pub const HOLD_BYTES: usize = 64 << 20;

/// The sums of one window of intended send time.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    /// Requests that ended (failures included).
    requests: u64,
    /// Successes, and their e2e latency from the intended send time.
    ok: u64,
    e2e_ms: f64,
    /// Successes with a first token, and its time.
    ttft_n: u64,
    ttft_ms: f64,
    /// Prompt tokens of the successes whose usage reported cached tokens, and those.
    prompt: u64,
    cached: u64,
}

impl Window {
    fn add(&mut self, o: &Window) {
        self.requests += o.requests;
        self.ok += o.ok;
        self.e2e_ms += o.e2e_ms;
        self.ttft_n += o.ttft_n;
        self.ttft_ms += o.ttft_ms;
        self.prompt += o.prompt;
        self.cached += o.cached;
    }
}

/// A held record: its owned parts, and the inter-token gaps a measured reply
/// adds to the figures.
#[derive(Debug)]
struct Held {
    rec: RequestRecord<'static>,
    trajectory_id: String,
    failure: Option<(FailureKind, String)>,
    /// The model of a mix it went to.
    model: Option<String>,
    itl: StreamGaps,
}

/// The steady-state search of one run.
#[derive(Debug)]
pub(crate) struct Steady {
    width: Duration,
    windows: Vec<Window>,
    /// Held records, until the cut is known (`None` after).
    held: Option<Vec<Held>>,
    held_bytes: usize,
    /// The most bytes held before the cut is decided early.
    hold_limit: usize,
    /// Where the steady window begins, once known.
    cut: Option<Duration>,
    /// The latest intended send seen.
    last_intended: Duration,
    /// The longest e2e latency seen (from the intended send).
    max_e2e: Duration,
    report: Option<SteadyState>,
}

impl Default for Steady {
    fn default() -> Self {
        Self {
            width: FIRST_WIDTH,
            windows: Vec::new(),
            held: Some(Vec::new()),
            held_bytes: 0,
            hold_limit: HOLD_BYTES,
            cut: None,
            last_intended: Duration::ZERO,
            max_e2e: Duration::ZERO,
            report: None,
        }
    }
}

impl Steady {
    /// Whether records are still held.
    pub(crate) fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// Whether a request due at `intended` falls before a cut already decided.
    pub(crate) fn cut_covers(&self, intended: Duration) -> bool {
        self.cut.is_some_and(|c| intended < c)
    }

    /// Counts one request in its window.
    pub(crate) fn observe(&mut self, rec: &RequestRecord<'_>) {
        let at = rec.timing.intended;
        self.last_intended = self.last_intended.max(at);
        let mut i = (at.as_nanos() / self.width.as_nanos().max(1)) as usize;
        while i >= MAX_WINDOWS {
            let old = std::mem::take(&mut self.windows);
            self.windows = old
                .chunks(2)
                .map(|c| {
                    let mut w = c[0];
                    if let Some(b) = c.get(1) {
                        w.add(b);
                    }
                    w
                })
                .collect();
            self.width *= 2;
            i = (at.as_nanos() / self.width.as_nanos().max(1)) as usize;
        }
        if self.windows.len() <= i {
            self.windows.resize(i + 1, Window::default());
        }
        let w = &mut self.windows[i];
        w.requests += 1;
        let e2e = rec.latency + rec.timing.behind();
        self.max_e2e = self.max_e2e.max(e2e);
        if rec.failure.is_none() {
            w.ok += 1;
            w.e2e_ms += e2e.as_secs_f64() * 1000.0;
            if let Some(t) = rec.ttft {
                w.ttft_n += 1;
                w.ttft_ms += t.as_secs_f64() * 1000.0;
            }
            if let Some(u) = rec.usage
                && let Some(c) = u.cached_tokens
            {
                w.prompt += u.prompt_tokens;
                w.cached += c;
            }
        }
    }

    /// Holds a record until the cut is known; `itl` are its reply's
    /// inter-token gaps (per-token microseconds, tokens). Returns whether the
    /// held records have outgrown [`HOLD_BYTES`].
    pub(crate) fn hold(&mut self, rec: &RequestRecord<'_>, itl: StreamGaps) -> bool {
        let Some(held) = self.held.as_mut() else {
            return false;
        };
        let failure = rec.failure.map(|(k, m)| (k, m.to_owned()));
        self.held_bytes += std::mem::size_of::<Held>()
            + rec.trajectory_id.len()
            + failure.as_ref().map_or(0, |f| f.1.len())
            + itl.bytes()
            + rec.token_times.len() * 16;
        held.push(Held {
            rec: detached(rec),
            trajectory_id: rec.trajectory_id.to_owned(),
            failure,
            model: rec.model.map(str::to_owned),
            itl,
        });
        self.held_bytes > self.hold_limit
    }

    /// Decides the cut from the windows so far (`early`: the time from the
    /// clock start, when the run goes on) and hands back the held records.
    fn decide(&mut self, early: Option<Duration>) -> Vec<Held> {
        let Some(held) = self.held.take() else {
            return Vec::new();
        };
        // Deciding early, the latest windows still miss their slowest
        // requests (in flight): they are left out of the search.
        let upto = match early {
            Some(_) => {
                let settled = self.last_intended.saturating_sub(self.max_e2e);
                let n = (settled.as_nanos() / self.width.as_nanos().max(1)) as usize;
                n.min(self.windows.len())
            }
            None => self.windows.len(),
        };
        let (mut report, window) = search(&self.windows[..upto], self.width);
        report.decided_secs = early.map(|d| d.as_secs_f64());
        self.cut = Some(self.width * u32::try_from(window).unwrap_or(u32::MAX));
        self.report = Some(report);
        held
    }

    /// The report, once the run is over: the steady window to the last
    /// intended send, and the requests left out (`warmup`: the run's warmup
    /// count, which with `auto` is only the cut).
    pub(crate) fn report(&self, warmup: u64) -> Option<SteadyState> {
        let mut r = self.report.clone()?;
        r.to_secs = self.last_intended.as_secs_f64();
        r.cut_requests = warmup;
        Some(r)
    }
}

/// A copy of `rec` that borrows nothing: its trajectory id and failure
/// message, which it borrows, are held beside it.
fn detached(rec: &RequestRecord<'_>) -> RequestRecord<'static> {
    RequestRecord {
        agent_id: rec.agent_id,
        trajectory_id: "",
        request_index: rec.request_index,
        planned_prompt_tokens: rec.planned_prompt_tokens,
        retries: rec.retries,
        reconnects: rec.reconnects,
        latency: rec.latency,
        server_timing: rec.server_timing,
        usage: rec.usage,
        estimated_cached_tokens: rec.estimated_cached_tokens,
        cache_estimate: rec.cache_estimate,
        live_block_fallbacks: rec.live_block_fallbacks,
        ttft: rec.ttft,
        ttfrt: rec.ttfrt,
        ttfat: rec.ttfat,
        reasoning_tokens: rec.reasoning_tokens,
        reasoning_counted: rec.reasoning_counted,
        images: rec.images,
        image_bytes: rec.image_bytes,
        audio_seconds: rec.audio_seconds,
        tpot: rec.tpot,
        itl_max: rec.itl_max,
        structured: rec.structured,
        token_times: rec.token_times.clone(),
        slo_met: rec.slo_met,
        failure: None,
        timing: rec.timing,
        endpoint: None,
        model: None,
        ids: rec.ids.clone(),
    }
}

/// Decides the cut when it is not yet known (`early`: the run goes on, and
/// this is the time from its clock start) and replays the held records into
/// `metrics`: those due before the cut as warmup, the rest as measured. Each is
/// then handed to `notify` (the reporters).
pub(crate) fn settle(
    steady: &mut Steady,
    metrics: &mut Metrics,
    load: &batchbench_contract::spec::LoadSpec,
    slo: &[batchbench_contract::slo::SloBound],
    early: Option<Duration>,
    mut notify: impl FnMut(&RequestRecord<'_>),
) {
    let held = steady.decide(early);
    let Some(cut) = steady.cut else { return };
    for h in held {
        let mut rec = RequestRecord {
            trajectory_id: &h.trajectory_id,
            failure: h.failure.as_ref().map(|(k, m)| (*k, m.as_str())),
            model: h.model.as_deref(),
            ..h.rec
        };
        rec.timing.warmup = rec.timing.intended < cut;
        if !rec.timing.warmup {
            // What the stream added to the figures when it was measured.
            let sent = rec.timing.last_attempt;
            if let Some(t) = rec.tpot {
                metrics.tpot.record_at(t, sent);
            }
            metrics.record_gaps(&h.itl, sent, rec.model);
        }
        metrics.record_outcome(&mut rec, load, slo);
        notify(&rec);
    }
}

/// One batch: its first window, windows covered, and the sums.
struct Batch {
    start: usize,
    windows: usize,
    sums: Window,
}

/// Groups the windows in order into batches of at least [`BATCH_REQUESTS`]
/// requests; a short last batch joins the one before it.
fn batches(windows: &[Window]) -> Vec<Batch> {
    let mut out: Vec<Batch> = Vec::new();
    let mut cur: Option<Batch> = None;
    for (i, w) in windows.iter().enumerate() {
        let b = cur.get_or_insert(Batch {
            start: i,
            windows: 0,
            sums: Window::default(),
        });
        b.windows += 1;
        b.sums.add(w);
        if b.sums.requests >= BATCH_REQUESTS {
            out.extend(cur.take());
        }
    }
    if let Some(rest) = cur {
        match out.last_mut() {
            Some(last) => {
                last.windows += rest.windows;
                last.sums.add(&rest.sums);
            }
            None => out.push(rest),
        }
    }
    out
}

/// One series: (first window, value) per batch (or span) that has a value.
type Points = Vec<(usize, f64)>;

/// The series looked at: name, unit, points.
fn series(
    windows: &[Window],
    b: &[Batch],
    width: Duration,
) -> Vec<(&'static str, &'static str, Points)> {
    let pick = |f: &dyn Fn(&Window) -> Option<f64>| -> Points {
        b.iter()
            .filter_map(|x| f(&x.sums).map(|v| (x.start, v)))
            .collect()
    };
    // The send rate over spans of equal length (a batch closes on its fifth
    // request, so its own length would bias the rate up): as many windows as
    // a batch holds on average. The last span is cut short by the end of the
    // run.
    let per = windows.len().div_ceil(b.len().max(1)).max(1);
    let span_secs = per as f64 * width.as_secs_f64();
    let mut sent: Points = windows
        .chunks_exact(per)
        .enumerate()
        .map(|(i, c)| {
            let n: u64 = c.iter().map(|w| w.requests).sum();
            (i * per, n as f64 / span_secs)
        })
        .collect();
    sent.pop();
    let mut out = vec![
        (
            "e2e latency",
            "ms",
            pick(&|w| (w.ok > 0).then(|| w.e2e_ms / w.ok as f64)),
        ),
        (
            "time to first token",
            "ms",
            pick(&|w| (w.ttft_n > 0).then(|| w.ttft_ms / w.ttft_n as f64)),
        ),
        ("requests sent", "per s", sent),
        (
            "prefix-cache hits",
            "share",
            // A server that reports no cached tokens at all has no such series.
            if windows.iter().any(|w| w.cached > 0) {
                pick(&|w| (w.prompt > 0).then(|| w.cached as f64 / w.prompt as f64))
            } else {
                Vec::new()
            },
        ),
    ];
    out.retain(|s| s.2.len() >= MIN_BATCHES);
    out
}

/// MSER's truncation of `y`: the `d` in `0..=m/2` that minimises the
/// squared standard error of the mean of `y[d..]`.
pub fn mser(y: &[f64]) -> usize {
    let m = y.len();
    if m < 2 {
        return 0;
    }
    // Suffix sums, so that each d costs O(1).
    let (mut s1, mut s2) = (0.0, 0.0);
    let mut best = (f64::INFINITY, 0);
    let mut stats = vec![0.0; m + 1];
    for d in (0..m).rev() {
        s1 += y[d];
        s2 += y[d] * y[d];
        let k = (m - d) as f64;
        stats[d] = (s2 - s1 * s1 / k).max(0.0) / (k * k);
    }
    for (d, &s) in stats.iter().enumerate().take(m / 2 + 1) {
        // The earliest of equal minima: cut no more than needed.
        if s < best.0 {
            best = (s, d);
        }
    }
    best.1
}

/// The mean, the variance and the AR(1) widening `(1 + r) / (1 - r)` of `y`
/// (its lag-1 correlation `r` clamped to 0..0.9): neighbouring batches of a
/// loaded server move together.
fn spread(y: &[f64]) -> (f64, f64, f64) {
    let k = y.len() as f64;
    let mean = y.iter().sum::<f64>() / k.max(1.0);
    if k < 2.0 {
        return (mean, 0.0, 1.0);
    }
    let var = y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0);
    let r = if var > 0.0 {
        let c = y
            .windows(2)
            .map(|w| (w[0] - mean) * (w[1] - mean))
            .sum::<f64>()
            / (k - 1.0);
        (c / var).clamp(0.0, 0.9)
    } else {
        0.0
    };
    (mean, var, (1.0 + r) / (1.0 - r))
}

/// MSER's cut of `y`, kept only when what it leaves out differs from the rest
/// beyond chance and by enough to matter (see [`DIFFER_T`], [`DIFFER_SHARE`],
/// [`MATERIAL_SHARE`]); 0 otherwise.
///
/// MSER also cuts through a slow fluctuation of the steady state just past
/// the transient (a dip takes variance with it). So the cut is then moved
/// back, block by block of [`BLOCK_SHARE`] of the series, over blocks whose
/// mean lies within [`SETTLED_T`] standard errors of the steady mean (a lone
/// block outside is passed over): it ends where the series last stood apart
/// from its steady state.
pub fn transient(y: &[f64]) -> usize {
    let d = mser(y);
    if d == 0 || y.len() - d < 2 {
        return 0;
    }
    let (before, after) = y.split_at(d);
    let mb = before.iter().sum::<f64>() / d as f64;
    let (ma, var, widen) = spread(after);
    let k = after.len() as f64;
    let se = (var * widen * (1.0 / d as f64 + 1.0 / k)).sqrt();
    let diff = (mb - ma).abs();
    let moves = diff * d as f64 / y.len() as f64;
    if !(diff > DIFFER_T * se
        && diff > DIFFER_SHARE * ma.abs()
        && moves > MATERIAL_SHARE * ma.abs())
    {
        return 0;
    }
    let block = ((y.len() as f64 * BLOCK_SHARE).ceil() as usize).max(3);
    // The spread of the steady state's own block means (at least what the
    // batches' AR(1) figure says): slow fluctuations count at their size.
    let means: Vec<f64> = after
        .chunks_exact(block)
        .map(|c| c.iter().sum::<f64>() / block as f64)
        .collect();
    let block_var = if means.len() >= MIN_BATCHES {
        spread(&means).1
    } else {
        0.0
    };
    // The variance of a mean over `n` batches of the steady state.
    let var_of = |n: usize| (block_var * block as f64).max(var * widen) / n as f64;
    let settled = |from: usize, to: usize| {
        let m = y[from..to].iter().sum::<f64>() / (to - from) as f64;
        (m - ma).abs() <= SETTLED_T * var_of(to - from).sqrt()
    };
    // Back over each block that has settled, while all it adds still has (a
    // long tail of small excesses adds up). One block alone outside the band,
    // with the one before it inside, is the steady state's own noise: a
    // transient's tail leaves it block after block.
    let mut cut = d;
    while cut >= block && settled(cut - block, d) {
        let lone = cut >= 2 * block && settled(cut - 2 * block, cut - block);
        if !settled(cut - block, cut) && !lone {
            break;
        }
        cut -= block;
    }
    cut
}

/// The search over the run's windows: each series' cut, and the run's (as a
/// window index: it begins at `width` times it).
fn search(windows: &[Window], width: Duration) -> (SteadyState, usize) {
    let b = batches(windows);
    let start_secs = |window: usize| window as f64 * width.as_secs_f64();
    let mut out = SteadyState {
        method: format!(
            "MSER-5: batch means of at least {BATCH_REQUESTS} requests in {} ms windows of intended send time, over the first half of the batches; a cut kept when the transient differs by more than {DIFFER_T} standard errors and {:.0}% and leaving it out moves the mean by more than {:.1}%, then moved back over blocks already within {SETTLED_T} standard errors of the steady mean",
            width.as_millis(),
            DIFFER_SHARE * 100.0,
            MATERIAL_SHARE * 100.0
        ),
        ..SteadyState::default()
    };
    let all = series(windows, &b, width);
    if all.is_empty() {
        out.note = Some(format!(
            "too few requests to look for a transient: fewer than {MIN_BATCHES} batches of {BATCH_REQUESTS}; nothing was cut"
        ));
        return (out, 0);
    }
    let mut at_half = false;
    let mut cut_window = 0;
    for (name, unit, points) in all {
        let y: Vec<f64> = points.iter().map(|p| p.1).collect();
        let d = transient(&y);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let window = if d == 0 { 0 } else { points[d].0 };
        let cut_secs = start_secs(window);
        at_half |= d > 0 && d >= y.len() / 2;
        if window > cut_window {
            cut_window = window;
            out.from_secs = cut_secs;
            out.set_by = Some(name.to_owned());
        }
        out.series.push(SteadySeries {
            name: name.to_owned(),
            unit: unit.to_owned(),
            cut_secs,
            transient_mean: (d > 0).then(|| mean(&y[..d])),
            steady_mean: mean(&y[d..]),
        });
    }
    if at_half {
        out.note = Some(
            "a transient reaches half the run, as far as MSER looks: it may last longer; run longer"
                .to_owned(),
        );
    }
    (out, cut_window)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded normal draw.
    fn noise(seed: u64) -> impl FnMut() -> f64 {
        let mut rng = crate::measurement::interval::TestRng(seed);
        move || rng.normal()
    }

    #[test]
    fn mser_cuts_a_decaying_start_and_nothing_from_a_flat_series() {
        let mut good = 0;
        for seed in 1..=100 {
            let mut z = noise(seed);
            // A start 5 sd high that decays with a time constant of 10
            // observations, in batch means of five (MSER-5).
            let x: Vec<f64> = (0..400)
                .map(|i| 100.0 + 50.0 * (-(i as f64) / 10.0).exp() + 10.0 * z())
                .collect();
            let y: Vec<f64> = x.chunks(5).map(|c| c.iter().sum::<f64>() / 5.0).collect();
            let d = transient(&y) * 5;
            // What the cut leaves in moves the mean of the rest by less than
            // its standard error (10 / sqrt(400 - d)).
            let left: f64 = (d..400).map(|i| 50.0 * (-(i as f64) / 10.0).exp()).sum();
            let bias = left / (400 - d) as f64;
            good += u32::from(bias < 10.0 / (400.0 - d as f64).sqrt());
            let flat: Vec<f64> = (0..80).map(|_| 100.0 + 10.0 / 5f64.sqrt() * z()).collect();
            assert_eq!(transient(&flat), 0, "seed {seed}");
        }
        // A statistical rule: nearly always, not always.
        assert!(good >= 80, "{good} of 100");
    }

    #[test]
    fn mser_looks_no_further_than_half_the_series() {
        let y: Vec<f64> = (0..100).map(|i| 100.0 - i as f64).collect();
        assert_eq!(mser(&y), 50);
        assert_eq!(mser(&[]), 0);
        assert_eq!(mser(&[1.0]), 0);
    }

    #[test]
    fn batches_hold_five_requests_and_a_short_end_joins_the_last() {
        let w = |requests| Window {
            requests,
            ..Window::default()
        };
        let b = batches(&[w(3), w(3), w(0), w(7), w(1)]);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].start, b[0].windows, b[0].sums.requests), (0, 2, 6));
        assert_eq!((b[1].start, b[1].windows, b[1].sums.requests), (2, 3, 8));
    }

    fn record(intended_ms: u64, latency_ms: u64, cached: u64) -> RequestRecord<'static> {
        let at = Duration::from_millis(intended_ms);
        RequestRecord {
            trajectory_id: "t",
            latency: Duration::from_millis(latency_ms),
            usage: Some(batchbench_contract::plugin::Usage {
                prompt_tokens: 100,
                completion_tokens: 10,
                cached_tokens: Some(cached),
                ..Default::default()
            }),
            ttft: Some(Duration::from_millis(latency_ms / 2)),
            timing: batchbench_contract::plugin::SendTiming {
                intended: at,
                sent: at,
                last_attempt: at,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_warming_cache_is_cut_where_its_hits_settle_and_replayed_as_warmup() {
        let mut z = noise(7);
        let mut s = Steady::default();
        let mut metrics = Metrics::default();
        // 100 requests a second for 60 s. A request finds its prompt cached
        // with a chance that rises as 0.8 (1 - e^(-t/4 s)), 95% of its final
        // value at 12 s; a hit takes 20 ms, a miss 100 ms.
        let mut rng = crate::measurement::interval::TestRng(0x9e37_79b9_7f4a_7c15);
        let mut u = move || rng.uniform();
        for i in 0..6000u64 {
            let t = i as f64 / 100.0;
            let hit = u() < 0.8 * (1.0 - (-t / 4.0).exp());
            let lat = if hit { 20.0 } else { 100.0 } + 2.0 * z();
            let rec = record(i * 10, lat.max(1.0) as u64, if hit { 100 } else { 0 });
            s.observe(&rec);
            assert!(!s.hold(&rec, StreamGaps::default()));
        }
        let mut seen = 0;
        settle(&mut s, &mut metrics, &Default::default(), &[], None, |_| {
            seen += 1
        });
        let r = s.report(metrics.warmup_requests).expect("decided");
        assert_eq!(seen, 6000);
        // MSER cuts where what is left of the transient is small beside the
        // noise: here before the 95% point, since a request either hits or
        // misses. The hit share it leaves in is within 2.5% of the final one.
        let c = r.from_secs;
        assert!((4.0..=14.4).contains(&c), "cut at {c} s: {r:?}");
        let left = 0.8 * 4.0 * (-c / 4.0).exp() / (60.0 - c);
        assert!(left < 0.025 * 0.8, "cut at {c} s leaves {left}");
        assert_eq!(r.set_by.as_deref().map(|s| !s.is_empty()), Some(true));
        // Every request due before the cut, and none after, is warmup.
        assert_eq!(
            metrics.warmup_requests,
            (r.from_secs * 100.0).round() as u64
        );
        assert_eq!(metrics.requests + metrics.warmup_requests, 6000);
        assert!(!s.holding());
        assert!(s.cut_covers(Duration::from_secs(1)));
        assert!(!s.cut_covers(Duration::from_secs(30)));
    }

    #[test]
    fn a_run_that_holds_too_much_decides_early_and_goes_on_unheld() {
        // Each record: its own size, a one-byte trajectory id, one gap.
        let each = std::mem::size_of::<Held>() + 1 + 8;
        let mut s = Steady {
            hold_limit: 10 * each,
            ..Steady::default()
        };
        let mut metrics = Metrics::default();
        let mut full = false;
        let mut i = 0;
        while !full {
            let rec = record(i * 10, 30, 0);
            s.observe(&rec);
            full = s.hold(
                &rec,
                StreamGaps {
                    all: vec![(1000, 3)],
                    ..StreamGaps::default()
                },
            );
            i += 1;
        }
        assert_eq!(i, 11, "the eleventh record passes the limit");
        let mut seen = 0;
        settle(
            &mut s,
            &mut metrics,
            &Default::default(),
            &[],
            Some(Duration::from_millis(120)),
            |_| seen += 1,
        );
        assert_eq!(seen, 11);
        assert!(!s.holding());
        // Too few to look for a transient: nothing cut, every record measured,
        // and a replayed reply's inter-token gaps are in the figures.
        assert_eq!(metrics.requests, 11);
        assert_eq!(metrics.itl.len(), 33);
        let rec = record(200, 30, 0);
        s.observe(&rec);
        assert!(
            !s.hold(&rec, StreamGaps::default()),
            "nothing is held once decided"
        );
        let r = s.report(metrics.warmup_requests).expect("decided");
        assert_eq!(r.decided_secs, Some(0.12));
        assert_eq!(r.to_secs, 0.2);
        assert!(r.note.as_deref().unwrap_or_default().contains("too few"));
    }

    #[test]
    fn too_few_requests_cut_nothing_and_say_so() {
        let mut s = Steady::default();
        for i in 0..20 {
            s.observe(&record(i * 100, 10, 0));
        }
        let (r, _) = search(&s.windows, s.width);
        assert_eq!(r.from_secs, 0.0);
        assert!(r.note.as_deref().unwrap().contains("too few"), "{r:?}");
    }
}
