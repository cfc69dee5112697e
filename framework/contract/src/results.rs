//! The results directory: the versioned files one run writes (`--output-dir`),
//! which reports, comparisons and merges read instead of re-running anything.
//!
//! | file | what |
//! |---|---|
//! | `run.json` | [`RunDoc`]: the format and its version, the run record (its spec included) and the summary; written last, whole, so its presence marks a complete directory |
//! | `requests.jsonl` | one line per request, the fields of `--requests-jsonl` |
//! | `trajectories.jsonl` | one line per trajectory ([`TrajectoryRecord`](crate::plugin::TrajectoryRecord)) |
//! | `histograms.json` | [`Histograms`]: every latency family as sparse HDR buckets, exact and mergeable |
//! | `timeseries.json` | [`TimeSeries`]: send rate, concurrency, throughput, errors and TTFT over time |
//! | `server_metrics.jsonl` | one [`ServerScrape`] per scrape of `--server-metrics`: common names and every raw series |
//!
//! These types are the format; writing them is the `results_dir` reporter's
//! job, reading them the `batchbench-results` crate's.

pub mod series;

use crate::record::{RunInfo, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The `format` value of [`RunDoc`].
pub const FORMAT: &str = "batchbench-results";
/// The version of the results directory format this build writes and reads.
pub const VERSION: u32 = 1;

/// The file names of a results directory.
pub mod files {
    /// The run record and summary, written last.
    pub const RUN: &str = "run.json";
    /// One line per request.
    pub const REQUESTS: &str = "requests.jsonl";
    /// One line per trajectory.
    pub const TRAJECTORIES: &str = "trajectories.jsonl";
    /// The latency histograms.
    pub const HISTOGRAMS: &str = "histograms.json";
    /// The time series.
    pub const TIMESERIES: &str = "timeseries.json";
    /// The server's metrics, one line per scrape.
    pub const SERVER_METRICS: &str = "server_metrics.jsonl";
    /// A series' index (`sweep`, `capacity`).
    pub const SERIES_INDEX: &str = "index.json";
}

/// `run.json`: what a run was and what it measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunDoc {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format version ([`VERSION`] when written by this build).
    pub version: u32,
    /// The run record: its facts and its complete spec.
    pub run: RunInfo,
    /// Every figure of the run.
    pub summary: Summary,
}

/// The histograms of a run: one per latency family, in microseconds, as the
/// sparse buckets of an HDR histogram (`[value, count]` pairs, each value the
/// highest of its bucket). Loading the pairs into a histogram of the same
/// bounds and precision gives back the exact distribution; adding the counts of
/// equal values merges runs exactly.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    /// Always `us`.
    pub unit: String,
    /// The lowest discernible value.
    pub lowest: u64,
    /// The highest trackable value (larger values saturate to it).
    pub highest: u64,
    /// Significant decimal digits kept.
    pub significant_figures: u8,
    /// Family name (`latency`, `ttft`, `itl`, `tpot`, `trajectory_e2e`,
    /// `latency_from_intended`, `ttft_from_intended`, `queue_wait`, `send_lag`,
    /// `admission_lag`)
    /// to its buckets; a family with no sample is absent.
    pub families: BTreeMap<String, Vec<[u64; 2]>>,
}

/// The value at quantile `q` (0 to 1) of rising `[value, count]` buckets, by
/// nearest rank: the smallest value with at least `ceil(q * n)` samples at or
/// below it. `None` when there is no sample.
pub fn bucket_quantile(buckets: &[[u64; 2]], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().map(|[_, c]| c).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut acc = 0;
    buckets
        .iter()
        .find(|[_, c]| {
            acc += c;
            acc >= rank
        })
        .map(|[v, _]| *v)
}

/// Client-side time series of a run, in equal buckets from the benchmark clock
/// start. Every series has one value per bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Bucket width in seconds.
    pub interval_secs: f64,
    /// Each bucket's start, seconds from the clock start.
    pub t: Vec<f64>,
    /// Requests sent (first attempts) in the bucket, per second.
    pub send_rate: Vec<f64>,
    /// Requests in flight, averaged over the bucket.
    pub concurrency: Vec<f64>,
    /// Successful requests that ended in the bucket, per second.
    pub throughput: Vec<f64>,
    /// Output tokens of the successes that ended in the bucket, per second.
    pub output_tokens_per_second: Vec<f64>,
    /// Failed requests that ended in the bucket, per second.
    pub error_rate: Vec<f64>,
    /// Mean time to first token of the successes whose first token came in the
    /// bucket, milliseconds (absent: none did).
    pub ttft_mean_ms: Vec<Option<f64>>,
    /// The largest of those, milliseconds.
    pub ttft_max_ms: Vec<Option<f64>>,
}

/// One scrape of a server's Prometheus metrics (`--server-metrics`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerScrape {
    /// When the scrape was answered, seconds from the benchmark clock start.
    pub t: f64,
    /// The URL scraped.
    pub url: String,
    /// Why the scrape failed (absent: it succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The server's known metrics under common names (vLLM, SGLang and
    /// llama.cpp alike): `requests_running`, `requests_waiting`,
    /// `kv_cache_usage` (0 to 1), `prefix_cache_hit_rate` (0 to 1),
    /// `prompt_tokens_per_second`, `generation_tokens_per_second`,
    /// `preemptions_per_second`. Rates are over the interval since the
    /// previous scrape of the same URL, so the first scrape has none.
    #[serde(default)]
    pub common: BTreeMap<String, f64>,
    /// Every sample as scraped, `name{labels}` to its value.
    #[serde(default)]
    pub raw: BTreeMap<String, f64>,
    /// Lines of the response that did not parse (they are left out).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_lines: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One request as the time series see it: offsets in seconds from the clock start.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestSpan {
    /// First attempt sent.
    pub sent: f64,
    /// Ended.
    pub end: f64,
    /// First token arrived (streamed successes).
    pub first_token: Option<f64>,
    /// Time to first token, seconds.
    pub ttft: Option<f64>,
    /// Succeeded.
    pub ok: bool,
    /// Output tokens (successes).
    pub output_tokens: u64,
}

/// Builds [`TimeSeries`] in bounded memory: buckets start 100 ms wide and double
/// (adjacent pairs merged) whenever a run outgrows [`MAX_BUCKETS`].
#[derive(Debug, Clone)]
pub struct TimeSeriesBuilder {
    width: f64,
    buckets: Vec<Bucket>,
}

/// The most buckets a [`TimeSeriesBuilder`] keeps before it doubles their width.
pub const MAX_BUCKETS: usize = 2048;
const FIRST_WIDTH: f64 = 0.1;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    sends: u64,
    successes: u64,
    failures: u64,
    output_tokens: u64,
    /// Request-seconds in flight within the bucket.
    busy: f64,
    ttft_sum: f64,
    ttft_n: u64,
    ttft_max: f64,
}

impl Bucket {
    fn merge(&mut self, o: &Bucket) {
        self.sends += o.sends;
        self.successes += o.successes;
        self.failures += o.failures;
        self.output_tokens += o.output_tokens;
        self.busy += o.busy;
        self.ttft_sum += o.ttft_sum;
        self.ttft_n += o.ttft_n;
        self.ttft_max = self.ttft_max.max(o.ttft_max);
    }
}

impl Default for TimeSeriesBuilder {
    fn default() -> Self {
        Self {
            width: FIRST_WIDTH,
            buckets: Vec::new(),
        }
    }
}

impl TimeSeriesBuilder {
    /// The bucket of time `t` (seconds), growing the series (and the bucket
    /// width) as needed.
    fn index(&mut self, t: f64) -> usize {
        let t = if t.is_finite() { t.max(0.0) } else { 0.0 };
        loop {
            let i = (t / self.width) as usize;
            if i < MAX_BUCKETS {
                if i >= self.buckets.len() {
                    self.buckets.resize(i + 1, Bucket::default());
                }
                return i;
            }
            self.double();
        }
    }

    fn double(&mut self) {
        let merged = self
            .buckets
            .chunks(2)
            .map(|pair| {
                let mut b = pair[0];
                if let Some(o) = pair.get(1) {
                    b.merge(o);
                }
                b
            })
            .collect();
        self.buckets = merged;
        self.width *= 2.0;
    }

    /// Adds one request. A span with a time that is not finite or beyond a
    /// year is left out: one wild value would widen every interval.
    pub fn add(&mut self, r: &RequestSpan) {
        const YEAR: f64 = 365.0 * 86_400.0;
        if !(r.sent.is_finite() && r.end.is_finite() && r.sent.max(r.end) < YEAR) {
            return;
        }
        let end = r.end.max(r.sent);
        // Grow to the end first, so that every index below is of the final width.
        let last = self.index(end);
        let first = self.index(r.sent);
        self.buckets[first].sends += 1;
        let b = &mut self.buckets[last];
        if r.ok {
            b.successes += 1;
            b.output_tokens += r.output_tokens;
        } else {
            b.failures += 1;
        }
        for i in first..=last {
            let lo = (i as f64 * self.width).max(r.sent);
            let hi = ((i + 1) as f64 * self.width).min(end);
            if hi > lo {
                self.buckets[i].busy += hi - lo;
            }
        }
        if let (Some(at), Some(ttft)) = (r.first_token, r.ttft) {
            let i = self.index(at.min(end));
            let b = &mut self.buckets[i];
            b.ttft_sum += ttft;
            b.ttft_n += 1;
            b.ttft_max = b.ttft_max.max(ttft);
        }
    }

    /// The series so far.
    pub fn build(&self) -> TimeSeries {
        let w = self.width;
        let ms = |b: &Bucket, v: f64| (b.ttft_n > 0).then_some(v * 1000.0);
        let mut s = TimeSeries {
            interval_secs: w,
            ..TimeSeries::default()
        };
        // Rounded to a microsecond (a millionth of a request or token): the
        // file stays short and free of float noise.
        let r = |v: f64| (v * 1e6).round() / 1e6;
        for (i, b) in self.buckets.iter().enumerate() {
            s.t.push(r(i as f64 * w));
            s.send_rate.push(r(b.sends as f64 / w));
            s.concurrency.push(r(b.busy / w));
            s.throughput.push(r(b.successes as f64 / w));
            s.output_tokens_per_second
                .push(r(b.output_tokens as f64 / w));
            s.error_rate.push(r(b.failures as f64 / w));
            s.ttft_mean_ms
                .push(ms(b, r(b.ttft_sum / b.ttft_n.max(1) as f64)));
            s.ttft_max_ms.push(ms(b, r(b.ttft_max)));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(sent: f64, end: f64, ok: bool) -> RequestSpan {
        RequestSpan {
            sent,
            end,
            ok,
            output_tokens: if ok { 10 } else { 0 },
            ..RequestSpan::default()
        }
    }

    #[test]
    fn bucket_quantiles_are_the_nearest_rank() {
        let b = [[10, 1], [20, 2], [40, 1]];
        assert_eq!(bucket_quantile(&b, 0.0), Some(10));
        assert_eq!(bucket_quantile(&b, 0.25), Some(10));
        assert_eq!(bucket_quantile(&b, 0.5), Some(20));
        assert_eq!(bucket_quantile(&b, 0.76), Some(40));
        assert_eq!(bucket_quantile(&b, 1.0), Some(40));
        assert_eq!(bucket_quantile(&[], 0.5), None);
    }

    #[test]
    fn counts_and_concurrency_add_up() {
        let mut b = TimeSeriesBuilder::default();
        // Two requests in flight over [0, 1 s), one failing at 0.55 s.
        b.add(&span(0.0, 1.0, true));
        b.add(&span(0.05, 1.0, true));
        b.add(&span(0.25, 0.55, false));
        let s = b.build();
        // The requests ending at 1.0 s fall in an eleventh interval.
        assert_eq!(s.t.len(), 11, "{s:?}");
        let w = s.interval_secs;
        let sum = |v: &[f64]| v.iter().sum::<f64>() * w;
        assert!((sum(&s.send_rate) - 3.0).abs() < 1e-9);
        assert!((sum(&s.throughput) - 2.0).abs() < 1e-9);
        assert!((sum(&s.error_rate) - 1.0).abs() < 1e-9);
        assert!((sum(&s.output_tokens_per_second) - 20.0).abs() < 1e-9);
        // Busy time: 1 + 0.95 + 0.3 request-seconds.
        assert!((sum(&s.concurrency) - 2.25).abs() < 1e-9, "{s:?}");
        assert!((s.concurrency[3] - 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.error_rate[5] - 10.0).abs() < 1e-9, "{s:?}");
    }

    #[test]
    fn a_long_run_stays_bounded_and_keeps_its_totals() {
        let mut b = TimeSeriesBuilder::default();
        for i in 0..100_000u32 {
            let t = f64::from(i) * 0.01;
            let mut r = span(t, t + 0.5, i % 10 != 0);
            r.first_token = Some(t + 0.1);
            r.ttft = Some(0.1);
            b.add(&r);
        }
        let s = b.build();
        assert!(s.t.len() <= MAX_BUCKETS, "{}", s.t.len());
        let w = s.interval_secs;
        let total: f64 = s.send_rate.iter().sum::<f64>() * w;
        assert!((total - 100_000.0).abs() < 1e-6);
        let busy: f64 = s.concurrency.iter().sum::<f64>() * w;
        assert!((busy - 50_000.0).abs() < 1e-3, "{busy}");
        let ttft = s.ttft_mean_ms.iter().flatten().copied().fold(0.0, f64::max);
        assert!((ttft - 100.0).abs() < 1e-6);
    }
}
