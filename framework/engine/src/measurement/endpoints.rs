//! A fleet's run per endpoint: what the routing policy sent each endpoint and
//! how it answered, kept beside the run's own figures (which they add up to).

use crate::measurement::latency::Latency;
use batchbench_contract::plugin::{FailureKind, RequestRecord};
use std::collections::BTreeMap;

/// One model's share of a run of several models: its figures as an
/// endpoint's, and the distributions its own SLO bounds judge.
#[derive(Debug, Default)]
pub struct ModelTally {
    /// The model's name in the mix.
    pub name: String,
    /// Its figures.
    pub tally: EndpointTally,
    /// The distributions of its measured successes that a bound naming it
    /// judges, from the intended send time as the run's own.
    pub slo: ModelSlo,
}

impl ModelTally {
    /// The tally of the model `name`.
    pub fn named(name: String) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }
}

/// A model's distributions for its SLO bounds.
#[derive(Debug, Default)]
pub struct ModelSlo {
    /// Inter-token latency per token of its measured streamed replies (a
    /// gap of k tokens counts k times, as the run's own).
    pub itl: Latency,
    /// TTFT from the intended send time.
    pub ttft: Latency,
    /// TTFAT from the intended send time.
    pub ttfat: Latency,
    /// Time per output token.
    pub tpot: Latency,
    /// End-to-end latency from the intended send time.
    pub e2e: Latency,
    /// Wait for a concurrency slot.
    pub queue_wait: Latency,
}

impl ModelSlo {
    /// Folds in one measured success's figures, sent at `at`.
    pub(crate) fn record(
        &mut self,
        f: &batchbench_contract::slo::RequestFigures,
        at: std::time::Duration,
    ) {
        if let Some(t) = f.ttft {
            self.ttft.record_at(t, at);
        }
        if let Some(t) = f.ttfat {
            self.ttfat.record_at(t, at);
        }
        if let Some(t) = f.tpot {
            self.tpot.record_at(t, at);
        }
        self.e2e.record_at(f.e2e, at);
        self.queue_wait.record_at(f.queue_wait, at);
    }

    /// The distribution of `metric`.
    pub fn of(&self, metric: batchbench_contract::slo::SloMetric) -> Option<&Latency> {
        use batchbench_contract::slo::SloMetric;
        match metric {
            SloMetric::Ttft => Some(&self.ttft),
            SloMetric::Ttfat => Some(&self.ttfat),
            SloMetric::Tpot => Some(&self.tpot),
            SloMetric::E2e => Some(&self.e2e),
            SloMetric::QueueWait => Some(&self.queue_wait),
            SloMetric::Itl => Some(&self.itl),
        }
    }
}

/// One endpoint's share of a fleet's run.
#[derive(Debug, Default)]
pub struct EndpointTally {
    /// Requests that ended there.
    pub requests: u64,
    /// Its successes.
    pub successes: u64,
    /// Its failures by kind.
    pub failures: BTreeMap<FailureKind, u64>,
    /// Prompt and completion tokens of its successes.
    pub prompt_tokens: u64,
    /// See `prompt_tokens`.
    pub completion_tokens: u64,
    /// Server-reported cached tokens, and the successes that reported any.
    pub server_cached_tokens: u64,
    /// See `server_cached_tokens`.
    pub server_cache_reports: u64,
    /// Its own perfect prefix cache's share of the prompts sent to it.
    pub estimated_cached_tokens: u64,
    /// Latency of its successes.
    pub latency: Latency,
    /// Time to first token of its successes.
    pub ttft: Latency,
}

impl EndpointTally {
    pub(crate) fn record(&mut self, rec: &RequestRecord<'_>) {
        self.record_with(rec, rec.cache_estimate.rank);
    }

    /// Folds in `rec`, whose own perfect cache (the endpoint's, or the
    /// model's) would have held `estimated` of its prompt.
    pub(crate) fn record_with(&mut self, rec: &RequestRecord<'_>, estimated: Option<u64>) {
        self.requests += 1;
        if let Some((kind, _)) = rec.failure {
            *self.failures.entry(kind).or_insert(0) += 1;
            return;
        }
        self.successes += 1;
        let at = rec.timing.sent;
        self.latency.record_at(rec.latency, at);
        if let Some(t) = rec.ttft {
            self.ttft.record_at(t, at);
        }
        self.estimated_cached_tokens += estimated.unwrap_or(0);
        if let Some(u) = rec.usage {
            self.prompt_tokens += u.prompt_tokens;
            self.completion_tokens += u.completion_tokens;
            if let Some(c) = u.cached_tokens {
                self.server_cached_tokens += c;
                self.server_cache_reports += 1;
            }
        }
    }

    /// Its summary over `secs`, for the endpoint at `url`.
    pub fn summary(&self, url: String, secs: f64) -> batchbench_contract::record::EndpointSummary {
        let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
        batchbench_contract::record::EndpointSummary {
            url,
            requests: self.requests,
            successful_requests: self.successes,
            failed_requests: self.requests - self.successes,
            failures_by_kind: self
                .failures
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            requests_per_second: per_s(self.successes),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            completion_tokens_per_second: per_s(self.completion_tokens),
            server_cached_tokens: (self.server_cache_reports > 0)
                .then_some(self.server_cached_tokens),
            estimated_cached_tokens: self.estimated_cached_tokens,
            latency: self.latency.stats(),
            ttft: self.ttft.stats(),
        }
    }
}
