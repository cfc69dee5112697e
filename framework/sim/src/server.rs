//! The HTTP server of the simulator.

use crate::apis::{self, Api, Msg, Prompt, fnv};
use crate::batch::{self, Admission, Gauges};
use crate::cache::PrefixCache;
use crate::{FaultKind, SimConfig};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use batchbench_contract::rng::{self, Stream};
use batchbench_engine::schedule::pacer::Pacer;
use batchbench_engine::tokens::TokenizerHandle;
use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const MAX_LOG: usize = 1_000_000;

/// One request as the simulator saw it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RequestLog {
    /// Arrival order.
    pub seq: u64,
    /// Worker that served it.
    pub worker: u32,
    /// Prompt tokens counted (content + overheads).
    pub prompt_tokens: u64,
    /// Prefix-cache hit, in tokens.
    pub cached_tokens: u64,
    /// Output tokens generated.
    pub completion_tokens: u64,
    /// The API the request came through.
    pub api: Api,
    /// Messages (input items) in the request.
    pub messages: u64,
    /// Responses API: prompt tokens carried over from the stored response the
    /// request continues (`previous_response_id`).
    pub stored_prompt_tokens: u64,
    /// Streamed.
    pub stream: bool,
    /// `X-SMG-Routing-Key`.
    pub routing_key: Option<String>,
    /// `X-SMG-Target-Worker`.
    pub target_worker: Option<String>,
    /// The body's `user` field.
    pub user: Option<String>,
    /// FNV-1a hash of the request body, to compare bodies across runs.
    pub body_hash: u64,
    /// SHA-256 of the request body (lowercase hex), to pin bodies across versions.
    pub body_sha256: String,
    /// The injected fault, if any.
    pub fault: Option<FaultKind>,
    /// With `--stamps`: when the request arrived (its body read, before any
    /// work on it), microseconds on the simulator's monotonic clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub received_us: Option<f64>,
    /// With `--stamps`: when each chunk that carried tokens was taken by the
    /// connection to be written (a whole reply: once), on the same clock.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chunk_us: Vec<f64>,
}

/// Per-worker counters.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WorkerStats {
    /// Requests served.
    pub requests: u64,
    /// Prompt tokens counted.
    pub prompt_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// Output tokens generated.
    pub completion_tokens: u64,
}

/// A snapshot of the simulator's counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SimStats {
    /// Generation requests received (every API).
    pub requests: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Requests rejected as invalid (HTTP 400).
    pub rejected: u64,
    /// Responses API: responses stored for a later `previous_response_id`.
    pub stored_responses: u64,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
}

struct AppState {
    cfg: SimConfig,
    tok: Arc<TokenizerHandle>,
    seq: AtomicU64,
    workers: Vec<Mutex<(PrefixCache, WorkerStats)>>,
    /// Per worker: what `/metrics` reports of its load.
    gauges: Vec<Arc<Gauges>>,
    /// Per worker, with the continuous-batching model: its scheduler.
    schedulers: Vec<mpsc::UnboundedSender<Admission>>,
    faults: Mutex<BTreeMap<String, u64>>,
    rejected: AtomicU64,
    log: Mutex<Vec<RequestLog>>,
    round_robin: AtomicU64,
    /// Token ids by text hash: a growing conversation resends the same messages,
    /// so each turn tokenizes only what it adds.
    ids_cache: Mutex<HashMap<u64, Arc<[u32]>>>,
    /// Responses API: stored conversations by response id, oldest first.
    stored: Mutex<StoredResponses>,
    /// Keeps every token's time to within a fraction of a millisecond (the
    /// runtime's timer has millisecond steps).
    pacer: Option<Arc<Pacer>>,
    /// The zero of the stamps' clock.
    epoch: std::time::Instant,
}

/// A stored response: the conversation's messages up to and including the
/// reply, as token ids (with role markers) and counted tokens, the template
/// and tool definitions left out (the request that continues it brings them).
/// It holds only what its request added, after the response it continued, so
/// a long conversation is stored once, not once per turn.
#[derive(Debug)]
struct Stored {
    parent: Option<Arc<Stored>>,
    ids: Box<[u32]>,
    count: u64,
}

impl Stored {
    /// Every id of the conversation, in order.
    fn extend_ids(&self, out: &mut Vec<u32>) {
        let mut chain = vec![self];
        while let Some(p) = chain.last().and_then(|s| s.parent.as_deref()) {
            chain.push(p);
        }
        for s in chain.iter().rev() {
            out.extend_from_slice(&s.ids);
        }
    }
}

/// The stored responses, the oldest dropped beyond [`STORED_RESPONSES`] (a
/// continuation of a dropped one is answered 400, as by a server that expired it).
#[derive(Debug, Default)]
struct StoredResponses {
    map: HashMap<String, Arc<Stored>>,
    order: std::collections::VecDeque<String>,
}

impl StoredResponses {
    fn insert(&mut self, id: String, s: Stored) {
        while self.map.len() >= STORED_RESPONSES {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
        self.order.push_back(id.clone());
        self.map.insert(id, Arc::new(s));
    }
}

/// At most this many stored responses.
const STORED_RESPONSES: usize = 100_000;

const IDS_CACHE_ENTRIES: usize = 200_000;

impl AppState {
    fn ids(&self, text: &str) -> Result<Arc<[u32]>, String> {
        if text.is_empty() {
            return Ok(Arc::from(Vec::new()));
        }
        // Synthetic text on a proven table: table lookups give the full
        // encoding's ids (see batchbench_engine::tokens::proof).
        if let Some(ids) = self.tok.proven_ids(text) {
            return Ok(ids.into());
        }
        let key = fnv(text.as_bytes()) ^ (text.len() as u64).rotate_left(48);
        if let Some(ids) = lock(&self.ids_cache).get(&key) {
            return Ok(ids.clone());
        }
        let ids: Arc<[u32]> = self.tok.ids(text).map_err(|e| e.to_string())?.into();
        let mut cache = lock(&self.ids_cache);
        if cache.len() >= IDS_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, ids.clone());
        Ok(ids)
    }
}

/// A running simulator.
#[derive(Debug)]
pub struct Sim {
    addr: SocketAddr,
    state: Arc<AppStateHandle>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Opaque handle to the state (keeps the internals private).
pub struct AppStateHandle(Arc<AppState>);

impl std::fmt::Debug for AppStateHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppStateHandle")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Sim {
    /// Starts serving on `addr` (port 0 picks a free port).
    pub async fn start(
        cfg: SimConfig,
        tok: Arc<TokenizerHandle>,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        cfg.validate().map_err(std::io::Error::other)?;
        // The simulator counts every prompt with the full tokenizer: parse it now
        // (a cached word table defers it), not on the first request.
        let t = tok.clone();
        tokio::task::spawn_blocking(move || t.full().map(|_| ()))
            .await
            .map_err(std::io::Error::other)?
            .map_err(std::io::Error::other)?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let workers = (0..cfg.workers)
            .map(|_| {
                Mutex::new((
                    PrefixCache::new(cfg.cache_block_tokens as usize, cfg.cache_capacity_tokens),
                    WorkerStats::default(),
                ))
            })
            .collect();
        let gauges: Vec<Arc<Gauges>> = (0..cfg.workers)
            .map(|_| Arc::new(Gauges::default()))
            .collect();
        // Without a precise timer (not Linux), the runtime's timer keeps the
        // schedule, to its millisecond.
        let pacer = Pacer::start().ok().map(Arc::new);
        let schedulers = match cfg.batch_model() {
            Some(m) => gauges
                .iter()
                .map(|g| batch::start(m, g.clone(), pacer.clone()))
                .collect(),
            None => Vec::new(),
        };
        let state = Arc::new(AppState {
            cfg,
            gauges,
            schedulers,
            tok,
            seq: AtomicU64::new(0),
            workers,
            faults: Mutex::new(BTreeMap::new()),
            rejected: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            round_robin: AtomicU64::new(0),
            ids_cache: Mutex::new(HashMap::new()),
            stored: Mutex::new(StoredResponses::default()),
            pacer,
            epoch: std::time::Instant::now(),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", handler(Api::Chat))
            .route("/chat/completions", handler(Api::Chat))
            .route("/v1/completions", handler(Api::Completions))
            .route("/completions", handler(Api::Completions))
            .route("/v1/responses", handler(Api::Responses))
            .route("/responses", handler(Api::Responses))
            .route("/v1/messages", handler(Api::Messages))
            .route("/generate", handler(Api::Generate))
            .route("/v1/embeddings", handler(Api::Embeddings))
            .route("/embeddings", handler(Api::Embeddings))
            .route("/v1/models", get(models))
            .route("/health", get(|| async { "ok" }))
            .route("/metrics", get(metrics))
            .route("/sim/requests", get(requests))
            .route("/sim/stats", get(stats))
            .with_state(state.clone());
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        // As real servers do: each SSE event leaves when written, not after
        // the client's delayed ACK of the one before (Nagle).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
        });
        Ok(Self {
            addr,
            state: Arc::new(AppStateHandle(state)),
            shutdown,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SimStats {
        snapshot(&self.state.0)
    }

    /// The request log (empty unless `record_requests`).
    pub fn requests(&self) -> Vec<RequestLog> {
        lock(&self.state.0.log).clone()
    }

    /// Stops accepting and waits for the server task (in-flight streams are dropped).
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.abort();
        let _ = self.task.await;
    }

    /// Serves until `cancel` fires.
    pub async fn serve_until(self, cancel: CancellationToken) {
        cancel.cancelled().await;
        self.stop().await;
    }
}

impl AppState {
    /// `t` on the stamps' clock: microseconds from the simulator's start.
    fn stamp(&self, t: std::time::Instant) -> f64 {
        t.saturating_duration_since(self.epoch).as_nanos() as f64 / 1000.0
    }

    /// With `--stamps`: the server's timings of a reply whose first tokens
    /// were made at `first` and whose last at `last`.
    fn timings(
        &self,
        p: &Plan,
        first: std::time::Instant,
        last: std::time::Instant,
    ) -> Option<apis::Timings> {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        self.cfg.stamps.then(|| apis::Timings {
            prompt_ms: ms(first.saturating_duration_since(p.received)),
            predicted_ms: ms(last.saturating_duration_since(first)),
        })
    }

    /// With `--stamps`: the chunks' write times, into the log entry of the
    /// request `seq`.
    fn log_chunks(&self, seq: u64, chunks: &[std::time::Instant]) {
        let stamps: Vec<f64> = chunks.iter().map(|t| self.stamp(*t)).collect();
        let mut log = lock(&self.log);
        if let Some(e) = log.iter_mut().rev().find(|e| e.seq == seq) {
            e.chunk_us = stamps;
        }
    }
}

fn snapshot(st: &AppState) -> SimStats {
    SimStats {
        requests: st.seq.load(Ordering::Relaxed),
        faults: lock(&st.faults).clone(),
        rejected: st.rejected.load(Ordering::Relaxed),
        stored_responses: lock(&st.stored).map.len() as u64,
        workers: st.workers.iter().map(|w| lock(w).1.clone()).collect(),
    }
}

async fn models(State(st): State<Arc<AppState>>) -> Response {
    let data: Vec<Value> = st
        .cfg
        .served_models
        .iter()
        .map(|m| serde_json::json!({"id": m, "object": "model", "owned_by": "batchbench-sim"}))
        .collect();
    axum::Json(serde_json::json!({"object": "list", "data": data})).into_response()
}

async fn requests(State(st): State<Arc<AppState>>) -> Response {
    axum::Json(lock(&st.log).clone()).into_response()
}

async fn stats(State(st): State<Arc<AppState>>) -> Response {
    axum::Json(snapshot(&st)).into_response()
}

async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let s = snapshot(&st);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# HELP sim_requests_total Chat completion requests received.\n# TYPE sim_requests_total counter"
    );
    let _ = writeln!(o, "sim_requests_total {}", s.requests);
    let _ = writeln!(
        o,
        "# HELP sim_rejected_total Requests rejected as invalid.\n# TYPE sim_rejected_total counter"
    );
    let _ = writeln!(o, "sim_rejected_total {}", s.rejected);
    for (name, help, f) in [
        (
            "sim_worker_requests_total",
            "Requests served per worker.",
            (|w: &WorkerStats| w.requests) as fn(&WorkerStats) -> u64,
        ),
        (
            "sim_prompt_tokens_total",
            "Prompt tokens counted per worker.",
            |w| w.prompt_tokens,
        ),
        (
            "sim_cached_tokens_total",
            "Prefix-cache hits in tokens per worker.",
            |w| w.cached_tokens,
        ),
        (
            "sim_completion_tokens_total",
            "Output tokens generated per worker.",
            |w| w.completion_tokens,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (i, w) in s.workers.iter().enumerate() {
            let _ = writeln!(o, "{name}{{worker=\"{i}\"}} {}", f(w));
        }
    }
    vllm_metrics(&st, &s, &mut o);
    let _ = writeln!(
        o,
        "# HELP sim_faults_total Injected faults by kind.\n# TYPE sim_faults_total counter"
    );
    for (k, v) in &s.faults {
        let _ = writeln!(o, "sim_faults_total{{kind=\"{k}\"}} {v}");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], o).into_response()
}

/// The load of each worker under vLLM's metric names (labelled by `engine`,
/// as vLLM labels its data-parallel engines), so that a scraper made for vLLM
/// reads the simulator.
fn vllm_metrics(st: &AppState, s: &SimStats, o: &mut String) {
    let model = st
        .cfg
        .served_models
        .first()
        .map_or("batchbench-sim", String::as_str);
    let kv_capacity = st.cfg.kv_capacity_tokens;
    let load = |g: &Gauges| {
        [
            g.running.load(Ordering::Relaxed) as f64,
            g.waiting.load(Ordering::Relaxed) as f64,
            if kv_capacity > 0 {
                g.kv_tokens.load(Ordering::Relaxed) as f64 / kv_capacity as f64
            } else {
                0.0
            },
            g.preemptions.load(Ordering::Relaxed) as f64,
        ]
    };
    let loads: Vec<[f64; 4]> = st.gauges.iter().map(|g| load(g)).collect();
    let served = |w: &WorkerStats| {
        [
            w.prompt_tokens as f64,
            w.cached_tokens as f64,
            w.prompt_tokens as f64,
            w.completion_tokens as f64,
        ]
    };
    let counts: Vec<[f64; 4]> = s.workers.iter().map(served).collect();
    // Name, type, help, the worker rows and the column in them.
    type Family<'a> = (&'a str, &'a str, &'a str, &'a [[f64; 4]], usize);
    let families: [Family<'_>; 8] = [
        (
            "vllm:num_requests_running",
            "gauge",
            "Requests in the batch.",
            &loads,
            0,
        ),
        (
            "vllm:num_requests_waiting",
            "gauge",
            "Requests waiting to join the batch.",
            &loads,
            1,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "gauge",
            "KV cache usage (1 is full; 0 without a KV capacity).",
            &loads,
            2,
        ),
        (
            "vllm:num_preemptions_total",
            "counter",
            "Preemptions under KV pressure.",
            &loads,
            3,
        ),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            "Prompt tokens looked up in the prefix cache.",
            &counts,
            0,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "counter",
            "Prompt tokens found in the prefix cache.",
            &counts,
            1,
        ),
        (
            "vllm:prompt_tokens_total",
            "counter",
            "Prompt tokens processed.",
            &counts,
            2,
        ),
        (
            "vllm:generation_tokens_total",
            "counter",
            "Output tokens generated.",
            &counts,
            3,
        ),
    ];
    for (name, kind, help, rows, col) in families {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (i, row) in rows.iter().enumerate() {
            let _ = writeln!(
                o,
                "{name}{{model_name=\"{model}\",engine=\"{i}\"}} {}",
                row[col]
            );
        }
    }
}

fn error(status: StatusCode, msg: &str) -> Response {
    (status, axum::Json(serde_json::json!({"error": {"message": msg, "type": "invalid_request_error", "code": status.as_u16()}})))
        .into_response()
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Role marker ids, standing in for the template's role headers.
fn marker(role: &str) -> u32 {
    u32::MAX - role.len() as u32
}

/// Counts a templated conversation's messages into `ids`; returns the count.
fn count_messages(st: &AppState, messages: &[Msg], ids: &mut Vec<u32>) -> Result<u64, String> {
    let mut count = 0u64;
    for m in messages {
        if let Some(role) = &m.role {
            ids.push(marker(role));
            count += u64::from(st.cfg.message_overhead_tokens);
        }
        let c = st.ids(&m.content)?;
        count += c.len() as u64;
        ids.extend_from_slice(&c);
        for &(tokens, hash) in &m.images {
            // The image's tokens, as ids of its bytes (the cache tells images apart).
            count += tokens;
            ids.extend((0..tokens).map(|i| (hash.wrapping_add(i) as u32) | 0x8000_0000));
        }
        for (name, args) in &m.calls {
            for t in [name, args] {
                let t = st.ids(t)?;
                count += t.len() as u64;
                ids.extend_from_slice(&t);
            }
        }
    }
    Ok(count)
}

/// A request's prompt as the cache sees it (token ids), its counted tokens,
/// the part that continues a stored response, and what to store of it.
struct Counted {
    ids: Vec<u32>,
    count: u64,
    stored: u64,
    messages: Option<ToStore>,
}

impl Counted {
    /// An instant simulator's prompt: not read.
    const UNREAD: Self = Self {
        ids: Vec::new(),
        count: 0,
        stored: 0,
        messages: None,
    };
}

/// What a response stores: the response it continued, where this request's
/// own messages start in the ids, and the conversation's count through them.
struct ToStore {
    parent: Option<Arc<Stored>>,
    from: usize,
    count: u64,
}

fn prompt_tokens(st: &AppState, req: &apis::Request) -> Result<Counted, String> {
    plain_or_templated(st, req, &req.prompt)
}

fn plain_or_templated(
    st: &AppState,
    req: &apis::Request,
    prompt: &Prompt,
) -> Result<Counted, String> {
    match prompt {
        Prompt::Inputs(inputs) => {
            let mut all = Counted {
                ids: Vec::new(),
                count: 0,
                stored: 0,
                messages: None,
            };
            for p in inputs {
                let c = plain_or_templated(st, req, p)?;
                all.ids.extend_from_slice(&c.ids);
                all.count += c.count;
            }
            Ok(all)
        }
        Prompt::Text(t) => {
            let ids = st.ids(t)?.to_vec();
            let count = ids.len() as u64;
            Ok(Counted {
                ids,
                count,
                stored: 0,
                messages: None,
            })
        }
        Prompt::Ids(ids) => Ok(Counted {
            count: ids.len() as u64,
            ids: ids.clone(),
            stored: 0,
            messages: None,
        }),
        Prompt::Templated { tools, messages } => {
            let prior =
                match &req.previous_response_id {
                    None => None,
                    Some(id) => {
                        Some(lock(&st.stored).map.get(id).cloned().ok_or_else(|| {
                            format!("Previous response with id '{id}' not found.")
                        })?)
                    }
                };
            let mut ids = Vec::new();
            let mut count = u64::from(st.cfg.template_overhead_tokens);
            for t in tools {
                let t = st.ids(t)?;
                count += t.len() as u64;
                ids.extend_from_slice(&t);
            }
            let mut stored = 0;
            if let Some(p) = &prior {
                p.extend_ids(&mut ids);
                stored = p.count;
            }
            let from = ids.len();
            if messages.first().is_some_and(|m| m.role.is_none()) && prior.is_none() {
                return Err("a function_call item continues no stored response".into());
            }
            let own = count_messages(st, messages, &mut ids)?;
            count += stored + own;
            Ok(Counted {
                ids,
                count,
                stored,
                messages: Some(ToStore {
                    parent: prior,
                    from,
                    count: stored + own,
                }),
            })
        }
    }
}

struct Plan {
    api: Api,
    id: String,
    worker: u32,
    prompt: u64,
    cached: u64,
    completion: u32,
    max: u32,
    stream: bool,
    usage_in_stream: bool,
    model: String,
    fault: Option<FaultKind>,
    fault_status: u16,
    /// Inputs of the request (embeddings).
    items: u64,
    /// Arrival order.
    seq: u64,
    /// Whether it has an entry in the request log (not once the log is full).
    logged: bool,
    /// When it arrived.
    received: std::time::Instant,
    /// Responses API: store the reply under `id`, after the messages of the
    /// prompt (`ids[from..]`, counted `count`).
    store: Option<(Option<Arc<Stored>>, Vec<u32>, u64)>,
}

/// The handler of one API's generation endpoint.
fn handler(api: Api) -> axum::routing::MethodRouter<Arc<AppState>> {
    post(
        move |st: State<Arc<AppState>>, headers: HeaderMap, body: Bytes| {
            serve(api, st, headers, body)
        },
    )
}

async fn serve(
    api: Api,
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = std::time::Instant::now();
    let seq = st.seq.fetch_add(1, Ordering::Relaxed);
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, &format!("invalid JSON body: {e}"));
        }
    };
    let parsed = match apis::parse(api, &req, &headers) {
        Ok(r) => r,
        Err(e) => {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, &e);
        }
    };
    let Counted {
        ids,
        count: prompt,
        stored: stored_prompt_tokens,
        messages: own_messages,
    } = match if st.cfg.instant {
        Ok(Counted::UNREAD)
    } else {
        prompt_tokens(&st, &parsed)
    } {
        Ok(x) => x,
        Err(e) => {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, &e);
        }
    };
    if st.cfg.max_context_tokens > 0 && prompt > u64::from(st.cfg.max_context_tokens) {
        st.rejected.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::BAD_REQUEST,
            &format!(
                "the prompt has {prompt} tokens, over the context limit of {}",
                st.cfg.max_context_tokens
            ),
        );
    }
    let hdr = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let target = hdr("x-smg-target-worker");
    let routing_key = hdr("x-smg-routing-key");
    let workers = st.cfg.workers;
    let worker = match (&target, &routing_key) {
        (Some(t), _) if t.trim().parse::<u64>().is_ok() => {
            (t.trim().parse::<u64>().unwrap_or(0) % u64::from(workers)) as u32
        }
        (_, Some(k)) => (rng::hash_str(k) % u64::from(workers)) as u32,
        _ => (st.round_robin.fetch_add(1, Ordering::Relaxed) % u64::from(workers)) as u32,
    };

    // Output length.
    let max = parsed.max.unwrap_or(st.cfg.default_max_tokens);
    let min = parsed.min.min(max);
    let ignore_eos = parsed.ignore_eos;
    // Output length and text are a function of the request (like greedy decoding:
    // the same prompt gets the same reply), never of arrival order.
    let mut rng = Stream::at(st.cfg.seed, &[fnv(&body)]);
    let completion = if api == Api::Embeddings {
        0
    } else if ignore_eos || min >= max {
        max
    } else {
        rng.range_inclusive(i64::from(min.max(1)), i64::from(max)) as u32
    };
    let stream = parsed.stream;
    let usage_in_stream = parsed.usage_in_stream;

    // Fault decision (seeded by arrival order).
    let mut frng = Stream::at(st.cfg.seed ^ 0xFA17, &[seq]);
    let fault = (st.cfg.fault_rate > 0.0
        && frng.next_f64() < st.cfg.fault_rate
        && !st.cfg.fault_kinds.is_empty())
    .then(|| st.cfg.fault_kinds[frng.below(st.cfg.fault_kinds.len() as u64) as usize]);
    let fault_status = if st.cfg.fault_status.is_empty() {
        503
    } else {
        st.cfg.fault_status[frng.below(st.cfg.fault_status.len() as u64) as usize]
    };

    let cached = if fault.is_some() {
        0
    } else {
        let mut w = lock(&st.workers[worker as usize]);
        // An embedding model keeps no prefix cache.
        let cached = if api == Api::Embeddings {
            0
        } else {
            w.0.lookup_and_insert(&ids).min(prompt)
        };
        w.1.requests += 1;
        w.1.prompt_tokens += prompt;
        w.1.cached_tokens += cached;
        w.1.completion_tokens += u64::from(completion);
        cached
    };
    if let Some(f) = fault {
        *lock(&st.faults).entry(f.as_str().to_owned()).or_insert(0) += 1;
    }
    let mut logged = false;
    if st.cfg.record_requests {
        let mut log = lock(&st.log);
        if log.len() < MAX_LOG {
            logged = true;
            log.push(RequestLog {
                seq,
                worker,
                prompt_tokens: prompt,
                cached_tokens: cached,
                completion_tokens: if fault.is_some() {
                    0
                } else {
                    u64::from(completion)
                },
                api,
                messages: parsed.items,
                stored_prompt_tokens,
                stream,
                routing_key,
                target_worker: target,
                user: parsed.user.clone(),
                body_hash: fnv(&body),
                body_sha256: sha256_hex(&body),
                fault,
                received_us: st.cfg.stamps.then(|| st.stamp(received)),
                chunk_us: Vec::new(),
            });
        }
    }
    let model = parsed
        .model
        .clone()
        .unwrap_or_else(|| "batchbench-sim".to_owned());
    let store = match own_messages {
        Some(t) if api == Api::Responses && parsed.store && fault.is_none() => {
            Some((t.parent, ids[t.from..].to_vec(), t.count))
        }
        _ => None,
    };
    let plan = Plan {
        api,
        seq,
        logged,
        received,
        id: apis::response_id(api, seq),
        store,
        items: parsed.items,
        worker,
        prompt,
        cached,
        completion,
        max,
        stream,
        usage_in_stream,
        model,
        fault,
        fault_status,
    };
    respond(st, plan, rng).await
}

fn ttft(st: &AppState, p: &Plan) -> Duration {
    let ms =
        st.cfg.ttft_base_ms + st.cfg.prefill_us_per_token * (p.prompt - p.cached) as f64 / 1000.0;
    Duration::from_secs_f64(ms.max(0.0) / 1000.0)
}

async fn sleep(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// How a response's tokens are timed.
enum Pace {
    /// The per-request model.
    Timed(Schedule),
    /// The worker's batch makes the tokens: one message per token.
    Batched(mpsc::UnboundedReceiver<()>),
}

/// The per-request model: the TTFT, then a decode interval per token, on a
/// schedule from the request's arrival, kept by the pacer to within a
/// fraction of a millisecond.
struct Schedule {
    /// When the next tokens are due.
    due: std::time::Instant,
    ttft: Duration,
    decode: Duration,
    pacer: Option<Arc<Pacer>>,
}

impl Schedule {
    /// Moves the schedule on by `by` and waits for it.
    async fn wait(&mut self, by: Duration) {
        self.due += by;
        match &self.pacer {
            Some(p) => p.until(self.due).await,
            None => tokio::time::sleep_until(self.due.into()).await,
        }
    }
}

impl Pace {
    /// Waits for the next `n` tokens (`first`: they start the reply).
    async fn next(&mut self, first: bool, n: u32) {
        match self {
            Self::Timed(s) => {
                let by = if first { s.ttft } else { s.decode * n };
                s.wait(by).await;
            }
            Self::Batched(rx) => {
                for _ in 0..n {
                    if rx.recv().await.is_none() {
                        break;
                    }
                }
            }
        }
    }

    /// Waits for the whole reply of `n` tokens; returns when its first token
    /// was made (none for no token).
    async fn all(&mut self, n: u32) -> Option<std::time::Instant> {
        match self {
            Self::Timed(s) => {
                // The TTFT, then a decode interval per output token; the
                // first token counts as made at the TTFT.
                let first = s.due + s.ttft;
                s.wait(s.ttft + s.decode * n).await;
                (n > 0).then_some(first)
            }
            Self::Batched(_) => {
                if n == 0 {
                    return None;
                }
                self.next(true, 1).await;
                let first = std::time::Instant::now();
                self.next(false, n - 1).await;
                Some(first)
            }
        }
    }
}

/// A request in flight in the per-request model, counted as running.
struct InFlight(Option<Arc<Gauges>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(g) = &self.0 {
            g.running.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The request joins its worker's batch, or (per-request model) is timed on
/// its own.
fn pace(st: &AppState, p: &Plan) -> (Pace, InFlight) {
    let w = p.worker as usize;
    if let Some(scheduler) = st.schedulers.get(w) {
        let (tokens, rx) = mpsc::unbounded_channel();
        let _ = scheduler.send(Admission {
            cached: p.cached,
            uncached: p.prompt.saturating_sub(p.cached),
            output: p.completion,
            tokens,
        });
        return (Pace::Batched(rx), InFlight(None));
    }
    let g = st.gauges[w].clone();
    g.running.fetch_add(1, Ordering::Relaxed);
    let decode = Duration::from_secs_f64(st.cfg.decode_ms_per_token.max(0.0) / 1000.0);
    (
        Pace::Timed(Schedule {
            due: std::time::Instant::now(),
            ttft: ttft(st, p),
            decode,
            pacer: st.pacer.clone(),
        }),
        InFlight(Some(g)),
    )
}

type Chunk = Result<Bytes, std::io::Error>;

fn receiver_stream(
    rx: mpsc::Receiver<Chunk>,
) -> impl futures_util::Stream<Item = Chunk> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) })
}

/// With `--stamps`: when the connection took each chunk of a stream, and
/// which of them carried tokens (`tokens` of them from the `first`).
struct WriteStamps {
    st: Arc<AppState>,
    seq: u64,
    first: usize,
    tokens: usize,
    taken: Vec<std::time::Instant>,
}

impl WriteStamps {
    /// Notes a chunk taken now; the last token chunk's logs them all.
    fn take(&mut self) {
        self.taken.push(std::time::Instant::now());
        if self.taken.len() == self.first + self.tokens {
            self.st.log_chunks(self.seq, &self.taken[self.first..]);
        }
    }
}

/// `rx` as a response body, each chunk stamped as the connection takes it.
fn stamped_stream(
    rx: mpsc::Receiver<Chunk>,
    stamps: Option<WriteStamps>,
) -> impl futures_util::Stream<Item = Chunk> + Send + 'static {
    futures_util::stream::unfold((rx, stamps), |(mut rx, mut stamps)| async move {
        let item = rx.recv().await?;
        if let Some(s) = stamps.as_mut() {
            s.take();
        }
        Some((item, (rx, stamps)))
    })
}

/// The pause between bytes of a `drip` fault.
fn drip(st: &AppState, fault: Option<FaultKind>) -> Option<Duration> {
    (fault == Some(FaultKind::Drip)).then(|| Duration::from_secs_f64(st.cfg.drip_ms / 1000.0))
}

/// Sends `bytes` one byte per chunk, `pause` apart; false once the client left.
async fn bytewise(bytes: Bytes, tx: mpsc::Sender<Chunk>, pause: Option<Duration>) -> bool {
    for i in 0..bytes.len() {
        if let Some(d) = pause {
            sleep(d).await;
        }
        if tx.send(Ok(bytes.slice(i..=i))).await.is_err() {
            return false;
        }
    }
    true
}

/// Passes a stream's events on as a stream fault has them: split at every
/// byte, dripped, with comments, keep-alives and CRLF line ends, or after an
/// oversized comment.
async fn shape(
    mut raw: mpsc::Receiver<Chunk>,
    out: mpsc::Sender<Chunk>,
    fault: Option<FaultKind>,
    pause: Option<Duration>,
    oversize: u64,
) {
    let mut first = true;
    while let Some(item) = raw.recv().await {
        let bytes = match item {
            Ok(b) => b,
            Err(e) => {
                let _ = out.send(Err(e)).await;
                return;
            }
        };
        let sent = match fault {
            Some(FaultKind::Split | FaultKind::Drip) => bytewise(bytes, out.clone(), pause).await,
            Some(FaultKind::Comments) => {
                let crlf = String::from_utf8_lossy(&bytes).replace('\n', "\r\n");
                out.send(Ok(Bytes::from(format!(": keep-alive\r\n\r\n:\r\n{crlf}"))))
                    .await
                    .is_ok()
            }
            Some(FaultKind::Oversized) if first => {
                let pad = usize::try_from(oversize).unwrap_or(usize::MAX);
                let comment = format!(": {}\n\n", "x".repeat(pad));
                out.send(Ok(Bytes::from(comment))).await.is_ok()
                    && out.send(Ok(bytes)).await.is_ok()
            }
            _ => out.send(Ok(bytes)).await.is_ok(),
        };
        first = false;
        if !sent {
            return;
        }
    }
}

async fn respond(st: Arc<AppState>, p: Plan, mut rng: Stream) -> Response {
    match p.fault {
        Some(FaultKind::Status) => {
            return error(
                StatusCode::from_u16(p.fault_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "injected fault",
            );
        }
        Some(FaultKind::Stall) => {
            sleep(Duration::from_secs_f64(st.cfg.stall_secs)).await;
            return error(StatusCode::GATEWAY_TIMEOUT, "injected stall");
        }
        Some(FaultKind::Close) => {
            // Unwinding out of the handler ends the connection's task before
            // hyper writes a byte, so the socket closes with no status line.
            // `resume_unwind` skips the panic hook: nothing is printed, and the
            // server's other connections go on.
            std::panic::resume_unwind(Box::new("injected close before the headers"));
        }
        Some(FaultKind::Html) => {
            return (
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                "<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
                .into_response();
        }
        Some(FaultKind::Error200) if !p.stream => {
            return (
                [(header::CONTENT_TYPE, "application/json")],
                r#"{"error": {"message": "injected error in a 200 response", "type": "server_error", "code": 500}}"#,
            )
                .into_response();
        }
        Some(FaultKind::Reset) => {
            // Headers go out, then the body errors: hyper drops the connection.
            let s = futures_util::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::other("injected reset"))
            });
            return Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(s))
                .unwrap_or_default();
        }
        _ => {}
    }
    let (mut pace, in_flight) = pace(&st, &p);
    if !p.stream {
        let first = pace.all(p.completion).await;
        let done = std::time::Instant::now();
        drop(in_flight);
        let mut text = String::new();
        st.tok
            .push_words(&mut rng, p.completion as usize, &mut text);
        if p.fault.is_none() {
            store(&st, &p, &text);
        }
        let timings = st.timings(&p, first.unwrap_or(done), done);
        let body = apis::body(p.api, &facts(&p), &text, timings).to_string();
        let body = match p.fault {
            Some(FaultKind::Truncate) => body[..body.len() / 2].to_owned(),
            Some(FaultKind::Malformed) => format!("{{\"choices\": [ {}", &body[..body.len() / 3]),
            Some(FaultKind::Oversized) => {
                // A correct response, padded to the size asked for.
                let pad = usize::try_from(st.cfg.oversize_bytes)
                    .unwrap_or(usize::MAX)
                    .saturating_sub(body.len());
                format!("{{\"padding\": \"{}\", {}", "x".repeat(pad), &body[1..])
            }
            _ => body,
        };
        let content_type = [(header::CONTENT_TYPE, "application/json")];
        return match p.fault {
            Some(FaultKind::Split | FaultKind::Drip) => {
                let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
                tokio::spawn(bytewise(Bytes::from(body), tx, drip(&st, p.fault)));
                (content_type, Body::from_stream(receiver_stream(rx))).into_response()
            }
            _ => {
                if st.cfg.stamps && p.logged && p.fault.is_none() {
                    st.log_chunks(p.seq, &[std::time::Instant::now()]);
                }
                (content_type, body).into_response()
            }
        };
    }
    // For the stream faults the events go through `shape`, which splits, drips,
    // pads or decorates them on their way out.
    let (tx, raw) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let rx = match p.fault {
        Some(FaultKind::Split | FaultKind::Drip | FaultKind::Comments | FaultKind::Oversized) => {
            let (out, shaped) = mpsc::channel(16);
            tokio::spawn(shape(
                raw,
                out,
                p.fault,
                drip(&st, p.fault),
                st.cfg.oversize_bytes,
            ));
            shaped
        }
        _ => raw,
    };
    // With --stamps, a token chunk is stamped when the connection takes it to
    // write it, not when it is queued: the channel and the connection's task
    // stand between the two. The token chunks follow the stream's opening
    // events, one per chunk of tokens.
    let stamps = (st.cfg.stamps && p.logged && p.fault.is_none()).then(|| {
        let per = st.cfg.tokens_per_chunk.max(1);
        WriteStamps {
            st: st.clone(),
            seq: p.seq,
            first: apis::stream_start(p.api, &facts(&p)).len(),
            tokens: p.completion.div_ceil(per) as usize,
            taken: Vec::new(),
        }
    });
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let f = facts(&p);
        let send = |events: Vec<String>| {
            let tx = tx.clone();
            async move {
                for e in events {
                    if tx.send(Ok(Bytes::from(e))).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        if !send(apis::stream_start(p.api, &f)).await {
            return;
        }
        if p.fault == Some(FaultKind::Error200) {
            let _ = tx
                .send(Ok(Bytes::from_static(
                    b"data: {\"error\": {\"message\": \"injected error in a 200 response\", \"type\": \"server_error\", \"code\": 500}}\n\n",
                )))
                .await;
            return;
        }
        if p.fault == Some(FaultKind::Malformed) {
            let _ = tx
                .send(Ok(Bytes::from_static(
                    b"data: {\"choices\": [{\"delta\": \n\n",
                )))
                .await;
            return;
        }
        if p.completion == 0 {
            pace.all(0).await;
        }
        let per = st.cfg.tokens_per_chunk.max(1);
        let mut sent = 0u32;
        let mut so_far = String::new();
        let mut written = Vec::new();
        while sent < p.completion {
            let n = per.min(p.completion - sent);
            pace.next(sent == 0, n).await;
            let mut text = String::new();
            st.tok.push_words(&mut rng, n as usize, &mut text);
            so_far.push_str(&text);
            sent += n;
            let e = apis::stream_delta(p.api, &f, &text, &so_far, sent);
            if st.cfg.stamps {
                written.push(std::time::Instant::now());
            }
            if tx.send(Ok(Bytes::from(e))).await.is_err() {
                return;
            }
            if p.fault == Some(FaultKind::Truncate) && sent * 2 >= p.completion {
                return; // ends without its closing events
            }
        }
        if p.fault.is_none() {
            store(&st, &p, &so_far);
        }
        let now = std::time::Instant::now();
        let timings = st.timings(
            &p,
            written.first().copied().unwrap_or(now),
            written.last().copied().unwrap_or(now),
        );
        send(apis::stream_end(
            p.api,
            &f,
            &so_far,
            p.usage_in_stream,
            timings,
        ))
        .await;
    });
    let body = stamped_stream(rx, stamps);
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_default()
}

/// What the reply formatters need of a plan.
fn facts(p: &Plan) -> apis::ReplyFacts<'_> {
    apis::ReplyFacts {
        id: &p.id,
        model: &p.model,
        prompt: p.prompt,
        cached: p.cached,
        completion: p.completion,
        length: p.completion >= p.max,
        items: p.items,
    }
}

/// Responses API: keeps the conversation through the reply `text` under the
/// response's id, for a request that continues it.
fn store(st: &AppState, p: &Plan, text: &str) {
    let Some((parent, ids, count)) = &p.store else {
        return;
    };
    let Ok(out) = st.ids(text) else {
        return;
    };
    let mut own = Vec::with_capacity(ids.len() + 1 + out.len());
    own.extend_from_slice(ids);
    own.push(marker("assistant"));
    own.extend_from_slice(&out);
    let stored = Stored {
        parent: parent.clone(),
        ids: own.into(),
        count: count + u64::from(st.cfg.message_overhead_tokens) + out.len() as u64,
    };
    lock(&st.stored).insert(p.id.clone(), stored);
}
