//! An OpenTelemetry collector's OTLP/HTTP traces receiver on loopback, for
//! tests of `--otlp-endpoint`: it decodes every export with the OpenTelemetry
//! project's own protobuf definitions (`opentelemetry-proto`) and keeps the
//! spans, as a collector would hand them on. Like the Collector's receiver
//! (Go's `net/http`), it keeps connections alive and answers each export
//! with an empty `ExportTraceServiceResponse`.

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// A receiver of `POST /v1/traces`, until the test process ends.
#[derive(Debug, Clone)]
pub struct OtlpReceiver {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    received: Arc<Mutex<Received>>,
}

#[derive(Debug, Default)]
struct Received {
    spans: Vec<Span>,
    exports: usize,
    service_names: Vec<String>,
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let received = Arc::new(Mutex::new(Received::default()));
        let r = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { continue };
                let r = r.clone();
                std::thread::spawn(move || answer(s, &r));
            }
        });
        Self {
            url: format!("http://{addr}"),
            received,
        }
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.lock().spans.clone()
    }

    /// The exports (POSTs) decoded so far.
    pub fn exports(&self) -> usize {
        self.lock().exports
    }

    /// The `service.name` of every export's resource.
    pub fn service_names(&self) -> Vec<String> {
        self.lock().service_names.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Received> {
        self.received.lock().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Answers the exports of one connection until it closes. A request that is
/// not a protobuf export to `/v1/traces` gets a 400, as a collector's would.
fn answer(s: TcpStream, received: &Mutex<Received>) {
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).map_or(true, |n| n == 0) {
            return;
        }
        let target = line.split(' ').nth(1).unwrap_or_default().to_owned();
        let (mut length, mut close, mut protobuf) = (0usize, false, false);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).map_or(true, |n| n == 0) {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            match k.as_str() {
                "content-length" => length = v.parse().unwrap_or(0),
                "connection" => close = v.eq_ignore_ascii_case("close"),
                "content-type" => protobuf = v == "application/x-protobuf",
                _ => {}
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let export = (target == "/v1/traces" && protobuf)
            .then(|| ExportTraceServiceRequest::decode(body.as_slice()).ok())
            .flatten();
        let (status, reply) = match export {
            Some(e) => {
                let mut got = received.lock().unwrap_or_else(|e| panic!("{e}"));
                got.exports += 1;
                for rs in e.resource_spans {
                    let name = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    got.service_names.push(name);
                    got.spans
                        .extend(rs.scope_spans.into_iter().flat_map(|s| s.spans));
                }
                (
                    "200 OK",
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
            None => ("400 Bad Request", b"not an OTLP traces export".to_vec()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if w.write_all(head.as_bytes()).is_err() || w.write_all(&reply).is_err() || close {
            return;
        }
    }
}
