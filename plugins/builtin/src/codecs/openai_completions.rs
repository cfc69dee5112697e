//! `openai_completions`: the OpenAI completions API (`/v1/completions`), a
//! prompt string in, text out, as vLLM, SGLang and llama.cpp serve it.
//!
//! The prompt is the conversation's text with no chat template (tool
//! definitions, message texts and tool-call arguments joined by a newline;
//! one message is its text exactly): a request of
//! N exact tokens is a prompt of N tokens, plus the BOS token a server adds.
//! Output constraints go out as `min_tokens` / `max_tokens` (or SGLang's
//! `min_new_tokens` / `max_new_tokens`); streaming asks for usage in the stream.

use super::openai_chat::{OpenAiChatConfig, run_fields};
use super::wire::{
    SseEvents, SseStream, ThinkTags, choices_chunk, choices_reply, closed, fields, json_str,
    note_text, raw_with_fields, split_think, w,
};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder,
};
use batchbench_contract::registry::BuildContext;
use serde::Deserialize;
use std::borrow::Cow;
use std::time::Instant;

/// Config of [`OpenAiCompletions`]: that of the chat codec.
pub type OpenAiCompletionsConfig = OpenAiChatConfig;

/// The OpenAI completions codec.
#[derive(Debug, Clone, Default)]
pub struct OpenAiCompletions {
    cfg: OpenAiCompletionsConfig,
}

impl OpenAiCompletions {
    /// A codec with this config.
    pub fn new(cfg: OpenAiCompletionsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg })
    }
}

impl RequestCodec for OpenAiCompletions {
    /// The prompt is flat text of the answers: earlier reasoning never goes
    /// back (with `reasoning_tags` off, tags the model wrote stay in the text).
    fn reasoning_history(
        &self,
        asked: Option<batchbench_contract::spec::ReasoningHistory>,
    ) -> Result<batchbench_contract::spec::ReasoningHistory, String> {
        super::wire::flat_reasoning_history(asked)
    }

    fn endpoint(&self) -> &str {
        "/v1/completions"
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let set = run_fields(&self.cfg, req);
        if let Some(raw) = req.raw_body {
            return raw_with_fields(raw, req.model, set, out);
        }
        w(out, "{\"model\":");
        json_str(out, req.model)?;
        w(out, ",\"prompt\":");
        super::wire::write_flat_prompt(out, req.conversation)?;
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let (choice, reply) = choices_reply::<Choice<'_>>(body)?;
        let mut content = choice.text.map(Cow::into_owned).unwrap_or_default();
        let mut reasoning = None;
        if self.cfg.reasoning_tags {
            (reasoning, content) = split_think(&content);
        }
        Ok(Reply {
            content,
            reasoning,
            finish_reason: choice.finish_reason.map(Cow::into_owned),
            ..reply
        })
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::with(CompletionsEvents {
            tags: self.cfg.reasoning_tags.then(ThinkTags::default),
            ..CompletionsEvents::default()
        }))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

/// Decodes an SSE stream of completion chunks.
#[derive(Debug, Default)]
struct CompletionsEvents {
    reply: Reply,
    done: bool,
    /// With `reasoning_tags`: the text's `<think>` split, and the reasoning.
    tags: Option<ThinkTags>,
    reasoning: String,
}

impl CompletionsEvents {
    /// One event's data.
    fn on_data(&mut self, data: &[u8], now: Instant) -> Result<(), CodecError> {
        if let Some(choice) = choices_chunk::<Choice<'_>>(data, &mut self.done, &mut self.reply)? {
            if let Some(t) = choice.text.filter(|t| !t.is_empty()) {
                match &mut self.tags {
                    Some(tags) => {
                        let (think, answer) = tags.feed(&t);
                        note_text(&mut self.reply, &mut self.reasoning, &think, &answer, now);
                    }
                    None => note_text(&mut self.reply, &mut self.reasoning, "", &t, now),
                }
            }
            if let Some(f) = choice.finish_reason {
                self.reply.finish_reason = Some(f.into_owned());
            }
        }
        Ok(())
    }
}

impl SseEvents for CompletionsEvents {
    fn data(&mut self, _event: &str, data: &[u8], now: Instant) -> Result<(), CodecError> {
        self.on_data(data, now)
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
    name: "openai_completions",
    description: "OpenAI completions (/v1/completions, JSON and SSE): the conversation as one prompt string, no chat template",
    example: r#"{"sglang": false, "ignore_eos": true}"#,
    config: OpenAiCompletionsConfig,
    build: OpenAiCompletions::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Conversation, Message, Role};
    use serde_json::Value;

    #[test]
    fn encodes_the_prompt_and_the_runs_fields() {
        let mut conv = Conversation::default();
        conv.messages.push(Message::new(Role::User, "a \"b\"\n"));
        let extra = vec![("user".to_owned(), serde_json::json!("u"))];
        let req = EncodeRequest {
            model: "m",
            conversation: &conv,
            output: Some((8, 16)),
            stream: true,
            extra_fields: &extra,
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        OpenAiCompletions::default()
            .encode(&req, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_slice(&out.finish().concat()).unwrap_or_default();
        assert_eq!(v["prompt"], "a \"b\"\n");
        assert_eq!(
            (v["min_tokens"].clone(), v["max_tokens"].clone()),
            (8.into(), 16.into())
        );
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["user"], "u");
        assert!(v.get("messages").is_none());
    }

    #[test]
    fn decodes_json_and_streams() {
        let body = br#"{"choices":[{"text":"hi","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}"#;
        let r = OpenAiCompletions::default()
            .decode(body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "hi");
        assert_eq!(r.usage.and_then(|u| u.cached_tokens), Some(4));
        let mut d = OpenAiCompletions::default().stream_decoder();
        let t0 = Instant::now();
        let stream = "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        for p in stream.as_bytes().chunks(5) {
            d.feed(p, t0).unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "a b");
        assert_eq!(r.chunks.len(), 2);
        assert_eq!(r.usage.map(|u| u.completion_tokens), Some(2));
        let mut d = OpenAiCompletions::default().stream_decoder();
        d.feed(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", t0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err(), "truncated");
    }
}
