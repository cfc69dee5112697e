//! A series of runs over one load dimension (`sweep`, `capacity`): the
//! `index.json` document of its results directory. Each of its runs is a
//! results directory of its own (`run-000`, ...).

use crate::spec::RunSpec;
use serde::{Deserialize, Serialize};

/// A figure over a point's runs: the mean and the half width of its 95%
/// interval (Student's t; absent with one run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The mean.
    pub mean: f64,
    /// Half the width of the 95% confidence interval of the mean.
    pub ci95: Option<f64>,
    /// Every run's value.
    pub values: Vec<f64>,
    /// The 95% interval of the figure: `mean ± ci95` over several runs, or
    /// one run's own interval (of its percentile or rate), where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
}

impl Estimate {
    /// The mean and interval of `values`.
    pub fn of(values: Vec<f64>) -> Self {
        let n = values.len();
        let mean = if n == 0 {
            0.0
        } else {
            values.iter().sum::<f64>() / n as f64
        };
        let ci95 = (n >= 2).then(|| {
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t95(n - 1) * (var / n as f64).sqrt()
        });
        Self {
            mean,
            ci95,
            values,
            // Latencies and rates are never negative.
            interval: ci95.map(|h| [(mean - h).max(0.0), mean + h]),
        }
    }

    /// With one run, that run's own interval (`own`); with several, the
    /// interval over them stays.
    pub fn or_own(mut self, own: Option<[f64; 2]>) -> Self {
        if self.values.len() == 1 {
            self.interval = own;
        }
        self
    }

    /// Of every value, when all are present and there is one at least.
    pub fn of_some(values: impl IntoIterator<Item = Option<f64>>) -> Option<Self> {
        let v: Option<Vec<f64>> = values.into_iter().collect();
        v.filter(|v| !v.is_empty()).map(Self::of)
    }
}

/// The two-sided 95% quantile of Student's t with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.saturating_sub(1)).copied().unwrap_or(1.96)
}

/// One bound's verdict at a point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BoundVerdict {
    /// The bound, canonically written.
    pub bound: String,
    /// An aggregate bound: the observed percentile over the runs, in ms.
    pub observed_ms: Option<Estimate>,
    /// A per-request bound: the share of successes that met it.
    pub share_met: Option<Estimate>,
    /// Held: the mean percentile is within the bound, or every request of
    /// every run met it.
    pub met: bool,
    /// An aggregate bound: the 95% interval of the percentile, in ms: the
    /// run's own (one run), or over the runs' percentiles (`--trials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<[f64; 2]>,
    /// An aggregate bound whose interval reaches across the bound, or that
    /// has none (a run too short for its percentile): `met` says which side
    /// the percentile fell on, not which side the server's is on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
    /// An undecided aggregate bound with a run too short for any interval
    /// of its percentile (a p99 of fewer than 368 requests).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub too_few: bool,
}

/// One point of a series: a load and its runs' figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Point {
    /// The load.
    pub value: f64,
    /// The command line of the point's runs (without its result files).
    pub command: Vec<String>,
    /// Each run's directory, relative to the results directory.
    pub runs: Vec<String>,
    /// Each run's seed.
    pub seeds: Vec<u64>,
    /// Requests sent (the measured ones; warmup left out) per run, summed.
    pub requests: u64,
    /// Failed requests, summed over the runs.
    pub failed_requests: u64,
    /// Successful requests per second.
    pub requests_per_second: Estimate,
    /// Output tokens per second.
    pub completion_tokens_per_second: Estimate,
    /// The achieved arrival rate of an open loop.
    pub achieved_rate: Option<Estimate>,
    /// Goodput (with an SLO): successes per second that met every
    /// per-request bound.
    pub goodput: Option<Estimate>,
    /// End-to-end latency from the intended send time, p50 and p99.
    pub e2e_p50_ms: Option<Estimate>,
    /// See `e2e_p50_ms`.
    pub e2e_p99_ms: Option<Estimate>,
    /// Time to first token from the intended send time, p99 (streamed).
    pub ttft_p99_ms: Option<Estimate>,
    /// Time per output token, p99 (streamed).
    pub tpot_p99_ms: Option<Estimate>,
    /// Every bound of the SLO.
    pub bounds: Vec<BoundVerdict>,
    /// With an SLO: every bound held, decided, and failures stayed within the
    /// allowed share.
    pub passed: Option<bool>,
    /// With an SLO: no bound missed for sure, and one or more undecided (the
    /// point neither passed nor failed; `passed` is false).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub undecided: bool,
    /// A figure landed near its bound, so the point was measured once more.
    pub remeasured: bool,
    /// A sweep stopped here: throughput stopped rising while latency rose.
    pub saturated: bool,
    /// The capacity found.
    pub capacity: bool,
    /// A run of the point was interrupted.
    pub interrupted: bool,
    /// The client, not the server, limited a run of the point: why (the
    /// run's `client_bound` line). Such a point is neither met nor missed
    /// (`passed` is absent), and a capacity search stops at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_bound: Option<String>,
}

/// The outcome of a capacity search.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Capacity {
    /// The highest load measured that met the SLO (absent: none did).
    pub load: Option<f64>,
    /// Its unit.
    pub unit: String,
    /// The dimension searched.
    pub dimension: String,
    /// The lowest load measured that did not meet it, missed or undecided
    /// (absent: none, up to `--max-load` or the points allowed).
    pub lowest_failing: Option<f64>,
    /// The lowest load measured that missed it for sure: between `load` and
    /// it lies the capacity, with the confidence of the points' intervals
    /// (the statistical bracket; the search's is `load` to `lowest_failing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lowest_missed: Option<f64>,
    /// The loads measured whose SLO stayed undecided.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<f64>,
    /// `(lowest_failing - load) / load`: how far the true capacity may lie
    /// above the reported one.
    pub relative_width: Option<f64>,
    /// The tolerance asked for.
    pub tolerance: f64,
    /// How the search ended: `found`, `at_max_load`, `below_lowest`,
    /// `out_of_points`, `at_limit` (a load the run cannot take),
    /// `client_bound` (the client, not the server, limited a point: no
    /// capacity is reported) or `interrupted`.
    pub verdict: String,
    /// The sentence the console printed.
    pub message: String,
}

/// A series: what `index.json` and `--summary-json` hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SeriesDoc {
    /// The format version of this document.
    pub version: u32,
    /// `sweep` or `capacity`.
    pub kind: String,
    /// The command (`batchbench`).
    pub command: String,
    /// The dimension varied.
    pub dimension: String,
    /// Its unit.
    pub unit: String,
    /// The SLO, canonically written.
    pub slo: Vec<String>,
    /// Runs per point.
    pub trials: u64,
    /// The points, in the order they were measured.
    pub points: Vec<Point>,
    /// A sweep's values that were not run (after an early stop).
    pub skipped: Vec<f64>,
    /// Why a sweep stopped before its last value.
    pub stopped_early: Option<String>,
    /// A capacity search's answer.
    pub capacity: Option<Capacity>,
    /// The series was interrupted.
    pub interrupted: bool,
    /// Why the series stopped on a run that could not complete.
    pub error: Option<String>,
    /// The base run spec (the first point's), for reference.
    pub spec: Option<RunSpec>,
}

/// The format version of [`SeriesDoc`].
pub const SERIES_VERSION: u32 = 1;
