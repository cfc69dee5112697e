//! Run metrics: counters and HDR histograms (no sampling), and the summary built
//! from them.

use crate::plugin::{FailureKind, RequestRecord, TrajectoryRecord};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How many failure examples the report keeps, beyond the per-kind counts.
pub const FAILURE_EXAMPLES: usize = 20;

fn histogram() -> Histogram<u64> {
    // Microseconds from 1 us to 1 hour at 3 significant digits; larger values saturate.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// A latency distribution in microseconds.
#[derive(Debug, Clone)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Self(histogram())
    }
}

impl Latency {
    /// Records one duration.
    pub fn record(&mut self, d: Duration) {
        self.record_us(d.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    /// Records one value in microseconds.
    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    /// Records `count` equal values.
    pub fn record_n(&mut self, us: u64, count: u64) {
        let _ = self.0.record_n(us.clamp(1, self.0.high()), count);
    }

    /// Number of values.
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
        })
    }
}

/// Percentiles of one distribution, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Maximum.
    pub max_ms: f64,
}

/// One failed request, for the failure report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FailureExample {
    /// Agent index.
    pub agent_id: u64,
    /// Trajectory id.
    pub trajectory_id: String,
    /// Request index within the trajectory.
    pub request_index: u64,
    /// Classification.
    pub kind: String,
    /// Server or client message (truncated).
    pub message: String,
}

/// The counters and distributions of a run, updated as events arrive.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests that ended (success or failure).
    pub requests: u64,
    /// Successful requests.
    pub successes: u64,
    /// Retries across all requests.
    pub retries: u64,
    /// Sum of `usage.prompt_tokens` over successes.
    pub prompt_tokens: u64,
    /// Sum of `usage.completion_tokens` over successes.
    pub completion_tokens: u64,
    /// Sum of server-reported cached tokens.
    pub server_cached_tokens: u64,
    /// Successes whose usage reported cached tokens.
    pub server_cache_reports: u64,
    /// Estimated cached input tokens under perfect prefix caching.
    pub estimated_cached_tokens: u64,
    /// Live blocks generated from their seed for want of a previous reply.
    pub live_block_fallbacks: u64,
    /// Successes with a planned prompt target and usage.
    pub drift_samples: u64,
    /// Sum of planned prompt tokens over those.
    pub planned_prompt_tokens: u64,
    /// Sum of server-counted prompt tokens over those.
    pub counted_prompt_tokens: u64,
    /// Largest |server - planned| seen.
    pub worst_prompt_drift: i64,
    /// Failures by kind.
    pub failures: BTreeMap<FailureKind, u64>,
    /// The first failures, with context.
    pub failure_examples: Vec<FailureExample>,
    /// Latency of successful requests.
    pub latency: Latency,
    /// Time to first token (streamed successes).
    pub ttft: Latency,
    /// Inter-token latency, one sample per token after the first.
    pub itl: Latency,
    /// Time per output token, one sample per streamed request.
    pub tpot: Latency,
    /// End-to-end runtime of completed trajectories.
    pub trajectory_e2e: Latency,
    /// Trajectories admitted.
    pub trajectories_started: u64,
    /// Trajectories that finished every planned request.
    pub trajectories_completed: u64,
    /// Trajectories that ended early.
    pub trajectories_failed: u64,
    /// Total think / tool time slept.
    pub delay_total: Duration,
    /// The latest admission of any trajectory, seconds from the clock start.
    pub last_admitted_seconds: f64,
}

impl Metrics {
    /// Folds in one request outcome.
    pub fn record_request(&mut self, rec: &RequestRecord<'_>) {
        self.requests += 1;
        self.retries += u64::from(rec.retries);
        self.live_block_fallbacks += u64::from(rec.live_block_fallbacks);
        match rec.failure {
            Some((kind, message)) => {
                *self.failures.entry(kind).or_insert(0) += 1;
                if self.failure_examples.len() < FAILURE_EXAMPLES {
                    let mut message = message.to_owned();
                    truncate(&mut message, 300);
                    self.failure_examples.push(FailureExample {
                        agent_id: rec.agent_id,
                        trajectory_id: rec.trajectory_id.to_owned(),
                        request_index: rec.request_index,
                        kind: kind.to_string(),
                        message,
                    });
                }
            }
            None => {
                self.successes += 1;
                self.latency.record(rec.latency);
                if let Some(t) = rec.ttft {
                    self.ttft.record(t);
                }
                self.estimated_cached_tokens += rec.estimated_cached_tokens;
                if let Some(u) = rec.usage {
                    self.prompt_tokens += u.prompt_tokens;
                    self.completion_tokens += u.completion_tokens;
                    if let Some(c) = u.cached_tokens {
                        self.server_cached_tokens += c;
                        self.server_cache_reports += 1;
                    }
                    if let Some(p) = rec.planned_prompt_tokens {
                        self.drift_samples += 1;
                        self.planned_prompt_tokens += u64::from(p);
                        self.counted_prompt_tokens += u.prompt_tokens;
                        let d = u.prompt_tokens as i64 - i64::from(p);
                        if d.abs() > self.worst_prompt_drift.abs() {
                            self.worst_prompt_drift = d;
                        }
                    }
                }
            }
        }
    }

    /// Folds in one trajectory outcome.
    pub fn record_trajectory(&mut self, rec: &TrajectoryRecord) {
        self.last_admitted_seconds = self.last_admitted_seconds.max(rec.admitted_at_seconds);
        if rec.completed {
            self.trajectories_completed += 1;
            self.trajectory_e2e
                .record(Duration::from_secs_f64(rec.runtime_seconds.max(0.0)));
        } else {
            self.trajectories_failed += 1;
        }
    }

    /// The failure count.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }
}

/// Truncates `s` to at most `max` bytes on a character boundary, marking the cut.
pub fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

/// The results of a run: what the console, CSV and Python report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    /// The run was cut short by Ctrl+C.
    pub interrupted: bool,
    /// Wall time from the benchmark clock start to the last completion.
    pub total_duration_seconds: f64,
    /// Requests that ended.
    pub total_requests: u64,
    /// Successes.
    pub successful_requests: u64,
    /// Failures.
    pub failed_requests: u64,
    /// Retries (excluded from token totals).
    pub retries: u64,
    /// Failures by kind.
    pub failures_by_kind: BTreeMap<String, u64>,
    /// The first failures, with context.
    pub failures: Vec<FailureExample>,
    /// Sum of `usage.prompt_tokens` over successes.
    pub total_prompt_tokens: u64,
    /// Sum of `usage.completion_tokens` over successes.
    pub total_completion_tokens: u64,
    /// Estimated cached input tokens under perfect prefix caching.
    pub estimated_cached_input_tokens: u64,
    /// Live blocks generated from their seed for want of a previous reply.
    pub live_block_fallbacks: u64,
    /// Server-reported cached tokens (`prompt_tokens_details.cached_tokens`).
    pub server_cached_tokens: Option<u64>,
    /// Planned prompt tokens, summed over successes that had a target.
    pub planned_prompt_tokens: u64,
    /// Server-counted prompt tokens for those same requests.
    pub counted_prompt_tokens: u64,
    /// Worst per-request (server - planned) prompt tokens.
    pub worst_prompt_drift_tokens: i64,
    /// Successes per second.
    pub requests_per_second: f64,
    /// Prompt tokens per second.
    pub prompt_tokens_per_second: f64,
    /// Completion tokens per second.
    pub completion_tokens_per_second: f64,
    /// Request latency of successes.
    pub latency: Option<LatencyStats>,
    /// Time to first token.
    pub ttft: Option<LatencyStats>,
    /// Inter-token latency (per token).
    pub itl: Option<LatencyStats>,
    /// Time per output token (per request).
    pub tpot: Option<LatencyStats>,
    /// End-to-end latency of completed trajectories.
    pub trajectory_e2e: Option<LatencyStats>,
    /// Trajectories admitted.
    pub trajectories_started: u64,
    /// Trajectories completed.
    pub trajectories_completed: u64,
    /// Trajectories that ended early.
    pub trajectories_failed: u64,
    /// Total think / tool time slept, seconds.
    pub total_delay_seconds: f64,
    /// Peak number of trajectories active at once.
    pub max_active_observed: u64,
    /// When the last trajectory was admitted, seconds from start.
    pub last_admitted_seconds: f64,
    /// From the last admission to the end.
    pub final_drain_seconds: f64,
    /// Open loop: trajectories whose admission waited for the active cap.
    pub late_admissions: u64,
    /// Open loop: how far any admission slipped behind its schedule, for any reason.
    pub max_admission_lag_ms: f64,
    /// Open loop: admission lag behind schedule.
    pub admission_lag: Option<LatencyStats>,
}

impl Summary {
    /// Builds the summary from the metrics and the elapsed time.
    pub fn from_metrics(m: &Metrics, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
        Self {
            total_duration_seconds: secs,
            total_requests: m.requests,
            successful_requests: m.successes,
            failed_requests: m.failed(),
            retries: m.retries,
            failures_by_kind: m
                .failures
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            failures: m.failure_examples.clone(),
            total_prompt_tokens: m.prompt_tokens,
            total_completion_tokens: m.completion_tokens,
            estimated_cached_input_tokens: m.estimated_cached_tokens,
            live_block_fallbacks: m.live_block_fallbacks,
            server_cached_tokens: (m.server_cache_reports > 0).then_some(m.server_cached_tokens),
            planned_prompt_tokens: m.planned_prompt_tokens,
            counted_prompt_tokens: m.counted_prompt_tokens,
            worst_prompt_drift_tokens: m.worst_prompt_drift,
            requests_per_second: per_s(m.successes),
            prompt_tokens_per_second: per_s(m.prompt_tokens),
            completion_tokens_per_second: per_s(m.completion_tokens),
            latency: m.latency.stats(),
            ttft: m.ttft.stats(),
            itl: m.itl.stats(),
            tpot: m.tpot.stats(),
            trajectory_e2e: m.trajectory_e2e.stats(),
            trajectories_started: m.trajectories_started,
            trajectories_completed: m.trajectories_completed,
            trajectories_failed: m.trajectories_failed,
            total_delay_seconds: m.delay_total.as_secs_f64(),
            last_admitted_seconds: m.last_admitted_seconds,
            ..Self::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_exact_enough() {
        let mut l = Latency::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.stats().unwrap_or_default();
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99_ms - 99.0).abs() < 0.1, "{s:?}");
    }

    #[test]
    fn failures_are_counted_and_kept() {
        let mut m = Metrics::default();
        let rec = RequestRecord {
            agent_id: 3,
            trajectory_id: "t",
            request_index: 1,
            planned_prompt_tokens: None,
            retries: 2,
            latency: Duration::from_millis(5),
            usage: None,
            estimated_cached_tokens: 0,
            live_block_fallbacks: 0,
            ttft: None,
            failure: Some((FailureKind::Http(503), "unavailable")),
        };
        m.record_request(&rec);
        assert_eq!(m.failed(), 1);
        assert_eq!(m.retries, 2);
        assert_eq!(m.failure_examples[0].kind, "http_503");
        assert!(m.latency.is_empty());
    }
}
