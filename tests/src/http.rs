//! A Prometheus exporter on loopback, and a plain scrape of one, for tests
//! that read metrics pages.
//!
//! The exporter behaves like the real ones (a DCGM exporter is Go's
//! `net/http`): `TCP_NODELAY`, keep-alive until the client closes or asks to
//! close, and a `Content-Length` on every answer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// Serves `GET /metrics` on a free loopback port until the test process ends,
/// with the page `page(seconds since the exporter started)` gives; any other
/// path is a 404. Returns the page's URL.
pub fn serve_metrics(page: impl Fn(f64) -> String + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let start = Instant::now();
    let page = Arc::new(page);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(s) = stream else { continue };
            let page = page.clone();
            std::thread::spawn(move || answer(s, start, &*page));
        }
    });
    format!("http://{addr}/metrics")
}

/// Answers the requests of one connection until it closes.
fn answer(s: TcpStream, start: Instant, page: &dyn Fn(f64) -> String) {
    let _ = s.set_nodelay(true);
    let Ok(w) = s.try_clone() else { return };
    let mut w = w;
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        // The rest of the head (a GET has no body).
        let mut close = false;
        loop {
            let mut h = String::new();
            match r.read_line(&mut h) {
                Ok(0) | Err(_) => return,
                Ok(_) if h == "\r\n" || h == "\n" => break,
                Ok(_) => {
                    let h = h.to_ascii_lowercase();
                    close |= h.starts_with("connection:") && h.contains("close");
                }
            }
        }
        let (status, body) = if path == "/metrics" {
            ("200 OK", page(start.elapsed().as_secs_f64()))
        } else {
            ("404 Not Found", "404 page not found\n".to_owned())
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if w.write_all(head.as_bytes()).is_err() || w.write_all(body.as_bytes()).is_err() {
            return;
        }
        if close {
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
