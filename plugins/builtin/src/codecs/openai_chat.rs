//! `openai_chat`: the OpenAI chat-completions wire format, as vLLM, SGLang,
//! llama.cpp and gateways speak it.
//!
//! Bodies are written straight from the live conversation (no intermediate JSON
//! tree, no clone of the messages). Output constraints go out as `min_tokens` /
//! `max_tokens`, or `min_new_tokens` / `max_new_tokens` with `sglang`. Responses
//! are decoded from JSON or from SSE; reasoning output (`reasoning_content` or
//! `reasoning`, or `<think>` tags in the content with `reasoning_tags`) is kept
//! apart from the answer; the first token is the first content or reasoning
//! text, never the role-only chunk, and the first answer token the first
//! content after it.

use super::chat_chunk::{self, Choice};
use super::wire::{
    SseEvents, SseStream, ThinkTags, choices_chunk, choices_reply, closed, json_str, note_text,
    num_field, split_think, w,
};
use batchbench_contract::conversation::{Conversation, Message};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder,
};
use batchbench_contract::registry::BuildContext;
use batchbench_contract::spec::{ReasoningHistory, ReasoningKnobs};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Instant;

/// Config of [`OpenAiChat`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiChatConfig {
    /// Send `min_new_tokens` / `max_new_tokens` instead of `min_tokens` / `max_tokens`.
    #[serde(default)]
    pub sglang: bool,
    /// Send `"ignore_eos": true`.
    #[serde(default)]
    pub ignore_eos: bool,
    /// The server runs no reasoning parser: the model's reasoning comes
    /// inside the content as `<think>...</think>`, and is split out of it
    /// here (the tags are part of neither the reasoning nor the answer).
    #[serde(default)]
    pub reasoning_tags: bool,
}

/// The OpenAI chat codec.
#[derive(Debug, Clone, Default)]
pub struct OpenAiChat {
    cfg: OpenAiChatConfig,
}

impl OpenAiChat {
    /// A codec with this config.
    pub fn new(cfg: OpenAiChatConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg })
    }
}

fn write_message(out: &mut Vec<u8>, m: &Message) -> Result<(), CodecError> {
    w(out, "{\"role\":\"");
    w(out, m.role.as_str());
    w(out, "\",\"content\":");
    if m.images.is_empty() && m.audio.is_empty() {
        json_str(out, &m.content)?;
    } else {
        // Text, then the images and the audio, as content parts.
        w(out, "[{\"type\":\"text\",\"text\":");
        json_str(out, &m.content)?;
        w(out, "}");
        for i in &m.images {
            w(
                out,
                ",{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:",
            );
            w(out, i.media_type);
            w(out, ";base64,");
            w(out, &i.base64);
            w(out, "\"}}");
        }
        for a in &m.audio {
            w(
                out,
                ",{\"type\":\"input_audio\",\"input_audio\":{\"data\":\"",
            );
            w(out, &a.base64);
            w(out, "\",\"format\":\"");
            w(out, a.format);
            w(out, "\"}}");
        }
        w(out, "]");
    }
    if let Some(r) = &m.reasoning {
        w(out, ",\"reasoning_content\":");
        json_str(out, r)?;
    }
    if !m.tool_calls.is_empty() {
        w(out, ",\"tool_calls\":[");
        for (i, c) in m.tool_calls.iter().enumerate() {
            if i > 0 {
                w(out, ",");
            }
            w(out, "{\"id\":");
            json_str(out, &c.id)?;
            w(out, ",\"type\":\"function\",\"function\":{\"name\":");
            json_str(out, &c.name)?;
            w(out, ",\"arguments\":");
            json_str(out, &c.arguments)?;
            w(out, "}}");
        }
        w(out, "]");
    }
    if let Some(id) = &m.tool_call_id {
        w(out, ",\"tool_call_id\":");
        json_str(out, id)?;
    }
    w(out, "}");
    Ok(())
}

/// Writes the messages array of `conv`. Messages serialised for an earlier turn
/// are kept in the conversation's wire cache as immutable chunks and sent as they
/// are, so a turn escapes and formats only the messages it adds, and copies nothing
/// of the rest.
pub fn write_messages(out: &mut BodyWriter, conv: &Conversation) -> Result<(), CodecError> {
    let mut cache = conv.wire.borrow_mut();
    if cache.messages > conv.messages.len() {
        // Not append-only after all: start over rather than send stale bytes.
        *cache = Default::default();
    }
    if cache.messages < conv.messages.len() {
        // Room for the texts and each message's keys: one allocation.
        let mut chunk = Vec::with_capacity(
            conv.messages[cache.messages..]
                .iter()
                .map(|m| m.content.len() + 64)
                .sum(),
        );
        for m in &conv.messages[cache.messages..] {
            if cache.messages > 0 || !chunk.is_empty() {
                chunk.push(b',');
            }
            write_message(&mut chunk, m)?;
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

/// The fields the run controls: output bounds, `ignore_eos`, streaming with
/// usage, and the routers' fields (the chat and completions codecs' alike).
pub(crate) fn run_fields<'a>(
    cfg: &OpenAiChatConfig,
    req: &'a EncodeRequest<'_>,
) -> Vec<(&'a str, Value)> {
    let mut set: Vec<(&str, Value)> = Vec::new();
    if let Some((min, max)) = req.output {
        let (min_f, max_f) = if cfg.sglang {
            ("min_new_tokens", "max_new_tokens")
        } else {
            ("min_tokens", "max_tokens")
        };
        set.push((max_f, Value::from(max)));
        if min > 0 {
            set.push((min_f, Value::from(min)));
        }
    }
    if cfg.ignore_eos {
        set.push(("ignore_eos", Value::Bool(true)));
    }
    if req.stream {
        set.push(("stream", Value::Bool(true)));
        set.push((
            "stream_options",
            serde_json::json!({ "include_usage": true }),
        ));
    }
    for (k, v) in req.extra_fields {
        set.push((k.as_str(), v.clone()));
    }
    set
}

impl RequestCodec for OpenAiChat {
    fn supports_images(&self) -> bool {
        true
    }

    /// As `input_audio` content parts (base64 WAV), as vLLM's and OpenAI's
    /// audio chat models take them.
    fn supports_audio(&self) -> bool {
        true
    }

    /// `reasoning_effort`, and thinking off through the chat template's
    /// switch (`chat_template_kwargs.enable_thinking`, vLLM's and SGLang's);
    /// chat completions have no thinking budget.
    /// `response_format`: `json_object`, or `json_schema` with the schema
    /// (strict), as OpenAI, vLLM, SGLang and llama.cpp read it.
    fn response_format_fields(
        &self,
        format: &batchbench_contract::spec::ResponseFormat,
    ) -> Result<Vec<(String, Value)>, String> {
        let value = match &format.schema {
            None => serde_json::json!({"type": "json_object"}),
            Some(schema) => serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": format.name, "schema": schema, "strict": true},
            }),
        };
        Ok(vec![("response_format".to_owned(), value)])
    }

    fn reasoning_fields(&self, knobs: &ReasoningKnobs) -> Result<Vec<(String, Value)>, String> {
        if knobs.budget_tokens.is_some() {
            return Err("chat completions have no thinking budget (Anthropic's messages have: --codec anthropic_messages); bound the reasoning with --reasoning-effort".into());
        }
        let mut fields = Vec::new();
        if let Some(e) = knobs.effort {
            fields.push(("reasoning_effort".into(), Value::from(e.as_str())));
        }
        if knobs.off {
            fields.push((
                "chat_template_kwargs".into(),
                serde_json::json!({ "enable_thinking": false }),
            ));
        }
        Ok(fields)
    }

    /// Earlier reasoning goes back as the message's `reasoning_content`
    /// unless the run drops it: chat templates that keep it (Qwen3's inside
    /// a tool loop) render it, others ignore it.
    fn reasoning_history(
        &self,
        asked: Option<ReasoningHistory>,
    ) -> Result<ReasoningHistory, String> {
        Ok(asked.unwrap_or(ReasoningHistory::Keep))
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        if let Some(raw) = req.raw_body {
            // A verbatim body, with what the run controls set on top.
            let set = run_fields(&self.cfg, req);
            return super::wire::raw_with_fields(raw, req.model, set, out);
        }
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        w(out, ",\"messages\":");
        write_messages(out, req.conversation)?;
        if !req.conversation.tools.is_empty() {
            w(out, ",\"tools\":[");
            for (i, t) in req.conversation.tools.iter().enumerate() {
                if i > 0 {
                    w(out, ",");
                }
                w(out, t);
            }
            w(out, "]");
        }
        if let Some((min, max)) = req.output {
            let (min_f, max_f) = if self.cfg.sglang {
                ("min_new_tokens", "max_new_tokens")
            } else {
                ("min_tokens", "max_tokens")
            };
            num_field(out, max_f, max.into());
            if min > 0 {
                num_field(out, min_f, min.into());
            }
        }
        if self.cfg.ignore_eos {
            w(out, ",\"ignore_eos\":true");
        }
        if req.stream {
            w(
                out,
                ",\"stream\":true,\"stream_options\":{\"include_usage\":true}",
            );
        }
        for (k, v) in req.extra_fields {
            w(out, ",");
            json_str(out, k)?;
            w(out, ":");
            serde_json::to_writer(&mut *out, v).map_err(|e| CodecError(e.to_string()))?;
        }
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        // The common reply without serde (see `chat_chunk`); serde reads
        // the rest and says what is wrong with a bad one.
        let (choice, reply) = match chat_chunk::read_reply(body) {
            Some(read) => read,
            None => choices_reply::<Choice<'_>>(body)?,
        };
        let msg = choice.message.unwrap_or_default();
        let mut content = msg.content.map(|c| c.into_owned()).unwrap_or_default();
        let mut reasoning = msg
            .reasoning_content
            .or(msg.reasoning)
            .map(|c| c.into_owned());
        if self.cfg.reasoning_tags && reasoning.is_none() {
            (reasoning, content) = split_think(&content);
        }
        Ok(Reply {
            content,
            reasoning,
            finish_reason: choice.finish_reason.map(|c| c.into_owned()),
            ..reply
        })
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::with(ChatEvents {
            tags: self.cfg.reasoning_tags.then(ThinkTags::default),
            ..ChatEvents::default()
        }))
    }
}

/// Reads the events of a stream of chat-completion chunks.
#[derive(Debug, Default)]
struct ChatEvents {
    reply: Reply,
    reasoning: String,
    done: bool,
    /// With `reasoning_tags`: the content's `<think>` split.
    tags: Option<ThinkTags>,
    /// The chunks' fast reading.
    chunks: chat_chunk::Reader,
}

impl SseEvents for ChatEvents {
    fn data(&mut self, _event: &str, data: &[u8], now: Instant) -> Result<(), CodecError> {
        // The common chunk without serde; serde reads the rest ([DONE], a
        // usage, anything the fast reading is not sure of) and says what is
        // wrong with a bad one.
        let fast = if self.done || data == b"[DONE]" {
            None
        } else {
            self.chunks.read(data, self.reply.id.is_none())
        };
        let choice = match fast {
            Some(chunk) => {
                if self.reply.id.is_none() {
                    self.reply.id = chunk.id.map(std::borrow::Cow::into_owned);
                }
                if chunk.usage.is_some() {
                    self.reply.usage = chunk.usage;
                }
                chunk.choice
            }
            None => choices_chunk::<Choice<'_>>(data, &mut self.done, &mut self.reply)?,
        };
        if let Some(choice) = choice {
            if let Some(d) = choice.delta.or(choice.message) {
                let content = d.content.unwrap_or_default();
                let reasoning = d.reasoning_content.or(d.reasoning).unwrap_or_default();
                match &mut self.tags {
                    Some(tags) if !content.is_empty() => {
                        let (mut think, answer) = tags.feed(&content);
                        think.insert_str(0, &reasoning);
                        note_text(&mut self.reply, &mut self.reasoning, &think, &answer, now);
                    }
                    _ => note_text(
                        &mut self.reply,
                        &mut self.reasoning,
                        &reasoning,
                        &content,
                        now,
                    ),
                }
            }
            if let Some(f) = choice.finish_reason {
                self.reply.finish_reason = Some(f.into_owned());
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Reply, CodecError> {
        if let Some(tags) = &mut self.tags {
            let (think, answer) = tags.finish();
            let now = Instant::now();
            note_text(&mut self.reply, &mut self.reasoning, &think, &answer, now);
        }
        let ended = self.done || self.reply.finish_reason.is_some();
        closed(
            ended,
            "its finish chunk and [DONE]",
            &mut self.reply,
            &mut self.reasoning,
        )
    }
}

batchbench_contract::register_codec! {
    name: "openai_chat",
    description: "OpenAI chat completions (JSON and SSE); min/max_tokens or SGLang min/max_new_tokens",
    example: r#"{"sglang": false, "ignore_eos": true}"#,
    config: OpenAiChatConfig,
    build: OpenAiChat::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Role, ToolCall};
    use batchbench_contract::plugin::{ServerTiming, Usage};
    use std::sync::Arc;

    fn codec(sglang: bool) -> OpenAiChat {
        OpenAiChat {
            cfg: OpenAiChatConfig {
                sglang,
                ignore_eos: true,
                reasoning_tags: false,
            },
        }
    }

    #[test]
    fn a_raw_body_is_sent_as_written_with_the_runs_fields_on_top() {
        let raw: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":99,"stream":false,"temperature":0.5}"#,
        )
        .unwrap();
        let conv = Conversation::default();
        let extra = vec![("user".to_owned(), serde_json::json!("u-1"))];
        let mut out = BodyWriter::default();
        let req = EncodeRequest {
            model: "run-model",
            conversation: &conv,
            output: Some((5, 5)),
            stream: true,
            extra_fields: &extra,
            raw_body: Some(&raw),
        };
        codec(false).encode(&req, &mut out).unwrap();
        let bytes: Vec<u8> = out.finish().concat();
        let text = String::from_utf8(bytes).unwrap();
        // Every key once: overridden fields are not written twice.
        for key in ["\"max_tokens\"", "\"stream\"", "\"model\""] {
            assert_eq!(text.matches(key).count(), 1, "{key} in {text}");
        }
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["model"], "m", "the body's model wins");
        assert_eq!(v["messages"][0]["content"], "hi");
        assert_eq!(v["temperature"], 0.5);
        assert_eq!(
            (v["max_tokens"].clone(), v["min_tokens"].clone()),
            (5.into(), 5.into())
        );
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["user"], "u-1");
    }

    #[test]
    fn encodes_valid_json_with_constraints() {
        let mut conv = Conversation::default();
        conv.messages
            .push(Message::new(Role::User, "hi \"there\"\n"));
        let mut a = Message::new(Role::Assistant, "ok");
        a.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "environment".into(),
            arguments: "{}".into(),
        });
        conv.messages.push(a);
        let mut t = Message::new(Role::Tool, "result");
        t.tool_call_id = Some(Arc::from("c1"));
        conv.messages.push(t);
        let extra = vec![("user".to_owned(), serde_json::json!("u-1"))];
        for sglang in [false, true] {
            let mut out = BodyWriter::default();
            let req = EncodeRequest {
                model: "m",
                conversation: &conv,
                output: Some((64, 64)),
                stream: true,
                extra_fields: &extra,
                raw_body: None,
            };
            codec(sglang)
                .encode(&req, &mut out)
                .unwrap_or_else(|e| panic!("{e}"));
            let v: serde_json::Value =
                serde_json::from_slice(&joined(out)).unwrap_or_else(|e| panic!("{e}"));
            let (min, max) = if sglang {
                ("min_new_tokens", "max_new_tokens")
            } else {
                ("min_tokens", "max_tokens")
            };
            assert_eq!(v[min], 64);
            assert_eq!(v[max], 64);
            assert_eq!(v["ignore_eos"], true);
            assert_eq!(v["stream_options"]["include_usage"], true);
            assert_eq!(v["user"], "u-1");
            assert_eq!(v["messages"][0]["content"], "hi \"there\"\n");
            assert_eq!(
                v["messages"][1]["tool_calls"][0]["function"]["name"],
                "environment"
            );
            assert_eq!(v["messages"][2]["tool_call_id"], "c1");
        }
    }

    fn joined(w: BodyWriter) -> Vec<u8> {
        w.finish().iter().flat_map(|b| b.iter().copied()).collect()
    }

    fn messages(conv: &Conversation) -> (Vec<u8>, usize) {
        let mut w = BodyWriter::default();
        write_messages(&mut w, conv).unwrap();
        let parts = w.finish();
        (
            parts.iter().flat_map(|b| b.iter().copied()).collect(),
            parts.len(),
        )
    }

    #[test]
    fn incremental_encoding_equals_a_fresh_encoding() {
        let mut conv = Conversation::default();
        for turn in 0..5 {
            // Two messages a turn, like an agent loop.
            for k in 0..2 {
                let role = if k == 0 { Role::Assistant } else { Role::Tool };
                conv.messages
                    .push(Message::new(role, format!("t{turn} m{k} \"q\"")));
            }
            let (incremental, parts) = messages(&conv);
            let copy = Conversation {
                messages: conv.messages.clone(),
                ..Conversation::default()
            };
            assert_eq!(incremental, messages(&copy).0);
            // "[", one shared chunk per turn, "]": earlier turns are not rewritten.
            assert_eq!(parts, turn + 3);
            let v: serde_json::Value = serde_json::from_slice(&incremental).unwrap();
            assert_eq!(v.as_array().map(Vec::len), Some(2 * turn + 2));
        }
        conv.clear();
        conv.messages.push(Message::new(Role::User, "again"));
        assert_eq!(messages(&conv).0, br#"[{"role":"user","content":"again"}]"#);
    }

    #[test]
    fn decodes_json_with_reasoning_and_cache() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"a","reasoning_content":"r"},"finish_reason":"length"}],
            "usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        let r = codec(false).decode(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "a");
        assert_eq!(r.reasoning.as_deref(), Some("r"));
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                cached_tokens: Some(8),
                reasoning_tokens: None,
                items: None,
            })
        );
        assert!(codec(false).decode(b"{not json").is_err());
    }

    /// llama.cpp's own `timings`, in a whole reply and on a stream's last
    /// chunk; an object without a time is no timing.
    #[test]
    fn llama_cpp_timings_are_read_in_json_and_streams() {
        let body = br#"{"choices":[{"message":{"content":"a"},"finish_reason":"length"}],
            "timings":{"cache_n":3,"prompt_n":7,"prompt_ms":12.5,"predicted_n":2,"predicted_ms":30.25}}"#;
        let r = codec(false).decode(body).unwrap_or_else(|e| panic!("{e}"));
        let want = ServerTiming {
            prompt_ms: Some(12.5),
            predicted_ms: Some(30.25),
            total_ms: None,
            cached_tokens: Some(3),
        };
        assert_eq!(r.server_timing, Some(want));
        assert_eq!(want.server_ms(), Some(42.75));
        let empty = br#"{"choices":[{"message":{"content":"a"}}],"timings":{}}"#;
        let r = codec(false).decode(empty).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.server_timing, None);
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"timings\":{\"cache_n\":3,\"prompt_ms\":12.5,\"predicted_ms\":30.25}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut d = codec(true).stream_decoder();
        d.feed(stream.as_bytes(), Instant::now())
            .unwrap_or_else(|e| panic!("{e}"));
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.server_timing, Some(want));
    }

    #[test]
    fn sse_first_token_skips_role_chunk_and_split_lines_work() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\" hello\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n"
        );
        let mut d = codec(false).stream_decoder();
        let t0 = Instant::now();
        // Feed in awkward pieces: line boundaries must not matter.
        for (i, piece) in stream.as_bytes().chunks(7).enumerate() {
            d.feed(piece, t0 + std::time::Duration::from_millis(i as u64))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, " hello");
        assert_eq!(r.reasoning.as_deref(), Some("think"));
        assert_eq!(r.chunks.len(), 2);
        assert!(
            r.first_token_at.is_some_and(|t| t > t0),
            "role chunk must not count as first token"
        );
        assert_eq!(
            r.first_reasoning_at, r.first_token_at,
            "reasoning came first"
        );
        assert!(
            r.first_answer_at > r.first_reasoning_at,
            "the answer came after the reasoning"
        );
        assert_eq!(r.usage.map(|u| u.completion_tokens), Some(2));
    }

    #[test]
    fn reasoning_knobs_are_chat_fields_and_a_budget_is_refused() {
        use batchbench_contract::spec::ReasoningEffort;
        let knobs = ReasoningKnobs {
            effort: Some(ReasoningEffort::Low),
            off: true,
            ..ReasoningKnobs::default()
        };
        let fields = codec(false)
            .reasoning_fields(&knobs)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fields,
            vec![
                ("reasoning_effort".to_owned(), Value::from("low")),
                (
                    "chat_template_kwargs".to_owned(),
                    serde_json::json!({"enable_thinking": false})
                ),
            ]
        );
        let budget = ReasoningKnobs {
            budget_tokens: Some(2048),
            ..ReasoningKnobs::default()
        };
        assert!(codec(false).reasoning_fields(&budget).is_err());
        assert_eq!(
            codec(false).reasoning_fields(&ReasoningKnobs::default()),
            Ok(Vec::new())
        );
    }

    #[test]
    fn think_tags_in_the_content_are_reasoning_with_reasoning_tags() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"<think>\\nhm\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\" yes\\n</thi\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"nk>\\n\\nok\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n"
        );
        let t0 = Instant::now();
        let ms = |i: u64| t0 + std::time::Duration::from_millis(i);
        let tagged = OpenAiChat {
            cfg: OpenAiChatConfig {
                reasoning_tags: true,
                ..OpenAiChatConfig::default()
            },
        };
        let mut d = tagged.stream_decoder();
        for (i, event) in stream.split_inclusive("\n\n").enumerate() {
            d.feed(event.as_bytes(), ms(i as u64 + 1))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.reasoning.as_deref(), Some("\nhm yes\n"));
        assert_eq!(r.content, "\n\nok");
        assert_eq!(r.first_reasoning_at, Some(ms(1)));
        assert_eq!(
            r.first_answer_at,
            Some(ms(3)),
            "the answer starts after </think>"
        );
        // Without the option the tags are the answer's.
        let mut d = codec(false).stream_decoder();
        d.feed(stream.as_bytes(), ms(1))
            .unwrap_or_else(|e| panic!("{e}"));
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert!(r.content.starts_with("<think>") && r.reasoning.is_none());
        // A whole JSON reply is split the same way.
        let body = br#"{"choices":[{"message":{"role":"assistant","content":"<think>a</think>b"},"finish_reason":"stop"}]}"#;
        let r = tagged.decode(body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (r.reasoning.as_deref(), r.content.as_str()),
            (Some("a"), "b")
        );
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let mut d = codec(false).stream_decoder();
        d.feed(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
            Instant::now(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err());
        let mut d = codec(false).stream_decoder();
        assert!(d.feed(b"data: {oops\n", Instant::now()).is_err());
    }
}
