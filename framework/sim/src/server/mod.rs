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

mod lora;
mod metrics;
mod prompt;
mod respond;
mod stream;
mod structured;

use lora::Counter;
use metrics::{error, metrics, models, requests, sha256_hex, stats};
use prompt::{Counted, prompt_tokens};
use respond::respond;

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
    /// The `X-Request-Id` the client sent, if any.
    pub request_id: Option<String>,
    /// The `traceparent` the client sent, if any.
    pub traceparent: Option<String>,
    /// The injected fault, if any.
    pub fault: Option<FaultKind>,
    /// The request's `model` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The LoRA adapter it asked for (by `model`, `lora_path` or `lora`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Whether its adapter was not resident and was loaded for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adapter_loaded: bool,
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
    /// LoRA adapters loaded (requests for an adapter that was not resident).
    pub lora_loads: u64,
}

/// A snapshot of the simulator's counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SimStats {
    /// Generation requests received (every API).
    pub requests: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Requests rejected as invalid (HTTP 400), or for a model not served
    /// (HTTP 404, with `strict_models`).
    pub rejected: u64,
    /// Responses API: responses stored for a later `previous_response_id`.
    pub stored_responses: u64,
    /// Per worker.
    pub workers: Vec<WorkerStats>,
}

struct AppState {
    cfg: SimConfig,
    tok: Arc<TokenizerHandle>,
    /// Models with a tokenizer of their own, by name (the others count with
    /// `tok`), each with the salt of its entries in `ids_cache`.
    model_toks: HashMap<String, (Arc<TokenizerHandle>, u64)>,
    /// Each model's latency factor (`model_slowdown`); the others' is 1.
    model_factors: Vec<(String, f64)>,
    /// Per worker: the LoRA adapters resident, least recently used first.
    loras: Vec<Mutex<batchbench_contract::models::AdapterSlots>>,
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
    /// `text`'s ids by `tok`, whose cache entries are salted by `salt`.
    fn ids_by(&self, tok: &TokenizerHandle, salt: u64, text: &str) -> Result<Arc<[u32]>, String> {
        if text.is_empty() {
            return Ok(Arc::from(Vec::new()));
        }
        // Synthetic text on a proven table: table lookups give the full
        // encoding's ids (see batchbench_engine::tokens::proof).
        if let Some(ids) = tok.proven_ids(text) {
            return Ok(ids.into());
        }
        let key = fnv(text.as_bytes()) ^ (text.len() as u64).rotate_left(48) ^ salt;
        if let Some(ids) = lock(&self.ids_cache).get(&key) {
            return Ok(ids.clone());
        }
        let ids: Arc<[u32]> = tok.ids(text).map_err(|e| e.to_string())?.into();
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
        Self::start_with_models(cfg, tok, Vec::new(), addr).await
    }

    /// Starts serving on `addr`, counting the prompts of the models named in
    /// `models` with their own tokenizers (the others' with `tok`).
    pub async fn start_with_models(
        cfg: SimConfig,
        tok: Arc<TokenizerHandle>,
        own: Vec<(String, Arc<TokenizerHandle>)>,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        cfg.validate().map_err(std::io::Error::other)?;
        // The simulator counts every prompt with the full tokenizer: parse it now
        // (a cached word table defers it), not on the first request.
        for t in std::iter::once(&tok).chain(own.iter().map(|(_, t)| t)) {
            let t = t.clone();
            tokio::task::spawn_blocking(move || t.full().map(|_| ()))
                .await
                .map_err(std::io::Error::other)?
                .map_err(std::io::Error::other)?;
        }
        let model_toks = own
            .into_iter()
            .map(|(name, t)| {
                let salt = rng::hash_str(&name);
                (name, (t, salt))
            })
            .collect();
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
        let (cfg_workers, cfg_max_loras) = (cfg.workers, cfg.max_loras as usize);
        let model_factors = cfg.model_factors().map_err(std::io::Error::other)?;
        let state = Arc::new(AppState {
            model_factors,
            cfg,
            gauges,
            schedulers,
            tok,
            model_toks,
            loras: (0..cfg_workers)
                .map(|_| {
                    Mutex::new(batchbench_contract::models::AdapterSlots::new(
                        cfg_max_loras,
                    ))
                })
                .collect(),
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
            .route("/v1/rerank", handler(Api::Rerank))
            .route("/v2/rerank", handler(Api::Rerank))
            .route("/rerank", handler(Api::Rerank))
            .route("/v1/score", handler(Api::Score))
            .route("/score", handler(Api::Score))
            .route("/v1/audio/transcriptions", handler(Api::Transcription))
            .route("/v1/audio/translations", handler(Api::Transcription))
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

struct Plan {
    api: Api,
    id: String,
    worker: u32,
    prompt: u64,
    cached: u64,
    /// Output tokens, reasoning included.
    completion: u32,
    /// Of which reasoning, before the answer.
    reasoning: u32,
    /// Whether the usage reports the reasoning apart.
    reasoning_usage: bool,
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
    /// The prompt's ids on its worker, to cache the reply after them (a
    /// templated API's, read; see [`respond::hold_reply`]).
    held: Option<Vec<u32>>,
    /// Structured outputs: the answer's text, decided with the plan (its
    /// tokens are the answer's).
    answer: Option<String>,
    /// Loading its LoRA adapter, before its first token (zero: resident, or
    /// no adapter).
    adapter_load: Duration,
    /// Seconds of audio in its prompt (the encoder's time before its first
    /// token is `audio_ms_per_second` for each).
    audio_seconds: f64,
    /// Its model's latency factor (`model_slowdown`; 1 for most).
    slowdown: f64,
    /// Its model's and adapter's key in the prefix cache.
    cache_salt: u64,
    /// The tokenizer its reply is written with (its model's own, else the
    /// server's), and the salt of its entries in the ids cache.
    tok: Arc<TokenizerHandle>,
    salt: u64,
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
    let read = if api == Api::Transcription {
        // A form upload, not JSON.
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        crate::audio::form(&st.cfg, content_type, &body)
    } else {
        serde_json::from_slice::<Value>(&body)
            .map_err(|e| format!("invalid JSON body: {e}"))
            .and_then(|req| apis::parse(api, &req, &headers).map(|r| (req, r)))
    };
    let (req, parsed) = match read {
        Ok(r) => r,
        Err(e) => {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, &e);
        }
    };
    if let Some(e) = st.unknown_model(parsed.model.as_deref()) {
        st.rejected.fetch_add(1, Ordering::Relaxed);
        return e;
    }
    let Counted {
        ids,
        count: prompt,
        stored: stored_prompt_tokens,
        messages: own_messages,
    } = match if st.cfg.instant {
        Ok(Counted::UNREAD)
    } else {
        prompt_tokens(&Counter::of(&st, parsed.model.as_deref()), &parsed)
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
    let adapter = match lora::adapter(&st.cfg, &req) {
        Ok(a) => a,
        Err(e) => {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            return error(StatusCode::BAD_REQUEST, &e);
        }
    };
    let hdr = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    // The client's own id of the request and its trace context, logged; the
    // id answered with `request_id_headers`, as vLLM answers with request-id
    // headers on: the id sent, else its own.
    let request_id = hdr("x-request-id");
    let traceparent = hdr("traceparent");
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
    let drawn = if !api.generates() {
        0
    } else if ignore_eos || min >= max {
        max
    } else {
        rng.range_inclusive(i64::from(min.max(1)), i64::from(max)) as u32
    };
    // Reasoning comes first and counts in the cap: the answer is what is left
    // of it (all of it with ignore_eos).
    let reasoning = if !api.generates() {
        0
    } else {
        parsed
            .thinking
            .tokens(reasoning_base(&st.cfg, &body))
            .min(max)
    };
    let answer = if ignore_eos || min >= max {
        max - reasoning
    } else {
        drawn.min(max - reasoning)
    };
    // A structured answer is as long as its JSON, cut at the cap.
    let (answer, answer_text) = match parsed.structured.as_ref().filter(|_| api.generates()) {
        Some(schema) => {
            let own = Counter::of(&st, parsed.model.as_deref());
            let mut text = structured::answer(schema.as_ref(), own.tok, &mut rng);
            let mut brng = Stream::at(st.cfg.seed ^ 0x150B_AD0A, &[fnv(&body)]);
            if st.cfg.invalid_json_rate > 0.0 && brng.next_f64() < st.cfg.invalid_json_rate {
                text = structured::broken(&text);
            }
            let tokens = match own.ids(&text) {
                Ok(ids) => ids.len(),
                Err(e) => return error(StatusCode::BAD_REQUEST, &e),
            };
            let room = (max - reasoning) as usize;
            let n = tokens.min(room);
            (n as u32, Some(structured::cut(&text, tokens, n)))
        }
        None => (answer, None),
    };
    let completion = reasoning + answer;
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

    // Its cache blocks are its model's and adapter's alone.
    let cache_salt = rng::hash_str(parsed.model.as_deref().unwrap_or(""))
        ^ adapter.map_or(0, |a| (a as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // The adapter, made resident on its worker (loaded when it was not).
    let adapter_loaded =
        fault.is_none() && adapter.is_some_and(|a| st.take_adapter(worker as usize, a));
    let cached = if fault.is_some() {
        0
    } else {
        let mut w = lock(&st.workers[worker as usize]);
        // An embedding or ranking model keeps no prefix cache.
        let cached = if !api.generates() {
            0
        } else {
            w.0.lookup_and_insert_for(&ids, cache_salt).min(prompt)
        };
        w.1.requests += 1;
        w.1.prompt_tokens += prompt;
        w.1.cached_tokens += cached;
        w.1.completion_tokens += u64::from(completion);
        w.1.lora_loads += u64::from(adapter_loaded);
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
                model: parsed.model.clone(),
                adapter: adapter.map(|a| st.cfg.lora_adapters[a].clone()),
                adapter_loaded,
                received_us: st.cfg.stamps.then(|| st.stamp(received)),
                chunk_us: Vec::new(),
                request_id: request_id.clone(),
                traceparent,
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
    // A templated conversation's reply is cached after its prompt, as a
    // server's KV cache holds the tokens it generated: a client that sends
    // the reply back as it came finds them.
    let held = (matches!(api, Api::Chat | Api::Messages | Api::Responses)
        && fault.is_none()
        && !ids.is_empty())
    .then_some(ids);
    let (tok, salt) = st.model_tok(parsed.model.as_deref());
    let plan = Plan {
        cache_salt,
        tok,
        salt,
        slowdown: st.slowdown(parsed.model.as_deref()),
        adapter_load: if adapter_loaded {
            Duration::from_secs_f64(st.cfg.lora_load_ms / 1000.0)
        } else {
            Duration::ZERO
        },
        answer: answer_text,
        audio_seconds: parsed.audio_seconds(),
        held,
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
        reasoning,
        reasoning_usage: !st.cfg.omit_reasoning_usage,
        max,
        stream,
        usage_in_stream,
        model,
        fault,
        fault_status,
    };
    let headers = st.cfg.request_id_headers;
    let mut response = respond(st, plan, rng).await;
    if headers {
        let id = request_id.unwrap_or_else(|| format!("sim-req-{seq}"));
        if let Ok(v) = axum::http::HeaderValue::from_str(&id) {
            response.headers_mut().insert("x-request-id", v);
        }
    }
    response
}

/// The reasoning a reply of this request would make before its knobs: the
/// configured count, or one drawn between it and the maximum (seeded by the
/// request, apart from the answer's draws).
fn reasoning_base(cfg: &SimConfig, body: &[u8]) -> u32 {
    let (lo, hi) = (cfg.reasoning_tokens, cfg.reasoning_tokens_max);
    if hi <= lo {
        return lo;
    }
    let mut r = Stream::at(cfg.seed ^ 0x7EA5, &[fnv(body)]);
    r.range_inclusive(i64::from(lo), i64::from(hi)) as u32
}
