//! Plain HTTP/1.1 to one origin: hyper connections kept by the transport.
//!
//! A run sends every request to one URL, so the general pooled client's work per
//! request (its pool keyed by origin, the connector and proxy matching, the URL
//! parsed again, its service clones) buys nothing; on loopback it is a tenth of
//! the client's CPU per request. This keeps idle connections on a stack and
//! sends on them directly. TLS, proxies and credentials in the URL stay with the
//! general client (see [`super::Transport::new`]).

use super::{Chunks, Failure};
use crate::plugin::FailureKind;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, Uri};
use std::sync::Mutex;
use std::time::Duration;

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
    /// Connections that finished their last response, newest last.
    idle: Mutex<Vec<SendRequest<Chunks>>>,
    max_idle: usize,
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
    sender: SendRequest<Chunks>,
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
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
        })
    }

    /// Sends one request and returns the response head, with the connection
    /// that carries its body. An idle connection the server has closed is
    /// replaced by a new one before anything is sent on it.
    pub(super) async fn send(
        &self,
        body: &[Bytes],
        extra_headers: &[(String, String)],
    ) -> Result<(Response<Incoming>, Lent), Failure> {
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
        while let Some(mut sender) = self.take_idle() {
            if sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, Lent { sender })),
                Err(mut e) => match e.take_message() {
                    // Closed before the request went out: another connection.
                    Some(unsent) => req = unsent,
                    None => return Err(failure("sending the request", &e.into_error())),
                },
            }
        }
        let mut sender = self.connect().await?;
        match sender.send_request(req).await {
            Ok(resp) => Ok((resp, Lent { sender })),
            Err(e) => Err(failure("sending the request", &e)),
        }
    }

    /// Keeps a connection whose response was read to its end.
    pub(super) fn give_back(&self, lent: Lent) {
        if lent.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(lent.sender);
        }
    }

    fn take_idle(&self) -> Option<SendRequest<Chunks>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(s) = idle.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Chunks>, Failure> {
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
        let (sender, conn) = http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .map_err(|e| failure("opening the connection", &e))?;
        tokio::spawn(async move {
            // Its errors reach the request that was on it.
            let _ = conn.await;
        });
        Ok(sender)
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

/// A hyper error as a connection failure, with its causes.
fn failure(doing: &str, e: &hyper::Error) -> Failure {
    (
        FailureKind::Connect,
        super::with_causes(format!("{doing}: {e}"), e),
        true,
    )
}
