//! HTTP/1.1 servers on loopback for tests (a Prometheus exporter, an OTLP
//! receiver), and a plain scrape of a metrics page.
//!
//! Every server behaves like the real ones (a DCGM exporter and the
//! OpenTelemetry Collector are Go's `net/http`): `TCP_NODELAY`, keep-alive
//! until the client closes or asks to close, and a `Content-Length` on every
//! answer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// One request, as a test server reads it.
#[derive(Debug, Default)]
pub struct Request {
    /// The request target (`/metrics`).
    pub path: String,
    /// Its headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// Its body (`Content-Length` bytes).
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (lowercase), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: its status (`200 OK`), content type and body.
pub type Answer = (&'static str, &'static str, Vec<u8>);

/// Serves HTTP/1.1 on a free loopback port until the test process ends,
/// answering each request with `answer`. Returns the address.
pub fn serve(answer: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            let answer = answer.clone();
            std::thread::spawn(move || connection(s, &*answer));
        }
    });
    addr
}

/// Serves `GET /metrics` on a free loopback port until the test process ends,
/// with the page `page(seconds since the exporter started)` gives; any other
/// path is a 404. Returns the page's URL.
pub fn serve_metrics(page: impl Fn(f64) -> String + Send + Sync + 'static) -> String {
    let start = Instant::now();
    let addr = serve(move |r| {
        if r.path == "/metrics" {
            (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                page(start.elapsed().as_secs_f64()).into_bytes(),
            )
        } else {
            (
                "404 Not Found",
                "text/plain",
                b"404 page not found\n".to_vec(),
            )
        }
    });
    format!("http://{addr}/metrics")
}

/// Answers the requests of one connection until it closes.
fn connection(s: TcpStream, answer: &dyn Fn(&Request) -> Answer) {
    let _ = s.set_nodelay(true);
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut req = Request {
            path: line.split_whitespace().nth(1).unwrap_or("").to_owned(),
            ..Request::default()
        };
        loop {
            let mut h = String::new();
            match r.read_line(&mut h) {
                Ok(0) | Err(_) => return,
                Ok(_) if h == "\r\n" || h == "\n" => break,
                Ok(_) => {
                    let (k, v) = h.split_once(':').unwrap_or((h.as_str(), ""));
                    req.headers
                        .push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                }
            }
        }
        let length = req
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        req.body = vec![0; length];
        if r.read_exact(&mut req.body).is_err() {
            return;
        }
        let close = req
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let (status, kind, body) = answer(&req);
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if w.write_all(head.as_bytes()).is_err() || w.write_all(&body).is_err() || close {
            return;
        }
    }
}

/// The samples of the page at `addr` (`host:port`) and `/metrics`, by series
/// (`name{k=v,...}`), read with the exposition reader the scrapes use; `None`
/// where nothing answers. Every line must parse.
pub fn scrape(addr: &str) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let body = text.split_once("\r\n\r\n")?.1;
    let (samples, skipped) = batchbench_engine::telemetry::server_metrics::parse(body);
    assert_eq!(skipped, 0, "every line parses: {body}");
    Some(
        samples
            .into_iter()
            .map(|(name, labels, v)| {
                let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                (format!("{name}{{{}}}", l.join(",")), v)
            })
            .collect(),
    )
}

/// A free loopback address (`127.0.0.1:PORT`) for a listener of the tool's.
pub fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    l.local_addr().unwrap_or_else(|e| panic!("{e}")).to_string()
}
