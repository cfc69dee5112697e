//! Plain HTTP/1.1 to one origin: hyper connections kept by the transport.
//!
//! A run sends every request to one URL, so the general pooled client's work per
//! request (its pool keyed by origin, the connector and proxy matching, the URL
//! parsed again, its service clones) buys nothing; on loopback it is a tenth of
//! the client's CPU per request. This keeps idle connections on stacks, one
//! per thread that sends (a thread takes another's only when its own is
//! empty), and sends on them directly. TLS, proxies and credentials in the URL stay with the
//! general client (see [`super::Transport::new`]).

use super::{Chunks, Failure};
use batchbench_contract::plugin::FailureKind;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Where requests go and the connections kept open to it.
pub(super) struct Origin {
    /// `host:port` as a connect address (IPv6 without brackets).
    host: String,
    port: u16,
    /// The request target: the URL's path and query.
    path: Uri,
    /// Every request's headers: `host`, `accept`, the content type, the key and
    /// the run's own.
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

/// One connection: its sender, what it has seen, and the responses it has
/// carried.
struct Conn {
    sender: SendRequest<Chunks>,
    life: Arc<Life>,
    served: u32,
}

/// What a connection's socket has seen, kept beside it.
#[derive(Debug, Default)]
struct Life {
    /// Bytes read from the server.
    read: AtomicU64,
    /// When the connection ended (the server closed it, or it failed).
    ended: OnceLock<Instant>,
}

/// A close seen within this of a connection's last response is the server
/// closing after its response; a later one is its idle timeout. (Shorter in
/// the unit tests, which close a connection on its idle timeout.)
const CLOSE_AFTER_RESPONSE: Duration = if cfg!(test) {
    Duration::from_millis(50)
} else {
    Duration::from_secs(1)
};

/// Counters of the connections' life, read by [`Origin::counts`].
#[derive(Debug, Default)]
struct Counts {
    opened: AtomicU64,
    responses: AtomicU64,
    reused: AtomicU64,
    closed_after_response: AtomicU64,
    closed_when_idle: AtomicU64,
}

/// A TCP stream that counts the bytes it reads: a kept connection that ends
/// before any byte of its request's response is told apart from one that
/// ends in the middle of it.
struct Counted {
    tcp: tokio::net::TcpStream,
    life: Arc<Life>,
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = (buf.filled().len() - before) as u64;
            this.life.read.fetch_add(n, Ordering::Relaxed);
        }
        r
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Origin")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A connection lent to one request; [`Origin::give_back`] returns it.
pub(super) struct Lent {
    /// The connection, with the responses it carried before this one.
    conn: Conn,
    /// The response said `Connection: close`.
    close: bool,
}

/// A request's response head, on the connection that carries its body.
pub(super) struct Sent {
    pub(super) response: Response<Incoming>,
    pub(super) lent: Lent,
    /// When the request went out on the connection that answered it (a new
    /// connection's handshake included, as for any request that opens one).
    pub(super) at: Instant,
}

/// What the server did with the run's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionCounts {
    /// Connections opened.
    pub opened: u64,
    /// Responses read to their end.
    pub responses: u64,
    /// Of those, responses on a connection that had carried one before.
    pub reused: u64,
    /// Connections the server closed right after a response (within a
    /// second: `Connection: close`, or a close seen while the connection was
    /// idle or as an EOF or reset on the next request).
    pub closed_after_response: u64,
    /// Connections the server closed later while they were idle (its
    /// keep-alive timeout).
    pub closed_when_idle: u64,
}

impl ConnectionCounts {
    /// The server closed every connection after its first response: every
    /// request after a connection's first paid a new connection.
    pub fn closes_after_every_response(&self) -> bool {
        self.closed_after_response > 0 && self.reused == 0
    }
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
        let path: Uri = target
            .parse()
            .map_err(|e| format!("the path of '{url}': {e}"))?;
        let host_value =
            HeaderValue::from_str(&authority).map_err(|e| format!("the host of '{url}': {e}"))?;
        // What the general client sends as well.
        headers.entry(hyper::header::HOST).or_insert(host_value);
        headers
            .entry(hyper::header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        Ok(Self {
            host,
            port,
            path,
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
        let c = &self.counts;
        ConnectionCounts {
            opened: c.opened.load(Ordering::Relaxed),
            responses: c.responses.load(Ordering::Relaxed),
            reused: c.reused.load(Ordering::Relaxed),
            closed_after_response: c.closed_after_response.load(Ordering::Relaxed),
            closed_when_idle: c.closed_when_idle.load(Ordering::Relaxed),
        }
    }

    fn request(
        &self,
        body: &[Bytes],
        extra_headers: &[(String, String)],
    ) -> Result<Request<Chunks>, Failure> {
        let mut req = Request::new(Chunks::new(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path.clone();
        if extra_headers.is_empty() {
            *req.headers_mut() = self.headers.clone();
        } else {
            // A router's header replaces a fixed one of the same name.
            let h = req.headers_mut();
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
        }
        Ok(req)
    }

    /// Sends one request and returns the response head, with the connection
    /// that carries its body.
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
        reconnected: &mut bool,
    ) -> Result<Sent, Failure> {
        let mut req = self.request(body, extra_headers)?;
        match self.take_idle() {
            None => {}
            // Counted when the close was seen, at the response's end.
            Some(Kept::Closed) => *reconnected = true,
            Some(Kept::Open(mut conn, given_back)) => {
                if conn.sender.ready().await.is_err() {
                    self.closed_while_kept(&conn, given_back, reconnected);
                } else {
                    let read = conn.life.read.load(Ordering::Relaxed);
                    let at = Instant::now();
                    match conn.sender.try_send_request(req).await {
                        Ok(response) => return Ok(self.answered(response, conn, at)),
                        Err(mut e) => {
                            req = match e.take_message() {
                                // Closed before the request went out.
                                Some(unsent) => unsent,
                                None => {
                                    let e = e.into_error();
                                    // Sent: only a close before any byte of
                                    // the response may send it again.
                                    let nothing_back =
                                        conn.life.read.load(Ordering::Relaxed) == read;
                                    if !(nothing_back && closed_before_response(&e)) {
                                        return Err(failure("sending the request", &e));
                                    }
                                    self.request(body, extra_headers)?
                                }
                            };
                            self.closed_while_kept(&conn, given_back, reconnected);
                        }
                    }
                }
            }
        }
        // A new connection's handshake is part of its first request's time.
        let at = Instant::now();
        let mut conn = self.connect().await?;
        match conn.sender.send_request(req).await {
            Ok(response) => Ok(self.answered(response, conn, at)),
            Err(e) => Err(failure("sending the request", &e)),
        }
    }

    /// A kept connection was found closed: the request takes a new one. A
    /// close within [`CLOSE_AFTER_RESPONSE`] of its last response is the
    /// server closing after it; a later one, its idle timeout.
    fn closed_while_kept(&self, conn: &Conn, given_back: Instant, reconnected: &mut bool) {
        *reconnected = true;
        let ended = conn.life.ended.get().copied().unwrap_or_else(Instant::now);
        let counter = if ended.saturating_duration_since(given_back) <= CLOSE_AFTER_RESPONSE {
            &self.counts.closed_after_response
        } else {
            &self.counts.closed_when_idle
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn answered(&self, response: Response<Incoming>, conn: Conn, at: Instant) -> Sent {
        let close = response
            .headers()
            .get_all(hyper::header::CONNECTION)
            .iter()
            .any(|v| {
                v.to_str()
                    .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
            });
        Sent {
            response,
            lent: Lent { conn, close },
            at,
        }
    }

    /// Keeps a connection whose response was read to its end; one the server
    /// closed (or said it would) leaves a mark for the next request.
    pub(super) fn give_back(&self, lent: Lent) {
        let c = &self.counts;
        c.responses.fetch_add(1, Ordering::Relaxed);
        let Lent { mut conn, close } = lent;
        if conn.served > 0 {
            c.reused.fetch_add(1, Ordering::Relaxed);
        }
        let kept = if close || conn.sender.is_closed() {
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
            self.shard(i).iter().all(|k| match k {
                Kept::Open(c, _) => c.life.ended.get().is_some(),
                Kept::Closed => true,
            })
        })
    }

    /// The newest kept slot of this thread's stack, else of the next one
    /// that has any (an open connection found closed fails its `ready`).
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
        let life = Arc::new(Life::default());
        let io = Counted {
            tcp,
            life: life.clone(),
        };
        let (sender, conn) = http1::handshake(hyper_util::rt::TokioIo::new(io))
            .await
            .map_err(|e| failure("opening the connection", &e))?;
        let ended = life.clone();
        tokio::spawn(async move {
            // Its errors reach the request that was on it.
            let _ = conn.await;
            let _ = ended.ended.set(Instant::now());
        });
        Ok(Conn {
            sender,
            life,
            served: 0,
        })
    }
}

/// The next piece of a response body; `None` at its end.
pub(super) async fn chunk(body: &mut Incoming) -> Result<Option<Bytes>, Failure> {
    use http_body::Body as _;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => return Ok(None),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    return Ok(Some(data));
                }
                // Trailers: nothing the run reads.
            }
            Some(Err(e)) => return Err(failure("reading the response", &e)),
        }
    }
}

/// The connection ended before any response to a request sent on it: an
/// EOF, a reset or a broken pipe, not a timeout or a malformed response.
fn closed_before_response(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() || e.is_canceled() {
        return true;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            );
        }
        src = s.source();
    }
    false
}

/// A hyper error as a connection failure, with its causes.
fn failure(doing: &str, e: &hyper::Error) -> Failure {
    (
        FailureKind::Connect,
        super::with_causes(format!("{doing}: {e}"), e),
        true,
    )
}
