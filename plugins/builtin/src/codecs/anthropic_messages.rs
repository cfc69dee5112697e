//! `anthropic_messages`: Anthropic's Messages API (`/v1/messages`), as
//! Anthropic, vLLM, SGLang and gateways serve it.
//!
//! Leading system messages become the top-level `system`; an assistant message
//! becomes `text` and `tool_use` content blocks (a call's arguments are its
//! `input` object); tool results become `tool_result` blocks of one user
//! message, each answering a `tool_use` of the assistant message before it. A
//! tool result that answers no call there goes as text, so every `tool_result`
//! names a `tool_use`. The API key goes in `x-api-key`, with an
//! `anthropic-version` header.
//!
//! Usage follows the API: `input_tokens` counts only the uncached prompt, so
//! the prompt is `input_tokens + cache_read_input_tokens +
//! cache_creation_input_tokens`, and the cached part `cache_read_input_tokens`.

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

/// Config of [`AnthropicMessages`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnthropicMessagesConfig {
    /// The `anthropic-version` header.
    pub version: String,
    /// `max_tokens` of a request whose plan sets no output bound (the API
    /// requires the field).
    pub max_tokens: u32,
    /// Send `min_tokens` with the output floor (vLLM and the simulator honour
    /// it; turn off for a server that refuses unknown fields).
    pub min_tokens: bool,
    /// Send `"ignore_eos": true`.
    pub ignore_eos: bool,
}

impl Default for AnthropicMessagesConfig {
    fn default() -> Self {
        Self {
            version: "2023-06-01".into(),
            max_tokens: 4096,
            min_tokens: true,
            ignore_eos: false,
        }
    }
}

/// The Anthropic Messages codec.
#[derive(Debug, Clone, Default)]
pub struct AnthropicMessages {
    cfg: AnthropicMessagesConfig,
}

impl AnthropicMessages {
    /// A codec with this config.
    pub fn new(cfg: AnthropicMessagesConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if cfg.max_tokens == 0 {
            return Err(PluginError::Config {
                plugin: "anthropic_messages".into(),
                message: "max_tokens must be at least 1".into(),
            });
        }
        Ok(Self { cfg })
    }

    fn run_fields<'a>(&self, req: &'a EncodeRequest<'_>) -> Vec<(&'a str, Value)> {
        let (min, max) = req.output.unwrap_or((0, self.cfg.max_tokens));
        let mut set: Vec<(&str, Value)> = Vec::new();
        // A verbatim body keeps its own max_tokens unless the run bounds the output.
        if req.output.is_some() || req.raw_body.is_none_or(|b| !b.contains_key("max_tokens")) {
            set.push(("max_tokens", Value::from(max)));
        }
        if min > 0 && self.cfg.min_tokens {
            set.push(("min_tokens", Value::from(min)));
        }
        if self.cfg.ignore_eos {
            set.push(("ignore_eos", Value::Bool(true)));
        }
        if req.stream {
            set.push(("stream", Value::Bool(true)));
        }
        for (k, v) in req.extra_fields {
            set.push((k.as_str(), v.clone()));
        }
        set
    }
}

/// A user turn under construction: its tool results, then its other blocks
/// (the API wants the results first).
#[derive(Default)]
struct UserTurn {
    results: Vec<u8>,
    others: Vec<u8>,
    /// An empty text seen, sent only if the turn would otherwise be empty.
    empty_text: bool,
}

/// Starts a block in `buf`.
fn block(buf: &mut Vec<u8>) -> &mut Vec<u8> {
    if !buf.is_empty() {
        buf.push(b',');
    }
    buf
}

impl UserTurn {
    fn result(&mut self) -> &mut Vec<u8> {
        block(&mut self.results)
    }

    fn other(&mut self) -> &mut Vec<u8> {
        block(&mut self.others)
    }

    fn text(&mut self, text: &str) -> Result<(), CodecError> {
        // The API refuses empty text blocks.
        if text.is_empty() {
            self.empty_text = true;
            return Ok(());
        }
        let b = self.other();
        w(b, "{\"type\":\"text\",\"text\":");
        json_str(b, text)?;
        w(b, "}");
        Ok(())
    }

    fn flush(&mut self, out: &mut Vec<u8>, first: &mut bool) -> Result<(), CodecError> {
        if self.results.is_empty() && self.others.is_empty() {
            if !std::mem::take(&mut self.empty_text) {
                return Ok(());
            }
            // Only empty text: the turn is kept, as a string.
            if !std::mem::take(first) {
                out.push(b',');
            }
            w(out, "{\"role\":\"user\",\"content\":\"\"}");
            return Ok(());
        }
        if !std::mem::take(first) {
            out.push(b',');
        }
        w(out, "{\"role\":\"user\",\"content\":[");
        out.append(&mut self.results);
        if !self.others.is_empty() {
            if out.last() != Some(&b'[') {
                out.push(b',');
            }
            out.append(&mut self.others);
        }
        w(out, "]}");
        self.empty_text = false;
        Ok(())
    }
}

/// Writes `system` (if any) and `messages` from the conversation.
fn write_conversation(out: &mut Vec<u8>, conv: &Conversation) -> Result<(), CodecError> {
    let lead = conv
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    if lead > 0 {
        let system: Vec<&str> = conv.messages[..lead]
            .iter()
            .map(|m| m.content.as_ref())
            .collect();
        w(out, "\"system\":");
        json_str(out, &system.join("\n"))?;
        w(out, ",");
    }
    w(out, "\"messages\":[");
    let mut first = true;
    let mut user = UserTurn::default();
    // The tool calls of the latest assistant message, not yet answered.
    let mut open: Vec<&str> = Vec::new();
    for m in &conv.messages[lead..] {
        match m.role {
            Role::Assistant => {
                user.flush(out, &mut first)?;
                write_assistant(out, m, &mut first)?;
                open = m.tool_calls.iter().map(|c| c.id.as_ref()).collect();
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                match open.iter().position(|c| *c == id) {
                    Some(i) => {
                        open.swap_remove(i);
                        let b = user.result();
                        w(b, "{\"type\":\"tool_result\",\"tool_use_id\":");
                        json_str(b, id)?;
                        w(b, ",\"content\":");
                        json_str(b, &m.content)?;
                        w(b, "}");
                    }
                    None => user.text(&m.content)?,
                }
            }
            Role::User | Role::System => {
                // Images first, as Anthropic advises, then the text.
                for i in &m.images {
                    let b = user.other();
                    w(
                        b,
                        "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"",
                    );
                    w(b, i.media_type);
                    w(b, "\",\"data\":\"");
                    w(b, &i.base64);
                    w(b, "\"}}");
                }
                user.text(&m.content)?;
            }
        }
    }
    user.flush(out, &mut first)?;
    w(out, "]");
    Ok(())
}

fn write_assistant(out: &mut Vec<u8>, m: &Message, first: &mut bool) -> Result<(), CodecError> {
    if !std::mem::take(first) {
        out.push(b',');
    }
    if m.content.is_empty()
        && m.tool_calls.is_empty()
        && m.reasoning.is_none()
        && m.redacted_reasoning.is_empty()
    {
        // An empty reply: the API refuses an empty text block.
        w(out, "{\"role\":\"assistant\",\"content\":\"\"}");
        return Ok(());
    }
    w(out, "{\"role\":\"assistant\",\"content\":[");
    let mut n = 0;
    // The thinking goes back first, with its signature, as the API returned
    // it (a tool loop with extended thinking must send it).
    if let Some(r) = &m.reasoning {
        w(out, "{\"type\":\"thinking\",\"thinking\":");
        json_str(out, r)?;
        if let Some(sig) = &m.reasoning_signature {
            w(out, ",\"signature\":");
            json_str(out, sig)?;
        }
        w(out, "}");
        n += 1;
    }
    // Encrypted thinking goes back after it, as it came.
    for data in &m.redacted_reasoning {
        if n > 0 {
            w(out, ",");
        }
        w(out, "{\"type\":\"redacted_thinking\",\"data\":");
        json_str(out, data)?;
        w(out, "}");
        n += 1;
    }
    if !m.content.is_empty() {
        if n > 0 {
            w(out, ",");
        }
        w(out, "{\"type\":\"text\",\"text\":");
        json_str(out, &m.content)?;
        w(out, "}");
        n += 1;
    }
    for c in &m.tool_calls {
        if n > 0 {
            w(out, ",");
        }
        n += 1;
        w(out, "{\"type\":\"tool_use\",\"id\":");
        json_str(out, &c.id)?;
        w(out, ",\"name\":");
        json_str(out, &c.name)?;
        w(out, ",\"input\":");
        // The arguments are a JSON object already: sent as they are.
        let args = c.arguments.trim();
        match serde_json::from_str::<serde::de::IgnoredAny>(args) {
            Ok(_) if args.starts_with('{') => w(out, args),
            _ => {
                w(out, "{\"arguments\":");
                json_str(out, &c.arguments)?;
                w(out, "}");
            }
        }
        w(out, "}");
    }
    w(out, "]}");
    Ok(())
}

impl RequestCodec for AnthropicMessages {
    /// `thinking`: enabled with a budget (at least 1,024 tokens, the API's
    /// least), or disabled. The Messages API has no reasoning effort.
    fn reasoning_fields(
        &self,
        knobs: &batchbench_contract::spec::ReasoningKnobs,
    ) -> Result<Vec<(String, serde_json::Value)>, String> {
        if knobs.effort.is_some() {
            return Err("Anthropic's messages have no reasoning effort: give a thinking budget (--thinking-budget) or turn thinking off (--no-thinking)".into());
        }
        match (knobs.budget_tokens, knobs.off) {
            (Some(_), true) => {
                Err("a thinking budget and thinking off: give one of the two".into())
            }
            (Some(b), false) if b < 1024 => Err(format!(
                "a thinking budget of {b} tokens is under Anthropic's least, 1024"
            )),
            (Some(b), false) => Ok(vec![(
                "thinking".into(),
                serde_json::json!({ "type": "enabled", "budget_tokens": b }),
            )]),
            (None, true) => Ok(vec![(
                "thinking".into(),
                serde_json::json!({ "type": "disabled" }),
            )]),
            (None, false) => Ok(Vec::new()),
        }
    }

    /// Earlier thinking goes back as thinking blocks with their signatures
    /// (the API requires them in a tool loop with extended thinking, and
    /// strips those of earlier turns itself) unless the run drops it.
    fn reasoning_history(
        &self,
        asked: Option<batchbench_contract::spec::ReasoningHistory>,
    ) -> Result<batchbench_contract::spec::ReasoningHistory, String> {
        Ok(asked.unwrap_or(batchbench_contract::spec::ReasoningHistory::Keep))
    }

    fn endpoint(&self) -> &str {
        "/v1/messages"
    }

    fn api_key_header(&self) -> Option<&str> {
        Some("x-api-key")
    }

    fn supports_images(&self) -> bool {
        true
    }

    fn headers(&self) -> Vec<(String, String)> {
        vec![("anthropic-version".into(), self.cfg.version.clone())]
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let set = self.run_fields(req);
        if let Some(raw) = req.raw_body {
            return raw_with_fields(raw, req.model, set, out);
        }
        let conv = req.conversation;
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        w(out, ",");
        let mut body = Vec::new();
        write_conversation(&mut body, conv)?;
        out.write(&body);
        if !conv.tools.is_empty() {
            w(out, ",\"tools\":[");
            for (i, t) in conv.tools.iter().enumerate() {
                if i > 0 {
                    w(out, ",");
                }
                let mut f = tool_function(t)?;
                let schema = f
                    .remove("parameters")
                    .unwrap_or_else(|| serde_json::json!({"type": "object"}));
                f.insert("input_schema".into(), schema);
                json_value(out, &Value::Object(f))?;
            }
            w(out, "]");
        }
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let m: WireMessage = serde_json::from_slice(body)
            .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
        if let Some(e) = &m.error {
            return Err(CodecError(format!(
                "the server answered HTTP 200 with an error: {}",
                error_message(e)
            )));
        }
        let mut content = String::new();
        let mut reasoning = String::new();
        let mut signature = None;
        let mut redacted = Vec::new();
        for b in &m.content {
            let text = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
            match b.get("type").and_then(Value::as_str) {
                Some("text") => content.push_str(text("text")),
                Some("thinking") => {
                    reasoning.push_str(text("thinking"));
                    signature = b
                        .get("signature")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                }
                Some("redacted_thinking") => redacted.push(text("data").to_owned()),
                _ => {}
            }
        }
        Ok(Reply {
            content,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            reasoning_signature: signature,
            redacted_reasoning: redacted,
            usage: m.usage.map(WireUsage::into_usage),
            finish_reason: m.stop_reason,
            id: m.id,
            ..Reply::default()
        })
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::<MessagesEvents>::default())
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    id: Option<String>,
    content: Vec<Value>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Later figures (a stream's `message_delta`) over earlier ones.
    fn merge(&mut self, later: Self) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = later
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = later
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
    }

    fn into_usage(self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: self.input_tokens.unwrap_or(0)
                + read
                + self.cache_creation_input_tokens.unwrap_or(0),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: self.cache_read_input_tokens,
            reasoning_tokens: None,
            items: None,
        }
    }
}

/// One stream event (`type` names it).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    message: Option<WireStart>,
    content_block: Option<Value>,
    delta: Option<Value>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireStart {
    id: Option<String>,
    usage: Option<WireUsage>,
}

/// Decodes a Messages event stream.
#[derive(Debug, Default)]
struct MessagesEvents {
    reply: Reply,
    reasoning: String,
    usage: Option<WireUsage>,
    done: bool,
}

impl MessagesEvents {
    /// One event's data.
    fn on_data(&mut self, data: &[u8], now: Instant) -> Result<(), CodecError> {
        let e: Event = serde_json::from_slice(data)
            .map_err(|e| CodecError(format!("invalid stream event JSON: {e}")))?;
        let mut usage = |u: Option<WireUsage>| {
            if let Some(u) = u {
                self.usage.get_or_insert_with(WireUsage::default).merge(u);
            }
        };
        match e.kind.as_str() {
            "message_start" => {
                let m = e.message.unwrap_or_default();
                usage(m.usage);
                self.reply.id = m.id;
            }
            "message_delta" => {
                usage(e.usage);
                if let Some(r) = e
                    .delta
                    .as_ref()
                    .and_then(|d| d.get("stop_reason")?.as_str())
                {
                    self.reply.finish_reason = Some(r.to_owned());
                }
            }
            // Encrypted thinking comes whole in its block's start: reasoning
            // with no readable text (no chunk, no token counted), kept to be
            // sent back.
            "content_block_start" => {
                let block = e.content_block.unwrap_or_default();
                if block.get("type").and_then(Value::as_str) == Some("redacted_thinking") {
                    let data = block.get("data").and_then(Value::as_str).unwrap_or("");
                    self.reply.redacted_reasoning.push(data.to_owned());
                    self.reply.first_reasoning_at.get_or_insert(now);
                    self.reply.first_token_at.get_or_insert(now);
                }
            }
            "content_block_delta" => {
                let d = e.delta.unwrap_or_default();
                let text = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
                let bytes = match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        self.reply.content.push_str(text("text"));
                        if !text("text").is_empty() {
                            self.reply.first_answer_at.get_or_insert(now);
                        }
                        text("text").len()
                    }
                    Some("thinking_delta") => {
                        self.reasoning.push_str(text("thinking"));
                        if !text("thinking").is_empty() {
                            self.reply.first_reasoning_at.get_or_insert(now);
                        }
                        text("thinking").len()
                    }
                    // Not output: the thinking block's seal, sent back with it.
                    Some("signature_delta") => {
                        self.reply
                            .reasoning_signature
                            .get_or_insert_with(String::new)
                            .push_str(text("signature"));
                        0
                    }
                    // A tool call the model makes is output too: its answer.
                    Some("input_json_delta") => {
                        if !text("partial_json").is_empty() {
                            self.reply.first_answer_at.get_or_insert(now);
                        }
                        text("partial_json").len()
                    }
                    _ => 0,
                };
                if bytes > 0 {
                    self.reply.first_token_at.get_or_insert(now);
                    self.reply
                        .chunks
                        .push((now, u32::try_from(bytes).unwrap_or(u32::MAX)));
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let msg = e
                    .error
                    .as_ref()
                    .map_or_else(|| "unknown error".into(), error_message);
                return Err(CodecError(format!("the stream reported an error: {msg}")));
            }
            _ => {}
        }
        Ok(())
    }
}

impl SseEvents for MessagesEvents {
    fn data(&mut self, _event: &str, data: &[u8], now: Instant) -> Result<(), CodecError> {
        self.on_data(data, now)
    }

    fn close(&mut self) -> Result<Reply, CodecError> {
        let mut reply = closed(
            self.done,
            "message_stop",
            &mut self.reply,
            &mut self.reasoning,
        )?;
        reply.usage = self.usage.take().map(WireUsage::into_usage);
        Ok(reply)
    }
}

batchbench_contract::register_codec! {
    name: "anthropic_messages",
    description: "Anthropic Messages API (/v1/messages, JSON and SSE events): content blocks, tool_use and tool_result, x-api-key",
    example: r#"{"version": "2023-06-01", "max_tokens": 4096, "min_tokens": true}"#,
    config: AnthropicMessagesConfig,
    build: AnthropicMessages::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::turn;
    use batchbench_contract::spec::ReasoningHistory;
    use std::sync::Arc;

    fn encode(conv: &Conversation, output: Option<(u32, u32)>) -> Value {
        let req = EncodeRequest {
            model: "m",
            conversation: conv,
            output,
            stream: true,
            extra_fields: &[],
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        AnthropicMessages::default()
            .encode(&req, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_slice(&out.finish().concat()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_tool_use_is_answered_by_a_tool_result_in_the_next_user_turn() {
        let mut conv = Conversation::default();
        conv.tools.push(Arc::from(
            r#"{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}"#,
        ));
        conv.messages.push(Message::new(Role::System, "be brief"));
        conv.messages.push(Message::new(Role::User, "go"));
        for i in 0..2 {
            conv.messages
                .push(turn::assistant(format!("step {i}"), None));
            let id = turn::agent_call_id(3, i);
            turn::call(
                &mut conv.messages,
                id.clone(),
                "environment",
                Arc::from(r#"{"k":1}"#),
            );
            conv.messages.push(turn::tool_result("out", id));
        }
        // A result that answers no call goes as text.
        conv.messages
            .push(turn::tool_result("orphan", Arc::from("call_none")));
        let v = encode(&conv, None);
        assert_eq!(v["system"], "be brief");
        assert_eq!(v["max_tokens"], 4096, "the API requires max_tokens");
        assert_eq!(v["tools"][0]["input_schema"]["type"], "object");
        let msgs = v["messages"].as_array().cloned().unwrap_or_default();
        let roles: Vec<_> = msgs.iter().map(|m| m["role"].clone()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        for pair in msgs[1..].chunks(2) {
            let uses: Vec<_> = pair[0]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].clone())
                .collect();
            let results: Vec<_> = pair[1]["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| b["tool_use_id"].clone())
                .collect();
            assert_eq!(uses, results);
            assert_eq!(pair[0]["content"][1]["input"]["k"], 1);
        }
        assert_eq!(msgs[4]["content"][1]["text"], "orphan");
        // Results come first in their user message, whatever the order before.
        let mut conv = Conversation::default();
        conv.messages.push(Message::new(Role::User, "go"));
        let id = turn::agent_call_id(0, 0);
        turn::call(
            &mut conv.messages,
            id.clone(),
            "environment",
            Arc::from("{}"),
        );
        conv.messages.push(Message::new(Role::User, "note"));
        conv.messages.push(turn::tool_result("", id));
        let v = encode(&conv, None);
        let last = &v["messages"][2]["content"];
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1]["text"], "note");
        assert_eq!(
            v["messages"][1]["content"].as_array().map(Vec::len),
            Some(1),
            "no empty text block"
        );
        let v = encode(&conv, Some((8, 8)));
        assert_eq!(
            (v["max_tokens"].clone(), v["min_tokens"].clone()),
            (8.into(), 8.into())
        );
    }

    #[test]
    fn decodes_messages_and_their_event_stream() {
        let body = br#"{"id":"msg_1","type":"message","content":[{"type":"thinking","thinking":"hm","signature":"EqQB"},{"type":"text","text":"hi"}],
            "stop_reason":"max_tokens","usage":{"input_tokens":3,"cache_read_input_tokens":5,"output_tokens":2}}"#;
        let r = AnthropicMessages::default()
            .decode(body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "hi");
        assert_eq!(r.reasoning.as_deref(), Some("hm"));
        assert_eq!(r.reasoning_signature.as_deref(), Some("EqQB"));
        let u = r.usage.unwrap_or_default();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
            (8, Some(5), 2)
        );
        let stream = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":4,\"cache_read_input_tokens\":6,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: ping\ndata: {\"type\":\"ping\"}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"t\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"EqQB\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"ab\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        let mut d = AnthropicMessages::default().stream_decoder();
        let t0 = Instant::now();
        for p in stream.as_bytes().chunks(11) {
            d.feed(p, t0).unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "ab");
        assert_eq!(r.reasoning.as_deref(), Some("t"));
        assert_eq!(r.reasoning_signature.as_deref(), Some("EqQB"));
        assert_eq!(r.chunks.len(), 2, "the signature is no output");
        assert!(r.first_reasoning_at.is_some());
        assert_eq!(r.finish_reason.as_deref(), Some("end_turn"));
        let u = r.usage.unwrap_or_default();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
            (10, Some(6), 3)
        );
        let mut d = AnthropicMessages::default().stream_decoder();
        assert!(
            d.feed(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", t0)
                .is_err()
        );
        let mut d = AnthropicMessages::default().stream_decoder();
        d.feed(b"data: {\"type\":\"message_start\",\"message\":{}}\n\n", t0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err(), "truncated");
    }

    #[test]
    fn thinking_goes_back_first_with_its_signature() {
        let mut reply = Reply {
            content: "a".into(),
            reasoning: Some("because".into()),
            reasoning_signature: Some("EqQB".into()),
            ..Reply::default()
        };
        assert_eq!(
            sent_back(reply.clone()),
            serde_json::json!([
                {"type": "thinking", "thinking": "because", "signature": "EqQB"},
                {"type": "text", "text": "a"}
            ])
        );
        // Dropped: the answer alone.
        reply.drop_reasoning();
        assert_eq!(
            sent_back(reply),
            serde_json::json!([{"type": "text", "text": "a"}])
        );
        let c = AnthropicMessages::default();
        assert_eq!(c.reasoning_history(None), Ok(ReasoningHistory::Keep));
        assert_eq!(
            c.reasoning_history(Some(ReasoningHistory::Drop)),
            Ok(ReasoningHistory::Drop)
        );
    }

    /// Redacted thinking as the Messages API documents it: a block whose
    /// `data` is encrypted, whole in its `content_block_start` when streamed,
    /// to be sent back unchanged.
    #[test]
    fn redacted_thinking_is_reasoning_kept_unread_and_sent_back_as_it_came() {
        let data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";
        let body = format!(
            r#"{{"id":"msg_2","type":"message","content":[{{"type":"thinking","thinking":"hm","signature":"EqQB"}},{{"type":"redacted_thinking","data":"{data}"}},{{"type":"text","text":"hi"}}],"stop_reason":"end_turn","usage":{{"input_tokens":3,"output_tokens":9}}}}"#
        );
        let r = AnthropicMessages::default()
            .decode(body.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.reasoning.as_deref(), Some("hm"));
        assert_eq!(r.redacted_reasoning, vec![data.to_owned()]);
        // Streamed: the block starts whole, and carries no readable token.
        let stream = format!(
            concat!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_2\",\"usage\":{{\"input_tokens\":4,\"output_tokens\":1}}}}}}\n\n",
                "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"redacted_thinking\",\"data\":\"{}\"}}}}\n\n",
                "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n",
                "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n",
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"text_delta\",\"text\":\"ab\"}}}}\n\n",
                "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":1}}\n\n",
                "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":9}}}}\n\n",
                "event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n",
            ),
            data
        );
        let mut d = AnthropicMessages::default().stream_decoder();
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_millis(5);
        let events: Vec<&str> = stream.split_inclusive("\n\n").collect();
        for (i, e) in events.iter().enumerate() {
            d.feed(e.as_bytes(), if i < 3 { t0 } else { t1 })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.redacted_reasoning, vec![data.to_owned()]);
        assert_eq!(r.reasoning, None, "nothing of it is readable");
        assert_eq!(r.chunks.len(), 1, "no token of it is counted");
        assert_eq!(
            (r.first_token_at, r.first_reasoning_at, r.first_answer_at),
            (Some(t0), Some(t0), Some(t1)),
            "the answer waited for it"
        );
        // Kept: back after the readable thinking, before the text; dropped:
        // gone with it.
        let mut reply = Reply {
            content: "a".into(),
            reasoning: Some("because".into()),
            reasoning_signature: Some("EqQB".into()),
            redacted_reasoning: vec![data.to_owned(), "Zm9v".to_owned()],
            ..Reply::default()
        };
        assert_eq!(
            sent_back(reply.clone()),
            serde_json::json!([
                {"type": "thinking", "thinking": "because", "signature": "EqQB"},
                {"type": "redacted_thinking", "data": data},
                {"type": "redacted_thinking", "data": "Zm9v"},
                {"type": "text", "text": "a"}
            ])
        );
        reply.drop_reasoning();
        assert_eq!(
            sent_back(reply),
            serde_json::json!([{"type": "text", "text": "a"}])
        );
        // Only encrypted thinking, no text: still a message of blocks.
        let only = Reply {
            redacted_reasoning: vec!["Zm9v".to_owned()],
            ..Reply::default()
        };
        assert_eq!(
            sent_back(only),
            serde_json::json!([{"type": "redacted_thinking", "data": "Zm9v"}])
        );
    }

    /// The content of `reply` as the next turn sends it back.
    fn sent_back(reply: Reply) -> Value {
        let mut conv = Conversation::default();
        conv.messages.push(Message::new(Role::User, "q"));
        conv.messages.push(reply.into_message());
        conv.messages.push(Message::new(Role::User, "more"));
        encode(&conv, None)["messages"][1]["content"].clone()
    }
}
