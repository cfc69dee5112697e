//! `openai_responses`: the OpenAI Responses API (`/v1/responses`), as OpenAI,
//! vLLM and gateways serve it.
//!
//! The conversation goes out as `input` items: messages as `{"role", "content"}`,
//! an assistant's tool calls as `function_call` items and tool results as
//! `function_call_output` items; tool definitions in the Responses shape
//! (`{"type": "function", "name", ...}`).
//!
//! Stateless (the default), every request carries the whole conversation and
//! asks the server not to store it (`"store": false`). Stateful
//! (`{"stateful": true}`), a request that continues a stored response sends
//! `previous_response_id` and only what follows the reply: the tool calls on
//! it and the items after it. The server's own conversation state is then
//! what is measured, the prompt it counts is the same.
//!
//! Streams are read event by event: `response.created` (the id),
//! `response.output_text.delta`, `response.reasoning_text.delta`,
//! `response.completed` (usage) and `response.incomplete`; `response.failed`
//! and `error` are failures. A reasoning item's summary
//! (`response.reasoning_summary_text.delta`, a `summary` part) is a summary of
//! the thinking, not the model's reasoning tokens: it is neither reasoning nor
//! answer, and its arrival is no token.

use super::wire::{
    SseEvents, SseStream, closed, error_message, fields, json_str, json_value, raw_with_fields,
    tool_function, w,
};
use batchbench_contract::conversation::{Conversation, Message, Role};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder, Usage,
};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Instant;

/// Config of [`OpenAiResponses`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiResponsesConfig {
    /// Continue stored responses with `previous_response_id`, sending only
    /// the new items (the server keeps the conversation).
    pub stateful: bool,
    /// Send `min_tokens` with the output floor (vLLM and the simulator honour
    /// it; turn off for a server that refuses unknown fields).
    pub min_tokens: bool,
    /// Send `"ignore_eos": true`.
    pub ignore_eos: bool,
}

impl Default for OpenAiResponsesConfig {
    fn default() -> Self {
        Self {
            stateful: false,
            min_tokens: true,
            ignore_eos: false,
        }
    }
}

/// The OpenAI Responses codec.
#[derive(Debug, Clone, Default)]
pub struct OpenAiResponses {
    cfg: OpenAiResponsesConfig,
}

impl OpenAiResponses {
    /// A codec with this config.
    pub fn new(cfg: OpenAiResponsesConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg })
    }

    fn run_fields<'a>(&self, req: &'a EncodeRequest<'_>) -> Vec<(&'a str, Value)> {
        let mut set: Vec<(&str, Value)> = Vec::new();
        if let Some((min, max)) = req.output {
            set.push(("max_output_tokens", Value::from(max)));
            if min > 0 && self.cfg.min_tokens {
                set.push(("min_tokens", Value::from(min)));
            }
        }
        if self.cfg.ignore_eos {
            set.push(("ignore_eos", Value::Bool(true)));
        }
        if req.stream {
            set.push(("stream", Value::Bool(true)));
        }
        set.push(("store", Value::Bool(self.cfg.stateful)));
        for (k, v) in req.extra_fields {
            set.push((k.as_str(), v.clone()));
        }
        set
    }
}

/// Writes the items of one message: `skip_content` leaves out an assistant
/// message's text (the server holds it) and keeps its tool calls.
fn write_items(
    out: &mut Vec<u8>,
    m: &Message,
    skip_content: bool,
    first: &mut bool,
) -> Result<(), CodecError> {
    let mut sep = |out: &mut Vec<u8>| {
        if !std::mem::take(first) {
            out.push(b',');
        }
    };
    match m.role {
        Role::Tool => {
            sep(out);
            w(out, "{\"type\":\"function_call_output\",\"call_id\":");
            json_str(out, m.tool_call_id.as_deref().unwrap_or(""))?;
            w(out, ",\"output\":");
            json_str(out, &m.content)?;
            w(out, "}");
        }
        role => {
            if !skip_content && (!m.content.is_empty() || m.tool_calls.is_empty()) {
                sep(out);
                w(out, "{\"role\":\"");
                w(out, role.as_str());
                w(out, "\",\"content\":");
                if m.images.is_empty() {
                    json_str(out, &m.content)?;
                } else {
                    w(out, "[{\"type\":\"input_text\",\"text\":");
                    json_str(out, &m.content)?;
                    w(out, "}");
                    for i in &m.images {
                        w(out, ",{\"type\":\"input_image\",\"image_url\":\"data:");
                        w(out, i.media_type);
                        w(out, ";base64,");
                        w(out, &i.base64);
                        w(out, "\"}");
                    }
                    w(out, "]");
                }
                w(out, "}");
            }
            for c in &m.tool_calls {
                sep(out);
                w(out, "{\"type\":\"function_call\",\"call_id\":");
                json_str(out, &c.id)?;
                w(out, ",\"name\":");
                json_str(out, &c.name)?;
                w(out, ",\"arguments\":");
                json_str(out, &c.arguments)?;
                w(out, "}");
            }
        }
    }
    Ok(())
}

/// The last reply the server keeps the conversation under: its index and id.
fn stored_reply(conv: &Conversation) -> Option<(usize, &str)> {
    conv.messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| Some((i, m.response_id.as_deref()?)))
        .filter(|(_, id)| !id.is_empty())
}

/// Writes the whole conversation's items, reusing the items written for
/// earlier turns (kept in the conversation's wire cache, sent uncopied).
fn write_all_items(out: &mut BodyWriter, conv: &Conversation) -> Result<(), CodecError> {
    let mut cache = conv.wire.borrow_mut();
    if cache.messages > conv.messages.len() {
        *cache = Default::default();
    }
    if cache.messages < conv.messages.len() {
        let mut chunk = Vec::new();
        let mut first = cache.chunks.is_empty();
        for m in &conv.messages[cache.messages..] {
            write_items(&mut chunk, m, false, &mut first)?;
        }
        cache.chunks.push(bytes::Bytes::from(chunk));
        cache.messages = conv.messages.len();
    }
    out.write(b"[");
    for c in &cache.chunks {
        out.push_shared(c.clone());
    }
    out.write(b"]");
    Ok(())
}

impl RequestCodec for OpenAiResponses {
    /// `text.format`: `json_object`, or `json_schema` with the schema
    /// (strict).
    fn response_format_fields(
        &self,
        format: &batchbench_contract::spec::ResponseFormat,
    ) -> Result<Vec<(String, serde_json::Value)>, String> {
        let value = match &format.schema {
            None => serde_json::json!({"type": "json_object"}),
            Some(schema) => serde_json::json!({
                "type": "json_schema", "name": format.name, "schema": schema, "strict": true,
            }),
        };
        Ok(vec![(
            "text".to_owned(),
            serde_json::json!({ "format": value }),
        )])
    }

    /// `reasoning.effort`; thinking off is the effort `none`, and the API has
    /// no thinking budget.
    fn reasoning_fields(
        &self,
        knobs: &batchbench_contract::spec::ReasoningKnobs,
    ) -> Result<Vec<(String, serde_json::Value)>, String> {
        if knobs.budget_tokens.is_some() {
            return Err("the Responses API has no thinking budget (Anthropic's messages have: --codec anthropic_messages); bound the reasoning with --reasoning-effort".into());
        }
        let effort = match (knobs.effort, knobs.off) {
            (Some(e), false) => Some(e.as_str()),
            (None, true) => Some("none"),
            (Some(_), true) => {
                return Err(
                    "thinking off is the effort none in the Responses API: give one of the two"
                        .into(),
                );
            }
            (None, false) => None,
        };
        Ok(effort
            .map(|e| vec![("reasoning".to_owned(), serde_json::json!({ "effort": e }))])
            .unwrap_or_default())
    }

    /// A Responses conversation's reasoning stays with the server: a turn
    /// that continues a stored response sends only what follows it, and a
    /// stateless one sends the answers alone.
    fn reasoning_history(
        &self,
        asked: Option<batchbench_contract::spec::ReasoningHistory>,
    ) -> Result<batchbench_contract::spec::ReasoningHistory, String> {
        match asked {
            Some(batchbench_contract::spec::ReasoningHistory::Keep) => Err("the Responses API keeps a conversation's reasoning on the server (previous_response_id); the codec sends no reasoning items back".into()),
            _ => Ok(batchbench_contract::spec::ReasoningHistory::Drop),
        }
    }

    fn supports_images(&self) -> bool {
        true
    }

    fn endpoint(&self) -> &str {
        "/v1/responses"
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let set = self.run_fields(req);
        if let Some(raw) = req.raw_body {
            return raw_with_fields(raw, req.model, set, out);
        }
        let conv = req.conversation;
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        w(out, ",\"input\":");
        match stored_reply(conv).filter(|_| self.cfg.stateful) {
            Some((at, id)) => {
                let mut items = Vec::new();
                let mut first = true;
                write_items(&mut items, &conv.messages[at], true, &mut first)?;
                for m in &conv.messages[at + 1..] {
                    write_items(&mut items, m, false, &mut first)?;
                }
                out.write(b"[");
                out.write(&items);
                out.write(b"]");
                w(out, ",\"previous_response_id\":");
                json_str(out, id)?;
            }
            None => write_all_items(out, conv)?,
        }
        // Tools stay with the conversation in both modes (a stored response
        // does not carry them over).
        if !conv.tools.is_empty() {
            w(out, ",\"tools\":[");
            for (i, t) in conv.tools.iter().enumerate() {
                if i > 0 {
                    w(out, ",");
                }
                let mut f = tool_function(t)?;
                f.insert("type".into(), Value::from("function"));
                json_value(out, &Value::Object(f))?;
            }
            w(out, "]");
        }
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let r: WireResponse = serde_json::from_slice(body)
            .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
        r.into_reply()
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::<ResponsesEvents>::default())
    }
}

/// A response object (the body, or `response` in a stream event).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireResponse {
    id: Option<String>,
    status: Option<String>,
    output: Vec<Value>,
    usage: Option<WireUsage>,
    error: Option<Value>,
    incomplete_details: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: u64,
    output_tokens: u64,
    input_tokens_details: Option<Value>,
    output_tokens_details: Option<Value>,
}

impl WireUsage {
    fn into_usage(self) -> Usage {
        let detail = |d: &Option<Value>, k: &str| d.as_ref().and_then(|d| d.get(k)?.as_u64());
        Usage {
            prompt_tokens: self.input_tokens,
            completion_tokens: self.output_tokens,
            cached_tokens: detail(&self.input_tokens_details, "cached_tokens"),
            reasoning_tokens: detail(&self.output_tokens_details, "reasoning_tokens"),
            items: None,
        }
    }
}

impl WireResponse {
    /// `stop`, or `length` when the output cap ended it.
    fn finish_reason(&self) -> Option<String> {
        match self.status.as_deref() {
            Some("completed") => Some("stop".into()),
            Some("incomplete") => Some(
                match self
                    .incomplete_details
                    .as_ref()
                    .and_then(|d| d.get("reason")?.as_str())
                {
                    Some("max_output_tokens") | None => "length".into(),
                    Some(other) => other.to_owned(),
                },
            ),
            _ => None,
        }
    }

    fn failure(&self) -> Option<CodecError> {
        match (&self.error, self.status.as_deref()) {
            (Some(e), _) if !e.is_null() => Some(CodecError(format!(
                "the response failed: {}",
                error_message(e)
            ))),
            (_, Some("failed" | "cancelled")) => Some(CodecError(format!(
                "the response ended with status {}",
                self.status.as_deref().unwrap_or("")
            ))),
            _ => None,
        }
    }

    fn into_reply(self) -> Result<Reply, CodecError> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let mut content = String::new();
        let mut reasoning = String::new();
        for item in &self.output {
            let texts = |key: &str| -> Vec<&str> {
                item.get(key)
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .filter_map(|p| p.get("text").and_then(Value::as_str))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            match item.get("type").and_then(Value::as_str) {
                Some("message") => content.extend(texts("content")),
                // Its content; a summary of it is not the model's reasoning.
                Some("reasoning") => reasoning.extend(texts("content")),
                _ => {}
            }
        }
        Ok(Reply {
            content,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            finish_reason: self.finish_reason(),
            usage: self.usage.map(WireUsage::into_usage),
            response_id: self.id,
            ..Reply::default()
        })
    }
}

/// One stream event (`type` names it; the fields used by any of them).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    /// A text delta (other events may carry other kinds of delta).
    delta: Option<Value>,
    response: Option<WireResponse>,
    error: Option<Value>,
    message: Option<String>,
}

/// Decodes a Responses event stream.
#[derive(Debug, Default)]
struct ResponsesEvents {
    reply: Reply,
    reasoning: String,
    done: bool,
}

impl ResponsesEvents {
    /// One event's data.
    fn on_data(&mut self, data: &[u8], now: Instant) -> Result<(), CodecError> {
        if data == b"[DONE]" {
            return Ok(());
        }
        let e: Event<'_> = serde_json::from_slice(data)
            .map_err(|e| CodecError(format!("invalid stream event JSON: {e}")))?;
        match e.kind.as_ref() {
            "response.created" | "response.in_progress" => {
                if let Some(id) = e.response.and_then(|r| r.id) {
                    self.reply.response_id = Some(id);
                }
            }
            "response.output_text.delta" => {
                if let Some(d) = e
                    .delta
                    .as_ref()
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    self.reply.content.push_str(d);
                    self.reply.first_answer_at.get_or_insert(now);
                    self.token(now, d.len());
                }
            }
            "response.reasoning_text.delta" | "response.reasoning.delta" => {
                if let Some(d) = e
                    .delta
                    .as_ref()
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty())
                {
                    self.reasoning.push_str(d);
                    self.reply.first_reasoning_at.get_or_insert(now);
                    self.token(now, d.len());
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let r = e.response.unwrap_or_default();
                if let Some(err) = r.failure() {
                    return Err(err);
                }
                self.reply.finish_reason = r.finish_reason();
                self.reply.usage = r.usage.map(WireUsage::into_usage);
                if let Some(id) = r.id {
                    self.reply.response_id = Some(id);
                }
                self.done = true;
            }
            "error" => {
                let msg = e
                    .message
                    .or_else(|| e.error.as_ref().map(error_message))
                    .unwrap_or_else(|| "unknown error".into());
                return Err(CodecError(format!("the stream reported an error: {msg}")));
            }
            _ => {}
        }
        Ok(())
    }

    fn token(&mut self, now: Instant, bytes: usize) {
        self.reply.first_token_at.get_or_insert(now);
        self.reply
            .chunks
            .push((now, u32::try_from(bytes).unwrap_or(u32::MAX)));
    }
}

impl SseEvents for ResponsesEvents {
    fn data(&mut self, _event: &str, data: &[u8], now: Instant) -> Result<(), CodecError> {
        self.on_data(data, now)
    }

    fn close(&mut self) -> Result<Reply, CodecError> {
        closed(
            self.done,
            "response.completed",
            &mut self.reply,
            &mut self.reasoning,
        )
    }
}

batchbench_contract::register_codec! {
    name: "openai_responses",
    description: "OpenAI Responses API (/v1/responses, JSON and SSE events); stateless, or stateful with previous_response_id",
    example: r#"{"stateful": true, "min_tokens": true, "ignore_eos": false}"#,
    config: OpenAiResponsesConfig,
    build: OpenAiResponses::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::turn;
    use std::sync::Arc;

    fn encode(codec: &OpenAiResponses, conv: &Conversation) -> Value {
        let req = EncodeRequest {
            model: "m",
            conversation: conv,
            output: Some((4, 4)),
            stream: false,
            extra_fields: &[],
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        codec
            .encode(&req, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice(&out.finish().concat()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn agent_turn(conv: &mut Conversation, reply: &str, id: &str, result: &str) {
        conv.messages.push(
            Reply {
                content: reply.into(),
                response_id: Some(id.into()),
                ..Reply::default()
            }
            .into_message(),
        );
        let call = turn::agent_call_id(0, 1);
        turn::call(
            &mut conv.messages,
            call.clone(),
            "environment",
            Arc::from("{}"),
        );
        conv.messages.push(turn::tool_result(result, call));
    }

    #[test]
    fn stateless_sends_everything_and_stateful_only_what_follows_the_reply() {
        let mut conv = Conversation::default();
        conv.tools.push(Arc::from(
            r#"{"type":"function","function":{"name":"f","parameters":{}}}"#,
        ));
        conv.messages.push(Message::new(Role::User, "question"));
        let stateless = OpenAiResponses::default();
        let stateful = OpenAiResponses {
            cfg: OpenAiResponsesConfig {
                stateful: true,
                ..OpenAiResponsesConfig::default()
            },
        };
        let v = encode(&stateful, &conv);
        assert_eq!(v["input"][0]["content"], "question");
        assert!(
            v.get("previous_response_id").is_none(),
            "nothing stored yet"
        );
        assert_eq!(v["tools"][0]["name"], "f");
        assert_eq!(v["tools"][0]["type"], "function");
        assert_eq!(v["store"], true);
        assert_eq!(v["max_output_tokens"], 4);

        agent_turn(&mut conv, "answer", "resp_1", "tool output");
        let v = encode(&stateless, &conv);
        let items = v["input"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 4, "{items:?}");
        assert_eq!(items[1]["role"], "assistant");
        assert_eq!(items[2]["type"], "function_call");
        assert_eq!(items[3]["type"], "function_call_output");
        assert_eq!(items[3]["call_id"], items[2]["call_id"]);
        assert_eq!(v["store"], false);

        let v = encode(&stateful, &conv);
        assert_eq!(v["previous_response_id"], "resp_1");
        let items = v["input"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            items.iter().map(|i| i["type"].clone()).collect::<Vec<_>>(),
            ["function_call", "function_call_output"]
        );
        agent_turn(&mut conv, "again", "resp_2", "more");
        let v = encode(&stateful, &conv);
        assert_eq!(v["previous_response_id"], "resp_2");
        assert_eq!(v["input"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn decodes_a_response_and_its_event_stream() {
        let body = br#"{"id":"resp_9","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},
            "output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"hm"}]},
                      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}],
            "usage":{"input_tokens":7,"output_tokens":3,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":1}}}"#;
        let r = OpenAiResponses::default()
            .decode(body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "hi");
        assert_eq!(r.reasoning, None, "a summary is not reasoning");
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.response_id.as_deref(), Some("resp_9"));
        let u = r.usage.unwrap_or_default();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.reasoning_tokens),
            (7, Some(4), Some(1))
        );

        let stream = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"status\":\"in_progress\"}}\n\n",
            "event: response.reasoning_text.delta\ndata: {\"type\":\"response.reasoning_text.delta\",\"delta\":\"think\"}\n\n",
            "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"delta\":\"summed up\"}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"status\":\"completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2}}}\n\n",
        );
        let t0 = Instant::now();
        let mut d = OpenAiResponses::default().stream_decoder();
        for (i, p) in stream.as_bytes().chunks(9).enumerate() {
            d.feed(p, t0 + std::time::Duration::from_millis(i as u64))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "a");
        assert_eq!(r.reasoning.as_deref(), Some("think"));
        assert_eq!(r.chunks.len(), 2, "the summary is no token");
        assert!(
            r.first_reasoning_at.is_some()
                && r.first_reasoning_at
                    <= r.first_token_at
                        .map(|t| t + std::time::Duration::from_secs(1))
        );
        assert_eq!(r.response_id.as_deref(), Some("resp_1"));
        assert_eq!(r.usage.map(|u| u.completion_tokens), Some(2));

        let mut d = OpenAiResponses::default().stream_decoder();
        d.feed(
            b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\n\n",
            t0,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err(), "truncated");
        let mut d = OpenAiResponses::default().stream_decoder();
        let err = d
            .feed(
                b"data: {\"type\":\"error\",\"message\":\"overloaded\"}\n\n",
                t0,
            )
            .err()
            .map(|e| e.0)
            .unwrap_or_default();
        assert!(err.contains("overloaded"), "{err}");
    }
}
