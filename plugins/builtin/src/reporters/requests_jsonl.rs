//! `requests_jsonl`: one JSON line per request (all attempts), for notebooks and
//! plots: outcome, latency, TTFT, planned against server-counted prompt tokens,
//! server-reported and estimated cached tokens.

use batchbench_contract::plugin::{PluginError, Reporter, RequestIds, RequestRecord, ServerTiming};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::Summary;
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// Config of [`RequestsJsonl`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestsJsonlConfig {
    /// Output file (replaced).
    pub path: PathBuf,
}

/// One line of the file.
#[derive(Debug, Serialize)]
struct Line<'a> {
    agent_id: u64,
    trajectory_id: &'a str,
    request_index: u64,
    ok: bool,
    failure_kind: Option<String>,
    failure: Option<&'a str>,
    retries: u32,
    /// Times a kept connection turned out closed by the server and the
    /// request went out at once on a new one (not retries).
    reconnects: u32,
    latency_ms: f64,
    /// Latency over all attempts, failed ones and their backoff included
    /// (present when the request was retried).
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_all_attempts_ms: Option<f64>,
    ttft_ms: Option<f64>,
    /// The server's own timings (llama.cpp `timings`, SGLang `meta_info`),
    /// where it reported them.
    #[serde(skip_serializing_if = "Option::is_none")]
    server_timing: Option<ServerTiming>,
    /// The client's latency less the server's own time: queueing before the
    /// server's clock starts, and the network.
    #[serde(skip_serializing_if = "Option::is_none")]
    client_minus_server_ms: Option<f64>,
    /// Time to the first reasoning token (streamed, where the API tells
    /// reasoning apart).
    #[serde(skip_serializing_if = "Option::is_none")]
    ttfrt_ms: Option<f64>,
    /// Time to the first answer token (streamed): after any reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    ttfat_ms: Option<f64>,
    /// Time per output token after the first (streamed, two tokens or more).
    tpot_ms: Option<f64>,
    /// The longest per-token gap between streamed chunks.
    itl_max_ms: Option<f64>,
    /// With `--response-format`: the schema the answer was checked against
    /// (its index), and why it was not valid (absent: valid).
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_schema: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    structured_invalid: Option<&'static str>,
    /// When each chunk that carried tokens arrived, from the send (with
    /// `--token-times`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    token_ms: Vec<f64>,
    /// Met every per-request SLO bound: present for the measured successes
    /// of a run with per-request bounds (`--slo ttft<=500ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    slo_met: Option<bool>,
    planned_prompt_tokens: Option<u32>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    /// Reasoning tokens (part of the completion tokens): the usage's, else
    /// counted by the client (`reasoning_counted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_tokens: Option<u64>,
    /// The client counted `reasoning_tokens` from the reasoning text.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    reasoning_counted: bool,
    /// Inputs answered (embeddings).
    #[serde(skip_serializing_if = "Option::is_none")]
    items: Option<u64>,
    /// Images the request carried, and their bytes.
    #[serde(skip_serializing_if = "is_zero")]
    images: u64,
    #[serde(skip_serializing_if = "is_zero")]
    image_bytes: u64,
    /// Seconds of audio the request carried.
    #[serde(skip_serializing_if = "is_zero_f64")]
    audio_seconds: f64,
    /// `prompt_tokens - planned_prompt_tokens`: the chat template's overhead plus
    /// any drift.
    prompt_drift_tokens: Option<i64>,
    server_cached_tokens: Option<u64>,
    estimated_cached_tokens: u64,
    /// What one perfect prefix cache shared by every request would have cached.
    global_estimated_cached_tokens: u64,
    /// The same on the request's data-parallel rank (a run routed to ranks).
    #[serde(skip_serializing_if = "Option::is_none")]
    rank_estimated_cached_tokens: Option<u64>,
    /// The same on a cache of the request's model alone (a mix).
    #[serde(skip_serializing_if = "Option::is_none")]
    model_estimated_cached_tokens: Option<u64>,
    live_block_fallbacks: u32,
    /// Intended send time (the schedule's, or when the request was ready),
    /// milliseconds from the benchmark clock start.
    intended_ms: f64,
    /// Actual send time (first attempt), milliseconds from the clock start.
    sent_ms: f64,
    /// When the response head (status and headers) arrived, milliseconds from
    /// the clock start; absent for a request that got none.
    first_byte_ms: Option<f64>,
    /// When the first streamed token arrived, milliseconds from the clock start.
    first_token_ms: Option<f64>,
    /// When the request ended, milliseconds from the clock start.
    end_ms: f64,
    /// The actual send time as Unix epoch milliseconds (the run's start plus
    /// `sent_ms`), to find the request in a server's logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_unix_ms: Option<f64>,
    /// When the request ended, as Unix epoch milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    end_unix_ms: Option<f64>,
    /// Wait for a concurrency slot.
    queue_wait_ms: f64,
    /// Latency from the intended send time to the last byte.
    latency_from_intended_ms: f64,
    /// A warmup request: left out of every summary figure.
    warmup: bool,
    /// An arrival of a rate schedule (released at its arrival time).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    arrival: bool,
    /// The endpoint it went to, by index in the run's hosts (a fleet's runs
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<u32>,
    /// The model of the run's mix it went to (a run of several models).
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    /// The ids that join it with the server's logs and traces (`request_id`
    /// sent, `server_request_id` and `response_id` received, `trace_id` and
    /// `span_id` of the `traceparent` sent),
    /// each where known.
    #[serde(flatten)]
    ids: &'a RequestIds,
}

/// Writes one JSON line per request as it completes.
#[derive(Debug)]
pub struct RequestsJsonl {
    cfg: RequestsJsonlConfig,
    file: Option<std::io::BufWriter<std::fs::File>>,
    /// The run's start, Unix epoch milliseconds.
    epoch_ms: Option<f64>,
}

impl RequestsJsonl {
    /// A reporter with this config.
    pub fn new(cfg: RequestsJsonlConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self {
            cfg,
            file: None,
            epoch_ms: None,
        })
    }

    fn fail(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: "requests_jsonl".into(),
            message: format!("{}: {m}", self.cfg.path.display()),
        }
    }
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The run's start as Unix epoch milliseconds, as a reporter's `on_start`
/// sees it (absent when unknown).
pub fn epoch_ms(run: &RunInfo) -> Option<f64> {
    clock_epoch_ms(run.started_unix)
}

/// The clock's start ([`Reporter::on_clock_start`]) as Unix epoch
/// milliseconds (absent when unknown).
pub fn clock_epoch_ms(started_unix: f64) -> Option<f64> {
    (started_unix > 0.0).then_some(started_unix * 1000.0)
}

/// `epoch_ms + offset`, to the microsecond.
fn unix_ms(epoch_ms: Option<f64>, offset: std::time::Duration) -> Option<f64> {
    epoch_ms.map(|e| ((e + ms(offset)) * 1000.0).round() / 1000.0)
}

fn line<'a>(rec: &'a RequestRecord<'a>, epoch_ms: Option<f64>) -> Line<'a> {
    let usage = rec.usage.as_ref();
    Line {
        agent_id: rec.agent_id,
        trajectory_id: rec.trajectory_id,
        request_index: rec.request_index,
        ok: rec.failure.is_none(),
        failure_kind: rec.failure.map(|(k, _)| k.to_string()),
        failure: rec.failure.map(|(_, m)| m),
        retries: rec.retries,
        reconnects: rec.reconnects,
        latency_ms: ms(rec.latency),
        latency_all_attempts_ms: (rec.retries > 0)
            .then(|| ms(rec.latency + rec.timing.retry_time())),
        ttft_ms: rec.ttft.map(ms),
        server_timing: rec.server_timing,
        client_minus_server_ms: rec
            .server_timing
            .and_then(|t| t.server_ms())
            .map(|s| ms(rec.latency) - s),
        ttfrt_ms: rec.ttfrt.map(ms),
        ttfat_ms: rec.ttfat.map(ms),
        tpot_ms: rec.tpot.map(ms),
        itl_max_ms: rec.itl_max.map(ms),
        structured_schema: rec.structured.map(|s| s.schema),
        structured_invalid: rec.structured.and_then(|s| s.invalid).map(|i| i.as_str()),
        token_ms: rec.token_times.iter().copied().map(ms).collect(),
        slo_met: rec.slo_met,
        planned_prompt_tokens: rec.planned_prompt_tokens,
        prompt_tokens: usage.map(|u| u.prompt_tokens),
        completion_tokens: usage.map(|u| u.completion_tokens),
        reasoning_tokens: rec.reasoning_tokens,
        reasoning_counted: rec.reasoning_counted,
        items: usage.and_then(|u| u.items),
        images: rec.images,
        image_bytes: rec.image_bytes,
        audio_seconds: rec.audio_seconds,
        prompt_drift_tokens: match (usage, rec.planned_prompt_tokens) {
            (Some(u), Some(p)) => {
                Some(i64::try_from(u.prompt_tokens).unwrap_or(i64::MAX) - i64::from(p))
            }
            _ => None,
        },
        server_cached_tokens: usage.and_then(|u| u.cached_tokens),
        estimated_cached_tokens: rec.estimated_cached_tokens,
        global_estimated_cached_tokens: rec.cache_estimate.global,
        rank_estimated_cached_tokens: rec.cache_estimate.rank,
        model_estimated_cached_tokens: rec.cache_estimate.model,
        live_block_fallbacks: rec.live_block_fallbacks,
        intended_ms: ms(rec.timing.intended),
        sent_ms: ms(rec.timing.sent),
        first_byte_ms: rec.timing.first_byte.map(ms),
        first_token_ms: rec.ttft.map(|t| ms(rec.timing.last_attempt + t)),
        end_ms: ms(rec.timing.last_attempt + rec.latency),
        sent_unix_ms: unix_ms(epoch_ms, rec.timing.sent),
        end_unix_ms: unix_ms(epoch_ms, rec.timing.last_attempt + rec.latency),
        queue_wait_ms: ms(rec.timing.queue_wait),
        latency_from_intended_ms: ms(rec.latency + rec.timing.behind()),
        warmup: rec.timing.warmup,
        arrival: rec.timing.arrival,
        endpoint: rec.endpoint,
        model: rec.model,
        ids: &rec.ids,
    }
}

/// A line of `--requests-jsonl` (and of a results directory's
/// `requests.jsonl`) read back: [`RecordLine::into_wire`] gives the request's
/// record as the run reported it, so that a merge replays it exactly.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RecordLine {
    /// The endpoint of a fleet it went to.
    pub endpoint: Option<u32>,
    /// The model of a mix it went to.
    pub model: Option<String>,
    /// Agent id.
    pub agent_id: u64,
    /// Trajectory id.
    pub trajectory_id: String,
    /// Request index within the trajectory.
    pub request_index: u64,
    /// The failure kind (absent: a success).
    pub failure_kind: Option<String>,
    /// The failure message.
    pub failure: Option<String>,
    /// Attempts beyond the first.
    pub retries: u32,
    /// Requests sent again at once on a new connection.
    pub reconnects: u32,
    /// Last attempt's send to its last byte.
    pub latency_ms: f64,
    /// The server's own timings.
    pub server_timing: Option<ServerTiming>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Time to the first reasoning token.
    pub ttfrt_ms: Option<f64>,
    /// Time to the first answer token.
    pub ttfat_ms: Option<f64>,
    /// Time per output token.
    pub tpot_ms: Option<f64>,
    /// Longest per-token gap.
    pub itl_max_ms: Option<f64>,
    /// The schema a structured answer was checked against.
    pub structured_schema: Option<u16>,
    /// Why it was not valid.
    pub structured_invalid: Option<String>,
    /// Token arrival times from the send.
    pub token_ms: Vec<f64>,
    /// Met every per-request SLO bound.
    pub slo_met: Option<bool>,
    /// Planned prompt tokens.
    pub planned_prompt_tokens: Option<u32>,
    /// Server-counted prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Server-counted output tokens.
    pub completion_tokens: Option<u64>,
    /// Reasoning tokens of them (the usage's, else counted).
    pub reasoning_tokens: Option<u64>,
    /// Whether the client counted them.
    pub reasoning_counted: bool,
    /// Inputs answered (embeddings).
    pub items: Option<u64>,
    /// Images the request carried.
    pub images: u64,
    /// Their bytes.
    pub image_bytes: u64,
    /// Seconds of audio the request carried.
    #[serde(default)]
    pub audio_seconds: f64,
    /// Server-reported cached tokens.
    pub server_cached_tokens: Option<u64>,
    /// The per-trajectory cache estimate.
    pub estimated_cached_tokens: u64,
    /// The shared-cache estimate.
    pub global_estimated_cached_tokens: u64,
    /// The per-rank estimate.
    pub rank_estimated_cached_tokens: Option<u64>,
    /// The per-model estimate (a mix).
    #[serde(default)]
    pub model_estimated_cached_tokens: Option<u64>,
    /// Live blocks made from their seed.
    pub live_block_fallbacks: u32,
    /// Intended send, ms from the clock start.
    pub intended_ms: f64,
    /// First attempt's send.
    pub sent_ms: f64,
    /// Response head.
    pub first_byte_ms: Option<f64>,
    /// Last byte.
    pub end_ms: f64,
    /// Wait for a concurrency slot.
    pub queue_wait_ms: f64,
    /// Warmup.
    pub warmup: bool,
    /// An arrival of the schedule.
    pub arrival: bool,
    /// This client's id of the request.
    pub request_id: Option<String>,
    /// The server's id of the request.
    pub server_request_id: Option<String>,
    /// The response's own id.
    pub response_id: Option<String>,
    /// The trace id of its `traceparent`.
    pub trace_id: Option<String>,
    /// The parent id of its `traceparent`: its span's id.
    pub span_id: Option<String>,
}

impl RecordLine {
    /// Moves every time by `ms` (onto another clock).
    pub fn shift(&mut self, ms: f64) {
        self.intended_ms += ms;
        self.sent_ms += ms;
        self.end_ms += ms;
        if let Some(t) = self.first_byte_ms.as_mut() {
            *t += ms;
        }
    }

    /// The request as the engine's wire record (whose
    /// [`record`](batchbench_contract::wire::WireRequestRecord::record) gives it
    /// back as the run reported it).
    pub fn into_wire(self) -> batchbench_contract::wire::WireRequestRecord {
        use batchbench_contract::plugin::Usage;
        let usage = self.prompt_tokens.map(|p| Usage {
            prompt_tokens: p,
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: self.server_cached_tokens,
            reasoning_tokens: if self.reasoning_counted {
                None
            } else {
                self.reasoning_tokens
            },
            items: self.items,
        });
        let last_attempt = self.end_ms - self.latency_ms;
        batchbench_contract::wire::WireRequestRecord {
            agent_id: self.agent_id,
            trajectory_id: self.trajectory_id,
            request_index: self.request_index,
            planned_prompt_tokens: self.planned_prompt_tokens,
            retries: self.retries,
            reconnects: self.reconnects,
            latency_ms: self.latency_ms,
            server_timing: self.server_timing,
            usage,
            estimated_cached_tokens: self.estimated_cached_tokens,
            global_estimated_cached_tokens: self.global_estimated_cached_tokens,
            rank_estimated_cached_tokens: self.rank_estimated_cached_tokens,
            model_estimated_cached_tokens: self.model_estimated_cached_tokens,
            live_block_fallbacks: self.live_block_fallbacks,
            ttft_ms: self.ttft_ms,
            ttfrt_ms: self.ttfrt_ms,
            ttfat_ms: self.ttfat_ms,
            reasoning_tokens: self.reasoning_tokens,
            reasoning_counted: self.reasoning_counted,
            images: self.images,
            image_bytes: self.image_bytes,
            audio_seconds: self.audio_seconds,
            tpot_ms: self.tpot_ms,
            itl_max_ms: self.itl_max_ms,
            structured_schema: self.structured_schema,
            structured_invalid: self.structured_invalid,
            token_ms: self.token_ms,
            slo_met: self.slo_met,
            failure_kind: self.failure_kind,
            failure_message: self.failure,
            intended_ms: self.intended_ms,
            sent_ms: self.sent_ms,
            last_attempt_ms: (last_attempt != self.sent_ms).then_some(last_attempt),
            first_byte_ms: self.first_byte_ms,
            queue_wait_ms: self.queue_wait_ms,
            warmup: self.warmup,
            arrival: self.arrival,
            endpoint: self.endpoint,
            model: self.model,
            request_id: self.request_id,
            server_request_id: self.server_request_id,
            response_id: self.response_id,
            trace_id: self.trace_id,
            span_id: self.span_id,
        }
    }
}

/// One request as a JSON object: the fields of a `requests_jsonl` line (the Python
/// package returns these as its per-request records); `epoch_ms` is the
/// run's start (see [`epoch_ms`]), for the wall-clock times.
pub fn record_json(rec: &RequestRecord<'_>, epoch_ms: Option<f64>) -> serde_json::Value {
    serde_json::to_value(line(rec, epoch_ms)).unwrap_or_default()
}

impl Reporter for RequestsJsonl {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        self.epoch_ms = epoch_ms(run);
        let f = std::fs::File::create(&self.cfg.path).map_err(|e| self.fail(e))?;
        self.file = Some(std::io::BufWriter::with_capacity(1 << 16, f));
        Ok(())
    }

    fn on_clock_start(&mut self, started_unix: f64) {
        self.epoch_ms = clock_epoch_ms(started_unix);
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        let line = line(rec, self.epoch_ms);
        // Serialised whole, then written: the buffer only ever holds whole lines
        // when on_finish flushes it (also after Ctrl+C).
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        f.write_all(&bytes).map_err(|e| self.fail(e))
    }

    fn on_finish(&mut self, _run: &RunInfo, _summary: &Summary) -> Result<(), PluginError> {
        match self.file.as_mut().map(std::io::Write::flush) {
            Some(Err(e)) => Err(self.fail(e)),
            _ => Ok(()),
        }
    }
}

batchbench_contract::register_reporter! {
    name: "requests_jsonl",
    description: "one JSON line per request: outcome, latency, TTFT, planned vs server-counted prompt tokens, cached tokens",
    example: r#"{"path": "requests.jsonl"}"#,
    config: RequestsJsonlConfig,
    build: RequestsJsonl::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::plugin::{FailureKind, SendTiming, Usage};
    use std::time::Duration;

    /// A line read back gives the line it was written from: a merge replays
    /// what the run reported, field for field.
    #[test]
    fn a_line_read_back_writes_the_same_line() {
        let rec = RequestRecord {
            agent_id: 7,
            trajectory_id: "user-7",
            request_index: 3,
            planned_prompt_tokens: Some(128),
            retries: 1,
            reconnects: 1,
            latency: Duration::from_micros(20_250),
            server_timing: Some(ServerTiming {
                prompt_ms: Some(2.5),
                predicted_ms: Some(15.0),
                total_ms: None,
                cached_tokens: Some(64),
            }),
            usage: Some(Usage {
                prompt_tokens: 136,
                completion_tokens: 16,
                cached_tokens: Some(64),
                reasoning_tokens: None,
                items: None,
            }),
            estimated_cached_tokens: 64,
            cache_estimate: batchbench_contract::prefix::Estimate {
                global: 96,
                rank: Some(48),
                model: None,
            },
            live_block_fallbacks: 2,
            ttft: Some(Duration::from_millis(4)),
            ttfrt: None,
            ttfat: None,
            reasoning_tokens: None,
            reasoning_counted: false,
            images: 0,
            image_bytes: 0,
            audio_seconds: 0.0,
            tpot: Some(Duration::from_micros(1_100)),
            itl_max: Some(Duration::from_millis(2)),
            structured: None,
            token_times: Vec::new(),
            slo_met: Some(true),
            failure: None,
            timing: SendTiming {
                intended: Duration::from_millis(50),
                sent: Duration::from_micros(50_125),
                last_attempt: Duration::from_micros(300_500),
                first_byte: Some(Duration::from_micros(302_000)),
                queue_wait: Duration::from_micros(100),
                warmup: false,
                arrival: true,
            },
            endpoint: None,
            model: None,
            ids: RequestIds {
                request_id: Some("0b6c2a1e-58d0-4c3f-9a77-2f1d3c4b5a69".into()),
                server_request_id: Some("0b6c2a1e-58d0-4c3f-9a77-2f1d3c4b5a69".into()),
                response_id: Some("chatcmpl-7".into()),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
                span_id: Some("00f067aa0ba902b7".into()),
            },
        };
        let epoch = Some(1_796_000_000_000.0);
        let written = record_json(&rec, epoch);
        let back: RecordLine = serde_json::from_value(written.clone()).unwrap_or_default();
        let wire = back.into_wire();
        assert_eq!(record_json(&wire.record(), epoch), written);
        // The wall-clock times are the run's start plus the offsets.
        assert_eq!(written["sent_unix_ms"], 1_796_000_000_050.125);
        assert_eq!(written["end_unix_ms"], 1_796_000_000_320.75);
        assert!(record_json(&rec, None).get("sent_unix_ms").is_none());
        let mut failed = rec.clone();
        failed.usage = None;
        failed.failure = Some((FailureKind::Timeout, "timed out"));
        let written = record_json(&failed, epoch);
        let back: RecordLine = serde_json::from_value(written.clone()).unwrap_or_default();
        assert_eq!(record_json(&back.into_wire().record(), epoch), written);
    }
}
