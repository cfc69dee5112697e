//! Plain HTTP/1.1 to one origin: connections kept by the transport, and the
//! exchange on them written here.
//!
//! A run sends every request to one URL, so the general pooled client's work per
//! request (its pool keyed by origin, the connector and proxy matching, the URL
//! parsed again, its service clones) buys nothing; on loopback it is a tenth of
//! the client's CPU per request. This keeps idle connections on stacks, one
//! per thread that sends (a thread takes another's only when its own is
//! empty), and sends on them directly. TLS, proxies and credentials in the URL stay with the
//! general client (see [`super::Transport::new`]).
//!
//! The exchange is the request's own task's: its head (the fixed part
//! rendered once, then the router's headers and the length) and body go out
//! in one vectored write, and the response is read on the same task, its head
//! parsed by `httparse` and its body framed by its length, as chunks, or up to
//! the close. A general HTTP client drives each connection from a task of its
//! own, and every request then crosses two tasks and a channel each way: on
//! an instant server that was a third of the client's CPU per request.

use super::Failure;
use super::counts::{ConnectionCounts, Counts};
use batchbench_contract::plugin::FailureKind;
use bytes::{Buf, Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::io::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where requests go and the connections kept open to it.
pub(super) struct Origin {
    /// `host:port` as a connect address (IPv6 without brackets).
    host: String,
    port: u16,
    /// The request line and every request's headers (`host`, `accept`, the
    /// content type, the key and the run's own), rendered once.
    head: Vec<u8>,
    /// The request target, for a head rendered again with a router's headers.
    target: String,
    /// Every request's headers: a router's header replaces one of them.
    headers: HeaderMap,
    connect_timeout: Duration,
    /// Connections that finished their last response, newest last, kept per
    /// thread (a thread takes its own first, then another's): the threads of
    /// a busy client do not queue on one lock.
    idle: Box<[Mutex<Vec<Kept>>]>,
    /// How many are kept over every thread's stack, and the most kept.
    kept: AtomicUsize,
    max_idle: usize,
    /// What the server did with the connections, over the run.
    counts: Counts,
}

/// A connection slot kept after a response: the connection, or the mark of
/// one the server closed after it. Whoever takes a mark opens a new
/// connection and counts a reconnect, so each close costs one count, whatever
/// the order in which the close and the next request arrive.
enum Kept {
    /// Open, and when it was given back.
    Open(Conn, Instant),
    /// Closed by the server (or `Connection: close`) after a response.
    Closed,
}

/// One connection: its socket, bytes read past the last response, and the
/// responses it has carried.
struct Conn {
    tcp: tokio::net::TcpStream,
    buf: BytesMut,
    served: u32,
}

/// A close seen within this of a connection's last response is the server
/// closing after its response; a later one is its idle timeout. (Shorter in
/// the unit tests, which close a connection on its idle timeout.)
const CLOSE_AFTER_RESPONSE: Duration = if cfg!(test) {
    Duration::from_millis(50)
} else {
    Duration::from_secs(1)
};

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// A request's response, its head read, on the connection that carries its
/// body: [`Response::chunk`] reads the body, and [`Origin::give_back`]
/// keeps the connection once it has.
pub(super) struct Response {
    /// The status code.
    pub(super) status: u16,
    /// The body's `content-length`, where the server framed it by one.
    pub(super) length: Option<u64>,
    /// The server's id of the request (the response header the run names),
    /// where it sent one.
    pub(super) server_id: Option<String>,
    body: Framing,
    conn: Conn,
    /// The server said it closes the connection after this response (or
    /// ends the body with the close).
    close: bool,
}

/// How a response's body ends, and how much of it is still to read.
enum Framing {
    /// After so many more bytes (its `content-length`).
    Length(u64),
    /// With its last chunk (`transfer-encoding: chunked`).
    Chunked(Chunk),
    /// With the connection: no length and no chunks.
    Close,
    /// It has ended.
    Done,
}

/// Where a chunked body's reading stands.
#[derive(Clone, Copy)]
enum Chunk {
    /// At a chunk's size line.
    Size,
    /// In a chunk's data, with so many bytes of it left.
    Data(u64),
    /// After a chunk's data, at its line end.
    DataEnd,
    /// After the last chunk, in the trailers.
    Trailers,
}

/// A request sent and its response's head read.
pub(super) struct Sent {
    pub(super) response: Response,
    /// When the request went out on the connection that answered it (a new
    /// connection's handshake included, as for any request that opens one).
    pub(super) at: Instant,
}

/// How an exchange on a connection failed.
enum Exchange {
    /// The connection ended (an EOF, a reset, a broken pipe) before any byte
    /// of the response: on a kept connection, the server had closed it.
    NothingBack(Failure),
    /// Anything else: the server saw the request, or the response was wrong.
    Failed(Failure),
}

/// How many stacks of kept connections: one per core, up to 16.
fn idle_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(16))
}

/// The stack of kept connections this thread uses, of `n`.
fn this_shard(n: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i % n)
}

/// The most bytes a response head may hold, and the most headers: what
/// hyper's client took.
const MAX_HEAD: usize = 400 * 1024;
const MAX_HEADERS: usize = 100;

/// The room a connection's reads are given.
const READ_ROOM: usize = 16 * 1024;

/// A request head: its line and `headers`, without the length and the blank
/// line that end it.
fn render<'a>(
    target: &str,
    headers: impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)>,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"POST ");
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head
}

impl Origin {
    /// The origin of a plain `http` URL with no credentials in it; `headers` are
    /// the run's fixed headers (content type, key, `--header`s).
    pub(super) fn new(
        url: &reqwest::Url,
        mut headers: HeaderMap,
        connect_timeout: Duration,
        max_idle: usize,
    ) -> Result<Self, String> {
        let Some(authority_host) = url.host_str() else {
            return Err(format!("no host in '{url}'"));
        };
        // An IPv6 address is written in brackets in a URL, not in an address.
        let host = authority_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(80);
        let mut authority = authority_host.to_owned();
        if let Some(p) = url.port() {
            authority.push_str(&format!(":{p}"));
        }
        let mut target = url.path().to_owned();
        if let Some(q) = url.query() {
            target.push('?');
            target.push_str(q);
        }
        let host_value =
            HeaderValue::from_str(&authority).map_err(|e| format!("the host of '{url}': {e}"))?;
        // What the general client sends as well.
        headers.entry(reqwest::header::HOST).or_insert(host_value);
        headers
            .entry(reqwest::header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        Ok(Self {
            host,
            port,
            head: render(&target, headers.iter()),
            target,
            headers,
            connect_timeout,
            idle: (0..idle_shards()).map(|_| Mutex::default()).collect(),
            kept: AtomicUsize::new(0),
            max_idle: max_idle.max(1),
            counts: Counts::default(),
        })
    }

    /// The connections' counts so far.
    pub(super) fn counts(&self) -> ConnectionCounts {
        self.counts.read()
    }

    /// A request's whole head for a body of `len` bytes: a router's header
    /// replaces a fixed one of the same name.
    fn head(&self, len: usize, extra_headers: &[(String, String)]) -> Result<Vec<u8>, Failure> {
        let mut head = if extra_headers.is_empty() {
            let mut head = Vec::with_capacity(self.head.len() + 32);
            head.extend_from_slice(&self.head);
            head
        } else {
            let mut h = HeaderMap::new();
            for (k, v) in extra_headers {
                let (name, value) =
                    super::header(k, v).map_err(|msg| (FailureKind::Connect, msg, false))?;
                h.append(name, value);
            }
            for (k, v) in &self.headers {
                if !h.contains_key(k) {
                    h.insert(k.clone(), v.clone());
                }
            }
            render(&self.target, h.iter())
        };
        // Written into the head itself: no string of its own per request.
        let _ = write!(head, "content-length: {len}\r\n\r\n");
        Ok(head)
    }

    /// Sends one request and reads its response's head; the response carries
    /// the connection its body comes on. `id_header` names the response
    /// header that holds the server's id of the request.
    ///
    /// A kept connection the server closed after its last response is never
    /// a failure: whether the close is seen before the request goes out or
    /// only as an EOF or reset before any of the response, the request goes
    /// out at once on a new connection, once, and `reconnected` says so. A
    /// fresh connection's failures are failures.
    pub(super) async fn send(
        &self,
        body: &[Bytes],
        extra_headers: &[(String, String)],
        id_header: Option<&str>,
        reconnected: &mut bool,
    ) -> Result<Sent, Failure> {
        let len = body.iter().map(Bytes::len).sum();
        let head = self.head(len, extra_headers)?;
        match self.take_idle() {
            None => {}
            // Counted when the close was seen, at the response's end.
            Some(Kept::Closed) => *reconnected = true,
            Some(Kept::Open(mut conn, given_back)) => {
                if conn.closed() {
                    self.closed_while_kept(given_back, reconnected);
                } else {
                    let at = Instant::now();
                    match conn.exchange(&head, body, id_header).await {
                        Ok(response) => return Ok(Sent { response, at }),
                        Err(Exchange::NothingBack(_)) => {
                            self.closed_while_kept(given_back, reconnected);
                        }
                        Err(Exchange::Failed(f)) => return Err(f),
                    }
                }
            }
        }
        // A new connection's handshake is part of its first request's time.
        let at = Instant::now();
        let conn = self.connect().await?;
        match conn.exchange(&head, body, id_header).await {
            Ok(response) => Ok(Sent { response, at }),
            Err(Exchange::NothingBack(f) | Exchange::Failed(f)) => Err(f),
        }
    }

    /// A kept connection was found closed: the request takes a new one. A
    /// close found within [`CLOSE_AFTER_RESPONSE`] of its last response is
    /// the server closing after it; a later one, its idle timeout. (A server
    /// that closes after every response without saying so, under a load
    /// that leaves its connections idle for longer, counts as timing them
    /// out; a server that says `Connection: close` is counted at once.)
    fn closed_while_kept(&self, given_back: Instant, reconnected: &mut bool) {
        *reconnected = true;
        let counter = if given_back.elapsed() <= CLOSE_AFTER_RESPONSE {
            &self.counts.closed_after_response
        } else {
            &self.counts.closed_when_idle
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps the connection of a response read to its end; one the server
    /// closed (or said it would) leaves a mark for the next request.
    pub(super) fn give_back(&self, response: Response) {
        let c = &self.counts;
        c.responses.fetch_add(1, Ordering::Relaxed);
        let Response {
            mut conn,
            close,
            body,
            ..
        } = response;
        if conn.served > 0 {
            c.reused.fetch_add(1, Ordering::Relaxed);
        }
        let kept = if close || !matches!(body, Framing::Done) {
            c.closed_after_response.fetch_add(1, Ordering::Relaxed);
            Kept::Closed
        } else {
            conn.served = conn.served.saturating_add(1);
            Kept::Open(conn, Instant::now())
        };
        if self.kept.fetch_add(1, Ordering::Relaxed) < self.max_idle {
            self.shard(this_shard(self.idle.len())).push(kept);
        } else {
            self.kept.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn shard(&self, i: usize) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.idle[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every kept connection has been seen closed.
    #[cfg(test)]
    pub(super) fn idle_all_closed(&self) -> bool {
        (0..self.idle.len()).all(|i| {
            self.shard(i).iter_mut().all(|k| match k {
                Kept::Open(c, _) => c.closed(),
                Kept::Closed => true,
            })
        })
    }

    /// The newest kept slot of this thread's stack, else of the next one
    /// that has any.
    fn take_idle(&self) -> Option<Kept> {
        if self.kept.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let n = self.idle.len();
        let own = this_shard(n);
        let kept = (0..n).find_map(|k| self.shard((own + k) % n).pop());
        if kept.is_some() {
            self.kept.fetch_sub(1, Ordering::Relaxed);
        }
        kept
    }

    async fn connect(&self) -> Result<Conn, Failure> {
        let addr = (self.host.as_str(), self.port);
        let tcp =
            match tokio::time::timeout(self.connect_timeout, tokio::net::TcpStream::connect(addr))
                .await
            {
                Ok(Ok(tcp)) => tcp,
                Ok(Err(e)) => {
                    return Err((
                        FailureKind::Connect,
                        format!("cannot connect to {}:{}: {e}", self.host, self.port),
                        true,
                    ));
                }
                Err(_) => {
                    return Err((
                        FailureKind::Timeout,
                        format!(
                            "connecting to {}:{} timed out after {:?}",
                            self.host, self.port, self.connect_timeout
                        ),
                        true,
                    ));
                }
            };
        let _ = tcp.set_nodelay(true);
        self.counts.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn {
            tcp,
            buf: BytesMut::with_capacity(READ_ROOM),
            served: 0,
        })
    }
}

/// The connection ended: an EOF, a reset or a broken pipe, not a timeout or
/// a malformed response.
fn ended(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof
    )
}

/// An I/O error as a connection failure.
fn failure(doing: &str, e: &std::io::Error) -> Failure {
    (FailureKind::Connect, format!("{doing}: {e}"), true)
}

/// A malformed response: a connection failure, retried as one.
fn malformed(what: impl std::fmt::Display) -> Failure {
    (
        FailureKind::Connect,
        format!("reading the response: {what}"),
        true,
    )
}

impl Conn {
    /// Whether the server has closed the kept connection (or sent bytes
    /// nobody asked for, which leave its framing unknown). Only what the
    /// runtime has already seen of the socket: no system call while it is
    /// quiet.
    fn closed(&mut self) -> bool {
        if !self.buf.is_empty() {
            return true;
        }
        self.buf.reserve(READ_ROOM);
        match self.tcp.try_read_buf(&mut self.buf) {
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            // An EOF, or bytes before any request.
            Ok(_) => true,
        }
    }

    /// Reads more of the response into the buffer; `Ok(0)` at the close.
    async fn read_more(&mut self) -> std::io::Result<usize> {
        self.buf.reserve(READ_ROOM);
        self.tcp.read_buf(&mut self.buf).await
    }

    /// Reads more of a response's body; its end before the body's is a
    /// failure.
    async fn fill(&mut self) -> Result<(), Failure> {
        match self.read_more().await {
            Ok(0) => Err(malformed("the connection closed before the response's end")),
            Ok(_) => Ok(()),
            Err(e) => Err(failure("reading the response", &e)),
        }
    }

    /// Up to `left` bytes of a body (what has arrived, reading when nothing
    /// has), and how many are left after them.
    async fn take(&mut self, left: u64) -> Result<(Bytes, u64), Failure> {
        if self.buf.is_empty() {
            self.fill().await?;
        }
        let n = self
            .buf
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        Ok((self.buf.split_to(n).freeze(), left - n as u64))
    }

    /// Writes the request and reads its response's head.
    ///
    /// A server may answer before it has read the whole body (a 413 for a
    /// prompt too large) and close: when the write fails as the connection
    /// ends, what the server sent before is read all the same, and its answer
    /// is the response.
    async fn exchange(
        mut self,
        head: &[u8],
        body: &[Bytes],
        id_header: Option<&str>,
    ) -> Result<Response, Exchange> {
        let written = self.write(head, body).await;
        if let Err(e) = &written
            && !ended(e)
        {
            return Err(Exchange::Failed(failure("sending the request", e)));
        }
        // Any byte back (an interim head included) means the server saw
        // the request: it is never sent again on a new connection.
        let mut read_any = false;
        loop {
            if let Some(h) = self.parse_head(id_header).map_err(Exchange::Failed)? {
                // 1xx (101 here), 204 and 304 have no body, whatever their
                // headers say; a transfer coding other than chunked last runs
                // to the close (RFC 9112, 6.3).
                let body = if matches!(h.status, 100..=199 | 204 | 304) {
                    Framing::Done
                } else if h.chunked {
                    Framing::Chunked(Chunk::Size)
                } else if h.coded {
                    Framing::Close
                } else {
                    match h.length {
                        Some(0) => Framing::Done,
                        Some(n) => Framing::Length(n),
                        None => Framing::Close,
                    }
                };
                let close = h.close || matches!(body, Framing::Close) || written.is_err();
                return Ok(Response {
                    status: h.status,
                    length: h.length.filter(|_| !h.chunked && !h.coded),
                    server_id: h.server_id,
                    body,
                    conn: self,
                    close,
                });
            }
            let read = self.read_more().await;
            if let Ok(1..) = read {
                read_any = true;
                continue;
            }
            // No (whole) head came: the failure is the write's where it
            // failed, else the read's.
            let (f, gone) = match (&written, &read) {
                (Err(e), _) => (failure("sending the request", e), true),
                (Ok(()), Err(e)) => (failure("reading the response", e), ended(e)),
                (Ok(()), Ok(_)) => (
                    malformed(if read_any {
                        "the connection closed in the middle of the response head"
                    } else {
                        "the connection closed before any of the response"
                    }),
                    true,
                ),
            };
            return Err(if gone && !read_any {
                Exchange::NothingBack(f)
            } else {
                Exchange::Failed(f)
            });
        }
    }

    /// Writes the head and the body's parts, in as few writes as the socket
    /// takes.
    async fn write(&mut self, head: &[u8], body: &[Bytes]) -> std::io::Result<()> {
        let parts: Vec<&[u8]> = std::iter::once(head)
            .chain(body.iter().map(|b| &b[..]))
            .filter(|p| !p.is_empty())
            .collect();
        let (mut part, mut offset) = (0, 0);
        while part < parts.len() {
            let slices: Vec<std::io::IoSlice<'_>> = parts[part..]
                .iter()
                .take(64)
                .enumerate()
                .map(|(i, p)| std::io::IoSlice::new(if i == 0 { &p[offset..] } else { p }))
                .collect();
            let mut n = self.tcp.write_vectored(&slices).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            while n > 0 {
                let left = parts[part].len() - offset;
                if n >= left {
                    n -= left;
                    part += 1;
                    offset = 0;
                } else {
                    offset += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// The response head at the start of the buffer, taken out of it; `None`
    /// until the head is whole. Interim (1xx) heads but 101 are skipped.
    fn parse_head(&mut self, id_header: Option<&str>) -> Result<Option<Head>, Failure> {
        loop {
            if self.buf.is_empty() {
                return Ok(None);
            }
            // Left uninitialised: the parser writes the headers it finds
            // (a hundred empty ones cost more than the parse).
            let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
            let mut r = httparse::Response::new(&mut []);
            let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
                &mut r,
                &self.buf,
                &mut headers,
            );
            let n = match parsed {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) if self.buf.len() > MAX_HEAD => {
                    return Err(malformed(format_args!(
                        "the response head is over {MAX_HEAD} bytes"
                    )));
                }
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(e) => return Err(malformed(format_args!("an invalid response head: {e}"))),
            };
            let status = r.code.unwrap_or(0);
            if (100..200).contains(&status) && status != 101 {
                self.buf.advance(n);
                continue;
            }
            // HTTP/1.0 closes unless it says otherwise.
            let mut h = Head {
                status,
                close: r.version == Some(0),
                ..Head::default()
            };
            for header in r.headers.iter() {
                let name = header.name;
                let value = || std::str::from_utf8(header.value).unwrap_or_default().trim();
                if name.eq_ignore_ascii_case("content-length") {
                    let value = value();
                    let n: u64 = value.parse().map_err(|_| {
                        malformed(format_args!("an invalid content-length '{value}'"))
                    })?;
                    if h.length.is_some_and(|l| l != n) {
                        return Err(malformed("two different content-lengths"));
                    }
                    h.length = Some(n);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    h.chunked = value()
                        .rsplit(',')
                        .next()
                        .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
                    h.coded = !h.chunked;
                } else if name.eq_ignore_ascii_case("connection") {
                    for token in value().split(',').map(str::trim) {
                        if token.eq_ignore_ascii_case("close") {
                            h.close = true;
                        } else if token.eq_ignore_ascii_case("keep-alive") && r.version == Some(0) {
                            h.close = false;
                        }
                    }
                }
                if h.server_id.is_none() && id_header.is_some_and(|n| name.eq_ignore_ascii_case(n))
                {
                    h.server_id = std::str::from_utf8(header.value).ok().map(str::to_owned);
                }
            }
            self.buf.advance(n);
            return Ok(Some(h));
        }
    }
}

/// What a response head says of its body and its connection.
#[derive(Debug, Default)]
struct Head {
    status: u16,
    /// Its `content-length`.
    length: Option<u64>,
    /// `transfer-encoding` ends with `chunked`.
    chunked: bool,
    /// `transfer-encoding` names other codings alone: the body runs to the
    /// close.
    coded: bool,
    /// The server closes the connection after it.
    close: bool,
    /// The server's id of the request.
    server_id: Option<String>,
}

impl Response {
    /// The next piece of the body; `None` at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        let Self { body, conn, .. } = self;
        loop {
            match body {
                Framing::Done => return Ok(None),
                Framing::Length(left) => {
                    let (data, rest) = conn.take(*left).await?;
                    *body = if rest == 0 {
                        Framing::Done
                    } else {
                        Framing::Length(rest)
                    };
                    return Ok(Some(data));
                }
                Framing::Close => {
                    if conn.buf.is_empty() {
                        match conn.read_more().await {
                            Ok(0) => {
                                *body = Framing::Done;
                                return Ok(None);
                            }
                            Ok(_) => {}
                            Err(e) => return Err(failure("reading the response", &e)),
                        }
                    }
                    return Ok(Some(conn.buf.split().freeze()));
                }
                Framing::Chunked(state) => match *state {
                    Chunk::Size | Chunk::Trailers => {
                        let Some(end) = conn.buf.windows(2).position(|w| w == b"\r\n") else {
                            if conn.buf.len() > MAX_HEAD {
                                return Err(malformed("a chunk's size line is too long"));
                            }
                            conn.fill().await?;
                            continue;
                        };
                        let line = &conn.buf[..end];
                        if matches!(state, Chunk::Trailers) {
                            // A blank line ends the trailers, and the body.
                            let last = line.is_empty();
                            conn.buf.advance(end + 2);
                            if last {
                                *body = Framing::Done;
                                return Ok(None);
                            }
                            continue;
                        }
                        let size = std::str::from_utf8(line)
                            .ok()
                            .and_then(|l| {
                                let hex = l.split(';').next().unwrap_or_default().trim();
                                u64::from_str_radix(hex, 16).ok()
                            })
                            .ok_or_else(|| malformed("an invalid chunk size"))?;
                        conn.buf.advance(end + 2);
                        *state = if size == 0 {
                            Chunk::Trailers
                        } else {
                            Chunk::Data(size)
                        };
                    }
                    Chunk::Data(left) => {
                        let (data, rest) = conn.take(left).await?;
                        *state = if rest == 0 {
                            Chunk::DataEnd
                        } else {
                            Chunk::Data(rest)
                        };
                        return Ok(Some(data));
                    }
                    Chunk::DataEnd => {
                        if conn.buf.len() < 2 {
                            conn.fill().await?;
                            continue;
                        }
                        if &conn.buf[..2] != b"\r\n" {
                            return Err(malformed("a chunk's data is longer than its size"));
                        }
                        conn.buf.advance(2);
                        *state = Chunk::Size;
                    }
                },
            }
        }
    }
}
