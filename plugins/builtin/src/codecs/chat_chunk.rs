//! The common chat-completion stream chunk read without serde's machinery.
//!
//! A streamed reply is a chunk per token or so, each a small JSON object of
//! which the chat codec reads a handful of fields; through serde's derive each
//! chunk cost about half a microsecond, most of a streamed request's client
//! CPU against an instant server, and a whole JSON reply about two. This
//! walks the object once, reads the response's `id`, the first choice's
//! `delta` or `message` (`content`, `reasoning_content`, `reasoning`) and
//! `finish_reason`, and the `usage`, and checks what it skips as JSON.
//!
//! It reads what serde would, or gives up: anything it is not sure of (a
//! chunk with a timings or error object, a field of a type the codec does
//! not take, a token count that is not plain digits, a key read twice,
//! nesting over 64 deep, text after the object, any malformed JSON) returns
//! `None`, and the caller reads the chunk with serde, which gives its answer
//! or its error. The tests hold the two readings equal.

use super::wire::special;
use batchbench_contract::plugin::{Reply, Usage};
use serde::Deserialize;
use std::borrow::Cow;

/// The most nested objects and arrays skipped before giving up.
const MAX_DEPTH: usize = 64;

/// A chunk's `id`, its first choice and its usage.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ChatChunk<'a> {
    pub(crate) id: Option<Cow<'a, str>>,
    pub(crate) choice: Option<Choice<'a>>,
    pub(crate) usage: Option<Usage>,
}

/// A choice of a chat completion or of a chunk of one: its `message` (a
/// JSON reply) or `delta` (a chunk), and its `finish_reason`.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct Choice<'a> {
    #[serde(default, borrow)]
    pub(crate) message: Option<WireMessage<'a>>,
    #[serde(default, borrow)]
    pub(crate) delta: Option<WireMessage<'a>>,
    #[serde(default, borrow)]
    pub(crate) finish_reason: Option<Cow<'a, str>>,
}

/// A message's or delta's texts.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct WireMessage<'a> {
    #[serde(default, borrow)]
    pub(crate) content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(crate) reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub(crate) reasoning: Option<Cow<'a, str>>,
}

/// Reads a chunk, or `None` where serde must (see the module's text).
#[cfg(test)]
pub(crate) fn read(data: &[u8]) -> Option<ChatChunk<'_>> {
    read_spans(data).map(|(chunk, _)| chunk)
}

/// A whole JSON reply with a choice: the choice, and the reply with its id
/// and usage; `None` where serde must read it (see the module's text), a
/// reply without a choice included (serde says what is wrong with it).
pub(crate) fn read_reply(body: &[u8]) -> Option<(Choice<'_>, Reply)> {
    let (chunk, _) = read_spans(body)?;
    let choice = chunk.choice?;
    let reply = Reply {
        usage: chunk.usage,
        id: chunk.id.map(Cow::into_owned),
        ..Reply::default()
    };
    Some((choice, reply))
}

/// Where a chunk's strings lie in it (each from its opening quote to past
/// its closing one): the id, the finish reason, and the message's or
/// delta's content, reasoning content and reasoning.
#[derive(Debug, Default, Clone, Copy)]
struct Spans {
    id: Option<(usize, usize)>,
    finish: Option<(usize, usize)>,
    text: [Option<(usize, usize)>; 3],
}

/// [`read`], with where its strings lie.
fn read_spans(data: &[u8]) -> Option<(ChatChunk<'_>, Spans)> {
    let mut s = Scan {
        s: data,
        i: 0,
        last: (0, 0),
        spans: Spans::default(),
    };
    let mut chunk = ChatChunk::default();
    let (mut seen_id, mut seen_choices) = (false, false);
    let mut seen_more = [false; 3];
    s.object(|s, key| {
        match key {
            b"id" => {
                once(&mut seen_id)?;
                chunk.id = s.opt_string()?;
                s.spans.id = chunk.id.as_ref().map(|_| s.last);
            }
            b"choices" => {
                once(&mut seen_choices)?;
                chunk.choice = s.first_of(Scan::choice)?;
            }
            b"usage" => {
                once(&mut seen_more[0])?;
                chunk.usage = s.opt_usage()?;
            }
            // Read by serde when they hold anything.
            b"timings" | b"error" => {
                once(&mut seen_more[if key == b"timings" { 1 } else { 2 }])?;
                s.literal(b"null")?;
            }
            _ => s.skip(0)?,
        }
        Some(())
    })?;
    s.end()?;
    Some((chunk, s.spans))
}

/// Reads a stream's chunks: the chunks of one stream are alike but for
/// their text, so a chunk that is the last fully read one with another text
/// in the same place (every byte before and after that string the same) is
/// read as that one with its new text, at the cost of comparing the bytes.
/// Any other chunk is read whole (and becomes the one the next are compared
/// with, where it carries one text).
#[derive(Debug, Default, Clone)]
pub(crate) struct Reader {
    prev: Vec<u8>,
    template: Option<Template>,
}

/// What the last chunk read whole holds, and where (see [`Spans`]).
#[derive(Debug, Clone, Copy)]
struct Template {
    /// The one text's string, and which of the three it is.
    text: (usize, usize),
    field: usize,
    /// In a delta (else a message).
    in_delta: bool,
    id: Option<(usize, usize)>,
    finish: Option<(usize, usize)>,
}

impl Reader {
    /// Reads a chunk, or `None` where serde must (see the module's text).
    /// A chunk read by the template has its id only `with_id` (a stream's
    /// chunks repeat the first one's; its text costs a check each).
    pub(crate) fn read<'a>(&mut self, data: &'a [u8], with_id: bool) -> Option<ChatChunk<'a>> {
        if let Some(chunk) = self.by_template(data, with_id) {
            return Some(chunk);
        }
        let (chunk, spans) = read_spans(data)?;
        self.learn(data, &chunk, spans);
        Some(chunk)
    }

    /// Keeps a chunk read whole as the template, where its first choice is
    /// a delta or a message with exactly one text, and its strings have no
    /// escape.
    fn learn(&mut self, data: &[u8], chunk: &ChatChunk<'_>, spans: Spans) {
        let (Some(choice), None) = (&chunk.choice, chunk.usage) else {
            return;
        };
        let (m, in_delta) = match (&choice.message, &choice.delta) {
            (None, Some(d)) => (d, true),
            (Some(m), None) => (m, false),
            _ => return,
        };
        let mut field = None;
        for (k, t) in [&m.content, &m.reasoning_content, &m.reasoning]
            .into_iter()
            .enumerate()
        {
            match t {
                None => {}
                Some(Cow::Borrowed(_)) if field.is_none() => field = Some(k),
                Some(_) => return,
            }
        }
        let borrowed = |c: &Option<Cow<'_, str>>| !matches!(c, Some(Cow::Owned(_)));
        let (Some(field), true, true) =
            (field, borrowed(&chunk.id), borrowed(&choice.finish_reason))
        else {
            return;
        };
        let Some(text) = spans.text[field] else {
            return;
        };
        self.prev.clear();
        self.prev.extend_from_slice(data);
        self.template = Some(Template {
            text,
            field,
            in_delta,
            id: spans.id,
            finish: spans.finish,
        });
    }

    /// The chunk read as the template with another text, where it is one.
    fn by_template<'a>(&self, data: &'a [u8], with_id: bool) -> Option<ChatChunk<'a>> {
        let t = self.template?;
        let prev = &self.prev;
        let (start, end) = t.text;
        let suffix = prev.len() - end;
        if data.len() < start + 2 + suffix
            || data[..start] != prev[..start]
            || data[data.len() - suffix..] != prev[end..]
        {
            return None;
        }
        let inner = data[start..data.len() - suffix]
            .strip_prefix(b"\"")?
            .strip_suffix(b"\"")?;
        // Its closing quote is the first quote, backslash or control byte
        // from its start (searched on past it: a word at a time, where a
        // short text alone would be searched byte by byte).
        if special(&data[start + 1..]) != Some(inner.len()) {
            return None;
        }
        let text = Some(Cow::Borrowed(std::str::from_utf8(inner).ok()?));
        // A string after the text moved with its length.
        let at = |(a, b): (usize, usize)| -> Option<Cow<'a, str>> {
            let (a, b) = if a >= end {
                (a - end + data.len() - suffix, b - end + data.len() - suffix)
            } else {
                (a, b)
            };
            std::str::from_utf8(&data[a + 1..b - 1])
                .ok()
                .map(Cow::Borrowed)
        };
        let id = match t.id {
            Some(span) if with_id => Some(at(span)?),
            _ => None,
        };
        let finish_reason = match t.finish {
            Some(span) => Some(at(span)?),
            None => None,
        };
        let mut m = WireMessage::default();
        *[&mut m.content, &mut m.reasoning_content, &mut m.reasoning][t.field] = text;
        let (message, delta) = if t.in_delta {
            (None, Some(m))
        } else {
            (Some(m), None)
        };
        Some(ChatChunk {
            id,
            choice: Some(Choice {
                message,
                delta,
                finish_reason,
            }),
            usage: None,
        })
    }
}

/// A key met for the first time (serde refuses a field given twice).
fn once(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

struct Scan<'a> {
    s: &'a [u8],
    i: usize,
    /// Where the last string [`Scan::opt_string`] read lies.
    last: (usize, usize),
    spans: Spans,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        self.ws();
        self.s[self.i..]
            .starts_with(lit)
            .then(|| self.i += lit.len())
    }

    /// Nothing but white space is left.
    fn end(&mut self) -> Option<()> {
        self.ws();
        (self.i == self.s.len()).then_some(())
    }

    /// A string's raw bytes between its quotes, and whether it has an
    /// escape; the scan stops at a control character (never in JSON text).
    #[inline(always)]
    fn raw_string(&mut self) -> Option<(&'a [u8], bool)> {
        self.eat(b'"')?;
        let s = self.s;
        let start = self.i;
        let mut i = start;
        let mut escaped = false;
        loop {
            i += special(s.get(i..)?)?;
            match s[i] {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i += 2;
                }
                _ => return None,
            }
        }
        self.i = i + 1;
        Some((&s[start..i], escaped))
    }

    /// The JSON text of the string that ends where the scan stands.
    fn quoted(&self, raw: &[u8]) -> &'a [u8] {
        &self.s[self.i - raw.len() - 2..self.i]
    }

    /// A string: borrowed where it has no escape, else decoded by serde_json.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let (raw, escaped) = self.raw_string()?;
        if escaped {
            serde_json::from_slice::<String>(self.quoted(raw))
                .ok()
                .map(Cow::Owned)
        } else {
            std::str::from_utf8(raw).ok().map(Cow::Borrowed)
        }
    }

    /// A string skipped: its escapes checked, its text not (serde does not
    /// check a skipped string's UTF-8 either).
    fn skip_string(&mut self) -> Option<()> {
        let (raw, escaped) = self.raw_string()?;
        if escaped {
            serde_json::from_slice::<serde::de::IgnoredAny>(self.quoted(raw)).ok()?;
        }
        Some(())
    }

    /// A member's name, as bytes (decoded where it has an escape; checked
    /// as UTF-8 as serde checks a field's name).
    #[inline(always)]
    fn key(&mut self) -> Option<Cow<'a, [u8]>> {
        let (raw, escaped) = self.raw_string()?;
        if escaped {
            let text: String = serde_json::from_slice(self.quoted(raw)).ok()?;
            Some(Cow::Owned(text.into_bytes()))
        } else {
            if !raw.is_ascii() {
                std::str::from_utf8(raw).ok()?;
            }
            Some(Cow::Borrowed(raw))
        }
    }

    /// A string or `null`.
    #[inline(always)]
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Some(None)
        } else {
            let start = self.i;
            let text = self.string()?;
            self.last = (start, self.i);
            Some(Some(text))
        }
    }

    /// An object, `f(scan, key)` reading each member's value.
    fn object(&mut self, mut f: impl FnMut(&mut Self, &[u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            f(self, &key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array's first element read by `f` (`None` when it is empty), the
    /// others skipped.
    fn first_of<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.i += 1;
            return Some(None);
        }
        let first = f(self)?;
        loop {
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.skip(1)?;
                }
                b']' => {
                    self.i += 1;
                    return Some(Some(first));
                }
                _ => return None,
            }
        }
    }

    /// A choice: its `message`, `delta` and `finish_reason`.
    fn choice(&mut self) -> Option<Choice<'a>> {
        let mut c = Choice::default();
        let mut seen = [false; 3];
        self.object(|s, key| {
            match key {
                b"message" => {
                    once(&mut seen[0])?;
                    c.message = s.opt_message()?;
                }
                b"delta" => {
                    once(&mut seen[1])?;
                    c.delta = s.opt_message()?;
                }
                b"finish_reason" => {
                    once(&mut seen[2])?;
                    c.finish_reason = s.opt_string()?;
                    s.spans.finish = c.finish_reason.as_ref().map(|_| s.last);
                }
                _ => s.skip(1)?,
            }
            Some(())
        })?;
        Some(c)
    }

    /// A message or delta, or `null`.
    fn opt_message(&mut self) -> Option<Option<WireMessage<'a>>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        let mut m = WireMessage::default();
        let mut seen = [false; 3];
        self.object(|s, key| {
            match key {
                b"content" => {
                    once(&mut seen[0])?;
                    m.content = s.opt_string()?;
                    s.spans.text[0] = m.content.as_ref().map(|_| s.last);
                }
                b"reasoning_content" => {
                    once(&mut seen[1])?;
                    m.reasoning_content = s.opt_string()?;
                    s.spans.text[1] = m.reasoning_content.as_ref().map(|_| s.last);
                }
                b"reasoning" => {
                    once(&mut seen[2])?;
                    m.reasoning = s.opt_string()?;
                    s.spans.text[2] = m.reasoning.as_ref().map(|_| s.last);
                }
                _ => s.skip(2)?,
            }
            Some(())
        })?;
        Some(Some(m))
    }

    /// A usage object, or `null`: its token counts, each as serde reads it
    /// (`prompt_tokens` and `completion_tokens` a number, the details' counts
    /// a number or `null`), the other members skipped.
    fn opt_usage(&mut self) -> Option<Option<Usage>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        let mut u = Usage::default();
        let mut seen = [false; 4];
        self.object(|s, key| {
            match key {
                b"prompt_tokens" => {
                    once(&mut seen[0])?;
                    u.prompt_tokens = s.count()?;
                }
                b"completion_tokens" => {
                    once(&mut seen[1])?;
                    u.completion_tokens = s.count()?;
                }
                b"prompt_tokens_details" => {
                    once(&mut seen[2])?;
                    u.cached_tokens = s.opt_detail(b"cached_tokens")?;
                }
                b"completion_tokens_details" => {
                    once(&mut seen[3])?;
                    u.reasoning_tokens = s.opt_detail(b"reasoning_tokens")?;
                }
                _ => s.skip(2)?,
            }
            Some(())
        })?;
        Some(Some(u))
    }

    /// A usage's details object, or `null`: its count named `name` (a
    /// number or `null`), the other members skipped, or checked as serde
    /// checks them where they are the other detail it knows.
    fn opt_detail(&mut self, name: &[u8]) -> Option<Option<u64>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        let mut count = None;
        let mut seen = [false; 2];
        self.object(|s, key| {
            match key {
                b"cached_tokens" | b"reasoning_tokens" => {
                    once(&mut seen[usize::from(key == b"reasoning_tokens")])?;
                    let c = if s.peek()? == b'n' {
                        s.literal(b"null")?;
                        None
                    } else {
                        Some(s.count()?)
                    };
                    if key == name {
                        count = c;
                    }
                }
                _ => s.skip(3)?,
            }
            Some(())
        })?;
        Some(count)
    }

    /// A token count: plain digits without a leading zero, that fit a
    /// `u64` (anything else is serde's to read or refuse).
    fn count(&mut self) -> Option<u64> {
        self.ws();
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(&b) = self.s.get(self.i).filter(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        let leading_zero = digits > 1 && self.s[start] == b'0';
        match self.s.get(self.i) {
            Some(b) if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+') => None,
            _ if digits == 0 || leading_zero => None,
            _ => Some(n),
        }
    }

    /// Skips any value, `depth` deep, checking it is JSON.
    fn skip(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' => self.object(|s, _| s.skip(depth + 1)),
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(());
                }
                loop {
                    self.skip(depth + 1)?;
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number as JSON writes one: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let digits = |s: &mut Self| {
            let start = s.i;
            while s.s.get(s.i).is_some_and(u8::is_ascii_digit) {
                s.i += 1;
            }
            (s.i > start).then_some(())
        };
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        if self.s.get(self.i) == Some(&b'0') {
            self.i += 1;
        } else {
            digits(self)?;
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            digits(self)?;
        }
        if let Some(b'e' | b'E') = self.s.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.s.get(self.i) {
                self.i += 1;
            }
            digits(self)?;
        }
        // A number runs into no letter or digit ("01", "1x").
        match self.s.get(self.i) {
            Some(b) if b.is_ascii_alphanumeric() || *b == b'.' => None,
            _ => Some(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codecs::wire::{ChoicesResponse, WireUsage};

    /// Chunks as vLLM, SGLang and llama.cpp send them, and odd ones.
    const READ_FAST: &[&str] = &[
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        r#"{"id":"chatcmpl-1","choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":null}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"Let me think"}}]}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning":"hm","content":null}}]}"#,
        r#"{"id":"c\u002d1","choices":[{"delta":{"content":"line\none \"quoted\" \\ \u00e9 \ud83d\ude00 \/"}}]}"#,
        "{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"é😀 raw\"}}]}",
        r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":"a","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}"#,
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"a"}}],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b1-x","object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": [1, 2.5e-3, -0, true, false, null]}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"first"}},{"index":1,"delta":{"content":"second"}}]}"#,
        r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"length"}],"timings":null,"error":null}"#,
        " {\n  \"id\" : \"c\" ,\n  \"choices\" : [ { \"delta\" : { \"content\" : \"a\" } , \"finish_reason\" : null } ]\n}\n",
        r#"{"choices":[{"delta":{"con\u0074ent":"escaped key"}}]}"#,
        r#"{"choices":[]}"#,
        r#"{"choices":[{"delta":null,"message":null}]}"#,
        r#"{}"#,
        r#"{"x":{"y":[{"z":[[],{},"",0,-1.5E+2,1e9]}]},"choices":[{"delta":{"content":"deep"}}]}"#,
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}"#,
        r#"{"id":"chatcmpl-0","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":" word word"}}],"usage":{"prompt_tokens":32,"completion_tokens":16,"total_tokens":48}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"usage":{"prompt_tokens":0,"completion_tokens":18446744073709551615,"prompt_tokens_details":{"cached_tokens":8,"audio_tokens":null},"completion_tokens_details":{"reasoning_tokens":3,"accepted_prediction_tokens":0}}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"usage":{"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null,"cached_tokens":2}}}"#,
        r#"{"choices":[{"message":{"content":"a"}}],"usage":{"prompt_tokens_details":{"reasoning_tokens":4},"extra":{"n":[1]}}}"#,
        r#"{"choices":[{"delta":{}}],"usage":{}}"#,
        r#"{"choices":[],"usage" : { "prompt_tokens" : 7 , "completion_tokens" : 1 }}"#,
    ];

    /// Read by serde alone: timings or an error, or what serde refuses.
    const LEFT_TO_SERDE: &[&str] = &[
        r#"{"choices":[{"delta":{}, "finish_reason":"stop"}],"timings":{"prompt_ms":1.5,"predicted_ms":9}}"#,
        r#"{"error":{"message":"boom","code":500}}"#,
        r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"delta":{"content":5}}]}"#,
        r#"{"choices":null}"#,
        r#"{"id":5}"#,
        r#"{"choices":[{"delta":{"content":"a"}}]}x"#,
        r#"{"n":01,"choices":[]}"#,
        r#"{"n":[1,],"choices":[]}"#,
        r#"{"n":"\q"}"#,
        "{\"n\":\"tab\there\"}",
        r#"{"choices":[{"delta":{"content":"unclosed}}]}"#,
        r#"["not an object"]"#,
        r#"{"n":tru}"#,
        r#"{"n":1.}"#,
        r#"{"n":-}"#,
        r#"{"choices":[{"delta":{"content":"a"}}],"usage":null,"usage":null}"#,
        r#"{"choices":[],"error":null,"err\u006fr":null}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1.0}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1e3}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":null}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":01}}"#,
        r#"{"choices":[],"usage":{"completion_tokens":18446744073709551616}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":"3"}}}"#,
        r#"{"choices":[],"usage":{"completion_tokens_details":{"cached_tokens":[]}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
        r#"{"choices":[],"usage":5}"#,
        r#"{"choices":[],"usage":null,"usage":{}}"#,
    ];

    /// serde's reading: the id and the first choice, and whether it holds
    /// what the fast reading leaves to it.
    fn by_serde(data: &[u8]) -> Result<(ChatChunk<'_>, bool), String> {
        let r: ChoicesResponse<'_, Choice<'_>> =
            serde_json::from_slice(data).map_err(|e| e.to_string())?;
        let more = r.timings.is_some() || r.error.is_some();
        Ok((
            ChatChunk {
                id: r.id,
                choice: r.choices,
                usage: r.usage.map(WireUsage::into_usage),
            },
            more,
        ))
    }

    /// The fast reading, where it reads at all, is serde's.
    fn agrees(data: &[u8]) -> bool {
        agrees_after(&mut Reader::default(), data)
    }

    /// [`agrees`], for a reader that has read other chunks before.
    fn agrees_after(reader: &mut Reader, data: &[u8]) -> bool {
        let Some(fast) = reader.read(data, true) else {
            return false;
        };
        match by_serde(data) {
            Ok((slow, more)) => {
                assert!(!more, "{}", String::from_utf8_lossy(data));
                assert_eq!(fast, slow, "{}", String::from_utf8_lossy(data));
            }
            Err(e) => panic!(
                "read fast what serde refuses ({e}): {}",
                String::from_utf8_lossy(data)
            ),
        }
        true
    }

    #[test]
    fn common_chunks_are_read_fast_as_serde_reads_them() {
        for chunk in READ_FAST {
            assert!(agrees(chunk.as_bytes()), "not read fast: {chunk}");
        }
        let c = read(READ_FAST[5].as_bytes()).unwrap_or_default();
        assert_eq!(c.id.as_deref(), Some("c-1"));
        let content = c.choice.and_then(|c| c.delta).and_then(|d| d.content);
        assert_eq!(
            content.as_deref(),
            Some("line\none \"quoted\" \\ \u{e9} \u{1f600} /")
        );
    }

    #[test]
    fn what_serde_must_read_or_refuse_is_left_to_it() {
        for chunk in LEFT_TO_SERDE {
            assert!(read(chunk.as_bytes()).is_none(), "read fast: {chunk}");
        }
        // Nesting past the depth it checks.
        let deep = format!(r#"{{"x":{}{}}}"#, "[".repeat(70), "]".repeat(70));
        assert!(read(deep.as_bytes()).is_none());
        assert!(by_serde(deep.as_bytes()).is_ok());
        // Bytes that are not UTF-8 in a text it reads.
        assert!(read(b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}").is_none());
    }

    /// A stream's chunks that differ in their text alone are read by
    /// comparing them with the last one read whole, as serde reads them;
    /// any other is read whole.
    #[test]
    fn a_streams_chunks_alike_but_for_their_text_are_read_by_the_template() {
        let chunk = |text: &str, finish: &str| {
            format!(
                r#"{{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish}}}]}}"#
            )
        };
        let mut r = Reader::default();
        let role = r#"{"id":"chatcmpl-9","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert!(agrees_after(&mut r, role.as_bytes()));
        let texts = [
            (r#"" Hello""#, true),
            (r#"",""#, true),
            (r#""""#, true),
            (r#"" wörld 😀""#, true),
            (r#""a\nb""#, false),
            (r#""x""#, true),
            ("null", false),
            (r#"" again""#, true),
            (r#""say \"hi\"""#, false),
        ];
        for (i, (text, by_template)) in texts.into_iter().enumerate() {
            let c = chunk(text, "null");
            // The first is read whole: the role chunk is no template for it.
            assert_eq!(
                r.by_template(c.as_bytes(), true).is_some(),
                by_template && i > 0,
                "{c}"
            );
            assert!(agrees_after(&mut r, c.as_bytes()), "{c}");
        }
        // Another member where the text was: read whole, as serde reads it.
        let two = chunk(r#""ok","x":"y""#, "null");
        assert!(r.by_template(two.as_bytes(), true).is_none());
        assert!(agrees_after(&mut r, two.as_bytes()));
        // The finish chunk is read whole.
        let finish = chunk(r#""""#, r#""stop""#);
        assert!(agrees_after(&mut r, finish.as_bytes()));
        // Reasoning, then the answer, and a server that puts its id last.
        for text in [
            r#"{"id":"c","choices":[{"delta":{"reasoning_content":"think"}}]}"#,
            r#"{"id":"c","choices":[{"delta":{"reasoning_content":" more"}}]}"#,
            r#"{"id":"c","choices":[{"delta":{"content":"answer"}}]}"#,
            r#"{"choices":[{"delta":{"content":"a"},"finish_reason":null}],"created":1,"id":"chatcmpl-1","model":"m"}"#,
            r#"{"choices":[{"delta":{"content":"longer text"},"finish_reason":null}],"created":1,"id":"chatcmpl-1","model":"m"}"#,
        ] {
            assert!(agrees_after(&mut r, text.as_bytes()), "{text}");
        }
        let last = r#"{"choices":[{"delta":{"content":"x"},"finish_reason":null}],"created":1,"id":"chatcmpl-1","model":"m"}"#;
        let by_template = r.by_template(last.as_bytes(), true).unwrap_or_default();
        assert_eq!(by_template.id.as_deref(), Some("chatcmpl-1"));
        // Without its id where the reader already has it.
        let without = r.by_template(last.as_bytes(), false).unwrap_or_default();
        assert_eq!(without.id, None);
        assert_eq!(without.choice, by_template.choice);
    }

    /// Every chunk cut short at every byte, and every byte replaced by each
    /// of the bytes that make JSON's structure: the fast reading either
    /// gives up or reads what serde reads.
    #[test]
    fn cut_or_altered_chunks_are_read_as_serde_reads_them_or_left_to_it() {
        let mut read_fast = 0;
        for chunk in READ_FAST.iter().chain(LEFT_TO_SERDE) {
            let bytes = chunk.as_bytes();
            for cut in 0..bytes.len() {
                agrees(&bytes[..cut]);
            }
            // Read alone, and after the chunk itself (its template).
            let mut primed = Reader::default();
            primed.read(bytes, true);
            for at in 0..bytes.len() {
                for b in *b"\"\\,:{}[] 0-.eEnx\n\x01\xff" {
                    let mut altered = bytes.to_vec();
                    altered[at] = b;
                    read_fast += usize::from(agrees(&altered));
                    agrees_after(&mut primed.clone(), &altered);
                }
                // A byte more or less, here.
                let mut longer = bytes.to_vec();
                longer.insert(at, b'x');
                agrees_after(&mut primed.clone(), &longer);
                let mut shorter = bytes.to_vec();
                shorter.remove(at);
                agrees_after(&mut primed.clone(), &shorter);
            }
        }
        // Most single-byte changes inside a text leave a chunk readable.
        assert!(read_fast > 1000, "{read_fast}");
    }
}
