//! `otlp_spans`: one OpenTelemetry span per request, sent to a collector over
//! OTLP/HTTP (`--otlp-endpoint URL`), so that a run shows in the same trace
//! view as the server's own spans.
//!
//! Each span is the client's side of one request: it starts at the request's
//! first send and ends with its last byte; its events are the send, a retried
//! request's last attempt, the response head, the first token, the first
//! answer token and the end, where each is known; its attributes are the
//! endpoint, the model, the token counts, the ids that join it with the
//! server's logs, and the failure kind. Its trace and span ids are those of
//! the `traceparent` the request carried (`--trace-context`), so that the
//! server's span is its child; without one, ids drawn the same way from the
//! seed and the run's start time, so that two runs of one seed never share
//! a trace in the collector.
//!
//! The messages are the OpenTelemetry project's own protobuf definitions
//! (`opentelemetry-proto`), sent as `application/x-protobuf`. A span is made
//! where the request's record is, then queued; one thread of this reporter
//! batches and posts them, so a collector that is slow or down never holds a
//! request up. What it could not deliver (a full queue, a refused or failed
//! export, spans still unsent when the run's end stopped waiting) is counted
//! in the summary's `deliveries`, never a failed run. Plain HTTP only: a
//! collector behind TLS is reached through a local collector or agent.

use batchbench_contract::plugin::{PluginError, Reporter, RequestRecord, RouteContext};
use batchbench_contract::record::{Delivery, RunInfo, redact_url};
use batchbench_contract::registry::BuildContext;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span, status,
};
use prost::Message as _;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The registry's name of this reporter.
const NAME: &str = "otlp_spans";

/// Config of [`OtlpSpans`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpSpansConfig {
    /// The collector's OTLP/HTTP URL: `http://host:port` (then
    /// `/v1/traces`), or the whole URL of its traces receiver.
    pub endpoint: String,
    /// The spans' `service.name`.
    #[serde(default = "default_service")]
    pub service_name: String,
    /// Spans per export.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Spans waiting for export at most; beyond it a span is dropped.
    #[serde(default = "default_queue")]
    pub queue: usize,
    /// Seconds an export may take (connect, send, reply), and that the run's
    /// end waits for the last ones.
    #[serde(default = "default_timeout")]
    pub timeout_secs: f64,
}

fn default_service() -> String {
    "batchbench".to_owned()
}
fn default_batch() -> usize {
    512
}
fn default_queue() -> usize {
    16_384
}
fn default_timeout() -> f64 {
    5.0
}

fn bad(message: String) -> PluginError {
    PluginError::Config {
        plugin: NAME.into(),
        message,
    }
}

/// Where spans go: a plain-HTTP collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` to connect to, and for the `Host` header.
    pub authority: String,
    /// The request target: `/v1/traces` unless the URL named one.
    pub path: String,
}

impl Endpoint {
    /// Parses `url`: `http://host[:port][/path]`. The URL's own path is the
    /// receiver's (a signal-specific URL, as OpenTelemetry's exporters take
    /// it); none, or `/`, is `/v1/traces`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        let shown = redact_url(url);
        let rest = match url.split_once("://") {
            Some((s, r)) if s.eq_ignore_ascii_case("http") => r,
            Some((s, _)) if s.eq_ignore_ascii_case("https") => {
                return Err(format!(
                    "{shown}: https is not supported: give a collector's plain-HTTP receiver (a local OpenTelemetry Collector can forward over TLS)"
                ));
            }
            _ => {
                return Err(format!(
                    "{shown:?} is not an OTLP/HTTP URL: expected http://host:port, e.g. http://localhost:4318"
                ));
            }
        };
        if let Some(c) = rest.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{shown:?} holds {c:?}, which a URL cannot"));
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        if authority.contains('@') {
            return Err(format!(
                "{shown}: credentials in the URL are not sent; give a collector that takes spans without them"
            ));
        }
        let not_host = || format!("{shown}: {authority:?} is not a host name or address");
        // An IPv6 address is bracketed; a name or an IPv4 address is not,
        // and holds no colon.
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (addr, after) = inner.split_once(']').ok_or_else(not_host)?;
            addr.parse::<std::net::Ipv6Addr>().map_err(|_| not_host())?;
            match after {
                "" => (&authority[..addr.len() + 2], None),
                p => (
                    &authority[..addr.len() + 2],
                    Some(p.strip_prefix(':').ok_or_else(not_host)?),
                ),
            }
        } else {
            let (h, p) = match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
            if h.is_empty() || !h.chars().all(name) {
                return Err(not_host());
            }
            (h, p)
        };
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{shown}: the port {p:?} is not a port number"))?,
        };
        if path.starts_with(['?', '#']) {
            return Err(format!(
                "{shown}: a receiver's URL has a path, not {path:?}"
            ));
        }
        let path = match path {
            "" | "/" => "/v1/traces".to_owned(),
            p => p.split('#').next().unwrap_or(p).to_owned(),
        };
        Ok(Self {
            authority: format!("{host}:{port}"),
            path,
        })
    }

    /// The URL, as the summary shows it.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority, self.path)
    }
}

/// What the exporter thread and the reporter share.
#[derive(Debug, Default)]
struct Counts {
    /// Spans the collector accepted.
    delivered: AtomicU64,
    /// The first reason a span was not delivered.
    error: Mutex<Option<String>>,
    /// The run's end stopped waiting: the thread drops what it still holds.
    abandon: AtomicBool,
}

impl Counts {
    fn failed(&self, why: String) {
        if let Ok(mut e) = self.error.lock() {
            e.get_or_insert(why);
        }
    }
}

/// Sends one span per request to an OTLP/HTTP collector.
#[derive(Debug)]
pub struct OtlpSpans {
    cfg: OtlpSpansConfig,
    endpoint: Endpoint,
    counts: Arc<Counts>,
    queue: Option<SyncSender<Span>>,
    /// The exporter thread says here that it is done.
    done: Option<Receiver<()>>,
    /// Spans made (queued or dropped at the queue).
    made: u64,
    /// The run's start, nanoseconds of Unix time.
    epoch_ns: u64,
    /// The seed of the ids of requests without a `traceparent`: the run's,
    /// with its start time mixed in.
    seed: u64,
    model: String,
    /// The span name's operation (`chat`, `text_completion`, ...).
    operation: String,
    /// Each endpoint's URL, by index (one for a single host).
    urls: Vec<String>,
}

impl OtlpSpans {
    /// Checks the config; the exporter starts with the run.
    pub fn new(cfg: OtlpSpansConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        let endpoint = Endpoint::parse(&cfg.endpoint).map_err(bad)?;
        if cfg.batch == 0 || cfg.queue == 0 {
            return Err(bad("batch and queue must be 1 or more".into()));
        }
        if !(cfg.timeout_secs > 0.0 && cfg.timeout_secs <= 3600.0) {
            return Err(bad(format!(
                "timeout_secs must be a number of seconds over 0, an hour at most, not {}",
                cfg.timeout_secs
            )));
        }
        Ok(Self {
            cfg,
            endpoint,
            counts: Arc::default(),
            queue: None,
            done: None,
            made: 0,
            epoch_ns: 0,
            seed: 0,
            model: String::new(),
            operation: String::new(),
            urls: Vec::new(),
        })
    }

    fn failed(&self, m: impl std::fmt::Display) -> PluginError {
        PluginError::Failed {
            plugin: NAME.into(),
            message: m.to_string(),
        }
    }

    fn at(&self, offset: Duration) -> u64 {
        self.epoch_ns
            .saturating_add(u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The span of one request.
    fn span(&self, rec: &RequestRecord<'_>) -> Span {
        let (trace_id, span_id) = ids(self.seed, rec);
        let t = &rec.timing;
        let end = t.last_attempt + rec.latency;
        let mut events = vec![(t.sent, "send")];
        if rec.retries > 0 || rec.reconnects > 0 {
            events.push((t.last_attempt, "last attempt"));
        }
        if let Some(b) = t.first_byte {
            events.push((b, "response head"));
        }
        if let Some(d) = rec.ttft {
            events.push((t.last_attempt + d, "first token"));
        }
        if let Some(d) = rec.ttfat {
            events.push((t.last_attempt + d, "first answer token"));
        }
        events.push((end, "end"));
        // By time; a stable sort keeps the named order among equal times.
        events.sort_by_key(|(at, _)| *at);

        let url = rec
            .endpoint
            .and_then(|i| self.urls.get(usize::try_from(i).ok()?))
            .or(self.urls.first())
            .cloned()
            .unwrap_or_default();
        let mut attributes = vec![
            string("gen_ai.operation.name", &self.operation),
            string("gen_ai.request.model", &self.model),
            string("url.full", &url),
            int("batchbench.agent_id", rec.agent_id),
            string("batchbench.trajectory_id", rec.trajectory_id),
            int("batchbench.request_index", rec.request_index),
            int("batchbench.retries", u64::from(rec.retries)),
            boolean("batchbench.warmup", t.warmup),
            double("batchbench.send_lag_ms", ms(t.send_lag())),
            double("batchbench.queue_wait_ms", ms(t.queue_wait)),
        ];
        if let Some(i) = rec.endpoint {
            attributes.push(int("batchbench.endpoint", u64::from(i)));
        }
        if let Some(p) = rec.planned_prompt_tokens {
            attributes.push(int("batchbench.planned_prompt_tokens", u64::from(p)));
        }
        if let Some(u) = &rec.usage {
            attributes.push(int("gen_ai.usage.input_tokens", u.prompt_tokens));
            attributes.push(int("gen_ai.usage.output_tokens", u.completion_tokens));
            if let Some(c) = u.cached_tokens {
                attributes.push(int("batchbench.cached_tokens", c));
            }
        }
        if let Some(r) = rec.reasoning_tokens {
            attributes.push(int("batchbench.reasoning_tokens", r));
        }
        for (key, value) in [
            ("gen_ai.response.id", &rec.ids.response_id),
            ("batchbench.request_id", &rec.ids.request_id),
            ("batchbench.server_request_id", &rec.ids.server_request_id),
        ] {
            if let Some(v) = value {
                attributes.push(string(key, v));
            }
        }
        let status = match &rec.failure {
            Some((kind, message)) => {
                attributes.push(string("error.type", &kind.to_string()));
                Some(Status {
                    code: status::StatusCode::Error as i32,
                    message: (*message).to_owned(),
                })
            }
            None => None,
        };
        Span {
            trace_id: trace_id.to_vec(),
            span_id: span_id.to_vec(),
            name: format!("{} {}", self.operation, self.model),
            kind: span::SpanKind::Client as i32,
            start_time_unix_nano: self.at(t.sent),
            end_time_unix_nano: self.at(end),
            attributes,
            events: events
                .into_iter()
                .map(|(at, name)| span::Event {
                    time_unix_nano: self.at(at),
                    name: name.to_owned(),
                    ..span::Event::default()
                })
                .collect(),
            status,
            ..Span::default()
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}
fn string(key: &str, v: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(v.to_owned()))
}
fn int(key: &str, v: u64) -> KeyValue {
    kv(
        key,
        any_value::Value::IntValue(i64::try_from(v).unwrap_or(i64::MAX)),
    )
}
fn double(key: &str, v: f64) -> KeyValue {
    kv(key, any_value::Value::DoubleValue(v))
}
fn boolean(key: &str, v: bool) -> KeyValue {
    kv(key, any_value::Value::BoolValue(v))
}

/// `hex` as `N` bytes, where it is `2N` hex digits and not all zero (an
/// invalid id, as W3C trace context has it).
fn hex_id<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    out.iter().any(|b| *b != 0).then_some(out)
}

/// The trace and span ids of a request's span: those of the `traceparent` it
/// carried, else those [`traceparent`](crate::routers::request_ids::traceparent)
/// draws from `seed`.
fn ids(seed: u64, rec: &RequestRecord<'_>) -> ([u8; 16], [u8; 8]) {
    let sent = rec
        .ids
        .trace_id
        .as_deref()
        .and_then(hex_id::<16>)
        .zip(rec.ids.span_id.as_deref().and_then(hex_id::<8>));
    if let Some(ids) = sent {
        return ids;
    }
    let tp = crate::routers::request_ids::traceparent(&RouteContext {
        seed,
        agent_id: rec.agent_id,
        routing_slot: 0,
        trajectory_id: rec.trajectory_id,
        request_index: rec.request_index,
    });
    let mut parts = tp.split('-').skip(1);
    let trace = parts.next().and_then(hex_id::<16>).unwrap_or([1; 16]);
    let span = parts.next().and_then(hex_id::<8>).unwrap_or([1; 8]);
    (trace, span)
}

/// The operation of a span's name, from the codec: OpenTelemetry's GenAI
/// names where one fits, else the codec's own.
fn operation(codec: &str) -> &str {
    match codec {
        "openai_chat" | "anthropic_messages" | "openai_responses" => "chat",
        "openai_completions" | "sglang_generate" => "text_completion",
        "openai_embeddings" => "embeddings",
        other => other,
    }
}

impl Reporter for OtlpSpans {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_start(&mut self, run: &RunInfo) -> Result<(), PluginError> {
        self.epoch_ns = (run.started_unix.max(0.0) * 1e9) as u64;
        self.seed = batchbench_contract::rng::derive(run.seed, &[run.started_unix.to_bits()]);
        self.model.clone_from(&run.model);
        let spec = run.spec.as_ref();
        self.operation = operation(spec.map_or("", |s| s.codec.name.as_str())).to_owned();
        self.urls = match spec.map(|s| &s.target.host) {
            Some(h) if h.is_fleet() => h.all().iter().map(|u| redact_url(u)).collect(),
            _ => vec![redact_url(&run.url)],
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(self.cfg.queue);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let exporter = Exporter {
            endpoint: self.endpoint.clone(),
            resource: Resource {
                attributes: vec![
                    string("service.name", &self.cfg.service_name),
                    string("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Resource::default()
            },
            batch: self.cfg.batch,
            timeout: Duration::from_secs_f64(self.cfg.timeout_secs),
            counts: self.counts.clone(),
        };
        std::thread::Builder::new()
            .name("otlp-spans".into())
            .spawn(move || {
                exporter.run(&rx);
                let _ = done_tx.send(());
            })
            .map_err(|e| self.failed(format!("cannot start its thread: {e}")))?;
        self.queue = Some(tx);
        self.done = Some(done_rx);
        Ok(())
    }

    fn on_clock_start(&mut self, started_unix: f64) {
        self.epoch_ns = (started_unix.max(0.0) * 1e9) as u64;
    }

    fn on_request(&mut self, rec: &RequestRecord<'_>) -> Result<(), PluginError> {
        let Some(queue) = &self.queue else {
            return Ok(());
        };
        self.made += 1;
        match queue.try_send(self.span(rec)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.counts.failed(format!(
                "the queue of {} spans was full: the collector took them slower than the run made them",
                self.cfg.queue
            )),
            Err(TrySendError::Disconnected(_)) => {
                self.counts.failed("the exporter thread ended".into());
            }
        }
        Ok(())
    }

    fn deliver(&mut self) -> Result<Option<Delivery>, PluginError> {
        // Closing the queue tells the exporter to send what it holds and end.
        drop(self.queue.take());
        if let Some(done) = self.done.take() {
            // The export under way, and its one more try.
            let wait = 2 * Duration::from_secs_f64(self.cfg.timeout_secs) + RETRY_AFTER;
            match done.recv_timeout(wait) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    self.counts.abandon.store(true, Ordering::Relaxed);
                    self.counts.failed(format!(
                        "still unsent {:.1} s after the run's end",
                        wait.as_secs_f64()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.counts.failed("the exporter thread ended early".into());
                }
            }
        }
        let delivered = self.counts.delivered.load(Ordering::Relaxed).min(self.made);
        let error = self.counts.error.lock().ok().and_then(|e| e.clone());
        Ok(Some(Delivery {
            reporter: NAME.to_owned(),
            items: "spans".to_owned(),
            destination: self.endpoint.url(),
            delivered,
            dropped: self.made - delivered,
            error,
        }))
    }
}

/// The exporter thread: batches spans and posts them.
struct Exporter {
    endpoint: Endpoint,
    resource: Resource,
    batch: usize,
    timeout: Duration,
    counts: Arc<Counts>,
}

/// How long a failed export waits before its one more try.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// How long a span waits in a partial batch for more.
const LINGER: Duration = Duration::from_millis(500);

impl Exporter {
    fn run(&self, rx: &Receiver<Span>) {
        let mut batch = Vec::with_capacity(self.batch);
        // When the batch's first span came: no span waits over LINGER.
        let mut since = std::time::Instant::now();
        loop {
            let closed = match rx.recv_timeout(LINGER) {
                Ok(span) => {
                    if batch.is_empty() {
                        since = std::time::Instant::now();
                    }
                    batch.push(span);
                    false
                }
                Err(RecvTimeoutError::Timeout) => false,
                Err(RecvTimeoutError::Disconnected) => true,
            };
            if self.counts.abandon.load(Ordering::Relaxed) {
                return;
            }
            let due = batch.len() >= self.batch || since.elapsed() >= LINGER || closed;
            if due && !batch.is_empty() {
                self.export(std::mem::take(&mut batch));
            }
            if closed {
                return;
            }
        }
    }

    /// Posts `spans`, once more after a moment where the collector said to
    /// retry (429, 502, 503, 504) or could not be reached; counts what it
    /// accepted.
    fn export(&self, spans: Vec<Span>) {
        let n = spans.len() as u64;
        let body = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "batchbench".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..InstrumentationScope::default()
                    }),
                    spans,
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        }
        .encode_to_vec();
        let mut outcome = self.post(&body);
        if matches!(outcome, Err(Failed { retry: true, .. })) {
            std::thread::sleep(RETRY_AFTER);
            outcome = self.post(&body);
        }
        match outcome {
            Ok(rejected) => {
                self.counts
                    .delivered
                    .fetch_add(n.saturating_sub(rejected.0), Ordering::Relaxed);
                if rejected.0 > 0 {
                    self.counts.failed(format!(
                        "the collector rejected {} spans: {}",
                        rejected.0, rejected.1
                    ));
                }
            }
            Err(f) => self.counts.failed(f.why),
        }
    }

    /// One POST of an encoded export, within `timeout` in all: the spans
    /// the collector rejected (a partial success) and its message, or why it
    /// failed. A failure before the export was sent whole may be tried again;
    /// one after it may not (the collector may hold the spans: a second try
    /// would send them twice).
    fn post(&self, body: &[u8]) -> Result<(u64, String), Failed> {
        let url = self.endpoint.url();
        let deadline = std::time::Instant::now() + self.timeout;
        let left = || {
            deadline
                .checked_duration_since(std::time::Instant::now())
                .filter(|d| !d.is_zero())
        };
        let fail = |why: String, retry: bool| Failed {
            why: format!("{url}: {why}"),
            retry,
        };
        let addrs: Vec<_> = self
            .endpoint
            .authority
            .to_socket_addrs()
            .map_err(|e| fail(e.to_string(), true))?
            .collect();
        // Every address the name has, in turn (`localhost` is often ::1
        // first, where a collector listens on IPv4 only).
        let mut s = None;
        let mut why = "the host has no address".to_owned();
        for a in &addrs {
            let Some(t) = left() else { break };
            match TcpStream::connect_timeout(a, t) {
                Ok(c) => {
                    s = Some(c);
                    break;
                }
                Err(e) => why = e.to_string(),
            }
        }
        let mut s = s.ok_or_else(|| fail(why, !addrs.is_empty()))?;
        let _ = s.set_nodelay(true);
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nUser-Agent: batchbench/{}\r\nConnection: close\r\n\r\n",
            self.endpoint.path,
            self.endpoint.authority,
            body.len(),
            env!("CARGO_PKG_VERSION")
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let timed_out = || fail(format!("no reply within {:?}", self.timeout), false);
        s.set_write_timeout(Some(left().ok_or_else(timed_out)?))
            .and_then(|()| s.write_all(&request))
            .map_err(|e| fail(e.to_string(), true))?;
        // The reply: its head, then its body as long as it says (or to the
        // end of the connection, or of its chunks), all by the deadline.
        let mut reply = Vec::new();
        let mut buf = [0u8; 8192];
        while !reply_complete(&reply) {
            s.set_read_timeout(Some(left().ok_or_else(timed_out)?))
                .map_err(|e| fail(e.to_string(), false))?;
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => reply.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail(e.to_string(), false)),
            }
        }
        let (status, body) =
            parse_reply(&reply).ok_or_else(|| fail("not an HTTP reply".into(), false))?;
        if !(200..300).contains(&status) {
            // A collector's error body is a protobuf `google.rpc.Status`
            // whose message is text: its printable runs say it.
            let text: String = String::from_utf8_lossy(&body[..body.len().min(300)])
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            return Err(fail(
                format!(
                    "HTTP {status}: {}",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                ),
                matches!(status, 429 | 502 | 503 | 504),
            ));
        }
        // A partial success names the spans it rejected; an empty or JSON
        // body (a collector that answers in JSON) rejected none.
        let partial = ExportTraceServiceResponse::decode(body.as_slice())
            .ok()
            .and_then(|r| r.partial_success)
            .map(|p| {
                (
                    u64::try_from(p.rejected_spans).unwrap_or(0),
                    p.error_message,
                )
            });
        Ok(partial.unwrap_or_default())
    }
}

/// Why an export failed, and whether one more try may do.
struct Failed {
    why: String,
    retry: bool,
}

/// Whether `reply` holds a whole HTTP/1.1 reply: its head and as many body
/// bytes as its `Content-Length` says, or its last chunk. A reply with
/// neither ends with its connection.
fn reply_complete(reply: &[u8]) -> bool {
    let Some(end) = reply.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&reply[..end]).to_ascii_lowercase();
    let body = reply.len() - end - 4;
    for l in head.lines() {
        if let Some((k, v)) = l.split_once(':') {
            match k.trim() {
                "content-length" => return v.trim().parse().is_ok_and(|n: usize| body >= n),
                "transfer-encoding" if v.contains("chunked") => {
                    return reply.ends_with(b"0\r\n\r\n");
                }
                _ => {}
            }
        }
    }
    false
}

/// The status and body of a `Connection: close` HTTP/1.1 reply (a chunked
/// body is de-chunked).
fn parse_reply(reply: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = reply.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&reply[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let body = &reply[end + 4..];
    let chunked = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("transfer-encoding")
                && v.to_ascii_lowercase().contains("chunked")
        })
    });
    if !chunked {
        return Some((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line + 2..];
        if size == 0 {
            return Some((status, out));
        }
        out.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

batchbench_contract::register_reporter! {
    name: "otlp_spans",
    description: "one OpenTelemetry span per request to an OTLP/HTTP collector, batched off the requests' path; what it cannot deliver is counted",
    example: r#"{"endpoint": "http://localhost:4318"}"#,
    config: OtlpSpansConfig,
    build: OtlpSpans::new,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_get_the_traces_path_unless_they_name_one() {
        let e = Endpoint::parse("http://localhost:4318").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.url(), "http://localhost:4318/v1/traces");
        let e = Endpoint::parse("http://10.0.0.2:4318/").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.url(), "http://10.0.0.2:4318/v1/traces");
        let e = Endpoint::parse("HTTP://[::1]:9/otlp/v1/traces").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (e.authority.as_str(), e.path.as_str()),
            ("[::1]:9", "/otlp/v1/traces")
        );
        let e = Endpoint::parse("http://collector").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.authority, "collector:80");
        let e = Endpoint::parse("http://[::1]").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.authority, "[::1]:80");
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (url, says) in [
            ("localhost:4318", "not an OTLP/HTTP URL"),
            ("https://collector:4318", "https is not supported"),
            ("http://:4318", "not a host"),
            ("http://collector:99999", "not a port number"),
            ("http://collector:x", "not a port number"),
            ("http://user:secret@collector:4318", "credentials"),
            ("http://coll ector:4318", "which a URL cannot"),
            ("http://::1:4318", "not a host"),
            ("http://[::1:4318", "not a host"),
            ("http://[nope]:4318", "not a host"),
            ("http://[::1]x", "not a host"),
            ("http://collector?x=1", "has a path"),
            ("", "not an OTLP/HTTP URL"),
        ] {
            let e = Endpoint::parse(url).map(|e| e.url()).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn ids_are_the_traceparents_or_what_it_would_have_carried() {
        let mut rec = RequestRecord {
            agent_id: 3,
            trajectory_id: "user-3",
            request_index: 2,
            ..RequestRecord::default()
        };
        let derived = ids(7, &rec);
        let ctx = RouteContext {
            seed: 7,
            agent_id: 3,
            routing_slot: 0,
            trajectory_id: "user-3",
            request_index: 2,
        };
        let tp = crate::routers::request_ids::traceparent(&ctx);
        let hex: String = derived.0.iter().map(|b| format!("{b:02x}")).collect();
        let span: String = derived.1.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(tp, format!("00-{hex}-{span}-01"));
        rec.ids.trace_id = Some("0af7651916cd43dd8448eb211c80319c".into());
        rec.ids.span_id = Some("b7ad6b7169203331".into());
        let (t, s) = ids(7, &rec);
        assert_eq!(t[0], 0x0a);
        assert_eq!(s[7], 0x31);
        // An all-zero id is invalid: the derived ones stand in.
        rec.ids.span_id = Some("0000000000000000".into());
        assert_eq!(ids(7, &rec), derived);
    }

    #[test]
    fn replies_are_read_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
        assert_eq!(parse_reply(plain), Some((200, b"hi".to_vec())));
        let chunked =
            b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_reply(chunked), Some((503, b"abcde".to_vec())));
        assert_eq!(parse_reply(b"garbage"), None);
    }
}
