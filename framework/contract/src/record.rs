//! The run record: what a run was (its spec and the facts the engine fixed) and
//! what it measured (the summary). Reporters, the wire documents of external
//! plugins and result files all speak these types.

use crate::spec::RunSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How a workload source describes itself in reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadInfo {
    /// `synthetic`, `trajectory_replay`, `finite_batch`, ...
    pub mode: String,
    /// Trajectories planned, when known.
    pub planned_trajectories: Option<u64>,
    /// Requests planned, when known.
    pub planned_requests: Option<u64>,
    /// Manifest path, for replay sources.
    pub manifest_path: Option<String>,
    /// SHA-256 of the manifest.
    pub manifest_sha256: Option<String>,
    /// Manifest schema version (the highest seen).
    pub schema_version: Option<u32>,
    /// The source draws trajectories (or requests) without end, as a duration
    /// run asks ([`BuildContext::endless`](crate::registry::BuildContext::endless)).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub endless: bool,
    /// The models of the run's mix its requests name (a replayed
    /// trajectory's own), once each: the run checks them against its mix
    /// before anything is sent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Where each of `models` is first named (`FILE:LINE: trajectory ID`),
    /// for the error that refuses one; empty when the source cannot say.
    #[serde(skip)]
    pub models_at: Vec<String>,
}

/// What reporters know about the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// The `model` field.
    pub model: String,
    /// Request URL.
    pub url: String,
    /// Run seed.
    pub seed: u64,
    /// Unix time at the benchmark clock start.
    pub started_unix: f64,
    /// Configured maximum of active trajectories.
    pub max_active: usize,
    /// The workload source's self-description.
    pub workload: WorkloadInfo,
    /// The command's flat view of its configuration, under the names existing
    /// notebooks and CSV columns read (derived from `spec`).
    pub config: serde_json::Value,
    /// The complete spec of the run (its seed resolved): given back as a
    /// `--config` file, it repeats the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RunSpec>,
    /// With a start time (`--start-at`): how long after it the clock really
    /// started, milliseconds (negative: early).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_skew_ms: Option<f64>,
    /// A merged directory (`batchbench merge`): the shards it holds, by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_shards: Vec<MergedShard>,
}

/// One shard of a merged run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MergedShard {
    /// The shard's index.
    pub index: u32,
    /// The results directory it was read from, as given.
    pub dir: String,
    /// Unix time at the shard's clock start.
    pub started_unix: f64,
    /// Its clock start after `start_at`, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_skew_ms: Option<f64>,
    /// Its seconds from its clock start to its end.
    pub elapsed_seconds: f64,
    /// Requests it measured (warmup excluded).
    pub requests: u64,
    /// The seconds its records were moved by onto the merged clock (its start
    /// less the earliest shard's).
    pub offset_seconds: f64,
}

impl Summary {
    /// Whether a completed run failed: no measured request succeeded, or the
    /// failed share is above `max_failure_rate`. The reason, or `None`.
    pub fn failure_verdict(&self, max_failure_rate: Option<f64>) -> Option<String> {
        if self.successful_requests == 0 {
            let cut = self.load.as_ref().map_or(0, |l| l.cut_at_deadline);
            return Some(if self.total_requests == 0 && cut > 0 {
                format!("no request was measured ({cut} cut at the deadline)")
            } else if self.total_requests == 0 {
                "no request was measured".to_owned()
            } else {
                format!(
                    "no request succeeded ({} of {} failed)",
                    self.failed_requests, self.total_requests
                )
            });
        }
        let share = self.failed_requests as f64 / self.total_requests.max(1) as f64;
        match max_failure_rate {
            Some(max) if share > max => Some(format!(
                "{:.2}% of requests failed ({} of {}), above the allowed {:.2}% (--max-failure-rate {max})",
                100.0 * share,
                self.failed_requests,
                self.total_requests,
                100.0 * max
            )),
            _ => None,
        }
    }
}

/// `url` with any credentials of its authority (`user:password@`) replaced by
/// `***@`, for every place a URL is recorded or printed.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let host = &authority[at + 1..];
    match scheme {
        Some(s) => format!("{s}://***@{host}{tail}"),
        None => format!("***@{host}{tail}"),
    }
}

/// The five figures of each latency family in the flat view.
const LATENCY_FIGURES: [&str; 5] = ["p50", "p90", "p99", "mean", "max"];

impl RunInfo {
    /// The run as flat named fields (the names CSV columns and other flat
    /// exports select from): the command's configuration view, every scalar of
    /// the summary, the workload's self-description and the run facts, each
    /// formatted once. The set of names does not depend on the summary's values,
    /// so a column that names no field can be refused before the run starts.
    pub fn fields(&self, s: &Summary) -> BTreeMap<String, String> {
        fn scalar(v: &serde_json::Value) -> String {
            match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }
        }
        let opt = |v: Option<String>| v.unwrap_or_default();
        let mut map = BTreeMap::new();
        if let serde_json::Value::Object(cfg) = &self.config {
            for (k, v) in cfg {
                map.insert(k.clone(), scalar(v));
            }
        }
        if let Ok(serde_json::Value::Object(sum)) = serde_json::to_value(s) {
            for (k, v) in sum {
                if !v.is_object() && !v.is_array() {
                    map.insert(k, scalar(&v));
                }
            }
        }
        let w = &self.workload;
        let fixed6 = |x: f64| format!("{x:.6}");
        let computed: [(&str, String); 18] = [
            ("timestamp", crate::timefmt::rfc3339(self.started_unix)),
            ("model", self.model.clone()),
            ("seed", self.seed.to_string()),
            ("total_duration_seconds", fixed6(s.total_duration_seconds)),
            ("requests_per_second", fixed6(s.requests_per_second)),
            (
                "prompt_tokens_per_second",
                fixed6(s.prompt_tokens_per_second),
            ),
            (
                "completion_tokens_per_second",
                fixed6(s.completion_tokens_per_second),
            ),
            ("total_delay_seconds", fixed6(s.total_delay_seconds)),
            ("retry_seconds", fixed6(s.retry_seconds)),
            (
                "server_closes_connections",
                s.server_closes_connections.to_string(),
            ),
            ("last_admitted_seconds", fixed6(s.last_admitted_seconds)),
            (
                "failures_by_kind",
                s.failures_by_kind
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(";"),
            ),
            ("workload_mode", w.mode.clone()),
            ("manifest_path", opt(w.manifest_path.clone())),
            ("manifest_sha256", opt(w.manifest_sha256.clone())),
            (
                "schema_version",
                opt(w.schema_version.map(|v| v.to_string())),
            ),
            (
                "planned_requests",
                opt(w.planned_requests.map(|v| v.to_string())),
            ),
            (
                "server_cached_ratio",
                opt(s.server_cached_tokens.and_then(|c| {
                    (s.estimated_cached_input_tokens > 0)
                        .then(|| fixed6(c as f64 / s.estimated_cached_input_tokens as f64))
                })),
            ),
        ];
        for (k, v) in computed {
            map.insert(k.to_owned(), v);
        }
        let l = s.load.as_ref();
        for (k, v) in [
            ("arrival", l.map(|l| l.arrival.clone())),
            ("target_rate", l.and_then(|l| l.target_rate).map(fixed6)),
            ("achieved_rate", l.map(|l| fixed6(l.achieved_rate))),
            ("late_sends", l.map(|l| l.late_sends.to_string())),
            ("warmup_requests", l.map(|l| l.warmup_requests.to_string())),
            ("cut_at_deadline", l.map(|l| l.cut_at_deadline.to_string())),
            ("at_deadline", l.and_then(|l| l.at_deadline.clone())),
            ("load_verdict", l.and_then(|l| l.verdict.clone())),
            (
                "dropped_arrivals",
                l.map(|l| l.dropped_arrivals.to_string()),
            ),
            ("dropped_waiting", l.map(|l| l.dropped_waiting.to_string())),
            (
                "client_bound",
                s.client_bound.as_ref().map(|b| b.reasons.join("+")),
            ),
            (
                "client_busy_share",
                s.client.as_ref().and_then(|c| c.busy_share).map(fixed6),
            ),
            (
                "scheduling_delay_p99_ms",
                s.client
                    .as_ref()
                    .and_then(|c| c.scheduling_delay)
                    .map(|d| fixed6(d.p99_ms)),
            ),
        ] {
            map.insert(k.to_owned(), opt(v));
        }
        // A run of several models: each one's successes, in the mix's order.
        let models = (!s.models.is_empty()).then(|| {
            s.models
                .iter()
                .map(|m| format!("{}={}", m.model, m.figures.successful_requests))
                .collect::<Vec<_>>()
                .join(";")
        });
        map.insert("models".to_owned(), opt(models));
        // Structured outputs, where the run asked for a format.
        let st = s.structured.as_ref();
        for (k, v) in [
            ("response_format", st.map(|t| t.format.clone())),
            ("structured_checked", st.map(|t| t.checked.to_string())),
            ("structured_valid_share", st.map(|t| fixed6(t.valid_share))),
            (
                "structured_valid_share_ci_low",
                st.and_then(|t| t.valid_share_ci).map(|c| fixed6(c[0])),
            ),
            (
                "structured_valid_share_ci_high",
                st.and_then(|t| t.valid_share_ci).map(|c| fixed6(c[1])),
            ),
        ] {
            map.insert(k.to_owned(), opt(v));
        }
        // Reasoning, where replies reasoned.
        for (k, v) in [
            (
                "total_reasoning_tokens",
                s.total_reasoning_tokens.map(|n| n.to_string()),
            ),
            ("reasoning_tokens_source", s.reasoning_tokens_source.clone()),
            (
                "total_answer_tokens",
                s.total_answer_tokens.map(|n| n.to_string()),
            ),
            (
                "reasoning_only_replies",
                Some(s.reasoning_only_replies.to_string()),
            ),
        ] {
            map.insert(k.to_owned(), opt(v));
        }
        // The GPUs' energy, where an exporter reported it.
        let e = s.server_metrics.as_ref().and_then(|m| m.energy.as_ref());
        for (k, v) in [
            ("energy_joules", e.map(|e| fixed6(e.joules))),
            ("energy_source", e.map(|e| e.source.clone())),
            (
                "joules_per_output_token",
                e.and_then(|e| e.joules_per_output_token).map(fixed6),
            ),
            (
                "joules_per_request",
                e.and_then(|e| e.joules_per_request).map(fixed6),
            ),
            (
                "joules_per_1k_prompt_tokens",
                e.and_then(|e| e.joules_per_1k_prompt_tokens).map(fixed6),
            ),
            ("mean_power_watts", e.map(|e| fixed6(e.mean_power_watts))),
            (
                "peak_power_watts",
                e.and_then(|e| e.peak_power_watts).map(fixed6),
            ),
        ] {
            map.insert(k.to_owned(), opt(v));
        }
        let slo = s.slo.as_ref();
        let joined = |pick: fn(&crate::slo::SloResult) -> bool| {
            slo.map(|r| {
                r.bounds
                    .iter()
                    .filter(|b| pick(b))
                    .map(|b| b.bound.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
        };
        for (k, v) in [
            ("slo", joined(|_| true)),
            ("slo_passed", slo.map(|r| r.passed.to_string())),
            ("slo_failed_bounds", joined(|b| !b.met)),
            ("good_requests", slo.map(|r| r.good_requests.to_string())),
            ("goodput", slo.map(|r| fixed6(r.goodput))),
        ] {
            map.insert(k.to_owned(), opt(v));
        }
        for (family, stats) in [
            ("latency", s.latency),
            ("ttft", s.ttft),
            ("ttfat", s.ttfat),
            ("reasoning_duration", s.reasoning_duration),
            ("tpot_reasoning", s.tpot_reasoning),
            ("tpot_answer", s.tpot_answer),
            ("itl", s.itl),
            ("itl_reasoning", s.itl_reasoning),
            ("itl_answer", s.itl_answer),
            ("tpot", s.tpot),
            ("trajectory_e2e", s.trajectory_e2e),
            (
                "latency_from_intended",
                l.and_then(|l| l.latency_from_intended),
            ),
            ("ttft_from_intended", l.and_then(|l| l.ttft_from_intended)),
            ("queue_wait", l.and_then(|l| l.queue_wait)),
            ("send_lag", l.and_then(|l| l.send_lag)),
            ("latency_all_attempts", s.latency_all_attempts),
            (
                "server_prompt",
                s.server_timing.as_ref().and_then(|t| t.prompt),
            ),
            (
                "server_predicted",
                s.server_timing.as_ref().and_then(|t| t.predicted),
            ),
            (
                "client_minus_server",
                s.server_timing.as_ref().and_then(|t| t.client_minus_server),
            ),
        ] {
            let values = stats.map(|s| [s.p50_ms, s.p90_ms, s.p99_ms, s.mean_ms, s.max_ms]);
            for (i, fig) in LATENCY_FIGURES.iter().enumerate() {
                map.insert(
                    format!("{family}_{fig}_ms"),
                    values.map_or_else(String::new, |v| format!("{:.3}", v[i])),
                );
            }
            // The 95% intervals: empty where there is none (too few samples
            // for a bound on both sides).
            let ci = stats.and_then(|s| s.ci);
            for (fig, bounds) in [
                ("p50", ci.and_then(|c| c.p50_ms)),
                ("p90", ci.and_then(|c| c.p90_ms)),
                ("p99", ci.and_then(|c| c.p99_ms)),
                ("mean", ci.and_then(|c| c.mean_ms)),
            ] {
                for (side, i) in [("low", 0), ("high", 1)] {
                    map.insert(
                        format!("{family}_{fig}_ms_ci_{side}"),
                        bounds.map_or_else(String::new, |b| format!("{:.3}", b[i])),
                    );
                }
            }
        }
        for (side, i) in [("low", 0), ("high", 1)] {
            map.insert(
                format!("requests_per_second_ci_{side}"),
                s.requests_per_second_ci
                    .map_or_else(String::new, |b| fixed6(b[i])),
            );
        }
        map
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
    /// The 95% confidence intervals of the percentiles and the mean (absent
    /// in records written before they existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<Intervals>,
}

/// How correlation between samples was allowed for in an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMethod {
    /// Batch means over time: the interval is widened (or narrowed) by the
    /// measured correlation.
    BatchMeans,
    /// Too few batches to measure the correlation (a run of a few seconds,
    /// merged shards): the samples are taken as independent, which
    /// understates the width when they are not.
    Independent,
}

/// The 95% intervals of one distribution's figures, in milliseconds. A
/// percentile without one had too few (effective) samples for a bound on
/// both sides: a p99 needs at least 368.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Intervals {
    /// The confidence level (0.95).
    pub level: f64,
    /// How correlation between samples was allowed for.
    pub method: IntervalMethod,
    /// The batches over time the correlation was measured on (0 when
    /// independence was assumed).
    pub batches: u32,
    /// The median's effective sample size: the count over the measured
    /// inflation of its variance (for independent samples, a little above the
    /// count in about two runs of five: chance).
    pub effective_count: f64,
    /// The median's interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<[f64; 2]>,
    /// The 90th percentile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90_ms: Option<[f64; 2]>,
    /// The 99th percentile's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<[f64; 2]>,
    /// The mean's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<[f64; 2]>,
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

/// The audio of a run's requests, and how fast it was answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AudioSummary {
    /// Requests that carried audio (failures included).
    pub requests: u64,
    /// Seconds of audio they carried (resent clips included).
    pub seconds: f64,
    /// Seconds of audio per request, the mean.
    pub seconds_per_request: f64,
    /// Seconds of audio answered per second of the run (successes).
    pub seconds_per_second: f64,
    /// The real-time factor of the successful requests: each one's audio
    /// seconds over its latency (2.0: a second of audio answered in half a
    /// second). The mean of the requests' factors.
    pub rtf_mean: f64,
    /// Their median.
    pub rtf_p50: f64,
    /// The slow tail: the factor nine requests in ten beat.
    pub rtf_p10: f64,
    /// The slowest request's.
    pub rtf_min: f64,
    /// Successful requests the factors are of.
    pub rtf_samples: u64,
}

/// The structured answers of a run: every successful reply's answer parsed
/// and validated against the format it asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StructuredSummary {
    /// `json_schema` or `json_object`.
    pub format: String,
    /// The schemas' names (their files' stems), in rotation order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schemas: Vec<String>,
    /// Answers checked (measured successes).
    pub checked: u64,
    /// Of which valid.
    pub valid: u64,
    /// `valid / checked`.
    pub valid_share: f64,
    /// Its 95% interval (Wilson's, answers taken as independent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_share_ci: Option<[f64; 2]>,
    /// The invalid answers by reason (`empty`, `truncated`, `not_json`,
    /// `not_object`, `schema`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub invalid: BTreeMap<String, u64>,
    /// The latency of the first checked request of each schema (a server
    /// compiles a schema's grammar once): their mean, and the p50 of the
    /// rest, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_latency_mean_ms: Option<f64>,
    /// The p50 latency of the requests after each schema's first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub later_latency_p50_ms: Option<f64>,
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
    /// Requests sent again at once on a new connection because the server had
    /// closed the kept one after its previous response: no backoff, nothing
    /// failed, not retries.
    pub reconnects: u64,
    /// The server closed every connection after its first response, although
    /// it may have advertised keep-alive (every request after a connection's
    /// first paid a new connection).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub server_closes_connections: bool,
    /// Seconds that failed attempts and their backoff cost, over all requests.
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub retry_seconds: f64,
    /// Latency of successes over all their attempts, failed ones and backoff
    /// included (present when a request was retried; `latency` is the last
    /// attempt's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_all_attempts: Option<LatencyStats>,
    /// The server's own timings beside the client's, where the server
    /// reports them (llama.cpp `timings`, SGLang `meta_info`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<ServerTimingReport>,
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
    /// Cached input tokens a perfect prefix cache shared by every request would
    /// give, block by block in send order (see [`crate::prefix`]): unlike
    /// `estimated_cached_input_tokens` it sees prefixes shared across
    /// trajectories.
    pub global_estimated_cached_input_tokens: u64,
    /// The same with one cache per data-parallel rank under the run's routing
    /// (present when a router assigns ranks).
    pub rank_estimated_cached_input_tokens: Option<u64>,
    /// The block size of those two estimates.
    pub cache_block_tokens: u32,
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
    /// The 95% interval of `requests_per_second`, from the spread of the
    /// successes per batch of time (absent in a run too short for 10 batches,
    /// and in merged shards).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second_ci: Option<[f64; 2]>,
    /// Prompt tokens per second.
    pub prompt_tokens_per_second: f64,
    /// Completion tokens per second.
    pub completion_tokens_per_second: f64,
    /// Request latency of successes.
    pub latency: Option<LatencyStats>,
    /// Time to first token.
    pub ttft: Option<LatencyStats>,
    /// Time to the first reasoning token, where the API tells reasoning apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfrt: Option<LatencyStats>,
    /// Time to the first answer token: the first content token after any
    /// reasoning (the TTFT of replies without reasoning). The wait a user of a
    /// reasoning model has before the answer starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttfat: Option<LatencyStats>,
    /// The reasoning phase of replies that reasoned and then answered: from
    /// the first reasoning token to the first answer token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_duration: Option<LatencyStats>,
    /// Time per output token of the reasoning phase (replies that reasoned,
    /// then answered): its duration over its tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_reasoning: Option<LatencyStats>,
    /// Time per output token of the answer phase of the same replies: first
    /// answer token to last token, over the answer's tokens after its first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_answer: Option<LatencyStats>,
    /// Reasoning tokens (part of the completion tokens): from the usage where
    /// the server reported them apart, else counted by the client from the
    /// reasoning text (`reasoning_tokens_source` says which).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_reasoning_tokens: Option<u64>,
    /// Where `total_reasoning_tokens` came from: `usage` (the server's count),
    /// `counted` (the client's tokenizer, the usage had none) or `mixed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens_source: Option<String>,
    /// Answer tokens: the completion tokens of the replies that reasoned,
    /// less their reasoning tokens (absent without reasoning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_answer_tokens: Option<u64>,
    /// Successful replies that reasoned but gave no answer: their output cap
    /// was spent on reasoning (no time to first answer token).
    #[serde(skip_serializing_if = "is_zero")]
    pub reasoning_only_replies: u64,
    /// Structured outputs (runs with `--response-format`): how many answers
    /// were valid, and why the others were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<StructuredSummary>,
    /// Inputs answered (embeddings: one vector each), where the API counts them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_items: Option<u64>,
    /// Inputs answered per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_per_second: Option<f64>,
    /// Images sent (`--images-per-request`), resent ones included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_sent: Option<u64>,
    /// Their encoded bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_image_bytes: Option<u64>,
    /// Audio in (`--audio-ms`, `--audio-files`): seconds sent and the
    /// real-time factor of the replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<AudioSummary>,
    /// Inter-token latency (per token).
    pub itl: Option<LatencyStats>,
    /// Inter-token latency within the reasoning phase of replies that
    /// reasoned and then answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_reasoning: Option<LatencyStats>,
    /// Inter-token latency within their answer phase (the first answer
    /// token's wait after the last reasoning token included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_answer: Option<LatencyStats>,
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
    /// The arrival process, when requests were released at a rate (absent: the
    /// closed loop).
    pub load: Option<LoadReport>,
    /// One line when latency or throughput still drifted over the second
    /// half of the run (the figures describe a moving target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trend: Option<String>,
    /// How synthetic prompts were known to be exact: `proven` (once, at load),
    /// `pre-tokenized` or `encoded` (every piece checked); absent without a
    /// tokenizer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_synthesis: Option<String>,
    /// The run against its SLO (`--slo`): each bound's verdict, and goodput;
    /// absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo: Option<crate::slo::SloReport>,
    /// Why the run failed although it completed (its command exits 1): no
    /// measured request succeeded, or more failed than the allowed share.
    pub run_failed: Option<String>,
    /// The server's metrics over the run (`--server-metrics`); absent when none
    /// were scraped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_metrics: Option<ServerMetricsReport>,
    /// The routing policy that picked each request's endpoint (a router's
    /// name): present in a run against a fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<String>,
    /// Each endpoint's share of the run, in the order of the hosts: present
    /// in a run against a fleet. Its counts add up to the run's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<EndpointSummary>,
    /// Each model's share of a run of several models (`--model-mix`), in
    /// the mix's order. Its counts add up to the run's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelSummary>,
    /// How hard the client itself worked over the run: its runtime's threads
    /// and how busy they were, and how late it ran its tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientLoad>,
    /// Present when the client, not the server, limited the run: why, in
    /// words and as reasons. Its figures are then the client's as much as the
    /// server's; a series point so marked is neither met nor missed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_bound: Option<ClientBound>,
    /// What the run's reporters delivered elsewhere (spans to a collector,
    /// for one), and what they had to drop: one entry a reporter that
    /// delivers ([`Reporter::deliver`](crate::plugin::Reporter::deliver)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliveries: Vec<Delivery>,
}

/// What one reporter delivered to a place outside the run (a collector, a
/// database) and what it dropped: a destination that was down, slow or full
/// costs the run nothing but this count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    /// The reporter, as the registry names it.
    pub reporter: String,
    /// What it delivers, plural (`spans`).
    pub items: String,
    /// Where to (credentials redacted).
    pub destination: String,
    /// Items the destination accepted.
    pub delivered: u64,
    /// Items it never accepted: refused, lost with a failed export, left in
    /// a full queue, or still unsent when the run's end gave up waiting.
    pub dropped: u64,
    /// Why the first of them was dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Delivery {
    /// Adds `other`'s counts to these (a merge of shards that delivered to
    /// the same place), keeping the first error.
    pub fn add(&mut self, other: &Self) {
        self.delivered += other.delivered;
        self.dropped += other.dropped;
        if self.error.is_none() {
            self.error.clone_from(&other.error);
        }
    }
}

/// The client's own load over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientLoad {
    /// Worker threads of the client's runtime (`--client-threads`).
    pub threads: u32,
    /// The share of the threads' time they were busy running tasks rather
    /// than parked for want of work (1.0: every thread, all the time). With
    /// `sim://` the simulator runs on the same threads.
    pub busy_share: Option<f64>,
    /// The process's CPU time over the threads' time (blocking threads, such
    /// as a tokenizer's, can take it past 1.0).
    pub cpu_share: Option<f64>,
    /// How late a probe task that wakes every 50 ms ran: the delay any task
    /// of the client (reading a reply's bytes, sending a request) could see
    /// before it was run, the timer's millisecond included.
    pub scheduling_delay: Option<LatencyStats>,
    /// Other work on the machine made the client's sends or tasks late while
    /// its own threads were mostly idle: not the client's limit, but in its
    /// figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Why the client limited a run: each reason a short name, and one line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientBound {
    /// `dropped` (arrivals due before the deadline were not sent by it),
    /// `schedule` (sends late by a material share of the latency, from
    /// threads busy over half the time), `busy`
    /// (its threads busy over [`ClientBound::BUSY_SHARE`] of the time),
    /// `scheduling` (its own load ran its tasks late by a material share of
    /// the first-token time).
    pub reasons: Vec<String>,
    /// The reasons in words, with their figures.
    pub message: String,
}

impl ClientBound {
    /// Above this share of its threads' time busy, the client is the limit.
    pub const BUSY_SHARE: f64 = 0.9;
}

/// One endpoint of a fleet over a run: what the routing sent it and how it
/// answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EndpointSummary {
    /// The endpoint's URL (credentials redacted); empty in a model's row
    /// ([`ModelSummary`]), which names its model instead.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Requests sent to it (measured ones: warmup left out).
    pub requests: u64,
    /// Its successes.
    pub successful_requests: u64,
    /// Its failures.
    pub failed_requests: u64,
    /// Its failures by kind (`http_503`, `timeout`, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failures_by_kind: BTreeMap<String, u64>,
    /// Its successes per second, over the run's duration.
    pub requests_per_second: f64,
    /// Prompt tokens of its successes.
    pub prompt_tokens: u64,
    /// Completion tokens of its successes.
    pub completion_tokens: u64,
    /// Completion tokens per second, over the run's duration.
    pub completion_tokens_per_second: f64,
    /// Cached prompt tokens it reported (absent: it reported none at all).
    pub server_cached_tokens: Option<u64>,
    /// What a perfect prefix cache of its own would have held of the prompts
    /// sent to it (blocks of the run's cache block size).
    pub estimated_cached_tokens: u64,
    /// Request latency of its successes.
    pub latency: Option<LatencyStats>,
    /// Time to first token of its successes (streamed).
    pub ttft: Option<LatencyStats>,
}

/// One model's share of a run of several models: the same figures as an
/// endpoint's, under the model's name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSummary {
    /// The model's name in the mix (an adapter's own name).
    pub model: String,
    /// Its figures.
    #[serde(flatten)]
    pub figures: EndpointSummary,
}

/// The server's own timings over a run's successes, beside the client's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerTimingReport {
    /// Successes whose reply carried the server's timings.
    pub requests: u64,
    /// Prompt processing (prefill), as the server timed it.
    pub prompt: Option<LatencyStats>,
    /// Generation (decode), as the server timed it.
    pub predicted: Option<LatencyStats>,
    /// The server's whole time on a request.
    pub total: Option<LatencyStats>,
    /// The client's latency less the server's time: queueing before the
    /// server's clock starts, and the network.
    pub client_minus_server: Option<LatencyStats>,
    /// Time to first token less the server's prompt time.
    pub ttft_minus_prompt: Option<LatencyStats>,
    /// Requests whose server time exceeded the client's latency by more than
    /// a millisecond (the two clocks disagree).
    pub server_over_client: u64,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the scrapes of `--server-metrics` saw over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerMetricsReport {
    /// The URLs scraped.
    pub urls: Vec<String>,
    /// Seconds between scrapes.
    pub interval_secs: f64,
    /// Scrapes made (each URL counts).
    pub scrapes: u64,
    /// Scrapes that failed (a connection error, a status other than 200, a
    /// body with no sample); never fatal to the run.
    pub failed_scrapes: u64,
    /// The first failures, `url: why`.
    pub errors: Vec<String>,
    /// Each common metric over the successful scrapes (see
    /// [`ServerScrape`](crate::results::ServerScrape)).
    pub metrics: BTreeMap<String, MetricSummary>,
    /// What the GPUs used, where an exporter reported their energy or power
    /// (a DCGM exporter); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<EnergyReport>,
}

/// The GPUs' energy over a run, from the scrapes of their exporters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnergyReport {
    /// Joules used between the first and the last scrape.
    pub joules: f64,
    /// Where it comes from: `counter` (the exporter's energy counter, its
    /// difference over the run) or `integrated power` (power integrated over
    /// the scrapes, where no counter was exported).
    pub source: String,
    /// The seconds it covers (first to last scrape).
    pub seconds: f64,
    /// Power integrated over the scrapes, joules, when a power gauge was
    /// exported beside the counter (a check of one against the other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrated_power_joules: Option<f64>,
    /// Mean power over them, watts.
    pub mean_power_watts: f64,
    /// The highest power one scrape saw (summed over the exporters), watts;
    /// absent without a power gauge.
    pub peak_power_watts: Option<f64>,
    /// Joules per output token of the run's successes.
    pub joules_per_output_token: Option<f64>,
    /// Joules per successful request.
    pub joules_per_request: Option<f64>,
    /// Joules per 1,000 prompt tokens.
    pub joules_per_1k_prompt_tokens: Option<f64>,
}

impl EnergyReport {
    /// Fills the per-token and per-request figures from the run's totals.
    pub fn per_work(&mut self, successes: u64, prompt_tokens: u64, completion_tokens: u64) {
        let per = |n: u64| (n > 0).then(|| self.joules / n as f64);
        self.joules_per_output_token = per(completion_tokens);
        self.joules_per_request = per(successes);
        self.joules_per_1k_prompt_tokens = per(prompt_tokens).map(|j| j * 1000.0);
    }
}

/// A server metric over a run's scrapes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    /// Scrapes that had it.
    pub samples: u64,
    /// Their mean.
    pub mean: f64,
    /// Their largest.
    pub max: f64,
    /// The last.
    pub last: f64,
}

impl MetricSummary {
    /// Adds one value.
    pub fn add(&mut self, v: f64) {
        self.samples += 1;
        self.mean += (v - self.mean) / self.samples as f64;
        self.max = if self.samples == 1 {
            v
        } else {
            self.max.max(v)
        };
        self.last = v;
    }
}

/// How an open-loop run kept its schedule, and what the schedule cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LoadReport {
    /// `poisson`, `constant` or `gamma`.
    pub arrival: String,
    /// `requests` or `sessions`.
    pub release: String,
    /// The target rate (absent with stages).
    pub target_rate: Option<f64>,
    /// Arrivals per second as they were really sent: the arrivals sent, less
    /// one, over the time from the first send to the last.
    pub achieved_rate: f64,
    /// Arrivals released.
    pub arrivals: u64,
    /// Latency from the intended send time: what a user arriving on schedule saw.
    pub latency_from_intended: Option<LatencyStats>,
    /// Time to first token from the intended send time.
    pub ttft_from_intended: Option<LatencyStats>,
    /// Wait for a concurrency slot (`max_concurrency`).
    pub queue_wait: Option<LatencyStats>,
    /// The client's own delay behind the schedule, beyond the queue.
    pub send_lag: Option<LatencyStats>,
    /// Requests sent more than 1 ms behind schedule (beyond the queue).
    pub late_sends: u64,
    /// Warmup requests sent and excluded from the statistics.
    pub warmup_requests: u64,
    /// Latency of the successful warmup requests, apart from every other figure.
    pub warmup_latency: Option<LatencyStats>,
    /// The run's duration limit, seconds.
    pub duration_secs: Option<f64>,
    /// `finish` or `cancel`: requests in flight at the deadline.
    pub at_deadline: Option<String>,
    /// Requests cancelled at the deadline (not failures).
    pub cut_at_deadline: u64,
    /// Arrivals due before the deadline that were not sent by it: the client
    /// was behind its schedule, and nothing is sent after the deadline.
    pub dropped_arrivals: u64,
    /// Arrivals that waited longer than `max_queue_wait_secs` for a
    /// concurrency slot and were dropped, unsent: the cap's slots were held
    /// by requests the server had not finished. Not among `dropped_arrivals`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_waiting: u64,
    /// Per stage of a rate schedule.
    pub stages: Vec<StageReport>,
    /// Who held the requests back: the client (its queue, its schedule, its
    /// cores, arrivals it dropped), or the server when the client kept its
    /// schedule while latency grew; one line, absent when neither held.
    pub verdict: Option<String>,
    /// A run that stops once its figures are sure (`target_ci`,
    /// `until_decided`): whether and when they were.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub convergence: Option<Convergence>,
    /// With `warmup = "auto"`: where the run's steady state was found to
    /// begin, and what the transient before it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<SteadyState>,
}

/// The steady window of a run whose warmup was found (`warmup = "auto"`):
/// the requests due before `from_secs` are its warmup.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SteadyState {
    /// How it was found, in words.
    pub method: String,
    /// Where the steady window begins: seconds from the clock start, by
    /// intended send time (0: no transient was found).
    pub from_secs: f64,
    /// Where it ends: the last intended send.
    pub to_secs: f64,
    /// Requests left out as the transient (they count as warmup).
    pub cut_requests: u64,
    /// The series whose transient ended last, which set the cut (absent when
    /// nothing was cut).
    pub set_by: Option<String>,
    /// Each series looked at.
    pub series: Vec<SteadySeries>,
    /// When the run held too many records to wait for its end, the time (from
    /// the clock start) the cut was decided from the windows so far.
    pub decided_secs: Option<f64>,
    /// A caution, in words: the transient may outlast what the run shows.
    pub note: Option<String>,
}

/// One time series a steady-state search looked at.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SteadySeries {
    /// `e2e latency`, `time to first token`, `requests sent`, `prefix-cache hits`.
    pub name: String,
    /// The unit of its values: `ms`, `per s`, `share`.
    pub unit: String,
    /// Where its transient ends, seconds from the clock start (0: none found).
    pub cut_secs: f64,
    /// Its mean over the transient (absent when nothing was cut).
    pub transient_mean: Option<f64>,
    /// Its mean over the steady window.
    pub steady_mean: f64,
}

/// Whether a run that stops once its figures are sure enough got there
/// before its cap (`duration_secs`), and where its figures stood.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Convergence {
    /// What the run waited for, in words: `every figure within ±2%`,
    /// `every SLO bound decided`, or both.
    pub rule: String,
    /// Whether it got there before the cap.
    pub converged: bool,
    /// Measured requests when it got there, or at the cap.
    pub requests: u64,
    /// Seconds from the clock start when it got there (absent: it did not).
    pub secs: Option<f64>,
    /// The figures it watched, as they stood at the stop.
    pub figures: Vec<WatchedFigure>,
    /// What kept it from converging, in words (absent when it converged).
    pub reason: Option<String>,
}

/// One figure a converging run watched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WatchedFigure {
    /// `e2e_p99`, `ttft_p90`, ...
    pub name: String,
    /// The estimate, in milliseconds.
    pub value_ms: f64,
    /// Its 95% interval (absent while the sample is too small for one).
    pub interval_ms: Option<[f64; 2]>,
    /// Half the interval's width, in percent of the estimate.
    pub half_width_pct: Option<f64>,
}

/// The figures of one stage of a rate schedule.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StageReport {
    /// Stage index (0-based).
    pub stage: usize,
    /// Stage length, seconds.
    pub secs: f64,
    /// Target rate.
    pub rate: f64,
    /// Requests that ended.
    pub requests: u64,
    /// Successes.
    pub successful_requests: u64,
    /// Successes per second of the stage.
    pub requests_per_second: f64,
    /// Latency of successes.
    pub latency: Option<LatencyStats>,
    /// Latency from the intended send time.
    pub latency_from_intended: Option<LatencyStats>,
    /// Time to first token.
    pub ttft: Option<LatencyStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(
            redact_url("http://u:p@h:1/x?q=a@b"),
            "http://***@h:1/x?q=a@b"
        );
        assert_eq!(redact_url("https://h/metrics"), "https://h/metrics");
        assert_eq!(redact_url("sim://?fault-rate=0.1"), "sim://?fault-rate=0.1");
        assert_eq!(redact_url("user@h"), "***@h");
    }
}
