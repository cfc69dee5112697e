//! The transcription and translation endpoints (`/v1/audio/transcriptions`,
//! `/v1/audio/translations`): a multipart form read into one request, its
//! clip's seconds from its WAV header ([`audio_clip`]). The replies are
//! [`apis`](crate::apis)' as every API's are, in vLLM's shapes.

use crate::SimConfig;
use crate::apis::{Msg, Prompt, Request, Thinking, audio_clip};
use serde_json::{Value, json};

/// One part of a multipart form: its name, and its file name where it is a
/// file.
struct Part<'a> {
    name: &'a str,
    filename: Option<&'a str>,
    body: &'a [u8],
}

/// The parts of a `multipart/form-data` body whose boundary the content
/// type names.
fn parts<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, String> {
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
        .filter(|_| content_type.trim_start().starts_with("multipart/form-data"))
        .ok_or("a transcription is a multipart/form-data upload with a boundary")?;
    let delim = format!("--{boundary}");
    let find = |hay: &[u8], from: usize| {
        memchr::memmem::find(&hay[from..], delim.as_bytes()).map(|i| i + from)
    };
    let mut at = find(body, 0).ok_or("the form has no part")?;
    let mut out = Vec::new();
    loop {
        at += delim.len();
        if body[at..].starts_with(b"--") {
            return Ok(out);
        }
        let start = at + 2; // \r\n after the delimiter
        let next = find(body, start).ok_or("the form is not closed")?;
        let part = body
            .get(start..next.saturating_sub(2))
            .ok_or("a form part is cut short")?;
        let split = memchr::memmem::find(part, b"\r\n\r\n").ok_or("a form part has no headers")?;
        let headers = std::str::from_utf8(&part[..split])
            .map_err(|_| "a form part's headers are not UTF-8")?;
        let disposition = headers
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .ok_or("a form part has no Content-Disposition")?;
        let param = |key: &str| {
            disposition.split(';').map(str::trim).find_map(|p| {
                p.strip_prefix(key)
                    .and_then(|v| v.strip_prefix('='))
                    .map(|v| v.trim_matches('"'))
            })
        };
        out.push(Part {
            name: param("name").ok_or("a form part has no name")?,
            filename: param("filename"),
            body: &part[split + 4..],
        });
        at = next;
    }
}

/// A transcription or translation form read into a request: the clip as
/// the prompt's audio (after the `prompt` field's text), a transcript of
/// the clip's length at the configured rate (capped by
/// `max_completion_tokens`), streamed with `stream=true`. Also the fields a
/// JSON request would have had, for what reads those (the adapter by
/// `model`).
pub fn form(cfg: &SimConfig, content_type: &str, body: &[u8]) -> Result<(Value, Request), String> {
    let parts = parts(content_type, body)?;
    let text = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name && p.filename.is_none())
            .map(|p| String::from_utf8_lossy(p.body).into_owned())
    };
    let file = parts
        .iter()
        .find(|p| p.name == "file")
        .ok_or("the form has no file")?;
    let (seconds, hash) = audio_clip(file.body, "file")?;
    let model = text("model");
    let flag = |name: &str| text(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let transcript = ((seconds * cfg.transcript_tokens_per_second).ceil() as u32).max(1);
    let cap = match text("max_completion_tokens") {
        Some(v) => v
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("max_completion_tokens: not a count: {v}"))?,
        None => u32::MAX,
    };
    let n = transcript.min(cap);
    let stream = flag("stream");
    let req = Request {
        prompt: Prompt::Templated {
            tools: Vec::new(),
            messages: vec![Msg {
                role: Some("user".into()),
                content: text("prompt").unwrap_or_default(),
                calls: Vec::new(),
                images: Vec::new(),
                audio: vec![(seconds, hash)],
                reasoning: String::new(),
            }],
        },
        items: 1,
        max: Some(n),
        min: n,
        ignore_eos: false,
        stream,
        usage_in_stream: stream && flag("stream_include_usage"),
        model: model.clone(),
        previous_response_id: None,
        store: false,
        user: None,
        thinking: Thinking::default(),
        structured: None,
    };
    Ok((json!({"model": model}), req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_reads_into_a_request_of_its_clips_length() {
        let cfg = SimConfig::default();
        let mut wav = batchbench_contract::audio::wav_header(16_000, 1, 32_000)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_vec();
        wav.extend(std::iter::repeat_n(0u8, 64_000));
        let b = "XyZ";
        let mut body = format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&wav);
        body.extend_from_slice(
            format!("\r\n--{b}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--{b}\r\nContent-Disposition: form-data; name=\"stream\"\r\n\r\ntrue\r\n--{b}--\r\n")
                .as_bytes(),
        );
        let (v, r) = form(&cfg, &format!("multipart/form-data; boundary={b}"), &body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["model"], "whisper");
        assert!(r.stream && !r.usage_in_stream);
        // Two seconds at three tokens a second.
        assert_eq!((r.max, r.min), (Some(6), 6));
        let Prompt::Templated { messages, .. } = &r.prompt else {
            panic!("templated")
        };
        assert!((messages[0].audio[0].0 - 2.0).abs() < 1e-12);
        assert!(form(&cfg, "application/json", &body).is_err());
        let e = form(
            &cfg,
            &format!("multipart/form-data; boundary={b}"),
            b"--XyZ--\r\n",
        )
        .err()
        .unwrap_or_default();
        assert!(e.contains("no file"), "{e}");
    }
}
