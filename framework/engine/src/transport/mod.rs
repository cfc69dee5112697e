//! HTTP transport: one client per run, retries with exponential backoff,
//! failures classified, cancellation through one token.
//!
//! Plain `http` URLs are sent over HTTP/1.1 connections this module keeps
//! itself (module `h1`); TLS (HTTP/2 where the server offers it), a proxy from the
//! environment, or credentials in the URL go through reqwest's pooled client.
//! Both classify failures alike.

mod counts;
mod h1;

pub use counts::ConnectionCounts;

use batchbench_contract::plugin::{FailureKind, Reply, RequestCodec};
use bytes::Bytes;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use std::sync::Once;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Installs the ring crypto provider for rustls, once per process.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Where and how requests are sent.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Full request URL.
    pub url: String,
    /// The API key (never printed).
    pub api_key: Option<String>,
    /// The header that carries the key verbatim; `None`: `Authorization:
    /// Bearer KEY` (see [`batchbench_contract::plugin::RequestCodec::api_key_header`]).
    pub api_key_header: Option<String>,
    /// Per-attempt timeout.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Base of the exponential backoff.
    pub retry_delay: Duration,
    /// Extra headers on every request.
    pub headers: Vec<(String, String)>,
    /// The bodies' media type (the codec's: JSON unless it says otherwise).
    pub content_type: String,
    /// Connections kept per host (the concurrency).
    pub pool_size: usize,
    /// Print truncated request and response payloads to stderr.
    pub verbose: bool,
    /// How server certificates are checked.
    pub tls: TlsConfig,
    /// The most bytes one response may hold; a larger one fails as `decode`.
    pub max_response_bytes: u64,
    /// The response header whose value is the server's id of the request,
    /// recorded per request (`x-request-id` unless `--request-id-header`).
    pub request_id_header: Option<reqwest::header::HeaderName>,
}

/// A header's name as the transport takes it (`None`: not a valid name).
pub fn header_name(name: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).ok()
}

/// The default bound on one response's bytes: 64 MiB, far above any chat
/// reply, far below what would hurt the client's memory.
pub const MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// How server certificates are checked: against the system's roots (always),
/// extra CA certificates, or not at all.
#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    /// PEM text of extra trusted CA certificates.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any certificate, unverified.
    pub insecure: bool,
}

impl TlsConfig {
    /// The CA certificates of a PEM file, checked: a file that holds none is an
    /// error naming it.
    pub fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, TransportError> {
        let pem = std::fs::read(path)
            .map_err(|e| TransportError(format!("--ca-cert {}: {e}", path.display())))?;
        match reqwest::Certificate::from_pem_bundle(&pem) {
            Ok(c) if !c.is_empty() => Ok(pem),
            Ok(_) => Err(TransportError(format!(
                "--ca-cert {}: no certificate in the file (a PEM file of CA certificates)",
                path.display()
            ))),
            Err(e) => Err(TransportError(format!("--ca-cert {}: {e}", path.display()))),
        }
    }

    /// `builder` with these settings.
    pub fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder, TransportError> {
        if let Some(pem) = &self.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| TransportError(format!("the CA certificates: {e}")))?;
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        if self.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        }
        Ok(builder)
    }
}

/// Joins a base URL and an endpoint; an endpoint that is a full URL wins.
pub fn join_url(host: &str, endpoint: &str) -> String {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        return endpoint.to_owned();
    }
    let host = host.trim_end_matches('/');
    if endpoint.is_empty() {
        return host.to_owned();
    }
    // A host that already ends with /v1 and an endpoint that starts with it: keep one.
    let ep = if endpoint.starts_with('/') {
        endpoint.to_owned()
    } else {
        format!("/{endpoint}")
    };
    if host.ends_with("/v1") && ep.starts_with("/v1/") {
        return format!("{host}{}", &ep[3..]);
    }
    format!("{host}{ep}")
}

/// Checks that `url` is one requests can go to: an `http` or `https` URL
/// with a host.
pub fn check_url(url: &str) -> Result<(), TransportError> {
    let u = reqwest::Url::parse(url)
        .map_err(|e| TransportError(format!("invalid URL '{url}': {e}")))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(TransportError(format!(
            "'{url}' is not an http or https URL with a host"
        )));
    }
    Ok(())
}

/// A transport failure that makes the run impossible (bad URL, bad header).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransportError(pub String);

/// A failed attempt: its kind, message and whether another attempt may succeed.
type Failure = (FailureKind, String, bool);

/// The outcome of one request, after all attempts.
#[derive(Debug)]
pub struct Outcome {
    /// The reply, or the failure of the last attempt. Boxed: a reply is
    /// some hundreds of bytes, and it is handed up through several layers
    /// of futures, each a copy unboxed.
    pub result: Result<Box<Reply>, (FailureKind, String)>,
    /// Attempts beyond the first.
    pub retries: u32,
    /// Times a kept connection turned out closed by the server and the
    /// request went out again at once on a new one (not retries: no backoff,
    /// nothing failed).
    pub reconnects: u32,
    /// When the first attempt was sent.
    pub first_sent_at: Instant,
    /// When the last attempt was sent: on a reconnect, the send on the new
    /// connection, which got the response.
    pub sent_at: Instant,
    /// When the last attempt's response head arrived (a successful reply).
    pub first_byte_at: Option<Instant>,
    /// When it ended.
    pub done_at: Instant,
    /// The server's id of the request (its last attempt's response header
    /// named by [`TargetConfig::request_id_header`]), where it sent one.
    pub server_request_id: Option<String>,
}

/// The shared HTTP client of a run.
#[derive(Debug, Clone)]
pub struct Transport {
    wire: Wire,
    url: reqwest::Url,
    cfg: TargetConfig,
}

/// How requests travel.
#[derive(Debug, Clone)]
enum Wire {
    /// Plain HTTP/1.1 on connections kept here.
    Plain(std::sync::Arc<h1::Origin>),
    /// reqwest's pooled client: TLS, proxies, credentials in the URL.
    Pooled(reqwest::Client),
}

/// A proxy from the environment that reqwest would use for a plain `http` URL.
fn http_proxy_set() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()))
}

impl Transport {
    /// Builds the run's client: connections of its own for a plain `http`
    /// URL, reqwest's pooled client otherwise.
    pub fn new(cfg: TargetConfig) -> Result<Self, TransportError> {
        install_crypto_provider();
        let url = reqwest::Url::parse(&cfg.url)
            .map_err(|e| TransportError(format!("invalid URL '{}': {e}", cfg.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TransportError(format!(
                "unsupported URL scheme in '{}' (use http or https)",
                cfg.url
            )));
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_str(&cfg.content_type).map_err(|_| {
                TransportError(format!("invalid content type '{}'", cfg.content_type))
            })?,
        );
        if let Some(key) = &cfg.api_key {
            let (name, value) = match &cfg.api_key_header {
                None => (AUTHORIZATION, format!("Bearer {key}")),
                Some(h) => (
                    HeaderName::from_bytes(h.as_bytes()).map_err(|_| {
                        TransportError(format!("invalid API key header name '{h}'"))
                    })?,
                    key.clone(),
                ),
            };
            let mut v = HeaderValue::from_str(&value).map_err(|_| {
                TransportError("the API key contains characters not allowed in a header".to_owned())
            })?;
            v.set_sensitive(true);
            headers.insert(name, v);
        }
        for (k, v) in &cfg.headers {
            let (name, value) = header(k, v).map_err(TransportError)?;
            headers.insert(name, value);
        }
        let connect_timeout = cfg.timeout.min(Duration::from_secs(30));
        if url.scheme() == "http"
            && url.username().is_empty()
            && url.password().is_none()
            && !http_proxy_set()
        {
            let origin = h1::Origin::new(&url, headers, connect_timeout, cfg.pool_size)
                .map_err(TransportError)?;
            return Ok(Self {
                wire: Wire::Plain(std::sync::Arc::new(origin)),
                url,
                cfg,
            });
        }
        // Fixed headers go out as client defaults: no per-request copy.
        let client = cfg
            .tls
            .apply(reqwest::Client::builder())?
            .default_headers(headers)
            .pool_max_idle_per_host(cfg.pool_size.max(1))
            .pool_idle_timeout(Duration::from_secs(90))
            .tcp_nodelay(true)
            .timeout(cfg.timeout)
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| TransportError(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            wire: Wire::Pooled(client),
            url,
            cfg,
        })
    }

    /// A client with the target's TLS settings and no default headers (the API
    /// key stays with the target): for scraping the server's metrics.
    pub fn side_client(&self, timeout: Duration) -> Result<reqwest::Client, TransportError> {
        self.cfg
            .tls
            .apply(reqwest::Client::builder())?
            .timeout(timeout)
            .build()
            .map_err(|e| TransportError(format!("cannot build the HTTP client: {e}")))
    }

    /// The target configuration.
    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }

    /// Sends one request with retries. `extra_headers` come from routers.
    /// No retry goes out at or after `retry_until` (the run's deadline: at it
    /// nothing new is sent); the request ends with its last failure.
    pub async fn send(
        &self,
        body: &[Bytes],
        extra_headers: &[(String, String)],
        stream: bool,
        codec: &dyn RequestCodec,
        cancel: &CancellationToken,
        retry_until: Option<Instant>,
    ) -> Outcome {
        if self.cfg.verbose {
            let joined: Vec<u8> = body
                .iter()
                .flat_map(|b| b.iter().copied())
                .take(4096)
                .collect();
            let mut s = String::from_utf8_lossy(&joined).into_owned();
            crate::measurement::metrics::truncate(&mut s, 400);
            eprintln!(
                "-> POST {} {s}",
                batchbench_contract::record::redact_url(self.url.as_str())
            );
        }
        let mut retries = 0;
        let mut reconnects = 0;
        let first_sent_at = Instant::now();
        loop {
            let mut sent_at = if retries == 0 {
                first_sent_at
            } else {
                Instant::now()
            };
            let mut attempt = Attempt {
                sent_at: None,
                reconnected: false,
                server_id: None,
            };
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => Err((FailureKind::Cancelled, "cancelled".to_owned(), false)),
                r = self.attempt(body, extra_headers, stream, codec, &mut attempt) => r,
            };
            let done_at = Instant::now();
            if attempt.reconnected {
                reconnects += 1;
                // The time runs from the send that got the response.
                sent_at = attempt.sent_at.unwrap_or(sent_at);
            }
            match result {
                Ok((reply, first_byte_at)) => {
                    if self.cfg.verbose {
                        let mut s = reply.content.clone();
                        crate::measurement::metrics::truncate(&mut s, 400);
                        eprintln!("<- {:?} {s}", reply.usage);
                    }
                    return Outcome {
                        result: Ok(reply),
                        retries,
                        reconnects,
                        first_sent_at,
                        sent_at,
                        first_byte_at: Some(first_byte_at),
                        done_at,
                        server_request_id: attempt.server_id,
                    };
                }
                Err((kind, msg, retryable)) => {
                    if self.cfg.verbose {
                        eprintln!("<- {kind}: {msg}");
                    }
                    let backoff = self
                        .cfg
                        .retry_delay
                        .saturating_mul(1 << retries.min(16))
                        .min(Duration::from_secs(30));
                    let too_late = retry_until.is_some_and(|d| Instant::now() + backoff >= d);
                    if !retryable
                        || retries >= self.cfg.max_retries
                        || cancel.is_cancelled()
                        || too_late
                    {
                        return Outcome {
                            result: Err((kind, msg)),
                            retries,
                            reconnects,
                            first_sent_at,
                            sent_at,
                            first_byte_at: None,
                            done_at,
                            server_request_id: attempt.server_id,
                        };
                    }
                    retries += 1;
                    tokio::select! {
                        () = cancel.cancelled() => {
                            return Outcome { result: Err((FailureKind::Cancelled, "cancelled".to_owned())), retries, reconnects, first_sent_at, sent_at, first_byte_at: None, done_at, server_request_id: attempt.server_id };
                        }
                        () = tokio::time::sleep(backoff) => {}
                    }
                }
            }
        }
    }

    /// The server's id of a request in its response head, where it gave one.
    fn server_id(&self, headers: &reqwest::header::HeaderMap) -> Option<String> {
        let v = headers.get(self.cfg.request_id_header.as_ref()?)?;
        v.to_str().ok().map(str::to_owned)
    }

    /// What the server did with the run's kept connections so far; `None`
    /// where reqwest's pool keeps them (TLS, proxies).
    pub fn connection_counts(&self) -> Option<ConnectionCounts> {
        match &self.wire {
            Wire::Plain(origin) => Some(origin.counts()),
            Wire::Pooled(_) => None,
        }
    }

    async fn attempt(
        &self,
        body: &[Bytes],
        extra_headers: &[(String, String)],
        stream: bool,
        codec: &dyn RequestCodec,
        attempt: &mut Attempt,
    ) -> Result<(Box<Reply>, Instant), Failure> {
        let origin = match &self.wire {
            Wire::Pooled(client) => {
                return self
                    .attempt_pooled(client, body, extra_headers, stream, codec, attempt)
                    .await;
            }
            Wire::Plain(origin) => origin,
        };
        // The whole exchange, body included, within the request timeout, as
        // the pooled client's timeout does.
        let timeout = self.cfg.timeout;
        let exchange = async {
            let id_header = self.cfg.request_id_header.as_ref().map(|h| h.as_str());
            let h1::Sent { mut response, at } = origin
                .send(body, extra_headers, id_header, &mut attempt.reconnected)
                .await?;
            attempt.sent_at = Some(at);
            let head_at = Instant::now();
            attempt.server_id = response.server_id.take();
            let status = reqwest::StatusCode::from_u16(response.status).map_err(|_| {
                (
                    FailureKind::Connect,
                    format!(
                        "reading the response: an invalid status {}",
                        response.status
                    ),
                    true,
                )
            })?;
            let length = response.length;
            let reply = self
                .read(
                    status,
                    length,
                    ResponseBody::Plain(&mut response),
                    stream,
                    codec,
                )
                .await?;
            // Read to its end: the connection carries the next request.
            origin.give_back(response);
            Ok((reply, head_at))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err((
                FailureKind::Timeout,
                format!("no complete response within the request timeout ({timeout:?})"),
                true,
            )),
        }
    }

    async fn attempt_pooled(
        &self,
        client: &reqwest::Client,
        body: &[Bytes],
        extra_headers: &[(String, String)],
        stream: bool,
        codec: &dyn RequestCodec,
        attempt: &mut Attempt,
    ) -> Result<(Box<Reply>, Instant), Failure> {
        let mut req = client.post(self.url.clone());
        req = match body {
            [one] => req.body(one.clone()),
            parts => {
                let len: usize = parts.iter().map(Bytes::len).sum();
                req.header(reqwest::header::CONTENT_LENGTH, len)
                    .body(reqwest::Body::wrap(Chunks::new(parts)))
            }
        };
        for (k, v) in extra_headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let mut resp = req.send().await.map_err(classify)?;
        let head_at = Instant::now();
        attempt.server_id = self.server_id(resp.headers());
        let status = resp.status();
        let length = resp.content_length();
        self.read(
            status,
            length,
            ResponseBody::Pooled(&mut resp),
            stream,
            codec,
        )
        .await
        .map(|reply| (reply, head_at))
    }

    /// Reads a response whose head has arrived: an error status as an HTTP
    /// failure, a body over the bound as `decode`, and the rest through the
    /// codec.
    async fn read(
        &self,
        status: reqwest::StatusCode,
        content_length: Option<u64>,
        mut resp: ResponseBody<'_>,
        stream: bool,
        codec: &dyn RequestCodec,
    ) -> Result<Box<Reply>, Failure> {
        let limit = self.cfg.max_response_bytes;
        // Not retried: the same request would get the same answer.
        let too_big = |n: u64| {
            (
                FailureKind::Decode,
                format!(
                    "the response is over {limit} bytes (--max-response-bytes): {n} bytes or more"
                ),
                false,
            )
        };
        if !status.is_success() {
            let code = status.as_u16();
            // The start of the error body is enough for the message.
            let mut text = Vec::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                text.extend_from_slice(&chunk);
                if text.len() >= 4096 {
                    break;
                }
            }
            let mut msg = format!("HTTP {code}: {}", String::from_utf8_lossy(&text).trim());
            crate::measurement::metrics::truncate(&mut msg, 300);
            let retryable = code == 408 || code == 429 || status.is_server_error();
            return Err((FailureKind::Http(code), msg, retryable));
        }
        if let Some(n) = content_length.filter(|n| *n > limit) {
            return Err(too_big(n));
        }
        let mut received = 0u64;
        if stream {
            let mut dec = codec.stream_decoder();
            while let Some(chunk) = resp.chunk().await? {
                received += chunk.len() as u64;
                if received > limit {
                    return Err(too_big(received));
                }
                dec.feed(&chunk, Instant::now())
                    .map_err(|e| (FailureKind::Decode, e.0, true))?;
            }
            dec.finish()
                .map(Box::new)
                .map_err(|e| (FailureKind::Decode, e.0, true))
        } else {
            // A body that arrives in one piece is decoded where it lies.
            let mut first: Option<Bytes> = None;
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await? {
                received += chunk.len() as u64;
                if received > limit {
                    return Err(too_big(received));
                }
                match first.take() {
                    None if body.is_empty() => first = Some(chunk),
                    held => {
                        if let Some(h) = held {
                            body.extend_from_slice(&h);
                        }
                        body.extend_from_slice(&chunk);
                    }
                }
            }
            let whole = first.as_deref().unwrap_or(&body);
            codec
                .decode(whole)
                .map(Box::new)
                .map_err(|e| (FailureKind::Decode, e.0, true))
        }
    }
}

/// What one attempt did beyond its result.
struct Attempt {
    /// When the request went out on the connection that answered it.
    sent_at: Option<Instant>,
    /// A kept connection was found closed and a new one carried the request.
    reconnected: bool,
    /// The server's id of the request, from its response head.
    server_id: Option<String>,
}

/// The body of a response, from either wire.
enum ResponseBody<'a> {
    Plain(&'a mut h1::Response),
    Pooled(&'a mut reqwest::Response),
}

impl ResponseBody<'_> {
    /// The next piece; `None` at the end.
    async fn chunk(&mut self) -> Result<Option<Bytes>, Failure> {
        match self {
            Self::Plain(body) => body.chunk().await,
            Self::Pooled(resp) => resp.chunk().await.map_err(classify),
        }
    }
}

/// A body made of shared chunks, sent in order without copying them.
struct Chunks {
    parts: std::collections::VecDeque<Bytes>,
    remaining: u64,
}

impl Chunks {
    fn new(parts: &[Bytes]) -> Self {
        Self {
            remaining: parts.iter().map(|b| b.len() as u64).sum(),
            parts: parts.iter().cloned().collect(),
        }
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.parts.pop_front();
        if let Some(b) = &next {
            self.remaining -= b.len() as u64;
        }
        std::task::Poll::Ready(next.map(|b| Ok(http_body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

fn classify(e: reqwest::Error) -> Failure {
    let kind = if e.is_timeout() {
        FailureKind::Timeout
    } else if e.is_decode() {
        FailureKind::Decode
    } else {
        FailureKind::Connect
    };
    // The error chain, without the URL's credentials (reqwest strips them).
    (kind, with_causes(e.to_string(), &e), true)
}

/// A header as the run or a router gives it, checked.
fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("invalid header name '{name}'"))?;
    let v =
        HeaderValue::from_str(value).map_err(|_| format!("invalid value for header '{name}'"))?;
    Ok((n, v))
}

/// `msg` followed by each of the error's causes.
fn with_causes(mut msg: String, e: &dyn std::error::Error) -> String {
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::join_url;

    #[test]
    fn urls_join() {
        assert_eq!(
            join_url("http://h:1", "/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            join_url("http://h:1/", "/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(
            join_url("http://h:1/v1", "/v1/chat/completions"),
            "http://h:1/v1/chat/completions"
        );
        assert_eq!(join_url("http://h:1", "https://x/y"), "https://x/y");
    }
}

/// The plain HTTP/1.1 wire against a raw socket server: what goes out on it,
/// and connections kept, reused and replaced.
#[cfg(test)]
mod wire_tests {
    use super::*;
    use batchbench_contract::plugin::{BodyWriter, CodecError, EncodeRequest, StreamDecoder};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;

    /// The response body, as the reply's content.
    struct Text;

    impl RequestCodec for Text {
        fn encode(&self, _: &EncodeRequest<'_>, _: &mut BodyWriter) -> Result<(), CodecError> {
            unreachable!("the tests send their own bodies")
        }
        fn decode(&self, body: &[u8]) -> Result<Reply, CodecError> {
            Ok(Reply {
                content: String::from_utf8_lossy(body).into_owned(),
                ..Reply::default()
            })
        }
        fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
            unreachable!("the tests do not stream")
        }
    }

    /// A server that answers every request with its head (lowercased) and
    /// body, and closes a connection after `per_connection` answers (0: never)
    /// without saying so. Returns its URL and the count of connections.
    async fn echo_server(per_connection: usize) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/x?q=1", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut answered = 0;
                    loop {
                        let Some((head, body)) =
                            crate::test_http::read_request(&mut sock, &mut buf).await
                        else {
                            return;
                        };
                        let mut answer = head.into_bytes();
                        answer.extend_from_slice(&body);
                        let mut out = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                            answer.len()
                        )
                        .into_bytes();
                        out.extend_from_slice(&answer);
                        if sock.write_all(&out).await.is_err() {
                            return;
                        }
                        answered += 1;
                        if answered == per_connection {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn transport(url: String, api_key: Option<&str>, headers: &[(&str, &str)]) -> Transport {
        let t = Transport::new(TargetConfig {
            content_type: "application/json".into(),
            url,
            api_key: api_key.map(str::to_owned),
            api_key_header: None,
            timeout: Duration::from_secs(10),
            max_retries: 0,
            retry_delay: Duration::ZERO,
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            pool_size: 4,
            verbose: false,
            tls: TlsConfig::default(),
            max_response_bytes: MAX_RESPONSE_BYTES,
            request_id_header: None,
        })
        .unwrap();
        assert!(
            matches!(t.wire, Wire::Plain(_)),
            "a plain URL uses the plain wire"
        );
        t
    }

    async fn send(t: &Transport, body: &[&'static str], extra: &[(&str, &str)]) -> Outcome {
        let body: Vec<Bytes> = body
            .iter()
            .map(|b| Bytes::from_static(b.as_bytes()))
            .collect();
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        t.send(&body, &extra, false, &Text, &CancellationToken::new(), None)
            .await
    }

    #[tokio::test]
    async fn a_request_carries_the_fixed_headers_a_router_s_and_its_whole_body() {
        let (url, _) = echo_server(0).await;
        let port = url
            .split(':')
            .nth(2)
            .unwrap()
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let t = transport(url, Some("k1"), &[("x-run", "a"), ("x-route", "fixed")]);
        let out = send(&t, &["{\"a\":", "1}"], &[("x-route", "r1")]).await;
        let echoed = out.result.unwrap().content;
        let lines: Vec<&str> = echoed.lines().collect();
        assert_eq!(lines[0], "post /v1/x?q=1 http/1.1", "{echoed}");
        for want in [
            format!("host: 127.0.0.1:{port}"),
            "content-type: application/json".to_owned(),
            "authorization: bearer k1".to_owned(),
            "accept: */*".to_owned(),
            "content-length: 7".to_owned(),
            "x-run: a".to_owned(),
            "x-route: r1".to_owned(),
        ] {
            assert!(lines.contains(&want.as_str()), "no '{want}' in {echoed}");
        }
        // The router's header replaced the fixed one of the same name.
        assert_eq!(lines.iter().filter(|l| l.starts_with("x-route")).count(), 1);
        assert!(echoed.ends_with("\r\n\r\n{\"a\":1}"), "{echoed}");
    }

    /// A body far larger than a socket's buffers goes out whole over several
    /// writes, and its echo comes back whole over several reads.
    #[tokio::test]
    async fn a_large_body_goes_out_and_comes_back_whole() {
        let (url, _) = echo_server(0).await;
        let t = transport(url, None, &[]);
        let parts: Vec<Bytes> = (0..4u8)
            .map(|i| Bytes::from(vec![b'a' + i; 300_000]))
            .collect();
        let out = t
            .send(&parts, &[], false, &Text, &CancellationToken::new(), None)
            .await;
        let echoed = out.result.unwrap().content;
        assert!(
            echoed.contains("content-length: 1200000\r\n"),
            "{}",
            &echoed[..200]
        );
        let body = &echoed[echoed.len() - 1_200_000..];
        for (i, part) in body.as_bytes().chunks(300_000).enumerate() {
            assert!(part.iter().all(|&b| b == b'a' + i as u8), "part {i}");
        }
    }

    /// Responses framed every way HTTP/1.1 frames them, written a few bytes
    /// at a time: an interim `100 Continue` before a chunked body (with a
    /// chunk extension and a trailer), a length on the same connection, then
    /// an HTTP/1.0 body that ends with the close, after which the next
    /// request opens a new connection.
    #[tokio::test]
    async fn chunked_interim_and_close_delimited_responses_are_read_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let answers: [&[u8]; 3] = [
                        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Request-Id: r-7\r\n\r\n4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nx-trailer: t\r\n\r\n",
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                        b"HTTP/1.0 200 OK\r\n\r\nclose-delimited",
                    ];
                    let mut buf = Vec::new();
                    for answer in answers {
                        if crate::test_http::read_request(&mut sock, &mut buf)
                            .await
                            .is_none()
                        {
                            return;
                        }
                        for piece in answer.chunks(3) {
                            if sock.write_all(piece).await.is_err() {
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                });
            }
        });
        let mut cfg = transport(url, None, &[]).cfg;
        cfg.request_id_header = header_name("x-request-id");
        let t = Transport::new(cfg).unwrap();
        let first = send(&t, &["{}"], &[]).await;
        assert_eq!(first.server_request_id.as_deref(), Some("r-7"));
        let contents: Vec<String> = [first]
            .into_iter()
            .chain([send(&t, &["{}"], &[]).await, send(&t, &["{}"], &[]).await])
            .map(|o| o.result.unwrap().content)
            .collect();
        assert_eq!(contents, ["abcdefg", "hello", "close-delimited"]);
        let c = t.connection_counts().unwrap();
        assert_eq!((c.opened, c.responses, c.reused), (1, 3, 2), "{c:?}");
        let fourth = send(&t, &["{}"], &[]).await;
        assert_eq!(fourth.result.unwrap().content, "abcdefg");
        assert_eq!(fourth.reconnects, 1);
        assert_eq!(t.connection_counts().unwrap().opened, 2);
    }

    #[tokio::test]
    async fn connections_are_reused() {
        let (url, accepted) = echo_server(0).await;
        let t = transport(url, None, &[]);
        for _ in 0..5 {
            let out = send(&t, &["{}"], &[]).await;
            assert!(out.result.is_ok(), "{:?}", out.result);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// Three requests succeed without a retry, each after the first on a
    /// new connection, counted as a reconnect.
    async fn each_request_after_the_first_reconnects(t: &Transport, accepted: &AtomicUsize) {
        for i in 0..3 {
            let out = send(t, &["{}"], &[]).await;
            assert!(out.result.is_ok(), "request {i}: {:?}", out.result);
            assert_eq!(out.retries, 0, "request {i}");
            assert_eq!(out.reconnects, u32::from(i > 0), "request {i}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_replaced_before_anything_fails() {
        let (url, accepted) = echo_server(1).await;
        let t = transport(url, None, &[]);
        // Whether the close arrives before the next request or after it went
        // out, the request gets a new connection and nothing fails.
        each_request_after_the_first_reconnects(&t, &accepted).await;
    }

    /// What a scripted server does with one request.
    #[derive(Clone, Copy, Debug)]
    enum Act {
        /// Answers `ok`, keeping the connection.
        Answer,
        /// Answers `ok` with `Connection: close`, then keeps the socket open
        /// and reads nothing: a client that reused it would wait forever.
        AnswerClose,
        /// Reads the request and closes: an EOF before any response.
        Eof,
        /// Reads the request and resets the connection.
        Reset,
        /// Sends the head and part of the body, then closes.
        Truncate,
        /// Sends part of the response head, then closes.
        PartialHead,
        /// Answers `ok`, then closes the connection once it has been idle
        /// for 200 ms (a keep-alive timeout).
        AnswerIdleClose,
        /// Sends an interim `100 Continue`, then closes.
        InterimClose,
        /// Answers `204 No Content` with a `content-length` (the length of
        /// what a GET would have returned): no body follows.
        NoContent,
    }

    /// A server that does `script(connection, request on it)` with each
    /// request; returns its URL and the count of connections.
    async fn scripted_server(script: fn(usize, usize) -> Act) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                let conn = count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    for req in 0.. {
                        if crate::test_http::read_request(&mut sock, &mut buf)
                            .await
                            .is_none()
                        {
                            return;
                        }
                        let out: &[u8] = match script(conn, req) {
                            Act::Answer => b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
                            Act::AnswerClose => {
                                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
                            }
                            Act::Eof => return,
                            Act::Reset => {
                                let _ = sock.set_zero_linger();
                                return;
                            }
                            Act::Truncate => {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial"
                            }
                            Act::PartialHead => b"HTTP/1.1 200 OK\r\ncontent-",
                            Act::AnswerIdleClose => {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                            }
                            Act::InterimClose => b"HTTP/1.1 100 Continue\r\n\r\n",
                            Act::NoContent => b"HTTP/1.1 204 No Content\r\ncontent-length: 5\r\n\r\n",
                        };
                        if sock.write_all(out).await.is_err() {
                            return;
                        }
                        match script(conn, req) {
                            Act::Truncate | Act::PartialHead | Act::InterimClose => return,
                            Act::AnswerIdleClose => {
                                tokio::time::sleep(Duration::from_millis(200)).await;
                                return;
                            }
                            Act::AnswerClose => {
                                // Open, silent: only the header says it is done.
                                std::future::pending::<()>().await;
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    fn retrying(url: String, retries: u32, delay: Duration) -> Transport {
        let mut cfg = transport(url, None, &[]).cfg;
        cfg.max_retries = retries;
        cfg.retry_delay = delay;
        cfg.timeout = Duration::from_secs(5);
        Transport::new(cfg).unwrap()
    }

    /// A kept connection that the server ends after the request went out (an
    /// EOF or a reset, before any byte of the response) costs the request a
    /// new connection at once: not a retry, no backoff, and its time starts
    /// at the send that got the response.
    #[tokio::test]
    async fn a_kept_connection_closed_under_a_request_is_a_reconnect_not_a_retry() {
        for act in [Act::Eof, Act::Reset] {
            let script = match act {
                Act::Eof => {
                    (|_, req| if req == 0 { Act::Answer } else { Act::Eof })
                        as fn(usize, usize) -> Act
                }
                _ => |_, req| if req == 0 { Act::Answer } else { Act::Reset },
            };
            let (url, accepted) = scripted_server(script).await;
            // A retry would wait a minute: the test would time out.
            let t = retrying(url, 2, Duration::from_secs(60));
            let first = send(&t, &["{}"], &[]).await;
            assert!(first.result.is_ok(), "{act:?}: {:?}", first.result);
            assert_eq!(first.reconnects, 0);
            for i in 1..4 {
                let out = send(&t, &["{}"], &[]).await;
                assert!(out.result.is_ok(), "{act:?} {i}: {:?}", out.result);
                assert_eq!((out.retries, out.reconnects), (0, 1), "{act:?} {i}");
                assert!(out.sent_at > out.first_sent_at, "{act:?} {i}");
                assert!(out.done_at - out.first_sent_at < Duration::from_secs(2));
            }
            assert_eq!(accepted.load(Ordering::SeqCst), 4, "{act:?}");
            let c = t.connection_counts().unwrap();
            assert_eq!((c.responses, c.reused), (4, 0), "{act:?}: {c:?}");
            assert!(c.closes_after_every_response(), "{act:?}: {c:?}");
        }
    }

    /// `Connection: close` is honoured: the connection is not used again,
    /// and the next request's new connection is counted, not retried.
    #[tokio::test]
    async fn connection_close_is_honoured_without_a_retry() {
        let (url, accepted) = scripted_server(|_, _| Act::AnswerClose).await;
        let t = retrying(url, 2, Duration::from_secs(60));
        each_request_after_the_first_reconnects(&t, &accepted).await;
        assert!(t.connection_counts().unwrap().closes_after_every_response());
    }

    /// A kept connection that ends after part of its response arrived is no
    /// reconnect: the server saw the request, so it is a failure, retried with
    /// backoff like any other.
    #[tokio::test]
    async fn a_close_after_part_of_the_head_is_a_retried_failure_not_a_reconnect() {
        let (url, accepted) = scripted_server(|conn, req| {
            if conn == 0 && req == 1 {
                Act::PartialHead
            } else {
                Act::Answer
            }
        })
        .await;
        let t = retrying(url, 1, Duration::from_millis(1));
        assert!(send(&t, &["{}"], &[]).await.result.is_ok());
        let out = send(&t, &["{}"], &[]).await;
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!((out.retries, out.reconnects), (1, 0));
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// At the run's deadline nothing new is sent: a retry that would go out
    /// at or after it is not sent, and the request ends with its failure.
    #[tokio::test]
    async fn no_retry_goes_out_after_the_deadline() {
        let (url, accepted) = scripted_server(|_, _| Act::PartialHead).await;
        let t = retrying(url, 3, Duration::from_millis(50));
        let body = [Bytes::from_static(b"{}")];
        let deadline = Instant::now() + Duration::from_millis(20);
        let out = t
            .send(
                &body,
                &[],
                false,
                &Text,
                &CancellationToken::new(),
                Some(deadline),
            )
            .await;
        assert!(out.result.is_err());
        assert_eq!(out.retries, 0);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        // Without a deadline, the same failure is retried three times.
        let out = send(&t, &["{}"], &[]).await;
        assert_eq!(out.retries, 3, "{:?}", out.result);
    }

    /// A connection closed on the server's idle timeout, long after its
    /// response, costs a reconnect but does not make the server one that
    /// closes every connection after its response.
    #[tokio::test]
    async fn an_idle_timeout_is_a_reconnect_but_not_a_server_that_closes_every_connection() {
        let (url, _) = scripted_server(|_, _| Act::AnswerIdleClose).await;
        let t = retrying(url, 0, Duration::ZERO);
        assert!(send(&t, &["{}"], &[]).await.result.is_ok());
        let Wire::Plain(origin) = &t.wire else {
            unreachable!("a plain URL")
        };
        // Until the client has seen the server's close.
        let start = Instant::now();
        while !origin.idle_all_closed() {
            assert!(start.elapsed() < Duration::from_secs(10), "no close seen");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let out = send(&t, &["{}"], &[]).await;
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!((out.retries, out.reconnects), (0, 1));
        let c = t.connection_counts().unwrap();
        assert_eq!(
            (c.closed_after_response, c.closed_when_idle),
            (0, 1),
            "{c:?}"
        );
        assert!(!c.closes_after_every_response(), "{c:?}");
    }

    /// An interim head is part of the response: a kept connection that
    /// closes after one is a failure (the server saw the request), never a
    /// reconnect that would send it again.
    #[tokio::test]
    async fn a_close_after_an_interim_head_is_a_failure_not_a_reconnect() {
        let (url, accepted) = scripted_server(|_, req| {
            if req == 0 {
                Act::Answer
            } else {
                Act::InterimClose
            }
        })
        .await;
        let t = retrying(url, 0, Duration::ZERO);
        assert!(send(&t, &["{}"], &[]).await.result.is_ok());
        let out = send(&t, &["{}"], &[]).await;
        assert!(out.result.is_err(), "{:?}", out.result);
        assert_eq!((out.retries, out.reconnects), (0, 0));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// A 204's `content-length` announces no body: the next response on the
    /// connection is read as the next one.
    #[tokio::test]
    async fn a_no_content_response_has_no_body_whatever_its_length_says() {
        let (url, accepted) = scripted_server(|_, req| {
            if req == 0 {
                Act::NoContent
            } else {
                Act::Answer
            }
        })
        .await;
        let t = retrying(url, 0, Duration::ZERO);
        let first = send(&t, &["{}"], &[]).await;
        assert_eq!(first.result.unwrap().content, "");
        let second = send(&t, &["{}"], &[]).await;
        assert_eq!(second.result.unwrap().content, "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// A server that keeps its connections is not reported as closing them.
    #[tokio::test]
    async fn a_keep_alive_server_is_reused_and_not_flagged() {
        let (url, _) = scripted_server(|_, _| Act::Answer).await;
        let t = retrying(url, 0, Duration::ZERO);
        for _ in 0..3 {
            let out = send(&t, &["{}"], &[]).await;
            assert_eq!((out.retries, out.reconnects), (0, 0));
        }
        let c = t.connection_counts().unwrap();
        assert_eq!((c.opened, c.responses, c.reused), (1, 3, 2), "{c:?}");
        assert!(!c.closes_after_every_response());
    }

    /// A close in the middle of a response is a real failure, retried with
    /// backoff as before; so is an EOF on a fresh connection (the
    /// simulator's `close` fault), which is no reconnect.
    #[tokio::test]
    async fn a_close_mid_response_or_on_a_fresh_connection_is_a_retried_failure() {
        for script in [(|_, _| Act::Truncate) as fn(usize, usize) -> Act, |_, _| {
            Act::Eof
        }] {
            let (url, accepted) = scripted_server(script).await;
            let t = retrying(url, 2, Duration::from_millis(1));
            let out = send(&t, &["{}"], &[]).await;
            let (kind, msg) = out.result.unwrap_err();
            assert_eq!(kind, FailureKind::Connect, "{msg}");
            assert_eq!((out.retries, out.reconnects), (2, 0), "{msg}");
            assert_eq!(accepted.load(Ordering::SeqCst), 3, "{msg}");
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_failure() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t = transport(format!("http://127.0.0.1:{port}/v1/x"), None, &[]);
        let out = send(&t, &["{}"], &[]).await;
        let (kind, msg) = out.result.unwrap_err();
        assert_eq!(kind, FailureKind::Connect, "{msg}");
        assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    }
}
