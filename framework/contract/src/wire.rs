//! The JSON documents that cross an external plugin's boundary.
//!
//! A WebAssembly component and a native library both exchange these documents (the
//! WIT contract passes them as strings, the C ABI as bytes), so a plugin written for
//! one host ports to the other unchanged. Field names are part of the plugin
//! contract: adding an optional field is compatible, anything else is a new
//! contract version.

use crate::conversation::{Conversation, Message, Role, ToolCall};
use crate::plan::{PlannedRequest, Trajectory};
use crate::plugin::{
    EncodeRequest, FailureKind, PluginError, Reply, RequestRecord, RouteContext, RouteExtras,
    SendTiming, Usage,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A trajectory as a workload plugin yields it: the trajectory's requests in
/// order, each a [`PlannedRequest`] (the same fields as a version-2 manifest's
/// request, with `blocks` of `{seed, tokens, role}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireTrajectory {
    /// Identifier used in reports and error messages.
    pub id: String,
    /// Start offset from benchmark start in milliseconds (open-loop admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after_ms: Option<u64>,
    /// The planned requests, in order.
    pub requests: Vec<PlannedRequest>,
}

impl WireTrajectory {
    /// Parses and checks a trajectory document from plugin `plugin`. Errors name the
    /// plugin, the trajectory, the request and the field.
    pub fn parse(plugin: &str, json: &[u8]) -> Result<Self, PluginError> {
        let t: Self = serde_json::from_slice(json).map_err(|e| PluginError::Failed {
            plugin: plugin.to_owned(),
            message: format!("next_trajectory returned an invalid trajectory: {e}"),
        })?;
        t.check(plugin)?;
        Ok(t)
    }

    /// Checks what the engine relies on. A bad trajectory is the plugin's failure
    /// (exit 1), not the user's input: it may come after requests were sent.
    pub fn check(&self, plugin: &str) -> Result<(), PluginError> {
        let bad = |message: String| {
            Err(PluginError::Failed {
                plugin: plugin.to_owned(),
                message,
            })
        };
        if self.id.is_empty() {
            return bad("a trajectory has an empty id".into());
        }
        if self.requests.is_empty() {
            return bad(format!("trajectory {}: requests is empty", self.id));
        }
        for (i, r) in self.requests.iter().enumerate() {
            for (j, b) in r.blocks.iter().flat_map(|b| b.iter()).enumerate() {
                if b.tokens == 0 {
                    return bad(format!(
                        "trajectory {}, request {i}, block {j}: tokens must be at least 1",
                        self.id
                    ));
                }
                if b.seed.is_empty() {
                    return bad(format!(
                        "trajectory {}, request {i}, block {j}: seed is empty",
                        self.id
                    ));
                }
            }
        }
        Ok(())
    }

    /// The engine's trajectory.
    pub fn into_trajectory(self) -> Trajectory {
        let mut t = Trajectory::from_vec(self.id, self.requests);
        t.start_after_ms = self.start_after_ms;
        t
    }
}

/// A router's view of one request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WireRouteContext {
    /// The run seed.
    pub seed: u64,
    /// Agent index in admission order.
    pub agent_id: u64,
    /// Reusable scheduler slot.
    pub routing_slot: u64,
    /// The trajectory.
    pub trajectory_id: String,
    /// Index of the request within the trajectory.
    pub request_index: u64,
}

impl WireRouteContext {
    /// From the engine's context.
    pub fn from_context(c: &RouteContext<'_>) -> Self {
        Self {
            seed: c.seed,
            agent_id: c.agent_id,
            routing_slot: c.routing_slot,
            trajectory_id: c.trajectory_id.to_owned(),
            request_index: c.request_index,
        }
    }

    /// The engine's context, borrowing the trajectory id.
    pub fn context(&self) -> RouteContext<'_> {
        RouteContext {
            seed: self.seed,
            agent_id: self.agent_id,
            routing_slot: self.routing_slot,
            trajectory_id: &self.trajectory_id,
            request_index: self.request_index,
        }
    }
}

/// What a router that picks endpoints sees (see
/// [`EndpointContext`](crate::plugin::EndpointContext)).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireEndpointContext {
    /// Who the request belongs to.
    pub route: WireRouteContext,
    /// This client's requests in flight per endpoint.
    pub in_flight: Vec<u32>,
    /// The prompt's chained block hashes.
    pub block_hashes: Vec<u64>,
    /// Tokens per block.
    pub block_tokens: u32,
}

impl WireEndpointContext {
    /// From the engine's context.
    pub fn from_context(c: &crate::plugin::EndpointContext<'_>) -> Self {
        Self {
            route: WireRouteContext::from_context(&c.route),
            in_flight: c.in_flight.to_vec(),
            block_hashes: c.block_hashes.to_vec(),
            block_tokens: c.block_tokens,
        }
    }

    /// The engine's context, borrowing from this one.
    pub fn context(&self) -> crate::plugin::EndpointContext<'_> {
        crate::plugin::EndpointContext {
            route: self.route.context(),
            in_flight: &self.in_flight,
            block_hashes: &self.block_hashes,
            block_tokens: self.block_tokens,
        }
    }
}

/// What a router adds: headers, and top-level body fields (any JSON value).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WireRouteExtras {
    /// HTTP headers.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Top-level JSON body fields.
    #[serde(default)]
    pub body_fields: Vec<(String, serde_json::Value)>,
}

impl WireRouteExtras {
    /// Checks header names and values and appends everything to `out`.
    pub fn append_to(self, plugin: &str, out: &mut RouteExtras) -> Result<(), PluginError> {
        for (k, v) in &self.headers {
            check_header(plugin, k, v)?;
        }
        out.headers.extend(self.headers);
        out.body_fields.extend(self.body_fields);
        Ok(())
    }
}

/// Rejects a header that HTTP cannot carry, naming it.
pub fn check_header(plugin: &str, name: &str, value: &str) -> Result<(), PluginError> {
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    let value_ok = value
        .bytes()
        .all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f));
    if name_ok && value_ok {
        Ok(())
    } else {
        Err(PluginError::Failed {
            plugin: plugin.to_owned(),
            message: format!("decorate returned an invalid HTTP header {name:?}: {value:?}"),
        })
    }
}

/// A request outcome as a reporter plugin receives it (times in milliseconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WireRequestRecord {
    /// Agent index.
    pub agent_id: u64,
    /// Trajectory id.
    pub trajectory_id: String,
    /// Request index within the trajectory.
    pub request_index: u64,
    /// Planned absolute prompt tokens.
    pub planned_prompt_tokens: Option<u32>,
    /// Attempts made beyond the first.
    pub retries: u32,
    /// Times a kept connection turned out closed and the request went out at
    /// once on a new one.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub reconnects: u32,
    /// Latency of the final attempt, from send to the last byte.
    pub latency_ms: f64,
    /// The server's own timings of the request, where it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<crate::plugin::ServerTiming>,
    /// Usage on success.
    pub usage: Option<Usage>,
    /// The perfect-prefix-cache estimate for this request.
    pub estimated_cached_tokens: u64,
    /// What a perfect prefix cache shared by every request would have cached.
    #[serde(default)]
    pub global_estimated_cached_tokens: u64,
    /// The same on the request's data-parallel rank (a run routed to ranks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_estimated_cached_tokens: Option<u64>,
    /// In a run of several models: the same on the request's model's own
    /// cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_estimated_cached_tokens: Option<u64>,
    /// Live blocks generated from their seed for want of a reply.
    pub live_block_fallbacks: u32,
    /// Time to first token (streaming).
    pub ttft_ms: Option<f64>,
    /// Time to the first reasoning token, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfrt_ms: Option<f64>,
    /// Time to the first answer token, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfat_ms: Option<f64>,
    /// Reasoning tokens of the reply (from the usage, else counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Whether the client counted `reasoning_tokens` (no usage count).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reasoning_counted: bool,
    /// Images the request carried.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub images: u64,
    /// Their encoded bytes.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub image_bytes: u64,
    /// Seconds of audio the request carried.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub audio_seconds: f64,
    /// Time per output token after the first (streamed, two tokens or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// The longest per-token gap between streamed chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_max_ms: Option<f64>,
    /// A structured answer's schema index (present when it was checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_schema: Option<u16>,
    /// Why that answer was not valid (`empty`, `truncated`, `not_json`,
    /// `not_object`, `schema`; absent: valid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_invalid: Option<String>,
    /// When each chunk that carried tokens arrived, from the last attempt's
    /// send (present when the run records token times).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_ms: Vec<f64>,
    /// Met every per-request SLO bound (a measured success of a run with
    /// per-request bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_met: Option<bool>,
    /// The failure kind (`http_429`, `timeout`, `connect`, `decode`, `cancelled`).
    pub failure_kind: Option<String>,
    /// The failure message.
    pub failure_message: Option<String>,
    /// Intended send time, milliseconds from the clock start.
    #[serde(default)]
    pub intended_ms: f64,
    /// Actual send time of the first attempt, milliseconds from the clock start.
    #[serde(default)]
    pub sent_ms: f64,
    /// Send time of the last attempt (absent: `sent_ms`, no retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt_ms: Option<f64>,
    /// When the response head arrived, milliseconds from the clock start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_ms: Option<f64>,
    /// Wait for a concurrency slot.
    #[serde(default)]
    pub queue_wait_ms: f64,
    /// A warmup request (excluded from the statistics).
    #[serde(default)]
    pub warmup: bool,
    /// An arrival of the schedule (released at its arrival time).
    #[serde(default)]
    pub arrival: bool,
    /// The endpoint of a fleet it went to, by index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<u32>,
    /// The model of the run's mix it went to (a run of several models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// This client's id of the request, sent in its request-id header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The server's id of the request, from its response's request-id header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_request_id: Option<String>,
    /// The response's own id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The W3C trace id of its `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The parent id of its `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn from_ms(v: f64) -> Duration {
    Duration::try_from_secs_f64(v / 1000.0).unwrap_or_default()
}

impl WireRequestRecord {
    /// From the engine's record.
    pub fn from_record(r: &RequestRecord<'_>) -> Self {
        Self {
            agent_id: r.agent_id,
            trajectory_id: r.trajectory_id.to_owned(),
            request_index: r.request_index,
            planned_prompt_tokens: r.planned_prompt_tokens,
            retries: r.retries,
            reconnects: r.reconnects,
            latency_ms: ms(r.latency),
            server_timing: r.server_timing,
            usage: r.usage,
            estimated_cached_tokens: r.estimated_cached_tokens,
            global_estimated_cached_tokens: r.cache_estimate.global,
            rank_estimated_cached_tokens: r.cache_estimate.rank,
            model_estimated_cached_tokens: r.cache_estimate.model,
            live_block_fallbacks: r.live_block_fallbacks,
            ttft_ms: r.ttft.map(ms),
            ttfrt_ms: r.ttfrt.map(ms),
            ttfat_ms: r.ttfat.map(ms),
            reasoning_tokens: r.reasoning_tokens,
            reasoning_counted: r.reasoning_counted,
            images: r.images,
            image_bytes: r.image_bytes,
            audio_seconds: r.audio_seconds,
            tpot_ms: r.tpot.map(ms),
            itl_max_ms: r.itl_max.map(ms),
            structured_schema: r.structured.map(|s| s.schema),
            structured_invalid: r
                .structured
                .and_then(|s| s.invalid)
                .map(|i| i.as_str().to_owned()),
            token_ms: r.token_times.iter().copied().map(ms).collect(),
            slo_met: r.slo_met,
            failure_kind: r.failure.map(|(k, _)| k.to_string()),
            failure_message: r.failure.map(|(_, m)| m.to_owned()),
            intended_ms: ms(r.timing.intended),
            sent_ms: ms(r.timing.sent),
            last_attempt_ms: (r.timing.last_attempt != r.timing.sent)
                .then(|| ms(r.timing.last_attempt)),
            first_byte_ms: r.timing.first_byte.map(ms),
            queue_wait_ms: ms(r.timing.queue_wait),
            warmup: r.timing.warmup,
            arrival: r.timing.arrival,
            endpoint: r.endpoint,
            model: r.model.map(str::to_owned),
            request_id: r.ids.request_id.clone(),
            server_request_id: r.ids.server_request_id.clone(),
            response_id: r.ids.response_id.clone(),
            trace_id: r.ids.trace_id.clone(),
            span_id: r.ids.span_id.clone(),
        }
    }

    /// The engine's record, borrowing strings from `self`.
    pub fn record(&self) -> RequestRecord<'_> {
        RequestRecord {
            agent_id: self.agent_id,
            trajectory_id: &self.trajectory_id,
            request_index: self.request_index,
            planned_prompt_tokens: self.planned_prompt_tokens,
            retries: self.retries,
            reconnects: self.reconnects,
            latency: from_ms(self.latency_ms),
            server_timing: self.server_timing,
            usage: self.usage,
            estimated_cached_tokens: self.estimated_cached_tokens,
            cache_estimate: crate::prefix::Estimate {
                global: self.global_estimated_cached_tokens,
                rank: self.rank_estimated_cached_tokens,
                model: self.model_estimated_cached_tokens,
            },
            live_block_fallbacks: self.live_block_fallbacks,
            ttft: self.ttft_ms.map(from_ms),
            ttfrt: self.ttfrt_ms.map(from_ms),
            ttfat: self.ttfat_ms.map(from_ms),
            reasoning_tokens: self.reasoning_tokens,
            reasoning_counted: self.reasoning_counted,
            images: self.images,
            image_bytes: self.image_bytes,
            audio_seconds: self.audio_seconds,
            tpot: self.tpot_ms.map(from_ms),
            itl_max: self.itl_max_ms.map(from_ms),
            structured: self
                .structured_schema
                .map(|schema| crate::plugin::StructuredCheck {
                    schema,
                    invalid: self
                        .structured_invalid
                        .as_deref()
                        .and_then(crate::plugin::InvalidOutput::named),
                }),
            token_times: self.token_ms.iter().copied().map(from_ms).collect(),
            slo_met: self.slo_met,
            failure: self.failure_kind.as_deref().map(|k| {
                (
                    FailureKind::parse(k).unwrap_or(FailureKind::Decode),
                    self.failure_message.as_deref().unwrap_or(""),
                )
            }),
            timing: SendTiming {
                intended: from_ms(self.intended_ms),
                sent: from_ms(self.sent_ms),
                last_attempt: from_ms(self.last_attempt_ms.unwrap_or(self.sent_ms)),
                first_byte: self.first_byte_ms.map(from_ms),
                queue_wait: from_ms(self.queue_wait_ms),
                warmup: self.warmup,
                arrival: self.arrival,
            },
            endpoint: self.endpoint,
            model: self.model.as_deref(),
            ids: crate::plugin::RequestIds {
                request_id: self.request_id.clone(),
                server_request_id: self.server_request_id.clone(),
                response_id: self.response_id.clone(),
                trace_id: self.trace_id.clone(),
                span_id: self.span_id.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Block, BlockRole};

    #[test]
    fn request_records_round_trip() {
        let rec = RequestRecord {
            agent_id: 3,
            trajectory_id: "t-1",
            request_index: 2,
            planned_prompt_tokens: Some(100),
            retries: 1,
            reconnects: 1,
            latency: Duration::from_micros(12_345),
            server_timing: Some(crate::plugin::ServerTiming {
                prompt_ms: Some(3.5),
                predicted_ms: Some(7.25),
                total_ms: None,
                cached_tokens: Some(64),
            }),
            usage: Some(Usage {
                prompt_tokens: 100,
                completion_tokens: 8,
                cached_tokens: Some(64),
                reasoning_tokens: None,
                items: None,
            }),
            estimated_cached_tokens: 64,
            cache_estimate: crate::prefix::Estimate {
                global: 64,
                rank: Some(32),
                model: None,
            },
            live_block_fallbacks: 0,
            ttft: Some(Duration::from_millis(5)),
            ttfrt: None,
            ttfat: Some(Duration::from_millis(5)),
            reasoning_tokens: None,
            reasoning_counted: false,
            images: 0,
            image_bytes: 0,
            audio_seconds: 0.0,
            tpot: Some(Duration::from_micros(1_250)),
            itl_max: Some(Duration::from_millis(3)),
            structured: Some(crate::plugin::StructuredCheck {
                schema: 1,
                invalid: Some(crate::plugin::InvalidOutput::Schema),
            }),
            token_times: Vec::new(),
            slo_met: Some(false),
            failure: Some((FailureKind::Http(429), "slow down")),
            timing: SendTiming {
                intended: Duration::from_millis(100),
                sent: Duration::from_micros(100_250),
                last_attempt: Duration::from_micros(350_500),
                first_byte: Some(Duration::from_micros(352_000)),
                queue_wait: Duration::from_micros(200),
                warmup: true,
                arrival: true,
            },
            endpoint: None,
            model: None,
            ids: crate::plugin::RequestIds {
                request_id: Some("a-1".into()),
                server_request_id: Some("s-1".into()),
                response_id: Some("chatcmpl-1".into()),
                trace_id: None,
                span_id: None,
            },
        };
        let wire = WireRequestRecord::from_record(&rec);
        let json = serde_json::to_string(&wire).unwrap_or_default();
        let back: WireRequestRecord = serde_json::from_str(&json).unwrap_or_default();
        let r = back.record();
        assert_eq!(r.trajectory_id, "t-1");
        assert_eq!(r.latency, Duration::from_micros(12_345));
        assert_eq!(r.failure, Some((FailureKind::Http(429), "slow down")));
        assert_eq!(r.timing, rec.timing);
        assert_eq!(r.timing.send_lag(), Duration::from_micros(50));
        assert_eq!(r.timing.behind(), Duration::from_micros(250_500));
        assert_eq!(r.usage, rec.usage);
        assert_eq!(r.ttft, Some(Duration::from_millis(5)));
    }

    #[test]
    fn trajectories_are_checked_with_context() {
        let block = |tokens| Block {
            seed: "s".into(),
            tokens,
            role: BlockRole::User,
            live: false,
            text: None,
        };
        let t = WireTrajectory {
            id: "mc-1".into(),
            start_after_ms: Some(5),
            requests: vec![PlannedRequest {
                blocks: Some(vec![block(512), block(0)].into()),
                ..Default::default()
            }],
        };
        let json = serde_json::to_vec(&t).unwrap_or_default();
        let err = WireTrajectory::parse("mooncake", &json)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            err,
            "mooncake: trajectory mc-1, request 0, block 1: tokens must be at least 1"
        );
        let err = WireTrajectory::parse("p", br#"{"id": "x", "requests": [], "extra": 1}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut out = RouteExtras::default();
        let extras = WireRouteExtras {
            headers: vec![("X-Ok".into(), "a\r\nInjected: 1".into())],
            body_fields: vec![],
        };
        assert!(extras.append_to("p", &mut out).is_err());
        assert!(out.headers.is_empty());
    }
}

/// A chat message as a native codec sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
    /// Reasoning output kept as state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The server's signature of that reasoning, sent back with it (absent
    /// for every server that signs nothing, so a codec built before it reads
    /// those conversations as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_signature: Option<String>,
    /// Reasoning the server sent encrypted (absent where it sent none, so a
    /// codec built before it reads those conversations as before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted_reasoning: Vec<String>,
    /// Tool calls of an assistant message: `(id, name, arguments)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<(String, String, String)>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

fn role(name: &str) -> Option<Role> {
    Some(match name {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => return None,
    })
}

/// What a native codec needs to write one request body: an
/// [`EncodeRequest`] with its conversation spelt out.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireEncodeRequest {
    /// The `model` field.
    pub model: String,
    /// Entries of the request's `tools` array, each a serialised JSON object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The conversation, whole.
    pub messages: Vec<WireMessage>,
    /// `(min, max)` output tokens, if constrained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<(u32, u32)>,
    /// Whether to stream.
    pub stream: bool,
    /// Body fields added by routers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_fields: Vec<(String, serde_json::Value)>,
    /// A verbatim body to send instead of one built from the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<serde_json::Map<String, serde_json::Value>>,
}

impl WireEncodeRequest {
    /// The document of `r` (every message's text is copied: a native codec pays
    /// for the whole conversation on every request).
    pub fn from_request(r: &EncodeRequest<'_>) -> Self {
        let msg = |m: &Message| WireMessage {
            role: m.role.as_str().to_owned(),
            content: m.content.to_string(),
            reasoning: m.reasoning.as_ref().map(|r| r.to_string()),
            reasoning_signature: m.reasoning_signature.as_ref().map(|r| r.to_string()),
            redacted_reasoning: m.redacted_reasoning.iter().map(|r| r.to_string()).collect(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| {
                    (
                        c.id.to_string(),
                        c.name.to_string(),
                        c.arguments.to_string(),
                    )
                })
                .collect(),
            tool_call_id: m.tool_call_id.as_ref().map(|c| c.to_string()),
        };
        Self {
            model: r.model.to_owned(),
            tools: r.conversation.tools.iter().map(|t| t.to_string()).collect(),
            messages: r.conversation.messages.iter().map(msg).collect(),
            output: r.output,
            stream: r.stream,
            extra_fields: r.extra_fields.to_vec(),
            raw_body: r.raw_body.cloned(),
        }
    }

    /// The conversation this document describes.
    pub fn conversation(&self) -> Result<Conversation, String> {
        let mut c = Conversation {
            tools: self.tools.iter().map(|t| Arc::from(t.as_str())).collect(),
            ..Conversation::default()
        };
        for (i, m) in self.messages.iter().enumerate() {
            let r = role(&m.role)
                .ok_or_else(|| format!("messages[{i}].role: unknown role {:?}", m.role))?;
            let mut msg = Message::new(r, m.content.as_str());
            msg.reasoning = m.reasoning.as_deref().map(Arc::from);
            msg.reasoning_signature = m.reasoning_signature.as_deref().map(Arc::from);
            msg.redacted_reasoning = m
                .redacted_reasoning
                .iter()
                .map(|r| Arc::from(r.as_str()))
                .collect();
            msg.tool_calls = m
                .tool_calls
                .iter()
                .map(|(id, name, args)| ToolCall {
                    id: id.as_str().into(),
                    name: name.as_str().into(),
                    arguments: args.as_str().into(),
                })
                .collect();
            msg.tool_call_id = m.tool_call_id.as_deref().map(Arc::from);
            c.messages.push(msg);
        }
        Ok(c)
    }
}

/// A decoded response as a native codec returns it. Streaming timings name the
/// host's feeds by index (the host knows when each feed arrived).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireReply {
    /// Assistant content.
    pub content: String,
    /// Reasoning output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The server's signature of the reasoning, where its API signs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_signature: Option<String>,
    /// Reasoning the server sent encrypted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redacted_reasoning: Vec<String>,
    /// Usage, when the server reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `finish_reason` of the first choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Streaming: the feed that carried the first content or reasoning token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_feed: Option<usize>,
    /// Streaming: `(feed, content bytes)` of each content-bearing chunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<(usize, u32)>,
    /// Streaming: the feed that carried the first reasoning token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_reasoning_feed: Option<usize>,
    /// Streaming: the feed that carried the first answer (content) token.
    /// A codec built before it leaves it out: the host takes the first token
    /// when no reasoning came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer_feed: Option<usize>,
    /// The server's id of the response, where it keeps conversation state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The response's own id as its body gave it, for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The server's own timings of the request, where it reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<crate::plugin::ServerTiming>,
}

impl WireReply {
    /// The document of `r`, whose instants are those of `feeds` (the arrival of
    /// each feed, in order).
    pub fn from_reply(r: Reply, feeds: &[std::time::Instant]) -> Self {
        let index = |t: std::time::Instant| {
            feeds
                .partition_point(|f| *f < t)
                .min(feeds.len().saturating_sub(1))
        };
        Self {
            first_token_feed: r.first_token_at.map(index),
            first_reasoning_feed: r.first_reasoning_at.map(index),
            first_answer_feed: r.first_answer_at.map(index),
            chunks: r.chunks.iter().map(|(t, n)| (index(*t), *n)).collect(),
            response_id: r.response_id,
            id: r.id,
            server_timing: r.server_timing,
            content: r.content,
            reasoning: r.reasoning,
            reasoning_signature: r.reasoning_signature,
            redacted_reasoning: r.redacted_reasoning,
            usage: r.usage,
            finish_reason: r.finish_reason,
        }
    }

    /// The reply, with feed indices turned back into the instants of `feeds`.
    pub fn into_reply(self, feeds: &[std::time::Instant]) -> Reply {
        let at = |i: usize| feeds.get(i).copied();
        Reply {
            first_token_at: self.first_token_feed.and_then(at),
            first_reasoning_at: self.first_reasoning_feed.and_then(at),
            first_answer_at: self.first_answer_feed.and_then(at),
            response_id: self.response_id,
            id: self.id,
            server_request_id: None,
            server_timing: self.server_timing,
            chunks: self
                .chunks
                .iter()
                .filter_map(|(i, n)| at(*i).map(|t| (t, *n)))
                .collect(),
            content: self.content,
            reasoning: self.reasoning,
            reasoning_signature: self.reasoning_signature,
            redacted_reasoning: self.redacted_reasoning,
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
