//! `openai_transcriptions`: speech to text, as OpenAI, vLLM and the servers
//! that copy them serve it: `/v1/audio/transcriptions` (or, with
//! `"task": "translation"`, `/v1/audio/translations`), a multipart form
//! upload whose `file` is the request's audio clip.
//!
//! The clip is the first audio clip of the conversation's last user message
//! (`batchbench --audio-ms` or `--audio-files`), and the message's text, when
//! it has any, goes as the `prompt` (the context the model is given). The
//! transcript's length is the model's: the run's output cap is not sent
//! (`max_completion_tokens` can be, through `--body-field`).
//!
//! Replies: `{"text": ...}` with a usage of tokens (OpenAI's
//! `{"type": "tokens", "input_tokens", "output_tokens"}`) or of duration
//! (vLLM's and Whisper's `{"type": "duration", "seconds"}`, which counts no
//! tokens); streamed, vLLM's `transcription.chunk` events (chat-completion
//! chunks, with `stream_include_usage` for the token counts) or OpenAI's
//! `transcript.text.delta` and `transcript.text.done` events.

use super::wire::{SseEvents, SseStream, choices_chunk, closed, error_in_200, note_text, w};
use batchbench_contract::plugin::{
    BodyWriter, CodecError, EncodeRequest, PluginError, Reply, RequestCodec, StreamDecoder, Usage,
};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::time::Instant;

/// The form's boundary: 40 characters that a WAV file's samples would
/// contain by chance once in 2^200 bytes.
const BOUNDARY: &str = "batchbench-form-9f3c2a7d41e8b65c0d17a2e4";

/// Config of [`OpenAiTranscriptions`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiTranscriptionsConfig {
    /// `transcription` (`/v1/audio/transcriptions`: the speech's own
    /// language) or `translation` (`/v1/audio/translations`: into English).
    pub task: String,
    /// `language`: the speech's language (ISO 639-1), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// `temperature` (absent: the server's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

impl Default for OpenAiTranscriptionsConfig {
    fn default() -> Self {
        Self {
            task: "transcription".into(),
            language: None,
            temperature: None,
        }
    }
}

/// The transcription and translation codec.
#[derive(Debug, Clone, Default)]
pub struct OpenAiTranscriptions {
    cfg: OpenAiTranscriptionsConfig,
    content_type: String,
}

impl OpenAiTranscriptions {
    /// A codec with this config.
    pub fn new(cfg: OpenAiTranscriptionsConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        if !matches!(cfg.task.as_str(), "transcription" | "translation") {
            return Err(PluginError::Config {
                plugin: "openai_transcriptions".into(),
                message: format!(
                    "task must be transcription or translation, got '{}'",
                    cfg.task
                ),
            });
        }
        if cfg.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
            return Err(PluginError::Config {
                plugin: "openai_transcriptions".into(),
                message: "temperature must be 0 to 2".into(),
            });
        }
        Ok(Self {
            cfg,
            content_type: format!("multipart/form-data; boundary={BOUNDARY}"),
        })
    }
}

/// Appends one text field of the form.
fn field(out: &mut BodyWriter, name: &str, value: &str) {
    w(out, "--");
    w(out, BOUNDARY);
    w(out, "\r\nContent-Disposition: form-data; name=\"");
    w(out, name);
    w(out, "\"\r\n\r\n");
    w(out, value);
    w(out, "\r\n");
}

/// A header value's characters that a form's field name or file name may not
/// hold as they are.
fn quoted_safe(s: &str) -> Cow<'_, str> {
    if s.contains(['"', '\r', '\n', '\\']) {
        Cow::Owned(s.replace(['"', '\r', '\n', '\\'], "_"))
    } else {
        Cow::Borrowed(s)
    }
}

impl RequestCodec for OpenAiTranscriptions {
    fn endpoint(&self) -> &str {
        if self.cfg.task == "translation" {
            "/v1/audio/translations"
        } else {
            "/v1/audio/transcriptions"
        }
    }

    fn supports_audio(&self) -> bool {
        true
    }

    fn requires_audio(&self) -> bool {
        true
    }

    fn content_type(&self) -> &str {
        &self.content_type
    }

    fn encode(&self, req: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
        if req.raw_body.is_some() {
            return Err(CodecError(
                "a transcription is a form upload: a verbatim JSON body cannot be sent".into(),
            ));
        }
        let msg = req
            .conversation
            .messages
            .iter()
            .rev()
            .find(|m| !m.audio.is_empty())
            .ok_or_else(|| {
                CodecError(
                    "a transcription request needs an audio clip (batchbench --audio-ms or --audio-files)"
                        .into(),
                )
            })?;
        let clip = &msg.audio[0];
        w(out, "--");
        w(out, BOUNDARY);
        w(
            out,
            "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"",
        );
        w(out, &quoted_safe(&clip.name));
        w(out, "\"\r\nContent-Type: audio/");
        w(out, clip.format);
        w(out, "\r\n\r\n");
        out.push_shared(clip.bytes.clone());
        w(out, "\r\n");
        field(out, "model", req.model);
        field(out, "response_format", "json");
        if !msg.content.is_empty() {
            field(out, "prompt", &msg.content);
        }
        if let Some(l) = &self.cfg.language {
            field(out, "language", l);
        }
        if let Some(t) = self.cfg.temperature {
            field(out, "temperature", &t.to_string());
        }
        if req.stream {
            field(out, "stream", "true");
            // vLLM's: the token counts on the last chunk.
            field(out, "stream_include_usage", "true");
        }
        for (k, v) in req.extra_fields {
            let text = match v {
                Value::String(s) => Cow::Borrowed(s.as_str()),
                v => Cow::Owned(v.to_string()),
            };
            field(out, &quoted_safe(k), &text);
        }
        w(out, "--");
        w(out, BOUNDARY);
        w(out, "--\r\n");
        Ok(())
    }

    fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
        let r: Transcript<'_> = serde_json::from_slice(body)
            .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
        if let Some(e) = &r.error {
            return Err(error_in_200(e));
        }
        let text = r
            .text
            .ok_or_else(|| CodecError("response has no text".into()))?;
        Ok(Reply {
            content: text.into_owned(),
            usage: r.usage.and_then(AudioUsage::into_usage),
            ..Reply::default()
        })
    }

    fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
        Box::new(SseStream::with(TranscriptEvents::default()))
    }
}

/// A transcription reply, or one of OpenAI's stream events.
#[derive(Deserialize)]
struct Transcript<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<AudioUsage>,
    #[serde(default)]
    error: Option<Value>,
}

/// A transcription's `usage`: tokens (OpenAI's, and vLLM's stream usage) or
/// the audio's duration (no tokens).
#[derive(Deserialize)]
struct AudioUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl AudioUsage {
    fn into_usage(self) -> Option<Usage> {
        let completion = self.output_tokens.or(self.completion_tokens)?;
        Some(Usage {
            prompt_tokens: self.input_tokens.or(self.prompt_tokens).unwrap_or(0),
            completion_tokens: completion,
            ..Usage::default()
        })
    }
}

/// A streamed transcription's delta (vLLM's chunks).
#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
}

/// Reads a streamed transcription: vLLM's chunks or OpenAI's events.
#[derive(Debug, Default)]
struct TranscriptEvents {
    reply: Reply,
    reasoning: String,
    done: bool,
}

impl SseEvents for TranscriptEvents {
    fn data(&mut self, _event: &str, data: &[u8], now: Instant) -> Result<(), CodecError> {
        // OpenAI's events name their type; vLLM's chunks are choices.
        if data.starts_with(b"{") && memchr::memmem::find(data, b"\"transcript.text.").is_some() {
            let e: Transcript<'_> = serde_json::from_slice(data)
                .map_err(|e| CodecError(format!("invalid stream event JSON: {e}")))?;
            match e.kind.as_deref() {
                Some("transcript.text.delta") => {
                    let d = e.delta.unwrap_or_default();
                    note_text(&mut self.reply, &mut self.reasoning, "", &d, now);
                }
                Some("transcript.text.done") => {
                    if let Some(u) = e.usage.and_then(AudioUsage::into_usage) {
                        self.reply.usage = Some(u);
                    }
                    self.reply.finish_reason = Some("stop".into());
                    self.done = true;
                }
                _ => {}
            }
            return Ok(());
        }
        if let Some(choice) = choices_chunk::<Choice<'_>>(data, &mut self.done, &mut self.reply)? {
            if let Some(c) = choice.delta.and_then(|d| d.content) {
                note_text(&mut self.reply, &mut self.reasoning, "", &c, now);
            }
            if let Some(f) = choice.finish_reason {
                self.reply.finish_reason = Some(f.into_owned());
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<Reply, CodecError> {
        let ended = self.done || self.reply.finish_reason.is_some();
        closed(
            ended,
            "its last event ([DONE] or transcript.text.done)",
            &mut self.reply,
            &mut self.reasoning,
        )
    }
}

batchbench_contract::register_codec! {
    name: "openai_transcriptions",
    description: "speech to text (/v1/audio/transcriptions, /v1/audio/translations): the request's audio clip uploaded as a form, JSON or SSE",
    example: r#"{"task": "transcription", "language": "en"}"#,
    config: OpenAiTranscriptionsConfig,
    build: OpenAiTranscriptions::new,
}

#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::audio::Audio;
    use batchbench_contract::conversation::{Conversation, Message, Role};
    use std::sync::Arc;

    fn codec(task: &str) -> OpenAiTranscriptions {
        let cfg = OpenAiTranscriptionsConfig {
            task: task.into(),
            language: Some("en".into()),
            temperature: None,
        };
        OpenAiTranscriptions::new(cfg, &BuildContext::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn body(
        codec: &OpenAiTranscriptions,
        stream: bool,
        audio: bool,
    ) -> Result<Vec<u8>, CodecError> {
        let mut conv = Conversation::default();
        let mut m = Message::new(Role::User, "names: Ada");
        if audio {
            m.audio.push(Arc::new(Audio {
                format: "wav",
                bytes: bytes::Bytes::from_static(b"RIFF\x00\x01WAVE"),
                base64: "".into(),
                seconds: 1.0,
                name: "a\"b.wav".into(),
            }));
        }
        conv.messages.push(m);
        let extra = [("max_completion_tokens".to_owned(), Value::from(64))];
        let req = EncodeRequest {
            model: "whisper",
            conversation: &conv,
            output: Some((0, 16)),
            stream,
            extra_fields: &extra,
            raw_body: None,
        };
        let mut out = BodyWriter::default();
        codec.encode(&req, &mut out)?;
        Ok(out.finish().concat())
    }

    #[test]
    fn the_clip_goes_as_the_forms_file_with_the_text_as_prompt() {
        let c = codec("transcription");
        assert_eq!(c.endpoint(), "/v1/audio/transcriptions");
        assert_eq!(codec("translation").endpoint(), "/v1/audio/translations");
        assert!(c.content_type().ends_with(BOUNDARY));
        let b = String::from_utf8_lossy(&body(&c, true, true).unwrap_or_default()).into_owned();
        let part = |name: &str| format!("name=\"{name}\"");
        assert!(b.starts_with(&format!("--{BOUNDARY}\r\n")), "{b}");
        assert!(b.contains("name=\"file\"; filename=\"a_b.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\u{0}\u{1}WAVE\r\n"), "{b}");
        for (k, v) in [
            ("model", "whisper"),
            ("prompt", "names: Ada"),
            ("language", "en"),
            ("response_format", "json"),
            ("stream", "true"),
            ("max_completion_tokens", "64"),
        ] {
            assert!(
                b.contains(&format!("{}\r\n\r\n{v}\r\n", part(k))),
                "{k} in {b}"
            );
        }
        assert!(b.ends_with(&format!("--{BOUNDARY}--\r\n")));
        // Unstreamed: no stream fields, and the output cap is never sent.
        let b = String::from_utf8_lossy(&body(&c, false, true).unwrap_or_default()).into_owned();
        assert!(
            !b.contains("name=\"stream") && !b.contains("max_tokens"),
            "{b}"
        );
        assert!(body(&c, false, false).is_err(), "no clip");
        assert!(
            OpenAiTranscriptions::new(
                OpenAiTranscriptionsConfig {
                    task: "speech".into(),
                    ..Default::default()
                },
                &BuildContext::default()
            )
            .is_err()
        );
    }

    #[test]
    fn replies_of_vllm_and_openai_read_alike() {
        let c = codec("transcription");
        // vLLM: a duration, no tokens.
        let r = c
            .decode(br#"{"text":"hello there","usage":{"type":"duration","seconds":3}}"#)
            .unwrap_or_default();
        assert_eq!((r.content.as_str(), r.usage), ("hello there", None));
        // OpenAI: tokens.
        let r = c
            .decode(
                br#"{"text":"hi","usage":{"type":"tokens","input_tokens":40,"output_tokens":2}}"#,
            )
            .unwrap_or_default();
        assert_eq!(
            r.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            Some((40, 2))
        );
        assert!(c.decode(br#"{"error":{"message":"bad audio"}}"#).is_err());
        // vLLM's stream.
        let mut d = c.stream_decoder();
        let now = Instant::now();
        for e in [
            r#"{"id":"trsc-1","object":"transcription.chunk","model":"w","choices":[{"delta":{"content":"hel"}}]}"#,
            r#"{"id":"trsc-1","object":"transcription.chunk","model":"w","choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            r#"{"id":"trsc-1","object":"transcription.chunk","model":"w","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":2,"total_tokens":52}}"#,
            "[DONE]",
        ] {
            d.feed(format!("data: {e}\n\n").as_bytes(), now)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_default();
        assert_eq!(r.content, "hello");
        assert_eq!(r.usage.map(|u| u.completion_tokens), Some(2));
        assert_eq!(r.chunks.len(), 2);
        // OpenAI's stream.
        let mut d = c.stream_decoder();
        for e in [
            r#"{"type":"transcript.text.delta","delta":"Hi"}"#,
            r#"{"type":"transcript.text.delta","delta":" you"}"#,
            r#"{"type":"transcript.text.done","text":"Hi you","usage":{"type":"tokens","input_tokens":9,"output_tokens":3}}"#,
        ] {
            d.feed(format!("data: {e}\n\n").as_bytes(), now)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let r = d.finish().unwrap_or_default();
        assert_eq!(
            (r.content.as_str(), r.usage.map(|u| u.completion_tokens)),
            ("Hi you", Some(3))
        );
        // Cut short.
        let mut d = c.stream_decoder();
        d.feed(
            b"data: {\"type\":\"transcript.text.delta\",\"delta\":\"a\"}\n\n",
            now,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(d.finish().is_err());
    }
}
