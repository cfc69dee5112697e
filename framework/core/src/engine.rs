//! The engine: admission, the per-trajectory loop, and event fan-out.
//!
//! Data flow of one turn: plan → token synthesis on a bounded pool (off the async
//! threads, prefetched while the previous request is in flight) → codec encodes the
//! live conversation → routers decorate → HTTP → codec decodes → metrics and
//! reporters → think time → next turn.

use crate::blocks::{self, BlockState};
use crate::conversation::{Conversation, Message, Role, ToolCall};
use crate::metrics::{Metrics, Summary};
use crate::plan::{PlannedRequest, Trajectory};
use crate::plugin::{
    BodyWriter, EncodeRequest, PluginError, Reply, Reporter, RequestCodec, RequestRecord,
    RouteContext, RouteExtras, Router, TrajectoryRecord, WorkloadInfo, WorkloadSource,
};
use crate::rng;
use crate::tokens::{TokenError, TokenizerHandle};
use crate::transport::{Outcome, Transport};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The prompt sent when a request has no prompt-length target.
pub const DEFAULT_PROMPT: &str = "Write a short paragraph about the history of computing.";

/// Stream purposes, so prompts and environment texts never share a stream.
const PURPOSE_PROMPT: u64 = 1;
const PURPOSE_ENV: u64 = 2;

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The plan cannot be run as written (bad input: exit 2).
    #[error("{0}")]
    Plan(String),
    /// Text could not be synthesised exactly (bad input: exit 2).
    #[error(transparent)]
    Token(#[from] TokenError),
    /// A plugin failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl EngineError {
    /// Whether this is bad input (exit 2, nothing was sent).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Plan(_)
                | Self::Token(_)
                | Self::Plugin(PluginError::Config { .. } | PluginError::Plan(_))
        )
    }
}

/// Engine settings that are not plugins.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The `model` field.
    pub model: String,
    /// Run seed.
    pub seed: u64,
    /// Trajectories active at once (closed-loop slots).
    pub max_active: usize,
    /// Stream responses unless a request says otherwise.
    pub stream: bool,
    /// Template tokens of a first or reset request, subtracted from its content.
    pub initial_overhead_tokens: u32,
    /// Template tokens of each appended turn, subtracted from its environment.
    pub turn_overhead_tokens: u32,
    /// Divides every delay and start offset.
    pub time_scale: f64,
    /// Token-synthesis jobs at once.
    pub synth_workers: usize,
    /// How trajectories are admitted.
    pub admission: Admission,
    /// Open loop: trajectories whose first request is prepared ahead of its offset.
    pub lookahead: usize,
}

/// How trajectories are admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Admission {
    /// In source order into `max_active` slots; a finished trajectory's slot goes
    /// to the next one. Start offsets are ignored.
    #[default]
    ClosedLoop,
    /// Each trajectory at its start offset divided by the time scale, whatever is
    /// active; `max_active` is a hard cap that delays (and counts) late admissions.
    OpenLoop,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            model: String::new(),
            seed: 0,
            max_active: 1,
            stream: false,
            initial_overhead_tokens: 0,
            turn_overhead_tokens: 0,
            time_scale: 1.0,
            synth_workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            admission: Admission::ClosedLoop,
            lookahead: 256,
        }
    }
}

/// What reporters know about the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// The `model` field.
    pub model: String,
    /// Request URL.
    pub url: String,
    /// Run seed.
    pub seed: u64,
    /// Unix time at the benchmark clock start.
    pub started_unix: f64,
    /// Configured maximum of active trajectories.
    pub max_active: usize,
    /// The workload source's self-description.
    pub workload: WorkloadInfo,
    /// The run's configuration (flags and plugin configs), for reports.
    pub config: serde_json::Value,
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Run facts.
    pub info: RunInfo,
    /// The summary (partial when interrupted).
    pub summary: Summary,
}

struct Collector {
    metrics: Metrics,
    reporters: Vec<Box<dyn Reporter>>,
    /// The first failure of each reporter's per-event hooks: a failed reporter
    /// gets no further events, and its error ends the run (exit 1) once every
    /// reporter has finished.
    failed: Vec<Option<PluginError>>,
}

impl Collector {
    /// Calls `hook` on every reporter that has not failed.
    fn notify(&mut self, mut hook: impl FnMut(&mut dyn Reporter) -> Result<(), PluginError>) {
        for (r, failed) in self.reporters.iter_mut().zip(&mut self.failed) {
            if failed.is_none() {
                if let Err(e) = hook(r.as_mut()) {
                    *failed = Some(e);
                }
            }
        }
    }
}

/// Token synthesis: the tokenizer and the bounded pool its jobs run on.
struct Synth {
    seed: u64,
    tokenizer: Option<Arc<TokenizerHandle>>,
    pool: Semaphore,
    texts: blocks::TextCache,
}

struct Shared {
    opts: EngineOptions,
    transport: Transport,
    codec: Arc<dyn RequestCodec>,
    routers: Vec<Arc<dyn Router>>,
    synth: Arc<Synth>,
    cancel: CancellationToken,
    start: Instant,
    collector: Mutex<Collector>,
}

impl Shared {
    fn collector(&self) -> std::sync::MutexGuard<'_, Collector> {
        self.collector
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Content made ready for a turn before it is sent.
#[derive(Debug)]
enum Prepared {
    /// A fresh conversation opening with this user message.
    Fresh(Arc<str>),
    /// An appended environment (tool result) of this text.
    Append(Arc<str>),
    /// A structured prompt, with the block texts synthesised for it.
    Blocks {
        fresh: bool,
        blocks: crate::plan::Blocks,
        made: blocks::Made,
    },
    /// A verbatim body.
    Raw(crate::plan::RawBody),
}

/// What a preparation job needs, copied out of the plan so it can run anywhere.
#[derive(Debug, Clone)]
struct PrepJob {
    trajectory_id: Arc<str>,
    agent_id: u64,
    request_index: u64,
    kind: PrepKind,
}

#[derive(Debug, Clone)]
enum PrepKind {
    Fixed,
    Raw(crate::plan::RawBody),
    Fresh {
        tokens: u32,
        prefix: Option<(u64, u32)>,
    },
    Append {
        tokens: u32,
    },
    Blocks {
        fresh: bool,
        blocks: crate::plan::Blocks,
        needs: Vec<blocks::Need>,
    },
}

/// A run: plugins, options and the target, ready to go.
pub struct Engine {
    opts: EngineOptions,
    transport: Transport,
    codec: Arc<dyn RequestCodec>,
    routers: Vec<Arc<dyn Router>>,
    reporters: Vec<Box<dyn Reporter>>,
    tokenizer: Option<Arc<TokenizerHandle>>,
    cancel: CancellationToken,
    config: serde_json::Value,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// A new engine sending through `transport` with `codec`.
    pub fn new(opts: EngineOptions, transport: Transport, codec: Arc<dyn RequestCodec>) -> Self {
        Self {
            opts,
            transport,
            codec,
            routers: Vec::new(),
            reporters: Vec::new(),
            tokenizer: None,
            cancel: CancellationToken::new(),
            config: serde_json::Value::Null,
        }
    }

    /// Adds a router; routers decorate in the order added.
    pub fn router(mut self, r: Arc<dyn Router>) -> Self {
        self.routers.push(r);
        self
    }

    /// Adds a reporter; every event goes to every reporter.
    pub fn reporter(mut self, r: Box<dyn Reporter>) -> Self {
        self.reporters.push(r);
        self
    }

    /// The tokenizer used for synthetic text.
    pub fn tokenizer(mut self, t: Arc<TokenizerHandle>) -> Self {
        self.tokenizer = Some(t);
        self
    }

    /// The cancellation token (Ctrl+C cancels it).
    pub fn cancel_token(mut self, c: CancellationToken) -> Self {
        self.cancel = c;
        self
    }

    /// The run configuration recorded in reports.
    pub fn config(mut self, c: serde_json::Value) -> Self {
        self.config = c;
        self
    }

    /// Runs the workload to completion or cancellation.
    pub async fn run(self, mut source: Box<dyn WorkloadSource>) -> Result<RunOutput, EngineError> {
        let max_active = self.opts.max_active.max(1);
        let mut info = RunInfo {
            model: self.opts.model.clone(),
            url: self.transport.config().url.clone(),
            seed: self.opts.seed,
            started_unix: 0.0,
            max_active,
            workload: source.info(),
            config: self.config,
        };
        let synth = Arc::new(Synth {
            seed: self.opts.seed,
            tokenizer: self.tokenizer,
            pool: Semaphore::new(self.opts.synth_workers.max(1)),
            texts: blocks::TextCache::default(),
        });
        let mut reporters = self.reporters;

        // Admit the initial trajectories and prepare their first prompts before the
        // clock starts: a plan that cannot be built fails here, with nothing sent.
        let open = self.opts.admission == Admission::OpenLoop;
        let initial_count = if open {
            self.opts.lookahead.max(1)
        } else {
            max_active
        };
        let mut initial = Vec::new();
        let mut exhausted = false;
        while initial.len() < initial_count {
            match source.next_trajectory() {
                Some(Ok(t)) => initial.push(t),
                Some(Err(e)) => return Err(e.into()),
                None => {
                    exhausted = true;
                    break;
                }
            }
        }
        let mut prepared = Vec::with_capacity(initial.len());
        {
            let mut jobs = JoinSet::new();
            for (i, t) in initial.iter_mut().enumerate() {
                let first = t.requests.next();
                let job = first
                    .as_ref()
                    .map(|r| fresh_job(&self.opts, &t.id, i as u64, 0, r))
                    .transpose()?;
                let synth = synth.clone();
                jobs.spawn(async move {
                    (
                        i,
                        first,
                        match job {
                            Some(j) => Some(prepare(&synth, j).await),
                            None => None,
                        },
                    )
                });
            }
            let mut slots: Vec<Option<(Option<PlannedRequest>, Option<Prepared>)>> =
                (0..initial.len()).map(|_| None).collect();
            while let Some(r) = jobs.join_next().await {
                let (i, first, p) = r.map_err(|e| EngineError::Internal(e.to_string()))?;
                slots[i] = Some((first, p.transpose()?));
            }
            prepared.extend(slots.into_iter().flatten());
        }

        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        info.started_unix = started_unix;
        for r in &mut reporters {
            r.on_start(&info)?;
        }
        // The benchmark clock starts now.
        let start = Instant::now();
        let shared = Arc::new(Shared {
            opts: self.opts,
            transport: self.transport,
            codec: self.codec,
            routers: self.routers,
            synth,
            cancel: self.cancel,
            start,
            collector: Mutex::new(Collector {
                metrics: Metrics::default(),
                failed: reporters.iter().map(|_| None).collect(),
                reporters,
            }),
        });

        let adm = if open {
            open_loop(
                &shared,
                &mut *source,
                initial.into_iter().zip(prepared).collect(),
                exhausted,
                max_active,
            )
            .await
        } else {
            let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
            let mut next_agent = 0u64;
            let mut max_observed = 0u64;
            for (t, (first, prep)) in initial.into_iter().zip(prepared) {
                let slot = next_agent;
                tasks.spawn(run_trajectory(
                    shared.clone(),
                    next_agent,
                    slot,
                    t,
                    first,
                    prep,
                    None,
                ));
                next_agent += 1;
            }
            max_observed = max_observed.max(tasks.len() as u64);
            let mut fatal: Option<EngineError> = None;
            while let Some(done) = tasks.join_next().await {
                let freed = match done {
                    Ok(Ok(slot)) => Some(slot),
                    Ok(Err(e)) => {
                        fatal.get_or_insert(e);
                        shared.cancel.cancel();
                        None
                    }
                    Err(e) => {
                        fatal.get_or_insert(EngineError::Internal(format!(
                            "a trajectory task failed: {e}"
                        )));
                        shared.cancel.cancel();
                        None
                    }
                };
                if let Some(slot) = freed {
                    if !exhausted && !shared.cancel.is_cancelled() {
                        match source.next_trajectory() {
                            Some(Ok(mut t)) => {
                                // FIFO: ids are handed out in manifest order; the replacement
                                // prepares its first prompt, then inherits the freed slot.
                                let first = t.requests.next();
                                tasks.spawn(run_trajectory(
                                    shared.clone(),
                                    next_agent,
                                    slot,
                                    t,
                                    first,
                                    None,
                                    None,
                                ));
                                next_agent += 1;
                                max_observed = max_observed.max(tasks.len() as u64);
                            }
                            Some(Err(e)) => {
                                fatal.get_or_insert(e.into());
                                shared.cancel.cancel();
                            }
                            None => exhausted = true,
                        }
                    }
                }
            }
            AdmissionStats {
                max_observed,
                fatal,
                ..AdmissionStats::default()
            }
        };
        let AdmissionStats {
            max_observed,
            fatal,
            late,
            lag,
        } = adm;
        let elapsed = start.elapsed();
        // The source may finish its description in the background (a digest).
        info.workload = tokio::task::spawn_blocking(move || source.final_info())
            .await
            .map_err(|e| EngineError::Internal(format!("the workload source failed: {e}")))?;
        let mut guard = shared.collector();
        let c = &mut *guard;
        let mut summary = Summary::from_metrics(&c.metrics, elapsed);
        summary.interrupted = shared.cancel.is_cancelled() && fatal.is_none();
        summary.max_active_observed = max_observed;
        summary.final_drain_seconds =
            (elapsed.as_secs_f64() - summary.last_admitted_seconds).max(0.0);
        summary.late_admissions = late;
        summary.admission_lag = lag.stats();
        summary.max_admission_lag_ms = summary.admission_lag.map_or(0.0, |l| l.max_ms);
        // Every reporter finishes (a failed one too, to flush what it has), so
        // that one reporter's failure loses no other reporter's results.
        let mut reporter_error = None;
        for (r, failed) in c.reporters.iter_mut().zip(&mut c.failed) {
            let finished = r.on_finish(&info, &summary);
            if let Some(e) = failed.take().or(finished.err()) {
                reporter_error.get_or_insert(e);
            }
        }
        match (fatal, reporter_error) {
            (Some(e), _) => Err(e),
            (None, Some(e)) => Err(e.into()),
            (None, None) => Ok(RunOutput { info, summary }),
        }
    }
}

/// What admission observed.
#[derive(Debug, Default)]
struct AdmissionStats {
    max_observed: u64,
    fatal: Option<EngineError>,
    late: u64,
    lag: crate::metrics::Latency,
}

/// Records a finished trajectory task; returns its freed slot.
fn reap(
    done: Result<Result<u64, EngineError>, tokio::task::JoinError>,
    fatal: &mut Option<EngineError>,
    cancel: &CancellationToken,
) -> Option<u64> {
    match done {
        Ok(Ok(slot)) => Some(slot),
        Ok(Err(e)) => {
            fatal.get_or_insert(e);
            cancel.cancel();
            None
        }
        Err(e) => {
            fatal.get_or_insert(EngineError::Internal(format!(
                "a trajectory task failed: {e}"
            )));
            cancel.cancel();
            None
        }
    }
}

type Ready = (Trajectory, (Option<PlannedRequest>, Option<Prepared>));

/// Open-loop admission: each trajectory at `start_after_ms / time_scale` from the
/// clock start, whatever is active; `cap` active at most (a trajectory that waits
/// for a slot is a late admission). First prompts are prepared ahead through a
/// bounded lookahead; the earliest were prepared before the clock started. Routing
/// slots are the lowest free ones, so equal start times are admitted, and slotted,
/// in manifest order.
async fn open_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
    cap: usize,
) -> AdmissionStats {
    type Pending = tokio::task::JoinHandle<Result<Option<Prepared>, EngineError>>;
    enum Prep {
        Done(Option<Prepared>),
        Pending(Pending),
    }
    let scale = sh.opts.time_scale.max(1e-9);
    let offset = |t: &Trajectory| {
        Duration::from_secs_f64(t.start_after_ms.unwrap_or(0) as f64 / 1000.0 / scale)
    };
    let mut queue: std::collections::VecDeque<(Trajectory, Option<PlannedRequest>, Prep)> = ready
        .into_iter()
        .map(|(t, (first, p))| (t, first, Prep::Done(p)))
        .collect();
    let mut stats = AdmissionStats::default();
    let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
    let mut free: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut next_slot = 0u64;
    let mut next_agent = 0u64;
    let lookahead = sh.opts.lookahead.max(1);
    loop {
        // Keep the lookahead full: prepare upcoming first prompts on the pool.
        while !exhausted && queue.len() < lookahead && stats.fatal.is_none() {
            match source.next_trajectory() {
                Some(Ok(mut t)) => {
                    let first = t.requests.next();
                    let job = first
                        .as_ref()
                        .map(|r| fresh_job(&sh.opts, &t.id, next_agent + queue.len() as u64, 0, r));
                    let synth = sh.synth.clone();
                    let handle = tokio::spawn(async move {
                        match job {
                            Some(Ok(j)) => prepare(&synth, j).await.map(Some),
                            Some(Err(e)) => Err(e),
                            None => Ok(None),
                        }
                    });
                    queue.push_back((t, first, Prep::Pending(handle)));
                }
                Some(Err(e)) => {
                    stats.fatal.get_or_insert(e.into());
                    sh.cancel.cancel();
                }
                None => exhausted = true,
            }
        }
        let Some((t, first, prep)) = queue.pop_front() else {
            break;
        };
        if sh.cancel.is_cancelled() {
            break;
        }
        let scheduled = offset(&t);
        let due = tokio::time::Instant::from_std(sh.start + scheduled);
        // Wait for the offset, reaping finished trajectories meanwhile.
        loop {
            tokio::select! {
                biased;
                () = sh.cancel.cancelled() => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) {
                        free.insert(slot);
                    }
                }
                () = tokio::time::sleep_until(due) => break,
            }
        }
        // The cap delays admission.
        let mut late = false;
        while tasks.len() >= cap && !sh.cancel.is_cancelled() {
            late = true;
            tokio::select! {
                () = sh.cancel.cancelled() => {}
                Some(done) = tasks.join_next() => {
                    if let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) {
                        free.insert(slot);
                    }
                }
            }
        }
        if sh.cancel.is_cancelled() {
            break;
        }
        let prepared = match prep {
            Prep::Done(p) => p,
            Prep::Pending(h) => match h.await {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    stats.fatal.get_or_insert(e);
                    sh.cancel.cancel();
                    break;
                }
                Err(e) => {
                    stats
                        .fatal
                        .get_or_insert(EngineError::Internal(e.to_string()));
                    sh.cancel.cancel();
                    break;
                }
            },
        };
        let now = sh.start.elapsed();
        stats.lag.record(now.saturating_sub(scheduled));
        stats.late += u64::from(late);
        let slot = free.pop_first().unwrap_or_else(|| {
            next_slot += 1;
            next_slot - 1
        });
        tasks.spawn(run_trajectory(
            sh.clone(),
            next_agent,
            slot,
            t,
            first,
            prepared,
            Some(scheduled),
        ));
        next_agent += 1;
        stats.max_observed = stats.max_observed.max(tasks.len() as u64);
    }
    // Abandon what was never admitted (after Ctrl+C or a fatal error).
    for (_, _, p) in queue {
        if let Prep::Pending(h) = p {
            h.abort();
        }
    }
    while let Some(done) = tasks.join_next().await {
        reap(done, &mut stats.fatal, &sh.cancel);
    }
    stats
}

fn content_tokens(
    opts: &EngineOptions,
    id: &str,
    index: u64,
    req: &PlannedRequest,
) -> Result<Option<u32>, EngineError> {
    let Some(prompt) = req.prompt_tokens else {
        return Ok(None);
    };
    let overhead = req.overhead_tokens.unwrap_or(opts.initial_overhead_tokens);
    if prompt <= overhead {
        return Err(EngineError::Plan(format!(
            "trajectory {id}, request {index}: prompt_tokens {prompt} leaves no content after {overhead} overhead tokens"
        )));
    }
    Ok(Some(prompt - overhead))
}

fn fresh_job(
    opts: &EngineOptions,
    id: &Arc<str>,
    agent_id: u64,
    index: u64,
    req: &PlannedRequest,
) -> Result<PrepJob, EngineError> {
    if let Some(body) = &req.body {
        return Ok(PrepJob {
            trajectory_id: id.clone(),
            agent_id,
            request_index: index,
            kind: PrepKind::Raw(body.clone()),
        });
    }
    if let Some(bs) = &req.blocks {
        return Ok(PrepJob {
            trajectory_id: id.clone(),
            agent_id,
            request_index: index,
            kind: PrepKind::Blocks {
                fresh: true,
                blocks: bs.clone(),
                needs: blocks::needs(bs, true, &BlockState::default()),
            },
        });
    }
    let kind = match content_tokens(opts, id, index, req)? {
        None => PrepKind::Fixed,
        Some(tokens) => PrepKind::Fresh {
            tokens,
            prefix: req.shared_prefix.map(|p| (p.key, p.tokens)),
        },
    };
    Ok(PrepJob {
        trajectory_id: id.clone(),
        agent_id,
        request_index: index,
        kind,
    })
}

fn next_job(
    opts: &EngineOptions,
    id: &Arc<str>,
    agent_id: u64,
    index: u64,
    prev: &PlannedRequest,
    next: &PlannedRequest,
    state: &BlockState,
) -> Result<PrepJob, EngineError> {
    if next.body.is_some() {
        return fresh_job(opts, id, agent_id, index, next);
    }
    if let (Some(bs), false) = (&next.blocks, next.reset_before) {
        return Ok(PrepJob {
            trajectory_id: id.clone(),
            agent_id,
            request_index: index,
            kind: PrepKind::Blocks {
                fresh: false,
                blocks: bs.clone(),
                needs: blocks::needs(bs, false, state),
            },
        });
    }
    if next.reset_before {
        return fresh_job(opts, id, agent_id, index, next);
    }
    let tokens = match next.environment_tokens {
        Some(t) => t,
        None => {
            let (Some(p0), Some(p1)) = (prev.prompt_tokens, next.prompt_tokens) else {
                return Err(EngineError::Plan(format!(
                    "trajectory {id}, request {index}: field environment_tokens or prompt_tokens is needed to continue a conversation"
                )));
            };
            let out = prev.output_tokens.unwrap_or(0);
            let growth = i64::from(p1)
                - i64::from(p0)
                - i64::from(out)
                - i64::from(opts.turn_overhead_tokens);
            u32::try_from(growth).map_err(|_| {
                EngineError::Plan(format!(
                    "trajectory {id}, request {index}: field prompt_tokens: environment growth {p1} - {p0} - {out} - {} is negative; mark the request reset_before",
                    opts.turn_overhead_tokens
                ))
            })?
        }
    };
    Ok(PrepJob {
        trajectory_id: id.clone(),
        agent_id,
        request_index: index,
        kind: PrepKind::Append { tokens },
    })
}

async fn prepare(sh: &Arc<Synth>, job: PrepJob) -> Result<Prepared, EngineError> {
    let seed = sh.seed;
    match &job.kind {
        PrepKind::Fixed => return Ok(Prepared::Fresh(Arc::from(DEFAULT_PROMPT))),
        PrepKind::Raw(body) => return Ok(Prepared::Raw(body.clone())),
        _ => {}
    }
    let Some(tok) = sh.tokenizer.clone() else {
        return Err(EngineError::Plan(format!(
            "trajectory {}: a prompt-length target needs a tokenizer (--tokenizer-model)",
            job.trajectory_id
        )));
    };
    let _permit = sh
        .pool
        .acquire()
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?;
    let synth = sh.clone();
    tokio::task::spawn_blocking(move || synthesise(&tok, seed, &synth.texts, &job))
        .await
        .map_err(|e| EngineError::Internal(e.to_string()))?
}

fn synthesise(
    tok: &TokenizerHandle,
    seed: u64,
    texts: &blocks::TextCache,
    job: &PrepJob,
) -> Result<Prepared, EngineError> {
    let ctx = || {
        format!(
            "trajectory {}, request {}",
            job.trajectory_id, job.request_index
        )
    };
    match job.kind {
        PrepKind::Fixed => Ok(Prepared::Fresh(Arc::from(DEFAULT_PROMPT))),
        PrepKind::Raw(ref body) => Ok(Prepared::Raw(body.clone())),
        PrepKind::Fresh { tokens, prefix } => {
            let key = rng::derive(seed, &[PURPOSE_PROMPT, job.agent_id, job.request_index]);
            let text = tok.exact_text_with_prefix(
                prefix.map(|(k, n)| (k, n as usize)),
                key,
                tokens as usize,
                &ctx,
            )?;
            Ok(Prepared::Fresh(text.into()))
        }
        PrepKind::Append { tokens } => {
            let key = rng::derive(seed, &[PURPOSE_ENV, job.agent_id, job.request_index]);
            let ctx = || {
                format!(
                    "trajectory {}, request {}, environment",
                    job.trajectory_id, job.request_index
                )
            };
            Ok(Prepared::Append(
                tok.exact_text(key, tokens as usize, &ctx)?.into(),
            ))
        }
        PrepKind::Blocks {
            fresh,
            ref blocks,
            ref needs,
        } => {
            let ctx = |b: usize| {
                format!(
                    "trajectory {}, request {}, block {b}",
                    job.trajectory_id, job.request_index
                )
            };
            let made = blocks::synthesise(tok, needs, texts, &ctx)?;
            Ok(Prepared::Blocks {
                fresh,
                blocks: blocks.clone(),
                made,
            })
        }
    }
}

/// Applies a prepared turn to the conversation; returns the live blocks that fell
/// back to their seed.
fn apply(
    conv: &mut Conversation,
    prepared: Prepared,
    last_reply: Option<Reply>,
    agent_id: u64,
    index: u64,
    state: &mut BlockState,
) -> u32 {
    match prepared {
        Prepared::Blocks {
            fresh,
            blocks,
            made,
        } => {
            return blocks::apply(conv, &blocks, fresh, made, last_reply.as_ref(), state);
        }
        Prepared::Fresh(text) => {
            conv.clear();
            conv.messages.push(Message::new(Role::User, text));
        }
        Prepared::Raw(_) => conv.clear(),
        Prepared::Append(env) => {
            // The model's reply is opaque state: keep content and reasoning, drop any
            // tool calls it made, and attach one valid synthetic call of ours.
            let reply = last_reply.unwrap_or_default();
            let call_id: Arc<str> = format!("call_{agent_id}_{index}").into();
            let mut assistant = Message::new(Role::Assistant, reply.content);
            assistant.reasoning = reply.reasoning.map(Into::into);
            assistant.tool_calls.push(ToolCall {
                id: call_id.clone(),
                name: Arc::from("environment"),
                arguments: Arc::from("{}"),
            });
            conv.messages.push(assistant);
            let mut tool = Message::new(Role::Tool, env);
            tool.tool_call_id = Some(call_id);
            conv.messages.push(tool);
        }
    }
    0
}

fn stream_timing(m: &mut Metrics, reply: &Reply, completion_tokens: u64) {
    let Some(first) = reply.first_token_at else {
        return;
    };
    let Some(&(last, _)) = reply.chunks.last() else {
        return;
    };
    if completion_tokens >= 2 && last > first {
        let tpot = (last - first) / (completion_tokens - 1) as u32;
        m.tpot.record(tpot);
    }
    // Inter-token latency per token: each chunk's gap is shared by the tokens it
    // carried. Servers rarely say how many that is, so the completion tokens are
    // allocated to chunks by content bytes (largest remainder, at least one each):
    // exact when every chunk is one token, and never more samples than tokens.
    let tokens = allocate_tokens(&reply.chunks, completion_tokens);
    for (w, k) in reply.chunks.windows(2).zip(tokens.iter().skip(1)) {
        if *k == 0 {
            continue;
        }
        let gap = w[1].0.saturating_duration_since(w[0].0);
        m.itl.record_n(gap.as_micros() as u64 / k, *k);
    }
}

/// Splits `total` tokens over chunks in proportion to their byte lengths.
fn allocate_tokens(chunks: &[(Instant, u32)], total: u64) -> Vec<u64> {
    let n = chunks.len() as u64;
    if n == 0 {
        return Vec::new();
    }
    if total <= n {
        // One token per chunk until the tokens run out.
        return (0..n).map(|i| u64::from(i < total)).collect();
    }
    let bytes: u64 = chunks.iter().map(|c| u64::from(c.1)).sum::<u64>().max(1);
    let spare = total - n; // every chunk carries at least one
    let mut out: Vec<u64> = Vec::with_capacity(chunks.len());
    let mut rema: Vec<(u64, usize)> = Vec::with_capacity(chunks.len());
    let mut given = 0;
    for (i, c) in chunks.iter().enumerate() {
        let exact = u128::from(spare) * u128::from(c.1);
        let whole = (exact / u128::from(bytes)) as u64;
        rema.push(((exact % u128::from(bytes)) as u64, i));
        out.push(1 + whole);
        given += whole;
    }
    rema.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in rema.into_iter().take((spare - given) as usize) {
        out[i] += 1;
    }
    out
}

async fn sleep_scaled(sh: &Shared, ms: u64) -> Duration {
    if ms == 0 {
        return Duration::ZERO;
    }
    let d = Duration::from_secs_f64(ms as f64 / 1000.0 / sh.opts.time_scale.max(1e-9));
    tokio::select! {
        () = sh.cancel.cancelled() => Duration::ZERO,
        () = tokio::time::sleep(d) => d,
    }
}

/// Runs one trajectory; returns its routing slot when it ends.
async fn run_trajectory(
    sh: Arc<Shared>,
    agent_id: u64,
    slot: u64,
    traj: Trajectory,
    first: Option<PlannedRequest>,
    first_prepared: Option<Prepared>,
    scheduled: Option<Duration>,
) -> Result<u64, EngineError> {
    let id = traj.id.clone();
    let mut reqs = traj.requests;
    let eligible = scheduled.unwrap_or_else(|| sh.start.elapsed());
    let mut completed = true;
    let mut run_started = None;
    if let Some(first) = first {
        let prepared = match first_prepared {
            Some(p) => p,
            None => prepare(&sh.synth, fresh_job(&sh.opts, &id, agent_id, 0, &first)?).await?,
        };
        run_started = Some(sh.start.elapsed());
        sh.collector().metrics.trajectories_started += 1;
        completed = drive(&sh, agent_id, slot, &id, first, prepared, &mut reqs).await?;
    }
    let admitted = run_started.unwrap_or(eligible);
    let finished = sh.start.elapsed();
    let rec = TrajectoryRecord {
        agent_id,
        trajectory_id: id.to_string(),
        routing_slot: slot,
        dp_rank: sh.routers.iter().find_map(|r| r.dp_rank(slot)),
        scheduled_at_seconds: eligible.as_secs_f64(),
        admitted_at_seconds: admitted.as_secs_f64(),
        queue_wait_seconds: admitted.saturating_sub(eligible).as_secs_f64(),
        finished_at_seconds: finished.as_secs_f64(),
        runtime_seconds: finished.saturating_sub(admitted).as_secs_f64(),
        completed: completed && !sh.cancel.is_cancelled(),
    };
    let mut c = sh.collector();
    c.metrics.record_trajectory(&rec);
    c.notify(|r| r.on_trajectory(&rec));
    Ok(slot)
}

/// The turn loop. Returns whether every request succeeded.
async fn drive(
    sh: &Arc<Shared>,
    agent_id: u64,
    slot: u64,
    id: &Arc<str>,
    first: PlannedRequest,
    first_prepared: Prepared,
    reqs: &mut crate::plan::RequestIter,
) -> Result<bool, EngineError> {
    let mut conv = Conversation::default();
    let mut cur = first;
    let mut prepared = first_prepared;
    let mut last_reply: Option<Reply> = None;
    let mut prev_prompt: Option<u64> = None;
    let mut all_ok = true;
    let mut index = 0u64;
    let mut state = BlockState::default();
    loop {
        if sh.cancel.is_cancelled() {
            return Ok(false);
        }
        let fresh = matches!(
            prepared,
            Prepared::Fresh(_) | Prepared::Raw(_) | Prepared::Blocks { fresh: true, .. }
        );
        let raw = match &prepared {
            Prepared::Raw(b) => Some(b.clone()),
            _ => None,
        };
        if fresh {
            prev_prompt = None;
        }
        let fallbacks = apply(
            &mut conv,
            prepared,
            last_reply.take(),
            agent_id,
            index,
            &mut state,
        );

        let ctx = RouteContext {
            seed: sh.opts.seed,
            agent_id,
            routing_slot: slot,
            trajectory_id: id,
            request_index: index,
        };
        let mut extras = RouteExtras::default();
        for r in &sh.routers {
            r.decorate(&ctx, &mut extras)?;
        }
        let stream = cur.stream.unwrap_or(sh.opts.stream);
        let mut body = BodyWriter::default();
        sh.codec
            .encode(
                &EncodeRequest {
                    model: &sh.opts.model,
                    conversation: &conv,
                    output: cur.output_bounds(),
                    stream,
                    extra_fields: &extras.body_fields,
                    raw_body: raw.as_ref().map(|b| &*b.0),
                },
                &mut body,
            )
            .map_err(|e| {
                EngineError::Internal(format!(
                    "trajectory {id}, request {index}: cannot encode: {e}"
                ))
            })?;
        let payload = body.finish();

        // Prepare the next turn's text while this request is in flight.
        let next = reqs.next();
        let next_prep = match &next {
            Some(n) => {
                let job = next_job(&sh.opts, id, agent_id, index + 1, &cur, n, &state)?;
                let synth = sh.synth.clone();
                Some(tokio::spawn(async move { prepare(&synth, job).await }))
            }
            None => None,
        };

        let Outcome {
            result,
            retries,
            sent_at,
            done_at,
        } = sh
            .transport
            .send(&payload, &extras.headers, stream, &*sh.codec, &sh.cancel)
            .await;
        let latency = done_at.saturating_duration_since(sent_at);
        let ok = result.is_ok();
        {
            let mut c = sh.collector();
            let c = &mut *c;
            let (usage, ttft, failure, estimated) = match &result {
                Ok(reply) => {
                    let est = match (prev_prompt, reply.usage) {
                        (Some(p), Some(u)) => p.min(u.prompt_tokens),
                        _ => 0,
                    };
                    if let Some(u) = reply.usage {
                        stream_timing(&mut c.metrics, reply, u.completion_tokens);
                    }
                    (
                        reply.usage,
                        reply
                            .first_token_at
                            .map(|t| t.saturating_duration_since(sent_at)),
                        None,
                        est,
                    )
                }
                Err((kind, msg)) => (None, None, Some((*kind, msg.as_str())), 0),
            };
            let rec = RequestRecord {
                agent_id,
                trajectory_id: id,
                request_index: index,
                planned_prompt_tokens: cur.prompt_tokens,
                retries,
                latency,
                usage,
                estimated_cached_tokens: estimated,
                live_block_fallbacks: fallbacks,
                ttft,
                failure,
            };
            c.metrics.record_request(&rec);
            c.notify(|r| r.on_request(&rec));
        }
        match result {
            Ok(reply) => {
                prev_prompt = reply.usage.map(|u| u.prompt_tokens);
                last_reply = Some(reply);
                // Tool / think time follows a successful response, the last one
                // included: an agent's end-to-end time runs through its final delay.
                let slept = sleep_scaled(sh, cur.delay_after_ms).await;
                if !slept.is_zero() {
                    sh.collector().metrics.delay_total += slept;
                }
            }
            Err(_) => {
                all_ok = false;
                prev_prompt = None;
            }
        }
        let Some(n) = next else { return Ok(all_ok) };
        let Some(handle) = next_prep else {
            return Ok(all_ok);
        };
        if !ok && !n.reset_before {
            // The conversation cannot continue without the reply.
            handle.abort();
            return Ok(false);
        }
        prepared = handle
            .await
            .map_err(|e| EngineError::Internal(e.to_string()))??;
        cur = n;
        index += 1;
    }
}

/// One line of a dry run.
#[derive(Debug, Serialize)]
struct DryRunLine<'a> {
    agent_id: u64,
    trajectory_id: &'a str,
    request_index: u64,
    #[serde(flatten)]
    request: &'a PlannedRequest,
}

/// Totals of a dry run.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DryRunStats {
    /// Trajectories planned.
    pub trajectories: u64,
    /// Requests planned.
    pub requests: u64,
    /// Sum of planned prompt tokens.
    pub prompt_tokens: u64,
    /// Sum of planned output tokens.
    pub output_tokens: u64,
}

/// Prints the plan, one JSON line per request, sending nothing.
pub fn dry_run(
    source: &mut dyn WorkloadSource,
    out: &mut dyn Write,
) -> Result<DryRunStats, EngineError> {
    let mut stats = DryRunStats::default();
    let io = |e: std::io::Error| EngineError::Internal(format!("cannot write the plan: {e}"));
    let mut agent_id = 0;
    while let Some(t) = source.next_trajectory() {
        let t = t?;
        stats.trajectories += 1;
        for (i, r) in t.requests.enumerate() {
            stats.requests += 1;
            stats.prompt_tokens += u64::from(r.prompt_tokens.unwrap_or(0));
            stats.output_tokens += u64::from(r.output_tokens.unwrap_or(0));
            let line = DryRunLine {
                agent_id,
                trajectory_id: &t.id,
                request_index: i as u64,
                request: &r,
            };
            serde_json::to_writer(&mut *out, &line)
                .map_err(|e| EngineError::Internal(e.to_string()))?;
            out.write_all(b"\n").map_err(io)?;
        }
        agent_id += 1;
    }
    out.flush().map_err(io)?;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::allocate_tokens;
    use std::time::Instant;

    #[test]
    fn token_allocation_is_exact() {
        let t = Instant::now();
        let chunks: Vec<(Instant, u32)> = [5u32, 9, 4, 12, 6].iter().map(|b| (t, *b)).collect();
        assert_eq!(allocate_tokens(&chunks, 5), vec![1; 5]);
        assert_eq!(allocate_tokens(&chunks, 3), vec![1, 1, 1, 0, 0]);
        let a = allocate_tokens(&chunks, 23);
        assert_eq!(a.iter().sum::<u64>(), 23);
        assert!(a.iter().all(|k| *k >= 1));
        assert!(a[3] >= a[2], "more bytes, at least as many tokens: {a:?}");
    }
}
