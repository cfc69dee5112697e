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
    read_spans(data, false).map(|(chunk, ..)| chunk)
}

/// A whole JSON reply with a choice: the choice, and the reply with its id
/// and usage; `None` where serde must read it (see the module's text), a
/// reply without a choice included (serde says what is wrong with it).
/// Read by the shapes this thread kept (see [`Shapes`]).
pub(crate) fn read_reply(body: &[u8]) -> Option<(Choice<'_>, Reply)> {
    let chunk = read_kept(body, true)?;
    let choice = chunk.choice?;
    let reply = Reply {
        usage: chunk.usage,
        id: chunk.id.map(Cow::into_owned),
        ..Reply::default()
    };
    Some((choice, reply))
}

/// [`Shapes::read`] by this thread's shapes: a thread's requests go to the
/// same servers, whose replies come in a few shapes, kept from one request
/// to the next.
fn read_kept(data: &[u8], with_id: bool) -> Option<ChatChunk<'_>> {
    thread_local! {
        static KEPT: std::cell::RefCell<Shapes> = std::cell::RefCell::default();
    }
    KEPT.with(|r| r.borrow_mut().read(data, with_id))
}

/// What a value the reading depends on stands for: the chunk's id, a text
/// of its first choice's message or delta (`content`, `reasoning_content`,
/// `reasoning`), its finish reason, a usage count, or any other number.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    Id,
    Text {
        delta: bool,
        field: u8,
    },
    Finish,
    Prompt,
    Completion,
    Cached,
    Reasoning,
    /// A detail's count that is not the one asked for (`null` or a count).
    Detail,
    /// A number skipped.
    Number,
}

/// Where such a value lies in a chunk read whole (from its first byte to
/// past its last), what it stands for, and what it was.
#[derive(Debug, Clone, Copy)]
struct Hole {
    start: usize,
    end: usize,
    role: Role,
    /// Read again in every chunk of the shape (a text, a string with an
    /// escape); any other is first compared as bytes.
    volatile: bool,
    /// `null`.
    null: bool,
    /// A count's value.
    count: u64,
}

/// The most values a kept shape has (more and the chunk is not kept: each
/// is compared or read again).
const HOLES: usize = 24;

/// [`read`], with where its strings lie, and where all the values it read
/// lie when `holes` (see [`Shapes`]).
fn read_spans(data: &[u8], holes: bool) -> Option<(ChatChunk<'_>, Spans, Vec<Hole>)> {
    let mut s = Scan {
        s: data,
        i: 0,
        spans: Spans::default(),
        holes: holes.then(|| Vec::with_capacity(HOLES)),
    };
    let mut chunk = ChatChunk::default();
    let (mut seen_id, mut seen_choices) = (false, false);
    let mut seen_more = [false; 3];
    s.object(|s, key| {
        match key {
            b"id" => {
                once(&mut seen_id)?;
                chunk.id = s.opt_string(Role::Id)?;
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
    Some((chunk, s.spans, s.holes.unwrap_or_default()))
}

/// Where a chunk's strings lie (each from its opening quote to past its
/// closing one): the id, the finish reason, and the message's or delta's
/// content, reasoning content and reasoning.
#[derive(Debug, Default, Clone, Copy)]
struct Spans {
    id: Option<(usize, usize)>,
    finish: Option<(usize, usize)>,
    text: [Option<(usize, usize)>; 3],
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
        let (chunk, spans, _) = read_spans(data, false)?;
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

/// Reads whole replies by the shapes of those it read before: a server's
/// replies come in a few shapes, alike but for their id, creation time,
/// text, finish reason and counts. A chunk read whole is kept as a shape:
/// its bytes, and where each value the reading depends on lies in them
/// (the strings it read, every number). A chunk whose bytes are a kept
/// one's outside those values is read as that one, each value read again
/// in its place by the same reading (a string, a count, a number); any
/// other is read whole, and kept in place of the one least lately used.
///
/// Outside its values such a chunk is the kept one byte for byte: the same
/// members in the same order, the same skipped values, the same nesting.
/// Each value is read as the whole reading reads it there (or the chunk is
/// read whole), so the reading is the whole reading's, which the tests
/// hold equal to serde's.
#[derive(Debug, Default, Clone)]
pub(crate) struct Shapes {
    /// The last used first.
    shapes: Vec<Shape>,
}

/// The most shapes kept: a server's reply with and without its texts or
/// counts, and room for other servers' and APIs'.
const SHAPES: usize = 8;

/// A chunk read whole, with where its values lie, and what its reading
/// holds whatever the values: its choice's message or delta, its usage.
#[derive(Debug, Clone)]
struct Shape {
    bytes: Vec<u8>,
    holes: Vec<Hole>,
    /// The first choice's message and delta, where it has one.
    choice: Option<(bool, bool)>,
    usage: bool,
    /// Its one volatile value, where it has one.
    single: Option<usize>,
    /// The values a chunk holds when they are the shape's (strings that
    /// are not `null`, counts), by their place in `holes`.
    valued: Vec<u8>,
}

impl Shapes {
    /// Reads a chunk, or `None` where serde must (see the module's text).
    /// Its id is read only `with_id`: otherwise it is `None`.
    pub(crate) fn read<'a>(&mut self, data: &'a [u8], with_id: bool) -> Option<ChatChunk<'a>> {
        let mut chunk = ChatChunk::default();
        if self.by_shape(data, with_id, &mut chunk) {
            return Some(chunk);
        }
        let (mut chunk, _, holes) = read_spans(data, true)?;
        self.keep(data, &chunk, holes);
        if !with_id {
            chunk.id = None;
        }
        Some(chunk)
    }

    /// Reads the chunk in `chunk` as a kept shape, where it has one (which
    /// becomes the first tried).
    fn by_shape<'a>(&mut self, data: &'a [u8], with_id: bool, chunk: &mut ChatChunk<'a>) -> bool {
        let Some(k) = (0..self.shapes.len()).find(|&k| self.shapes[k].read(data, with_id, chunk))
        else {
            return false;
        };
        self.shapes[..=k].rotate_right(1);
        true
    }

    /// [`Shapes::by_shape`], its chunk returned.
    #[cfg(test)]
    fn shaped<'a>(&mut self, data: &'a [u8], with_id: bool) -> Option<ChatChunk<'a>> {
        let mut chunk = ChatChunk::default();
        self.by_shape(data, with_id, &mut chunk).then_some(chunk)
    }

    /// Keeps a chunk read whole as a shape, in place of the one least
    /// lately used where there are [`SHAPES`].
    fn keep(&mut self, data: &[u8], chunk: &ChatChunk<'_>, holes: Vec<Hole>) {
        if holes.len() > HOLES {
            return;
        }
        let mut shape = if self.shapes.len() < SHAPES {
            Shape {
                bytes: Vec::new(),
                holes: Vec::new(),
                choice: None,
                usage: false,
                single: None,
                valued: Vec::new(),
            }
        } else if let Some(last) = self.shapes.pop() {
            last
        } else {
            return;
        };
        shape.bytes.clear();
        shape.bytes.extend_from_slice(data);
        shape.holes = holes;
        shape.choice = chunk
            .choice
            .as_ref()
            .map(|c| (c.message.is_some(), c.delta.is_some()));
        shape.usage = chunk.usage.is_some();
        shape.valued.clear();
        shape.valued.extend(
            (0..HOLES as u8)
                .zip(&shape.holes)
                .filter(|(_, h)| !h.null && !matches!(h.role, Role::Number | Role::Detail))
                .map(|(k, _)| k),
        );
        let mut volatile = shape.holes.iter().enumerate().filter(|(_, h)| h.volatile);
        shape.single = match (volatile.next(), volatile.next()) {
            (Some((v, _)), None) => Some(v),
            _ => None,
        };
        self.shapes.insert(0, shape);
    }
}

/// A value of a chunk read by its shape.
enum Value<'a> {
    Str(Option<Cow<'a, str>>),
    Count(Option<u64>),
    Skipped,
}

impl Shape {
    /// `data` read as this shape, where it is one (see [`Shapes`]).
    /// The reading is written in `chunk` (a chunk is some hundreds of
    /// bytes: it is not moved from one call to the next).
    fn read<'a>(&self, data: &'a [u8], with_id: bool, chunk: &mut ChatChunk<'a>) -> bool {
        // Against one server, replies mostly differ in their text alone.
        if let Some(v) = self.single {
            if self.read_text(v, data, with_id, chunk).is_some() {
                return true;
            }
        }
        // Mostly only the texts differ: the other values are compared as
        // bytes with the shape's, and a chunk where one is not the same is
        // read again value by value.
        match self.read_values(data, with_id, true, chunk) {
            Ok(()) => true,
            Err(true) => self.read_values(data, with_id, false, chunk).is_ok(),
            Err(false) => false,
        }
    }

    /// A chunk of the shape's bytes before and after its one volatile
    /// value `v` (its text), with one value of its kind between them:
    /// the other values are the shape's, those after it moved with the
    /// length of the text.
    fn read_text<'a>(
        &self,
        v: usize,
        data: &'a [u8],
        with_id: bool,
        chunk: &mut ChatChunk<'a>,
    ) -> Option<()> {
        let h = self.holes.get(v)?;
        let suffix = &self.bytes[h.end..];
        let end = data.len().checked_sub(suffix.len())?;
        if end < h.start || data[..h.start] != self.bytes[..h.start] || data[end..] != *suffix {
            return None;
        }
        *chunk = self.empty();
        let mut s = Scan {
            s: &data[..end],
            i: h.start,
            spans: Spans::default(),
            holes: None,
        };
        let text = s.opt_string(h.role)?;
        if s.i != end {
            return None;
        }
        set(chunk, h.role, Value::Str(text), with_id)?;
        for &k in &self.valued {
            let o = &self.holes[usize::from(k)];
            if usize::from(k) != v && (with_id || o.role != Role::Id) {
                let p = if o.start < h.start {
                    o.start
                } else {
                    o.start - h.end + end
                };
                set_kept(chunk, o, data, p, with_id)?;
            }
        }
        Some(())
    }

    /// A chunk with its shape's choice and usage, their values empty.
    fn empty<'a>(&self) -> ChatChunk<'a> {
        ChatChunk {
            id: None,
            choice: self.choice.map(|(message, delta)| Choice {
                message: message.then(WireMessage::default),
                delta: delta.then(WireMessage::default),
                finish_reason: None,
            }),
            usage: self.usage.then(Usage::default),
        }
    }

    /// [`Shape::read`]: the texts read in their places, and the other
    /// values too unless `as_kept` (then compared as bytes). Not this
    /// shape: `Err(true)` where a value compared differs (read, it may be
    /// this shape), `Err(false)` where the bytes around the values do.
    fn read_values<'a>(
        &self,
        data: &'a [u8],
        with_id: bool,
        as_kept: bool,
        chunk: &mut ChatChunk<'a>,
    ) -> Result<(), bool> {
        *chunk = self.empty();
        let mut s = Scan {
            s: data,
            i: 0,
            spans: Spans::default(),
            holes: None,
        };
        // The shape's bytes from `from` are `data`'s from `s.i`, up to the
        // next value read; the values compared among them are `compared`.
        let mut from = 0;
        let mut compared = 0..0;
        for (k, h) in self.holes.iter().enumerate() {
            if as_kept && !h.volatile {
                if compared.is_empty() {
                    compared = k..k;
                }
                compared.end = k + 1;
                continue;
            }
            self.same_up_to(
                data,
                &mut s.i,
                &mut from,
                h.start,
                &mut compared,
                with_id,
                chunk,
            )?;
            from = h.end;
            let role = h.role;
            let value = match role {
                Role::Id | Role::Text { .. } | Role::Finish => s.opt_string(role).map(Value::Str),
                Role::Prompt | Role::Completion => s.count().map(|n| Value::Count(Some(n))),
                Role::Cached | Role::Reasoning | Role::Detail => s.opt_count().map(Value::Count),
                Role::Number => {
                    s.ws();
                    s.number().map(|()| Value::Skipped)
                }
            };
            // A value read here is read so the second time too.
            set(chunk, role, value.ok_or(false)?, with_id).ok_or(false)?;
        }
        let end = self.bytes.len();
        self.same_up_to(
            data,
            &mut s.i,
            &mut from,
            end,
            &mut compared,
            with_id,
            chunk,
        )?;
        if s.i != data.len() {
            return Err(false);
        }
        Ok(())
    }

    /// Checks that `data` from `at` is the shape's bytes from `from` up to
    /// `to`, the values `compared` among them included, and sets those
    /// values as the shape's; moves both on to `to`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn same_up_to<'a>(
        &self,
        data: &'a [u8],
        at: &mut usize,
        from: &mut usize,
        to: usize,
        compared: &mut std::ops::Range<usize>,
        with_id: bool,
        chunk: &mut ChatChunk<'a>,
    ) -> Result<(), bool> {
        let same = &self.bytes[*from..to];
        if data.get(*at..*at + same.len()) != Some(same) {
            return Err(self.a_value_differs(data, *at, *from, &self.holes[compared.clone()]));
        }
        for h in &self.holes[compared.clone()] {
            set_kept(chunk, h, data, *at + h.start - *from, with_id).ok_or(false)?;
        }
        *compared = 0..0;
        *at += same.len();
        *from = to;
        Ok(())
    }

    /// Where `data` from `at` is not the shape's bytes from `from`:
    /// whether the first difference is in one of the values `compared`
    /// (else it is in the bytes around them, which no reading changes).
    fn a_value_differs(
        &self,
        data: &[u8],
        mut at: usize,
        mut from: usize,
        compared: &[Hole],
    ) -> bool {
        for h in compared {
            let around = &self.bytes[from..h.start];
            if data.get(at..at + around.len()) != Some(around) {
                return false;
            }
            at += around.len();
            // With the byte after it, which a number does not run into.
            let value = &self.bytes[h.start..=h.end];
            if data.get(at..at + value.len()) != Some(value) {
                return true;
            }
            at += h.end - h.start;
            from = h.end;
        }
        false
    }
}

/// Sets a value that is the shape's, found in `data` at `p`, in its place
/// in the chunk.
#[inline(always)]
fn set_kept<'a>(
    chunk: &mut ChatChunk<'a>,
    h: &Hole,
    data: &'a [u8],
    p: usize,
    with_id: bool,
) -> Option<()> {
    let value = match h.role {
        // Nothing to set (a chunk's places start empty).
        Role::Number | Role::Detail => return Some(()),
        Role::Id if !with_id => return Some(()),
        Role::Id | Role::Text { .. } | Role::Finish if h.null => return Some(()),
        // Not volatile, so without an escape: its bytes between its quotes.
        Role::Id | Role::Text { .. } | Role::Finish => {
            let raw = data.get(p + 1..p + h.end - h.start - 1)?;
            Value::Str(Some(Cow::Borrowed(std::str::from_utf8(raw).ok()?)))
        }
        Role::Prompt | Role::Completion => Value::Count(Some(h.count)),
        Role::Cached | Role::Reasoning => Value::Count((!h.null).then_some(h.count)),
    };
    set(chunk, h.role, value, with_id)
}

/// Sets a value read in its place in the chunk (`None` where the chunk has
/// no place for it, which its shape's has).
#[inline(always)]
fn set<'a>(chunk: &mut ChatChunk<'a>, role: Role, value: Value<'a>, with_id: bool) -> Option<()> {
    match (role, value) {
        (_, Value::Skipped) => {}
        (Role::Id, Value::Str(id)) => {
            if with_id {
                chunk.id = id;
            }
        }
        (Role::Text { delta, field }, Value::Str(text)) => {
            let c = chunk.choice.as_mut()?;
            let m = if delta { &mut c.delta } else { &mut c.message };
            let m = m.as_mut()?;
            match field {
                0 => m.content = text,
                1 => m.reasoning_content = text,
                _ => m.reasoning = text,
            }
        }
        (Role::Finish, Value::Str(f)) => chunk.choice.as_mut()?.finish_reason = f,
        (Role::Prompt, Value::Count(n)) => chunk.usage.as_mut()?.prompt_tokens = n?,
        (Role::Completion, Value::Count(n)) => chunk.usage.as_mut()?.completion_tokens = n?,
        (Role::Cached, Value::Count(n)) => chunk.usage.as_mut()?.cached_tokens = n,
        (Role::Reasoning, Value::Count(n)) => chunk.usage.as_mut()?.reasoning_tokens = n,
        (Role::Detail, _) => {}
        _ => return None,
    }
    Some(())
}

/// A key met for the first time (serde refuses a field given twice).
fn once(seen: &mut bool) -> Option<()> {
    (!std::mem::replace(seen, true)).then_some(())
}

struct Scan<'a> {
    s: &'a [u8],
    i: usize,
    /// Where the strings read lie.
    spans: Spans,
    /// Where the values the reading depends on lie, where they are kept.
    holes: Option<Vec<Hole>>,
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

    /// A string or `null`, kept as a value standing for `role`.
    #[inline(always)]
    fn opt_string(&mut self, role: Role) -> Option<Option<Cow<'a, str>>> {
        let first = self.peek()?;
        let start = self.i;
        let text = if first == b'n' {
            self.literal(b"null")?;
            None
        } else {
            Some(self.string()?)
        };
        // A text changes from chunk to chunk (a `null` one mostly stays);
        // a string with an escape is read again (its bytes are not its text).
        let escaped = matches!(text, Some(Cow::Owned(_)));
        let volatile = (matches!(role, Role::Text { .. }) && text.is_some()) || escaped;
        self.hole(Hole {
            start,
            end: self.i,
            role,
            volatile,
            null: text.is_none(),
            count: 0,
        });
        Some(text)
    }

    /// Notes a value the reading depends on: where a string lies, and
    /// every value where the holes are kept.
    fn hole(&mut self, hole: Hole) {
        if !hole.null {
            let at = Some((hole.start, hole.end));
            match hole.role {
                Role::Id => self.spans.id = at,
                Role::Finish => self.spans.finish = at,
                Role::Text { field, .. } => self.spans.text[usize::from(field)] = at,
                _ => {}
            }
        }
        if let Some(h) = &mut self.holes {
            h.push(hole);
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
                    c.message = s.opt_message(false)?;
                }
                b"delta" => {
                    once(&mut seen[1])?;
                    c.delta = s.opt_message(true)?;
                }
                b"finish_reason" => {
                    once(&mut seen[2])?;
                    c.finish_reason = s.opt_string(Role::Finish)?;
                }
                _ => s.skip(1)?,
            }
            Some(())
        })?;
        Some(c)
    }

    /// A message or delta, or `null`.
    fn opt_message(&mut self, delta: bool) -> Option<Option<WireMessage<'a>>> {
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
                    m.content = s.opt_string(Role::Text { delta, field: 0 })?;
                }
                b"reasoning_content" => {
                    once(&mut seen[1])?;
                    m.reasoning_content = s.opt_string(Role::Text { delta, field: 1 })?;
                }
                b"reasoning" => {
                    once(&mut seen[2])?;
                    m.reasoning = s.opt_string(Role::Text { delta, field: 2 })?;
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
                    u.prompt_tokens = s.counted(Role::Prompt)?;
                }
                b"completion_tokens" => {
                    once(&mut seen[1])?;
                    u.completion_tokens = s.counted(Role::Completion)?;
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
                    let role = match (key == name, name) {
                        (false, _) => Role::Detail,
                        (true, b"cached_tokens") => Role::Cached,
                        (true, _) => Role::Reasoning,
                    };
                    let c = s.counted_or_null(role)?;
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

    /// A token count kept as a value standing for `role`.
    fn counted(&mut self, role: Role) -> Option<u64> {
        self.counted_by(role, |s| s.count().map(Some)).flatten()
    }

    /// A token count or `null`, kept as a value standing for `role`.
    fn counted_or_null(&mut self, role: Role) -> Option<Option<u64>> {
        self.counted_by(role, Scan::opt_count)
    }

    /// A count read by `read`, kept as a value standing for `role`.
    fn counted_by(
        &mut self,
        role: Role,
        read: impl FnOnce(&mut Self) -> Option<Option<u64>>,
    ) -> Option<Option<u64>> {
        self.ws();
        let start = self.i;
        let n = read(self)?;
        self.hole(Hole {
            start,
            end: self.i,
            role,
            volatile: false,
            null: n.is_none(),
            count: n.unwrap_or_default(),
        });
        Some(n)
    }

    /// A token count or `null`.
    fn opt_count(&mut self) -> Option<Option<u64>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            Some(None)
        } else {
            Some(Some(self.count()?))
        }
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
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                self.number()?;
                self.hole(Hole {
                    start,
                    end: self.i,
                    role: Role::Number,
                    volatile: false,
                    null: false,
                    count: 0,
                });
                Some(())
            }
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
        agrees_with(reader.read(data, true), data)
    }

    /// [`agrees`], for kept shapes.
    fn shaped_agrees(shapes: &mut Shapes, data: &[u8]) -> bool {
        agrees_with(shapes.read(data, true), data)
    }

    /// Whether the chunk was read fast, where it was read as serde reads it.
    fn agrees_with(fast: Option<ChatChunk<'_>>, data: &[u8]) -> bool {
        let Some(fast) = fast else {
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

    /// Chunks that differ from one read before in their values alone (the
    /// id, creation time, texts, finish reason) are read by that one's
    /// shape, as serde reads them; any other is read whole. (Streams are
    /// read by their template; these are shapes at their hardest.)
    #[test]
    fn chunks_alike_but_for_their_values_are_read_by_their_shape() {
        let chunk = |id: &str, created: u64, text: &str, finish: &str| {
            format!(
                r#"{{"id":"{id}","object":"chat.completion.chunk","created":{created},"model":"m","choices":[{{"index":0,"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish}}}]}}"#
            )
        };
        let mut r = Shapes::default();
        let role = r#"{"id":"chatcmpl-9","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        assert!(shaped_agrees(&mut r, role.as_bytes()));
        let texts = [
            r#"" Hello""#,
            r#"",""#,
            r#""""#,
            r#"" wörld 😀""#,
            r#""a\nb""#,
            "null",
            r#""say \"hi\"""#,
        ];
        for (i, text) in texts.into_iter().enumerate() {
            let c = chunk("chatcmpl-9", 1, text, "null");
            // The first is read whole: the role chunk is not its shape.
            assert_eq!(r.shaped(c.as_bytes(), true).is_some(), i > 0, "{c}");
            assert!(shaped_agrees(&mut r, c.as_bytes()), "{c}");
        }
        // Another member where the text was: read whole, as serde reads it.
        let two = chunk("chatcmpl-9", 1, r#""ok","x":"y""#, "null");
        assert!(r.shaped(two.as_bytes(), true).is_none());
        assert!(shaped_agrees(&mut r, two.as_bytes()));
        // Text that is not UTF-8 where the shape has a text: left to serde.
        let mut bad = chunk("chatcmpl-9", 1, r#""ab""#, "null").into_bytes();
        let at = bad.windows(2).position(|w| w == b"ab").unwrap_or_default();
        bad[at] = 0xff;
        assert!(r.read(&bad, true).is_none());
        // The finish chunk has the text chunk's shape: its finish reason
        // is one of its values.
        let finish = chunk("chatcmpl-9", 1, r#""""#, r#""stop""#);
        assert!(r.shaped(finish.as_bytes(), true).is_some());
        assert!(shaped_agrees(&mut r, finish.as_bytes()));
        // The next stream: another id and creation time, the same shapes.
        assert!(
            r.shaped(role.replace("-9", "-10").as_bytes(), true)
                .is_some()
        );
        for text in [r#""next""#, r#"" stream""#] {
            let c = chunk("chatcmpl-10", 1_700_000_123, text, "null");
            assert!(r.shaped(c.as_bytes(), true).is_some(), "{c}");
            assert!(shaped_agrees(&mut r, c.as_bytes()), "{c}");
        }
        // A creation time of another kind of number: still one of its
        // values; a string there is not.
        let odd = chunk("chatcmpl-10", 1, r#""x""#, "null").replace(":1,", ":-1.5e3,");
        assert!(r.shaped(odd.as_bytes(), true).is_some());
        assert!(shaped_agrees(&mut r, odd.as_bytes()));
        let odd = chunk("chatcmpl-10", 1, r#""x""#, "null").replace(":1,", r#":"1","#);
        assert!(r.shaped(odd.as_bytes(), true).is_none());
        assert!(shaped_agrees(&mut r, odd.as_bytes()));
        // Without its id where the reader already has it.
        let c = chunk("chatcmpl-10", 1, r#""y""#, "null");
        let with = r.shaped(c.as_bytes(), true).unwrap_or_default();
        let without = r.shaped(c.as_bytes(), false).unwrap_or_default();
        assert_eq!(with.id.as_deref(), Some("chatcmpl-10"));
        assert_eq!(without.id, None);
        assert_eq!(without.choice, with.choice);
    }

    /// A whole reply or a usage chunk like one read before, but for its id,
    /// creation time, text, finish reason and counts, is read by its shape
    /// as serde reads it; the least lately used shape makes room.
    #[test]
    fn a_reply_like_one_read_before_is_read_by_its_shape() {
        let reply = |id: &str, text: &str, finish: &str, prompt: u64, cached: &str| {
            format!(
                r#"{{"id":"{id}","object":"chat.completion","created":17000{prompt},"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":{text},"reasoning_content":null}},"finish_reason":{finish}}}],"usage":{{"prompt_tokens":{prompt},"total_tokens":{},"completion_tokens":16,"prompt_tokens_details":{{"cached_tokens":{cached}}},"completion_tokens_details":{{"reasoning_tokens":3}}}}}}"#,
                prompt + 16
            )
        };
        let mut r = Shapes::default();
        let first = reply("chatcmpl-1", r#"" a b""#, r#""length""#, 32, "8");
        assert!(r.shaped(first.as_bytes(), true).is_none());
        assert!(shaped_agrees(&mut r, first.as_bytes()));
        for (id, text, finish, prompt, cached) in [
            (
                "chatcmpl-2",
                r#""other words, longer""#,
                r#""stop""#,
                1024,
                "null",
            ),
            ("x", r#""""#, "null", 0, "18446744073709551615"),
            ("chatcmpl-3", "null", r#""length""#, 7, "0"),
            ("chatcmpl-4", r#""\u00e9t\u00e9""#, r#""stop""#, 5, "5"),
        ] {
            let c = reply(id, text, finish, prompt, cached);
            assert!(r.shaped(c.as_bytes(), true).is_some(), "{c}");
            assert!(shaped_agrees(&mut r, c.as_bytes()), "{c}");
        }
        // Counts serde reads otherwise, or refuses: read whole or left to it.
        for (prompt, cached) in [("01", "1"), ("1", "1.0"), ("1", "-1"), ("1", "\"1\"")] {
            let c =
                reply("c", r#""t""#, "null", 1, cached).replacen(":1,", &format!(":{prompt},"), 1);
            assert!(r.shaped(c.as_bytes(), true).is_none(), "{c}");
            shaped_agrees(&mut r, c.as_bytes());
        }
        // A stream's usage chunk and its first chunk, two streams running.
        let usage = |id: &str, n: u64| {
            format!(
                r#"{{"id":"{id}","object":"chat.completion.chunk","created":{n},"model":"m","choices":[],"usage":{{"prompt_tokens":{n},"total_tokens":{},"completion_tokens":{n}}}}}"#,
                2 * n
            )
        };
        assert!(shaped_agrees(&mut r, usage("a", 3).as_bytes()));
        assert!(r.shaped(usage("bb", 12).as_bytes(), true).is_some());
        assert!(shaped_agrees(&mut r, usage("bb", 12).as_bytes()));
        // Seven other shapes later the reply's is gone; the usage's is not.
        for k in 0..SHAPES - 2 {
            let other = format!(r#"{{"id":"c","choices":[],"k{k}":{k}}}"#);
            assert!(shaped_agrees(&mut r, other.as_bytes()));
        }
        assert!(r.shaped(usage("c", 1).as_bytes(), true).is_some());
        let other = r#"{"id":"c","choices":[],"last":0}"#;
        assert!(shaped_agrees(&mut r, other.as_bytes()));
        assert!(r.shaped(first.as_bytes(), true).is_none());
        assert!(r.shaped(usage("d", 2).as_bytes(), true).is_some());
        assert_eq!(r.shapes.len(), SHAPES);
    }

    /// More values than a shape keeps: read whole each time, never kept.
    #[test]
    fn a_chunk_with_more_values_than_a_shape_keeps_is_read_whole() {
        let many: Vec<String> = (0..HOLES).map(|k| format!(r#""n{k}":{k}"#)).collect();
        let c = format!(r#"{{"id":"c","choices":[],{}}}"#, many.join(","));
        let mut r = Shapes::default();
        assert!(shaped_agrees(&mut r, c.as_bytes()));
        assert!(r.shapes.is_empty());
        assert!(r.shaped(c.as_bytes(), true).is_none());
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
            // Read alone, and after the chunk itself (its template, its shape).
            let mut primed = Reader::default();
            primed.read(bytes, true);
            let mut shaped = Shapes::default();
            shaped.read(bytes, true);
            for at in 0..bytes.len() {
                for b in *b"\"\\,:{}[] 0-.eEnx\n\x01\xff" {
                    let mut altered = bytes.to_vec();
                    altered[at] = b;
                    read_fast += usize::from(agrees(&altered));
                    agrees_after(&mut primed.clone(), &altered);
                    shaped_agrees(&mut shaped.clone(), &altered);
                }
                // A byte more or less, here.
                let mut longer = bytes.to_vec();
                longer.insert(at, b'x');
                agrees_after(&mut primed.clone(), &longer);
                shaped_agrees(&mut shaped.clone(), &longer);
                let mut shorter = bytes.to_vec();
                shorter.remove(at);
                agrees_after(&mut primed.clone(), &shorter);
                shaped_agrees(&mut shaped.clone(), &shorter);
            }
        }
        // Most single-byte changes inside a text leave a chunk readable.
        assert!(read_fast > 1000, "{read_fast}");
    }
}
