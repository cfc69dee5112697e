//! `sglang_generate`: SGLang's native `/generate` API.
//!
//! The prompt is the conversation's text with no chat template (as for
//! completions), sent as `text`, or with `{"input": "ids"}` as `input_ids`
//! tokenized by the client with the run's tokenizer; output bounds go in `sampling_params`
//! (`min_new_tokens`, `max_new_tokens`, `ignore_eos`). Usage and cached tokens
//! come from `meta_info`. A stream's `text` is the whole output so far (or,
//! with SGLang's incremental streaming, only the new part): each event adds
//! what it holds beyond the previous one.

use super::wire::{
    SseEvents, SseStream, ThinkTags, closed, error_in_200, fields, note_text, raw_with_fields,
    split_think, w,
};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, ServerTiming,
    StreamDecoder, Usage,
};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Instant;

/// What `/generate` is given as the prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GenerateInput {
    /// `text`: the server tokenizes.
    #[default]
    Text,
    /// `input_ids`: the client tokenizes, with the run's tokenizer.
    Ids,
}

/// Config of [`SglangGenerate`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SglangGenerateConfig {
    /// `text` (default) or `ids` (`input_ids`, tokenized by the client).
    pub input: GenerateInput,
    /// Send `"ignore_eos": true` in `sampling_params`.
    pub ignore_eos: bool,
    /// Sampling parameters sent with every request, beside the output bounds
    /// (`{"temperature": 0}`).
    pub sampling_params: serde_json::Map<String, Value>,
    /// The model's reasoning comes inside the text as `<think>...</think>`
    /// (`/generate` runs no reasoning parser): split it out of the answer.
    pub reasoning_tags: bool,
}

/// The SGLang `/generate` codec.
#[derive(Debug, Clone, Default)]
pub struct SglangGenerate {
    cfg: SglangGenerateConfig,
    /// The run's tokenizer, for `input_ids`.
    tokens: batchbench_contract::registry::TokenCounter,
}

impl SglangGenerate {
    /// A codec with this config.
    pub fn new(cfg: SglangGenerateConfig, ctx: &BuildContext) -> Result<Self, PluginError> {
        for k in ["max_new_tokens", "min_new_tokens"] {
            if cfg.sampling_params.contains_key(k) {
                return Err(PluginError::Config {
                    plugin: "sglang_generate".into(),
                    message: format!(
                        "sampling_params.{k}: the run sets the output bounds (--output-tokens)"
                    ),
                });
            }
        }
        if cfg.input == GenerateInput::Ids {
            // Load the tokenizer now, while the codec is built.
            ctx.tokens.ids("").map_err(|e| PluginError::Config {
                plugin: "sglang_generate".into(),
                message: format!(
                    "input \"ids\" needs the run's tokenizer (--tokenizer-model): {e}"
                ),
            })?;
        }
        Ok(Self {
            cfg,
            tokens: ctx.tokens.clone(),
        })
    }

    fn sampling(&self, req: &EncodeRequest<'_>) -> Value {
        let mut p = self.cfg.sampling_params.clone();
        if let Some((min, max)) = req.output {
            p.insert("max_new_tokens".into(), Value::from(max));
            if min > 0 {
                p.insert("min_new_tokens".into(), Value::from(min));
            }
        }
        if self.cfg.ignore_eos {
            p.insert("ignore_eos".into(), Value::Bool(true));
        }
        Value::Object(p)
    }
}

impl RequestCodec for SglangGenerate {
    /// The prompt is flat text of the answers: earlier reasoning never goes
    /// back (with `reasoning_tags` off, tags the model wrote stay in the text).
    fn reasoning_history(
        &self,
        asked: Option<batchbench_contract::spec::ReasoningHistory>,
    ) -> Result<batchbench_contract::spec::ReasoningHistory, String> {
        super::wire::flat_reasoning_history(asked)
    }

    fn endpoint(&self) -> &str {
        "/generate"
    }

    /// `sampling_params.json_schema`: the schema as a string (any object for
    /// `json_object`), which SGLang's grammar back end enforces.
    fn response_format_fields(
        &self,
        format: &batchbench_contract::spec::ResponseFormat,
    ) -> Result<Vec<(String, Value)>, String> {
        let schema = match &format.schema {
            None => serde_json::json!({"type": "object"}).to_string(),
            Some(schema) => schema.to_string(),
        };
        Ok(vec![(
            "sampling_params".to_owned(),
            serde_json::json!({ "json_schema": schema }),
        )])
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        let mut set: Vec<(&str, Value)> = vec![("sampling_params", self.sampling(req))];
        if req.stream {
            set.push(("stream", Value::Bool(true)));
        }
        for (k, v) in req.extra_fields {
            match (k.as_str(), v, &mut set[0].1) {
                // A field the run adds to the sampling parameters (the
                // structured format's schema) joins the codec's own.
                ("sampling_params", Value::Object(more), Value::Object(own)) => {
                    own.extend(more.clone());
                }
                _ => set.push((k.as_str(), v.clone())),
            }
        }
        if let Some(raw) = req.raw_body {
            // The body's own sampling parameters stay, under the run's.
            if let Some(Value::Object(own)) = raw.get("sampling_params") {
                let mut merged = own.clone();
                if let Value::Object(run) = &set[0].1 {
                    merged.extend(run.clone());
                }
                set[0].1 = Value::Object(merged);
            }
            // `/generate` takes no model field.
            return raw_with_fields(raw, "", set, out);
        }
        if self.cfg.input == GenerateInput::Ids {
            // The client tokenizes here, on the sending path: the price of
            // this mode (the default sends text).
            let text = super::wire::flat_text(req.conversation);
            let ids = self.tokens.ids(&text).map_err(CodecError)?;
            w(out, "{\"input_ids\":");
            super::wire::json_value(out, &Value::from(ids))?;
        } else {
            w(out, "{\"text\":");
            super::wire::write_flat_prompt(out, req.conversation)?;
        }
        fields(out, &set)?;
        w(out, "}");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
        // A batch answers with an array: the first is this request's.
        let g: Generated = serde_json::from_value(match v {
            Value::Array(mut a) if !a.is_empty() => a.swap_remove(0),
            other => other,
        })
        .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
        if let Some(e) = &g.error {
            return Err(error_in_200(e));
        }
        let mut meta = g.meta_info.unwrap_or_default();
        let id = meta.id.take();
        let (reasoning, content) = if self.cfg.reasoning_tags {
            split_think(&g.text)
        } else {
            (None, g.text)
        };
        Ok(Reply {
            content,
            reasoning,
            finish_reason: meta.finish(),
            usage: meta.usage(),
            server_timing: meta.server_timing(),
            response_id: None,
            id,
            ..Reply::default()
        })
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::with(GenerateEvents {
            tags: self.cfg.reasoning_tags.then(ThinkTags::default),
            ..GenerateEvents::default()
        }))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Generated {
    text: String,
    meta_info: Option<MetaInfo>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MetaInfo {
    /// The server's id of the request.
    id: Option<String>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    finish_reason: Option<Value>,
    /// Seconds from the request's arrival to this output, on the server's
    /// clock.
    e2e_latency: Option<f64>,
}

impl MetaInfo {
    /// The server's time on the request so far (`e2e_latency`, seconds).
    fn server_timing(&self) -> Option<ServerTiming> {
        let secs = self.e2e_latency.filter(|s| s.is_finite() && *s >= 0.0)?;
        Some(ServerTiming {
            total_ms: Some(secs * 1000.0),
            ..ServerTiming::default()
        })
    }

    fn usage(&self) -> Option<Usage> {
        Some(Usage {
            prompt_tokens: self.prompt_tokens?,
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: self.cached_tokens,
            reasoning_tokens: self.reasoning_tokens,
            items: None,
        })
    }

    /// `{"type": "length", ...}` as `length`; a plain string as it is.
    fn finish(&self) -> Option<String> {
        match self.finish_reason.as_ref()? {
            Value::Object(o) => o.get("type").and_then(Value::as_str).map(str::to_owned),
            Value::String(s) => Some(s.clone()),
            _ => None,
        }
    }
}

/// Decodes a `/generate` stream.
#[derive(Debug, Default)]
struct GenerateEvents {
    reply: Reply,
    done: bool,
    /// Whether each event's text is the whole output so far (decided by the
    /// second event with text).
    cumulative: Option<bool>,
    /// The whole output so far, reasoning and tags included.
    raw: String,
    /// With `reasoning_tags`: the text's `<think>` split, and the reasoning.
    tags: Option<ThinkTags>,
    reasoning: String,
}

impl GenerateEvents {
    /// One event's data.
    fn on_data(&mut self, data: &[u8], now: Instant) -> Result<(), CodecError> {
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        if self.done {
            return Err(CodecError("data after [DONE]".into()));
        }
        let g: Generated = serde_json::from_slice(data)
            .map_err(|e| CodecError(format!("invalid stream chunk JSON: {e}")))?;
        if let Some(e) = &g.error {
            return Err(error_in_200(e));
        }
        // Cumulative text repeats what came before; incremental text does
        // not. The second event with text decides which, for the stream.
        if self.cumulative.is_none() && !self.raw.is_empty() && !g.text.is_empty() {
            self.cumulative =
                Some(g.text.len() > self.raw.len() && g.text.starts_with(self.raw.as_str()));
        }
        let new = match self.cumulative {
            Some(true) => g
                .text
                .strip_prefix(self.raw.as_str())
                .map(str::to_owned)
                .ok_or_else(|| {
                    CodecError("a cumulative stream's text does not extend the text before".into())
                })?,
            _ => g.text,
        };
        if !new.is_empty() {
            self.raw.push_str(&new);
            match &mut self.tags {
                Some(tags) => {
                    let (think, answer) = tags.feed(&new);
                    note_text(&mut self.reply, &mut self.reasoning, &think, &answer, now);
                }
                None => note_text(&mut self.reply, &mut self.reasoning, "", &new, now),
            }
        }
        if let Some(mut meta) = g.meta_info {
            if self.reply.id.is_none() {
                self.reply.id = meta.id.take();
            }
            if let Some(u) = meta.usage() {
                self.reply.usage = Some(u);
            }
            if let Some(f) = meta.finish() {
                self.reply.finish_reason = Some(f);
            }
            if let Some(t) = meta.server_timing() {
                self.reply.server_timing = Some(t);
            }
        }
        Ok(())
    }
}

impl SseEvents for GenerateEvents {
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
            "its finish reason and [DONE]",
            &mut self.reply,
            &mut self.reasoning,
        )
    }
}

batchbench_contract::register_codec! {
    name: "sglang_generate",
    description: "SGLang's native /generate (JSON and SSE): text prompt, sampling_params, meta_info usage and cached tokens",
    example: r#"{"ignore_eos": true, "sampling_params": {"temperature": 0}}"#,
    config: SglangGenerateConfig,
    build: SglangGenerate::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::conversation::{Conversation, Message, Role};

    #[test]
    fn encodes_text_and_sampling_params() {
        let mut conv = Conversation::default();
        conv.messages.push(Message::new(Role::User, "hello"));
        let req = EncodeRequest {
            model: "m",
            conversation: &conv,
            output: Some((3, 3)),
            stream: true,
            extra_fields: &[],
            raw_body: None,
        };
        let codec = SglangGenerate {
            cfg: SglangGenerateConfig {
                ignore_eos: true,
                sampling_params: serde_json::from_str(r#"{"temperature":0}"#).unwrap_or_default(),
                ..SglangGenerateConfig::default()
            },
            ..SglangGenerate::default()
        };
        let mut out = BodyWriter::default();
        codec
            .encode(&req, &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_slice(&out.finish().concat()).unwrap_or_default();
        assert_eq!(v["text"], "hello");
        assert_eq!(v["sampling_params"]["max_new_tokens"], 3);
        assert_eq!(v["sampling_params"]["min_new_tokens"], 3);
        assert_eq!(v["sampling_params"]["ignore_eos"], true);
        assert_eq!(v["sampling_params"]["temperature"], 0);
        assert_eq!(v["stream"], true);
        assert!(v.get("model").is_none());
    }

    #[test]
    fn decodes_json_and_cumulative_or_incremental_streams() {
        let body = br#"{"text":"hi there","meta_info":{"prompt_tokens":9,"completion_tokens":2,"cached_tokens":8,"finish_reason":{"type":"length","length":2}}}"#;
        let r = SglangGenerate::default()
            .decode(body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.content, "hi there");
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.usage.and_then(|u| u.cached_tokens), Some(8));
        for texts in [["a", "a b", "a b c"], ["a", " b", " c"]] {
            let mut stream = String::new();
            for (i, t) in texts.iter().enumerate() {
                let finish = if i == 2 {
                    r#"{"type":"length","length":3}"#
                } else {
                    "null"
                };
                stream.push_str(&format!(
                    "data: {{\"text\":\"{t}\",\"meta_info\":{{\"prompt_tokens\":4,\"completion_tokens\":{},\"finish_reason\":{finish}}}}}\n\n",
                    i + 1
                ));
            }
            stream.push_str("data: [DONE]\n\n");
            let mut d = SglangGenerate::default().stream_decoder();
            for p in stream.as_bytes().chunks(6) {
                d.feed(p, Instant::now()).unwrap_or_else(|e| panic!("{e}"));
            }
            let r = d.finish().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.content, "a b c", "{texts:?}");
            assert_eq!(r.chunks.len(), 3);
            assert_eq!(r.usage.map(|u| u.completion_tokens), Some(3));
        }
        let mut d = SglangGenerate::default().stream_decoder();
        d.feed(b"data: {\"text\":\"a\"}\n\n", Instant::now())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err(), "truncated");
    }
}
