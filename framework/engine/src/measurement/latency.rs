//! A latency distribution: an exact HDR histogram, and batches over time for
//! its intervals.

use batchbench_contract::record::LatencyStats;
use hdrhistogram::Histogram;
use std::time::Duration;

/// The bounds and precision of every latency histogram: microseconds from 1 us
/// to 1 hour at 3 significant digits; larger values saturate.
pub const HISTOGRAM_BOUNDS: (u64, u64, u8) = (1, 3_600_000_000, 3);

fn histogram() -> Histogram<u64> {
    let (lo, hi, sig) = HISTOGRAM_BOUNDS;
    Histogram::new_with_bounds(lo, hi, sig).expect("constant histogram bounds are valid")
}

/// A latency distribution in microseconds; the samples recorded with their
/// send time ([`record_at`](Self::record_at)) are also kept in batches over
/// time, from which the intervals allow for correlation between them.
#[derive(Debug, Clone)]
pub struct Latency(Histogram<u64>, crate::measurement::interval::Batches);

impl Default for Latency {
    fn default() -> Self {
        Self(
            histogram(),
            crate::measurement::interval::Batches::default(),
        )
    }
}

impl Latency {
    /// As a cumulative histogram over [`LIVE_BUCKETS`] (seconds), for live
    /// views: exact counts at each bound, read off the exact histogram.
    ///
    /// [`LIVE_BUCKETS`]: batchbench_contract::plugin::LIVE_BUCKETS
    pub fn live(&self) -> batchbench_contract::plugin::LiveHistogram {
        let h = &self.0;
        batchbench_contract::plugin::LiveHistogram {
            buckets: batchbench_contract::plugin::LIVE_BUCKETS
                .iter()
                .map(|&le| {
                    let us = (le * 1e6) as u64;
                    (
                        le,
                        if h.is_empty() {
                            0
                        } else {
                            h.count_between(0, us)
                        },
                    )
                })
                .collect(),
            count: h.len(),
            sum: if h.is_empty() {
                0.0
            } else {
                h.mean() * h.len() as f64 / 1e6
            },
        }
    }

    /// Records one duration.
    pub fn record(&mut self, d: Duration) {
        self.record_us(d.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// Records one duration sent at `at` from the clock start.
    pub fn record_at(&mut self, d: Duration, at: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.record_us(us);
        self.1.record(us, at);
    }

    /// Records one value in microseconds.
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    /// Records `count` equal values.
    pub fn record_n(&mut self, us: u64, count: u64) {
        let _ = self.0.record_n(us.clamp(1, self.0.high()), count);
    }

    /// Records `count` equal values of one request sent at `at` from the
    /// clock start (the tokens of one reply).
    pub fn record_n_at(&mut self, us: u64, count: u64, at: Duration) {
        self.record_n(us, count);
        self.1.record_n(us, count, at);
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at quantile `q` (0 to 1), in milliseconds; `None` when empty.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        (!self.0.is_empty()).then(|| self.0.value_at_quantile(q) as f64 / 1000.0)
    }

    /// The sparse buckets: `[value, count]` for every bucket that holds a
    /// sample, each value the highest of its bucket, rising.
    pub fn buckets(&self) -> Vec<[u64; 2]> {
        self.0
            .iter_recorded()
            .map(|v| [v.value_iterated_to(), v.count_at_value()])
            .collect()
    }

    /// A distribution from [`buckets`](Self::buckets) (of one run or of
    /// several: equal values add), exact when they came from this build's
    /// bounds ([`HISTOGRAM_BOUNDS`]).
    /// Without batches over time, its intervals take the samples as independent.
    pub fn from_buckets<'a>(buckets: impl IntoIterator<Item = &'a [u64; 2]>) -> Self {
        let mut l = Self::default();
        for [v, c] in buckets {
            l.record_n(*v, *c);
        }
        l
    }

    /// Adds another distribution's samples.
    pub fn add(&mut self, other: &Latency) {
        let _ = self.0.add(&other.0);
        self.1.add(&other.1);
    }

    /// The 95% interval of the value at quantile `q` (0 to 1), in
    /// milliseconds; `None` while the sample is too small for one.
    pub fn quantile_interval_ms(&self, q: f64) -> Option<[f64; 2]> {
        crate::measurement::interval::quantile_interval(&self.0, &self.1, q).0
    }

    /// Whether the value at quantile `q` is at most `max_ms`, decided at the
    /// 95% level (`None`: the sample cannot tell; see [`crate::measurement::interval::decide`]).
    pub fn decide(&self, q: f64, max_ms: f64) -> Option<bool> {
        let max_us = (max_ms * 1000.0).round().max(0.0) as u64;
        crate::measurement::interval::decide(&self.0, &self.1, q, max_us)
    }

    /// How the batch means drift over `span` of the run.
    pub fn trend(
        &self,
        span: crate::measurement::interval::Span,
    ) -> Option<crate::measurement::interval::Trend> {
        self.1.trend(span)
    }

    /// Half the 95% interval of the rate of samples, as a share of it.
    pub fn rate_half_share(&self) -> Option<f64> {
        self.1.rate_half_share()
    }

    /// How the number of samples per batch drifts over `span`.
    pub fn count_trend(
        &self,
        span: crate::measurement::interval::Span,
    ) -> Option<crate::measurement::interval::Trend> {
        self.1.count_trend(span)
    }

    /// p50/p90/p99/mean/max in milliseconds; `None` when empty.
    pub fn stats(&self) -> Option<LatencyStats> {
        if self.0.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Some(LatencyStats {
            count: self.0.len(),
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p90_ms: ms(self.0.value_at_quantile(0.90)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            mean_ms: self.0.mean() / 1000.0,
            max_ms: ms(self.0.max()),
            ci: crate::measurement::interval::intervals(&self.0, &self.1),
        })
    }
}
