//! A fleet's run per endpoint: what the routing policy sent each endpoint and
//! how it answered, kept beside the run's own figures (which they add up to).

use crate::measurement::latency::Latency;
use batchbench_contract::plugin::{FailureKind, RequestRecord};
use std::collections::BTreeMap;

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
        self.estimated_cached_tokens += rec.cache_estimate.rank.unwrap_or(0);
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
