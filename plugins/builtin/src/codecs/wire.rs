//! What the built-in codecs share: JSON writing helpers, a verbatim body with
//! the run's fields on top, a conversation flattened into one prompt, and the
//! lines of a server-sent event stream.

use batchbench_contract::conversation::Conversation;
use batchbench_contract::plugin::{
    BodyWriter, CodecError, Reply, RequestCodec, ServerTiming, StreamDecoder, Usage,
};
use serde::Deserialize;
use serde_json::Value;
use std::io::Write;
use std::time::Instant;

/// Writes `s` (writing to memory cannot fail).
pub(crate) fn w<W: Write>(out: &mut W, s: &str) {
    let _ = out.write_all(s.as_bytes());
}

/// Writes `,"key":n` (a key that needs no escaping).
pub(crate) fn num_field<W: Write>(out: &mut W, key: &str, n: u64) {
    w(out, ",\"");
    w(out, key);
    w(out, "\":");
    num(out, n);
}

/// Writes `n` in decimal, without the formatting machinery.
pub(crate) fn num<W: Write>(out: &mut W, n: u64) {
    w(out, itoa::Buffer::new().format(n));
}

/// Writes `s` as a JSON string, escaped as serde_json escapes it (a quote,
/// a backslash and the control characters; nothing else), runs of plain
/// text copied whole.
pub(crate) fn json_str<W: Write>(out: &mut W, s: &str) -> Result<(), CodecError> {
    let mut put = |b: &[u8]| out.write_all(b).map_err(|e| CodecError(e.to_string()));
    let s = s.as_bytes();
    put(b"\"")?;
    let mut i = 0;
    while let Some(k) = special(&s[i..]) {
        put(&s[i..i + k])?;
        let b = s[i + k];
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            _ => 0,
        };
        if short == 0 {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ])?;
        } else {
            put(&[b'\\', short])?;
        }
        i += k + 1;
    }
    put(&s[i..])?;
    put(b"\"")
}

/// Where the first byte that ends a run of a string's plain text lies (a
/// quote, a backslash or a control character), eight bytes at a time.
pub(crate) fn special(s: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let mut i = 0;
    while let Some(word) = s.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().ok()?);
        // A byte's high bit is set where it is zero after the xor, or
        // below 0x20; only the lowest flagged byte is sure to be one.
        let zero = |v: u64| v.wrapping_sub(ONES) & !v;
        let hit = (zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w))
            & HIGH;
        if hit != 0 {
            return Some(i + hit.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    s[i..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|k| i + k)
}

/// Writes a JSON value.
pub(crate) fn json_value<W: Write>(out: &mut W, v: &Value) -> Result<(), CodecError> {
    serde_json::to_writer(&mut *out, v).map_err(|e| CodecError(e.to_string()))
}

/// Writes `,"key":value` for each field.
pub(crate) fn fields(out: &mut BodyWriter, set: &[(&str, Value)]) -> Result<(), CodecError> {
    for (k, v) in set {
        w(out, ",");
        json_str(out, k)?;
        w(out, ":");
        json_value(out, v)?;
    }
    Ok(())
}

/// A verbatim body with the fields the run sets on top: the body's own fields
/// as written (those the run sets are replaced, never written twice), then the
/// run's. `model` is set only when the body names none.
pub(crate) fn raw_with_fields(
    raw: &serde_json::Map<String, Value>,
    model: &str,
    mut set: Vec<(&str, Value)>,
    out: &mut BodyWriter,
) -> Result<(), CodecError> {
    if !model.is_empty() && !raw.contains_key("model") {
        set.insert(0, ("model", Value::from(model)));
    }
    w(out, "{");
    let mut first = true;
    let own = raw
        .iter()
        .filter(|(k, _)| !set.iter().any(|(s, _)| s == k))
        .map(|(k, v)| (k.as_str(), v));
    for (k, v) in own.chain(set.iter().map(|(k, v)| (*k, v))) {
        if !first {
            w(out, ",");
        }
        first = false;
        json_str(out, k)?;
        w(out, ":");
        json_value(out, v)?;
    }
    w(out, "}");
    Ok(())
}

/// The separator between the texts of a flattened conversation.
pub const FLAT_JOIN: &str = "\n";

/// The texts of a flat prompt from message `from` on (the tool definitions
/// first when `from` is 0), in order: each message's text (unless it only
/// carries tool calls), then its calls' arguments.
fn flat_pieces(conv: &Conversation, from: usize) -> impl Iterator<Item = &str> {
    let tools = conv.tools.iter().filter(move |_| from == 0).map(|t| &**t);
    let messages = conv.messages[from..].iter().flat_map(|m| {
        let text = (!m.content.is_empty() || m.tool_calls.is_empty()).then_some(&*m.content);
        text.into_iter()
            .chain(m.tool_calls.iter().map(|c| &*c.arguments))
    });
    tools.chain(messages)
}

/// What a flat prompt sends back of earlier reasoning: nothing, for it is
/// the text of the answers (with the codec's `reasoning_tags` off, the tags a
/// model wrote stay in its answer and go back with it).
pub(crate) fn flat_reasoning_history(
    asked: Option<batchbench_contract::spec::ReasoningHistory>,
) -> Result<batchbench_contract::spec::ReasoningHistory, String> {
    match asked {
        Some(batchbench_contract::spec::ReasoningHistory::Keep) => Err("a flat prompt sends the answers alone; with the codec's reasoning_tags off, the <think> text stays in the answer and goes back with it".into()),
        _ => Ok(batchbench_contract::spec::ReasoningHistory::Drop),
    }
}

/// The conversation as one prompt text, as [`write_flat_prompt`] sends it.
pub(crate) fn flat_text(conv: &Conversation) -> String {
    flat_pieces(conv, 0).collect::<Vec<_>>().join(FLAT_JOIN)
}

/// Writes the conversation as one JSON string for APIs that take a plain
/// prompt (completions, SGLang's `/generate`): the texts of its tool
/// definitions, messages and tool-call arguments, in order, joined by a
/// newline, with no chat template. A one-message conversation is its text
/// exactly. Texts written for an earlier turn are kept in the conversation's
/// wire cache and sent uncopied, as the chat codec does with messages.
pub(crate) fn write_flat_prompt(
    out: &mut BodyWriter,
    conv: &Conversation,
) -> Result<(), CodecError> {
    let mut cache = conv.wire.borrow_mut();
    if cache.messages > conv.messages.len() || (cache.messages == 0 && !cache.chunks.is_empty()) {
        *cache = Default::default();
    }
    let mut chunk: Vec<u8> = Vec::new();
    // A JSON string's inside: its escaped text without the quotes. Escaping
    // is per character, so escaped pieces join into the escaped whole.
    let escaped = |text: &str| -> Result<Vec<u8>, CodecError> {
        let s = serde_json::to_vec(text).map_err(|e| CodecError(e.to_string()))?;
        Ok(s[1..s.len() - 1].to_vec())
    };
    let join = escaped(FLAT_JOIN)?;
    let push = |chunk: &mut Vec<u8>, first: bool, text: &str| -> Result<(), CodecError> {
        if !first {
            chunk.extend_from_slice(&join);
        }
        chunk.extend_from_slice(&escaped(text)?);
        Ok(())
    };
    let mut first = cache.chunks.is_empty();
    for text in flat_pieces(conv, cache.messages) {
        push(&mut chunk, first, text)?;
        first = false;
    }
    // Pushed even when empty: an empty first text still counts as written, so
    // the next one is joined after it as a fresh encoding would.
    cache.chunks.push(bytes::Bytes::from(chunk));
    cache.messages = conv.messages.len();
    out.write(b"\"");
    for c in &cache.chunks {
        out.push_shared(c.clone());
    }
    out.write(b"\"");
    Ok(())
}

/// What [`SseLines`] hands each data line to: `(event name, data)`.
pub type OnData<'a> = dyn FnMut(&str, &[u8]) -> Result<(), CodecError> + 'a;

/// The lines of a server-sent event stream, fed in arbitrary pieces: each
/// `data:` line is handed over with the event name in force (`event:`), and
/// comments and blank lines are skipped.
#[derive(Debug, Default)]
pub struct SseLines {
    buf: Vec<u8>,
    event: String,
}

impl SseLines {
    /// Feeds `bytes`; `f(event, data)` is called for each complete data line.
    ///
    /// Complete lines are read where they lie in `bytes`; only a line cut at
    /// the end of a piece is held, until the piece that completes it.
    pub fn feed(&mut self, bytes: &[u8], f: &mut OnData<'_>) -> Result<(), CodecError> {
        let mut rest = bytes;
        if !self.buf.is_empty() {
            let Some(pos) = memchr::memchr(b'\n', rest) else {
                self.buf.extend_from_slice(rest);
                return Ok(());
            };
            self.buf.extend_from_slice(&rest[..pos]);
            let held = std::mem::take(&mut self.buf);
            Self::line(&mut self.event, &held, f)?;
            // Its room serves the next cut line.
            self.buf = held;
            self.buf.clear();
            rest = &rest[pos + 1..];
        }
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            Self::line(&mut self.event, &rest[..pos], f)?;
            rest = &rest[pos + 1..];
        }
        self.buf.extend_from_slice(rest);
        Ok(())
    }

    /// Ends the stream: a last line without its newline is handed over too.
    pub fn finish(&mut self, f: &mut OnData<'_>) -> Result<(), CodecError> {
        let rest = std::mem::take(&mut self.buf);
        if !rest.is_empty() {
            Self::line(&mut self.event, &rest, f)?;
        }
        Ok(())
    }

    fn line(event: &mut String, line: &[u8], f: &mut OnData<'_>) -> Result<(), CodecError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            event.clear();
        } else if let Some(name) = line.strip_prefix(b"event:") {
            let name = name.strip_prefix(b" ").unwrap_or(name);
            *event = String::from_utf8_lossy(name).into_owned();
        } else if let Some(data) = line.strip_prefix(b"data:") {
            let data = data.strip_prefix(b" ").unwrap_or(data);
            f(event, data)?;
        }
        Ok(())
    }
}

/// A codec's reading of a server-sent event stream, event by event.
pub(crate) trait SseEvents: Send {
    /// One `data:` line, under its `event:` name, received at `now`.
    fn data(&mut self, event: &str, data: &[u8], now: std::time::Instant)
    -> Result<(), CodecError>;
    /// The stream ended: the reply, or why the stream was incomplete.
    fn close(&mut self) -> Result<Reply, CodecError>;
}

/// A [`StreamDecoder`] of the events `E` reads from the lines of an SSE stream.
#[derive(Debug, Default)]
pub(crate) struct SseStream<E> {
    lines: SseLines,
    events: E,
}

impl<E> SseStream<E> {
    /// A stream whose events start as `events` (a codec's options in them).
    pub(crate) fn with(events: E) -> Self {
        Self {
            lines: SseLines::default(),
            events,
        }
    }
}

impl<E: SseEvents> StreamDecoder for SseStream<E> {
    fn feed(&mut self, bytes: &[u8], now: std::time::Instant) -> Result<(), CodecError> {
        let Self { lines, events } = self;
        lines.feed(bytes, &mut |e, d| events.data(e, d, now))
    }

    fn finish(&mut self) -> Result<Reply, CodecError> {
        let Self { lines, events } = self;
        let now = std::time::Instant::now();
        lines.finish(&mut |e, d| events.data(e, d, now))?;
        events.close()
    }
}

/// The reply of a stream at its close: refused as truncated unless the
/// stream `ended` (its last event, named by `last`, came), with the reasoning
/// text read on the way.
pub(crate) fn closed(
    ended: bool,
    last: &str,
    reply: &mut Reply,
    reasoning: &mut String,
) -> Result<Reply, CodecError> {
    if !ended {
        return Err(CodecError(format!(
            "stream ended before {last} (truncated)"
        )));
    }
    let mut reply = std::mem::take(reply);
    if !reasoning.is_empty() {
        reply.reasoning = Some(std::mem::take(reasoning));
    }
    Ok(reply)
}

/// A JSON reply of choices (chat completions and completions): its first
/// choice for the codec to read, and the reply with the usage and llama.cpp's
/// timings filled in. An error object in a 200 and a reply without choices
/// are failures.
pub(crate) fn choices_reply<'a, C: Deserialize<'a>>(
    body: &'a [u8],
) -> Result<(C, Reply), CodecError> {
    let r: ChoicesResponse<'a, C> = serde_json::from_slice(body)
        .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
    if let Some(e) = &r.error {
        return Err(error_in_200(e));
    }
    let choice = r
        .choices
        .ok_or_else(|| CodecError("response has no choices".into()))?;
    let reply = Reply {
        usage: r.usage.map(WireUsage::into_usage),
        server_timing: r.timings.and_then(WireTimings::into_server_timing),
        id: r.id.map(std::borrow::Cow::into_owned),
        ..Reply::default()
    };
    Ok((choice, reply))
}

/// One `data:` line of a stream of choices chunks (chat completions and
/// completions): `[DONE]` ends the stream (`done`), and a chunk's error, usage
/// and llama.cpp timings go into `reply`; its first choice is the codec's to
/// read.
pub(crate) fn choices_chunk<'a, C: Deserialize<'a>>(
    data: &'a [u8],
    done: &mut bool,
    reply: &mut Reply,
) -> Result<Option<C>, CodecError> {
    if data == b"[DONE]" {
        *done = true;
        return Ok(None);
    }
    if *done {
        return Err(CodecError("data after [DONE]".into()));
    }
    let chunk: ChoicesResponse<'a, C> = serde_json::from_slice(data)
        .map_err(|e| CodecError(format!("invalid stream chunk JSON: {e}")))?;
    if let Some(e) = &chunk.error {
        return Err(error_in_200(e));
    }
    // Every chunk repeats the response's id: the first one gives it.
    if reply.id.is_none()
        && let Some(id) = chunk.id
    {
        reply.id = Some(id.into_owned());
    }
    if let Some(u) = chunk.usage {
        reply.usage = Some(u.into_usage());
    }
    if let Some(t) = chunk.timings.and_then(WireTimings::into_server_timing) {
        reply.server_timing = Some(t);
    }
    Ok(chunk.choices)
}

/// A response of choices (chat completions and completions, a JSON reply or
/// one chunk of a stream): the choices, the usage, llama.cpp's own timings,
/// and an error object in a successful response (some gateways answer 200).
#[derive(Deserialize)]
pub(crate) struct ChoicesResponse<'a, C> {
    /// The response's id (borrowed from the body unless it has escapes).
    #[serde(default, borrow)]
    pub(crate) id: Option<std::borrow::Cow<'a, str>>,
    /// The first choice: the run asks for one (`n` is never sent), and the
    /// others, where a server sends them, are skipped unread (no vector is
    /// built for a chunk's one choice).
    #[serde(
        default = "Option::default",
        deserialize_with = "first_choice",
        bound(deserialize = "C: Deserialize<'de>")
    )]
    pub(crate) choices: Option<C>,
    #[serde(default)]
    pub(crate) usage: Option<WireUsage>,
    #[serde(default)]
    pub(crate) timings: Option<WireTimings>,
    #[serde(default)]
    pub(crate) error: Option<Value>,
}

/// The first element of an array, the others skipped without being built.
fn first_choice<'de, D, C>(d: D) -> Result<Option<C>, D::Error>
where
    D: serde::Deserializer<'de>,
    C: Deserialize<'de>,
{
    struct First<C>(std::marker::PhantomData<C>);
    impl<'de, C: Deserialize<'de>> serde::de::Visitor<'de> for First<C> {
        type Value = Option<C>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of choices")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Option<C>, A::Error> {
            let first = seq.next_element()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    d.deserialize_seq(First(std::marker::PhantomData))
}

/// llama.cpp's `timings` object (chat and completions; in a stream, on the
/// last chunk): the server's prompt and generation times on its own clock.
#[derive(Deserialize)]
pub(crate) struct WireTimings {
    #[serde(default)]
    prompt_ms: Option<f64>,
    #[serde(default)]
    predicted_ms: Option<f64>,
    #[serde(default)]
    cache_n: Option<u64>,
}

impl WireTimings {
    /// The timings, when the object carries a time at all.
    pub(crate) fn into_server_timing(self) -> Option<ServerTiming> {
        (self.prompt_ms.is_some() || self.predicted_ms.is_some()).then_some(ServerTiming {
            prompt_ms: self.prompt_ms,
            predicted_ms: self.predicted_ms,
            total_ms: None,
            cached_tokens: self.cache_n,
        })
    }
}

/// OpenAI's `usage` object (chat and completions).
#[derive(Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<Details>,
    #[serde(default)]
    completion_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    pub(crate) fn into_usage(self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.prompt_tokens_details.and_then(|d| d.cached_tokens),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|d| d.reasoning_tokens),
            items: None,
        }
    }
}

/// The message of an error object (`{"message": ...}`), or the object itself,
/// at most 300 characters.
pub(crate) fn error_message(e: &Value) -> String {
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| e.to_string(), str::to_owned);
    message.chars().take(300).collect()
}

/// The failure of an error that came in a successful (HTTP 200) response.
pub(crate) fn error_in_200(e: &Value) -> CodecError {
    CodecError(format!(
        "the server answered HTTP 200 with an error: {}",
        error_message(e)
    ))
}

/// A chat-completions tool definition (`{"type": "function", "function":
/// {...}}`) as its function object; another shape as it is.
pub(crate) fn tool_function(tool: &str) -> Result<serde_json::Map<String, Value>, CodecError> {
    let v: Value = serde_json::from_str(tool)
        .map_err(|e| CodecError(format!("a tool definition is not JSON: {e}")))?;
    match v {
        Value::Object(mut o) => match o.remove("function") {
            Some(Value::Object(f)) => Ok(f),
            Some(other) => {
                o.insert("function".into(), other);
                Ok(o)
            }
            None => Ok(o),
        },
        _ => Err(CodecError("a tool definition is not a JSON object".into())),
    }
}

/// The chunks a stream's record makes room for at its first text (and eight
/// bytes of answer each): a short reply grows no vector chunk by chunk.
const FIRST_ROOM: usize = 32;

/// Notes streamed text of a reply that arrived at `now`: its reasoning
/// (`think`, gathered in `reasoning`) and its answer, with the first token of
/// each and the chunk's bytes for the inter-token figures.
pub(crate) fn note_text(
    reply: &mut Reply,
    reasoning: &mut String,
    think: &str,
    answer: &str,
    now: std::time::Instant,
) {
    if !think.is_empty() {
        reasoning.push_str(think);
        reply.first_reasoning_at.get_or_insert(now);
    }
    if !answer.is_empty() {
        if reply.content.capacity() == 0 {
            // Room for a short reply at once, not a growth per few chunks.
            reply.content.reserve(FIRST_ROOM * 8);
        }
        reply.content.push_str(answer);
        reply.first_answer_at.get_or_insert(now);
    }
    let bytes = think.len() + answer.len();
    if bytes > 0 {
        reply.first_token_at.get_or_insert(now);
        if reply.chunks.capacity() == 0 {
            reply.chunks.reserve(FIRST_ROOM);
        }
        reply
            .chunks
            .push((now, u32::try_from(bytes).unwrap_or(u32::MAX)));
    }
}

/// A whole reply's content split by [`ThinkTags`]: its reasoning (none when
/// it did not open with `<think>`) and its answer.
pub(crate) fn split_think(content: &str) -> (Option<String>, String) {
    let mut t = ThinkTags::default();
    let (mut r, mut a) = t.feed(content);
    let (r2, a2) = t.finish();
    r.push_str(&r2);
    a.push_str(&a2);
    (t.opened().then_some(r), a)
}

/// Reasoning inside the content, as `<think>...</think>` (a server that runs
/// no reasoning parser passes the model's tags through): splits a stream of
/// content text into reasoning and answer. Reasoning is what follows an
/// opening `<think>` at the start of the output (after white space) up to
/// `</think>`; a reply that does not open with the tag is all answer. The
/// tags themselves belong to neither part. A tag split between two chunks
/// waits for the next one.
#[derive(Debug, Default, Clone)]
pub(crate) struct ThinkTags {
    state: TagState,
    /// Text held back: white space before the output's first word, or what
    /// may be the start of a tag.
    held: String,
    /// The output opened with `<think>`.
    opened: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum TagState {
    /// Nothing but white space yet.
    #[default]
    Start,
    Reasoning,
    Answer,
}

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// The length of the longest end of `text` that begins `tag` (a tag cut by a
/// chunk's end).
fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

impl ThinkTags {
    /// Feeds one chunk of content; returns its reasoning and answer parts
    /// (either may be empty while text is held back).
    pub(crate) fn feed(&mut self, chunk: &str) -> (String, String) {
        let mut text = std::mem::take(&mut self.held);
        text.push_str(chunk);
        let (mut reasoning, mut answer) = (String::new(), String::new());
        loop {
            match self.state {
                TagState::Start => {
                    let body = text.trim_start();
                    if let Some(rest) = body.strip_prefix(OPEN) {
                        text = rest.to_owned();
                        self.state = TagState::Reasoning;
                        self.opened = true;
                    } else if OPEN.starts_with(body) {
                        // White space, or the start of the tag: wait.
                        self.held = text;
                        break;
                    } else {
                        self.state = TagState::Answer;
                    }
                }
                TagState::Reasoning => match text.find(CLOSE) {
                    Some(i) => {
                        reasoning.push_str(&text[..i]);
                        text = text[i + CLOSE.len()..].to_owned();
                        self.state = TagState::Answer;
                    }
                    None => {
                        let keep = partial_tag(&text, CLOSE);
                        reasoning.push_str(&text[..text.len() - keep]);
                        self.held = text[text.len() - keep..].to_owned();
                        break;
                    }
                },
                TagState::Answer => {
                    answer.push_str(&text);
                    break;
                }
            }
        }
        (reasoning, answer)
    }

    /// Whether the output opened with `<think>`.
    pub(crate) fn opened(&self) -> bool {
        self.opened
    }

    /// The stream ended: what was held back, as the part it belongs to (a
    /// reply of white space only, or reasoning cut before its `</think>`).
    pub(crate) fn finish(&mut self) -> (String, String) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            TagState::Reasoning => (held, String::new()),
            TagState::Start | TagState::Answer => (String::new(), held),
        }
    }
}

/// A body read whole by its codec's `decode`, for a run that streams against
/// an API that does not (embeddings, rerank, score).
#[derive(Debug)]
pub(crate) struct WholeBody<C> {
    codec: C,
    body: Vec<u8>,
}

impl<C> WholeBody<C> {
    /// A decoder of one body for `codec`.
    pub(crate) fn new(codec: C) -> Self {
        Self {
            codec,
            body: Vec::new(),
        }
    }
}

impl<C: RequestCodec + Send> StreamDecoder for WholeBody<C> {
    fn feed(&mut self, bytes: &[u8], _now: Instant) -> Result<(), CodecError> {
        self.body.extend_from_slice(bytes);
        Ok(())
    }

    fn finish(&mut self) -> Result<Reply, CodecError> {
        self.codec.decode(&std::mem::take(&mut self.body))
    }
}

/// The body of an API that answers its inputs, not with text: embeddings'
/// `data`, rerank's `results`, score's `data`; usage in prompt tokens (or
/// total tokens, where that is all it says).
#[derive(Debug, Deserialize)]
struct ItemsBody {
    #[serde(default)]
    data: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    results: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    usage: Option<ItemsUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ItemsUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: u64,
}

/// The reply of such a body: its inputs answered as items; `none` says what
/// a body that answers none lacks.
pub(crate) fn items_reply(body: &[u8], none: &str) -> Result<Reply, CodecError> {
    let r: ItemsBody = serde_json::from_slice(body)
        .map_err(|e| CodecError(format!("invalid response JSON: {e}")))?;
    if let Some(e) = &r.error {
        return Err(error_in_200(e));
    }
    let items = r.data.len().max(r.results.len()) as u64;
    if items == 0 {
        return Err(CodecError(format!("the response holds no {none}")));
    }
    Ok(Reply {
        usage: r.usage.map(|u| Usage {
            prompt_tokens: u.prompt_tokens.unwrap_or(u.total_tokens),
            completion_tokens: 0,
            cached_tokens: None,
            reasoning_tokens: None,
            items: Some(items),
        }),
        finish_reason: Some("stop".into()),
        ..Reply::default()
    })
}

/// `"name":[...]`, the texts of `messages` as a JSON array of strings, after
/// a comma (an input list: embeddings' `input`, rerank's `documents`).
pub(crate) fn texts(
    out: &mut BodyWriter,
    name: &str,
    messages: &[batchbench_contract::conversation::Message],
) -> Result<(), CodecError> {
    w(out, ",");
    json_str(out, name)?;
    w(out, ":[");
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            w(out, ",");
        }
        json_str(out, &m.content)?;
    }
    w(out, "]");
    Ok(())
}
#[cfg(test)]
mod tests {
    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 4096, 1_000_000_007, u64::MAX] {
            let mut out = Vec::new();
            super::num(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
        let mut out = Vec::new();
        super::num_field(&mut out, "max_tokens", 16);
        assert_eq!(out, b",\"max_tokens\":16");
    }

    use super::*;

    /// The word-at-a-time search finds what a byte-by-byte one finds, at
    /// every length and place, whatever bytes come before and after.
    #[test]
    fn the_end_of_plain_text_is_found_as_byte_by_byte() {
        let naive = |s: &[u8]| s.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pool = *b"\"\\\x00\x1f\x20\x21\x5b\x5c\x5d\x7f\x80\x9f\xa0\xdc\xe2\xffaZ ";
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let mut s: Vec<u8> = (0..len)
                .map(|_| {
                    let r = next();
                    if r % 4 == 0 {
                        pool[(r / 4) as usize % pool.len()]
                    } else {
                        b'a' + (r % 26) as u8
                    }
                })
                .collect();
            assert_eq!(special(&s), naive(&s), "{s:?}");
            s.reverse();
            assert_eq!(special(&s), naive(&s), "{s:?}");
        }
        for b in 0..=255u8 {
            for at in 0..20 {
                let mut s = vec![b'x'; 20];
                s[at] = b;
                assert_eq!(special(&s), naive(&s), "{b} at {at}");
            }
        }
    }

    /// Strings are written as serde_json writes them: every byte alone, and
    /// text around each.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let write = |s: &str| {
            let mut out = Vec::new();
            json_str(&mut out, s).unwrap_or_else(|e| panic!("{e}"));
            String::from_utf8(out).unwrap_or_else(|e| panic!("{e}"))
        };
        for c in (0..=0x7f_u8)
            .map(char::from)
            .chain(['\u{e9}', '\u{2028}', '\u{1f600}'])
        {
            for s in [
                c.to_string(),
                format!("a long run of plain text {c} then more of it"),
            ] {
                assert_eq!(
                    write(&s),
                    serde_json::to_string(&s).unwrap_or_default(),
                    "{s:?}"
                );
            }
        }
        assert_eq!(write(""), "\"\"");
    }

    #[test]
    fn think_tags_split_reasoning_from_the_answer_across_chunks() {
        let split = |chunks: &[&str]| {
            let mut t = ThinkTags::default();
            let (mut r, mut a) = (String::new(), String::new());
            for c in chunks {
                let (x, y) = t.feed(c);
                r.push_str(&x);
                a.push_str(&y);
            }
            let (x, y) = t.finish();
            (r + &x, a + &y)
        };
        let whole = ("a b".to_owned(), "\n\nc d".to_owned());
        assert_eq!(split(&["<think>a b</think>\n\nc d"]), whole);
        // Every cut of the text into two chunks gives the same parts.
        let text = "\n<think>a b</think>\n\nc d";
        for i in 1..text.len() {
            assert_eq!(split(&[&text[..i], &text[i..]]), whole, "cut at {i}");
        }
        // No opening tag: all answer, even with a closing one later.
        assert_eq!(
            split(&["hello </think> x"]),
            (String::new(), "hello </think> x".into())
        );
        assert_eq!(split(&["<thi", "nk", ">"]), (String::new(), String::new()));
        // Cut before its end: what came is reasoning.
        assert_eq!(
            split(&["<think>a", " b</th"]),
            ("a b</th".into(), String::new())
        );
        // A tag-like start that is not the tag.
        assert_eq!(split(&["<th", "ing>"]), (String::new(), "<thing>".into()));
    }
    use batchbench_contract::conversation::{Message, Role};

    fn flat(conv: &Conversation) -> String {
        let mut out = BodyWriter::default();
        write_flat_prompt(&mut out, conv).unwrap_or_else(|e| panic!("{e}"));
        let bytes: Vec<u8> = out.finish().concat();
        serde_json::from_slice::<String>(&bytes).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_flat_prompt_is_the_texts_joined_and_grows_by_appending() {
        let mut conv = Conversation::default();
        conv.messages
            .push(Message::new(Role::User, "hello \"world\"\n"));
        assert_eq!(flat(&conv), "hello \"world\"\n", "one message is its text");
        let mut a = Message::new(Role::Assistant, "ok");
        a.tool_calls
            .push(batchbench_contract::conversation::ToolCall {
                id: "c".into(),
                name: "f".into(),
                arguments: "{}".into(),
            });
        conv.messages.push(a);
        conv.messages.push(Message::new(Role::Tool, "result"));
        let grown = flat(&conv);
        assert_eq!(grown, "hello \"world\"\n\nok\n{}\nresult");
        let fresh = Conversation {
            messages: conv.messages.clone(),
            ..Conversation::default()
        };
        assert_eq!(flat(&fresh), grown, "cached and fresh agree");
    }

    #[test]
    fn sse_lines_carry_their_event_across_pieces() {
        let text = "event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\ndata: two\n\nevent: b\ndata: 3";
        // Lines whole in a piece, cut in two, and spread over several.
        for size in [1, 2, 3, 7, 16, text.len()] {
            sse_lines_in_pieces_of(text, size);
        }
    }

    fn sse_lines_in_pieces_of(text: &str, size: usize) {
        let mut got = Vec::new();
        let mut s = SseLines::default();
        for piece in text.as_bytes().chunks(size) {
            s.feed(piece, &mut |e, d| {
                got.push((e.to_owned(), String::from_utf8_lossy(d).into_owned()));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
        s.finish(&mut |e, d| {
            got.push((e.to_owned(), String::from_utf8_lossy(d).into_owned()));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got,
            [
                ("a".to_owned(), "{\"x\":1}".to_owned()),
                (String::new(), "two".to_owned()),
                ("b".to_owned(), "3".to_owned())
            ],
            "pieces of {size}"
        );
    }
}
