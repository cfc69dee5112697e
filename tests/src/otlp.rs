//! An OpenTelemetry collector's OTLP/HTTP traces receiver on loopback, for
//! tests of `--otlp-endpoint`: it decodes every export with the OpenTelemetry
//! project's own protobuf definitions (`opentelemetry-proto`) and keeps the
//! spans, as a collector would hand them on, answering each export with an
//! empty `ExportTraceServiceResponse` (served by [`crate::http::serve`], as
//! the Collector's receiver, Go's `net/http`, would).

use crate::http::{Request, serve};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
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
        let received = Arc::new(Mutex::new(Received::default()));
        let r = received.clone();
        let addr = serve(move |req| export(req, &r));
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

/// Takes one export, kept before it is answered (so a client that saw the
/// answer finds its spans here). A request that is not a protobuf export to
/// `/v1/traces` gets a 400, as a collector's would.
fn export(req: &Request, received: &Mutex<Received>) -> crate::http::Answer {
    const PROTOBUF: &str = "application/x-protobuf";
    let decoded = (req.path == "/v1/traces" && req.header("content-type") == Some(PROTOBUF))
        .then(|| ExportTraceServiceRequest::decode(req.body.as_slice()).ok())
        .flatten();
    let Some(e) = decoded else {
        return (
            "400 Bad Request",
            "text/plain",
            b"not an OTLP traces export".to_vec(),
        );
    };
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
        PROTOBUF,
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}
