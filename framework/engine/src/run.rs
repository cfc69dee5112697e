//! The engine: a run of a workload against a target, with its plugins and
//! options, from the first prompts made before the clock to the summary.
//!
//! [`Engine::run`] prepares the first prompts, starts the reporters and the
//! clock, hands the trajectories to admission, which runs each through the
//! turn driver, and sums up. This module is also where the engine's public
//! types are named: the options, the errors, the summary and the dry run.

mod requests;

use crate::blocks;
pub use crate::dry_run::{DryRunStats, dry_run};
use crate::load;
use crate::metrics::{Metrics, Summary};
pub use crate::options::{Admission, DEFAULT_PROMPT, EngineError, EngineOptions};
use crate::scrape::scrape_loop;
use crate::state::{Collector, Shared};
pub use crate::summary::{CLIENT_CPU_VERDICT, Tally, summarize};
use crate::synth::{Prepared, Synth, first_job, job, prepare};
use crate::tokens::TokenizerHandle;
use crate::transport::Transport;
use crate::turn::{Turn, drive, run_trajectory};
use batchbench_contract::plan::{PlannedRequest, Trajectory};
use batchbench_contract::plugin::{Reporter, RequestCodec, Router, WorkloadSource};
pub use batchbench_contract::record::RunInfo;
use batchbench_contract::spec::Release;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The result of a run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Run facts.
    pub info: RunInfo,
    /// The summary (partial when interrupted).
    pub summary: Summary,
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
    spec: Option<batchbench_contract::spec::RunSpec>,
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
            spec: None,
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

    /// The run's flat configuration view, recorded in reports.
    pub fn config(mut self, c: serde_json::Value) -> Self {
        self.config = c;
        self
    }

    /// What the run record says the run was: its flat configuration view and
    /// its complete spec.
    pub fn record(
        mut self,
        view: serde_json::Value,
        spec: batchbench_contract::spec::RunSpec,
    ) -> Self {
        self.config = view;
        self.spec = Some(spec);
        self
    }

    /// Runs the workload to completion or cancellation.
    pub async fn run(self, mut source: Box<dyn WorkloadSource>) -> Result<RunOutput, EngineError> {
        let max_active = self.opts.max_active.max(1);
        let mut info = RunInfo {
            model: self.opts.model.clone(),
            url: batchbench_contract::record::redact_url(&self.transport.config().url),
            seed: self.opts.seed,
            started_unix: 0.0,
            max_active,
            workload: source.info(),
            config: self.config,
            spec: self.spec,
            start_skew_ms: None,
            merged_shards: Vec::new(),
        };
        let synth = Arc::new(Synth {
            seed: self.opts.seed,
            tokenizer: self.tokenizer,
            pool: Semaphore::new(self.opts.synth_workers.max(1)),
            texts: blocks::TextCache::default(),
            images: self.opts.images,
            image_maker: std::sync::OnceLock::new(),
        });
        let mut reporters = self.reporters;

        // Admit the initial trajectories and prepare their first prompts before the
        // clock starts: a plan that cannot be built fails here, with nothing sent.
        let open = self.opts.admission == Admission::OpenLoop
            || (self.opts.load.is_open() && self.opts.load.release == Release::Sessions);
        let initial_count = if open || self.opts.load.is_open() {
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
                    .map(|r| first_job(&self.opts, &t.id, self.opts.shard.global(i as u64), r))
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

        // With a start time, reporters see it as the start; the clock's real
        // start replaces it below.
        info.started_unix = match self.opts.start_at_ms {
            Some(at) => at as f64 / 1000.0,
            None => unix_now(),
        };
        // Every reporter starts (a failing one does not keep the others from
        // saying what is wrong); any failure stops the run before the clock.
        let mut start_error = None;
        for r in &mut reporters {
            if let Err(e) = r.on_start(&info) {
                match start_error {
                    None => start_error = Some(e),
                    Some(_) => eprintln!("error: {e}"),
                }
            }
        }
        if let Some(e) = start_error {
            return Err(EngineError::Start(e));
        }
        // Precise send times for arrivals, its thread started before the clock.
        let pacer = (open || self.opts.load.is_open())
            .then(crate::pacer::Pacer::start)
            .and_then(Result::ok);
        if let Some(at) = self.opts.start_at_ms {
            let started = wait_for_start(at, &self.cancel).await;
            let skew_ms = (started - at as f64 / 1000.0) * 1000.0;
            if skew_ms > 1000.0 {
                eprintln!(
                    "warning: the start time (--start-at) had passed {:.1} s before the run was ready: it starts now, and records the skew",
                    skew_ms / 1000.0
                );
            }
            info.start_skew_ms = Some(skew_ms);
            info.started_unix = started;
        }
        // The benchmark clock starts now.
        let start = Instant::now();
        let cpu_at_start = crate::cpu::process_cpu();
        let cancel = self.cancel.child_token();
        let inflight = self
            .opts
            .load
            .max_concurrency
            .map(|n| Semaphore::new(usize::try_from(n).unwrap_or(Semaphore::MAX_PERMITS)));
        let block_tokens = self.opts.cache_block_tokens;
        let shared = Arc::new(Shared {
            opts: self.opts,
            transport: self.transport,
            codec: self.codec,
            routers: self.routers,
            synth,
            cancel,
            interrupt: self.cancel,
            deadline: CancellationToken::new(),
            inflight,
            pacer,
            sent: std::sync::atomic::AtomicU64::new(0),
            start,
            estimator: Mutex::default(),
            collector: Mutex::new(Collector {
                metrics: Metrics {
                    cache_block_tokens: block_tokens,
                    ..Metrics::default()
                },
                failed: reporters.iter().map(|_| None).collect(),
                reporters,
            }),
        });

        let scraper = (!shared.opts.server_metrics.is_empty()).then(|| {
            let stop = CancellationToken::new();
            (
                tokio::spawn(scrape_loop(shared.clone(), stop.clone())),
                stop,
            )
        });
        let timer = load::deadline_timer(&shared);
        let load = shared.opts.load.clone();
        let adm = if load.is_open() && load.release == Release::Requests {
            requests::request_loop(
                &shared,
                &mut *source,
                initial.into_iter().zip(prepared).collect(),
                exhausted,
            )
            .await
        } else if open {
            open_loop(
                &shared,
                &mut *source,
                initial.into_iter().zip(prepared).collect(),
                exhausted,
                max_active,
            )
            .await
        } else {
            closed_loop(
                &shared,
                &mut *source,
                initial.into_iter().zip(prepared).collect(),
                exhausted,
            )
            .await
        };
        if let Some(t) = timer {
            t.abort();
        }
        let AdmissionStats {
            max_observed,
            fatal,
            late,
            lag,
            arrivals,
        } = adm;
        let elapsed = start.elapsed();
        // The scraper takes one last scrape, then hands over its tally.
        let server_metrics = match scraper {
            Some((task, stop)) => {
                stop.cancel();
                task.await.ok().map(crate::server_metrics::Tally::report)
            }
            None => None,
        };
        let client_cpu =
            cpu_at_start.and_then(|c| Some(crate::cpu::process_cpu()?.saturating_sub(c)));
        // The source may finish its description in the background (a digest).
        info.workload = tokio::task::spawn_blocking(move || source.final_info())
            .await
            .map_err(|e| EngineError::Internal(format!("the workload source failed: {e}")))?;
        let mut guard = shared.collector();
        let c = &mut *guard;
        let mut summary = summarize(&Tally {
            metrics: &c.metrics,
            elapsed,
            load: &load,
            slo: &shared.opts.slo,
            max_failure_rate: shared.opts.max_failure_rate,
            arrivals,
            client_cpu,
            interrupted: shared.interrupt.is_cancelled() && fatal.is_none(),
            max_active_observed: max_observed,
            late_admissions: late,
            admission_lag: &lag,
        });
        summary.prompt_synthesis = shared
            .synth
            .tokenizer
            .as_ref()
            .map(|t| t.synthesis_path().as_str().to_owned());
        summary.server_metrics = server_metrics;
        summary.server_closes_connections = shared
            .transport
            .connection_counts()
            .is_some_and(|c| c.closes_after_every_response());
        // Every reporter finishes (a failed one too, to flush what it has), so
        // that one reporter's failure loses no other reporter's results.
        let mut reporter_error = None;
        let mut histograms = c.metrics.histograms();
        if !lag.is_empty() {
            histograms
                .families
                .insert("admission_lag".to_owned(), lag.buckets());
        }
        for (r, failed) in c.reporters.iter_mut().zip(&mut c.failed) {
            let finished = match failed {
                Some(_) => r.on_finish(&info, &summary),
                None => r
                    .on_histograms(&histograms)
                    .and_then(|()| r.on_finish(&info, &summary)),
            };
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

/// Unix time now, seconds.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until Unix millisecond `at` (or a cancel): on the runtime's timer to
/// within a few milliseconds, then spinning on the wall clock, so that shards
/// on machines with synchronised clocks start within a millisecond of one
/// another. Returns the Unix time it woke at.
async fn wait_for_start(at: i64, cancel: &CancellationToken) -> f64 {
    let target = at as f64 / 1000.0;
    let early = target - unix_now() - 0.005;
    if early > 0.0 {
        tokio::select! {
            () = cancel.cancelled() => return unix_now(),
            () = tokio::time::sleep(Duration::from_secs_f64(early)) => {}
        }
    }
    loop {
        let now = unix_now();
        if now >= target || cancel.is_cancelled() {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// What admission observed.
#[derive(Debug, Default)]
struct AdmissionStats {
    max_observed: u64,
    fatal: Option<EngineError>,
    late: u64,
    lag: crate::metrics::Latency,
    /// Arrivals released by a rate schedule.
    arrivals: u64,
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

/// A first prompt made before the clock, or being made on the pool.
enum Prep {
    Done(Option<Prepared>),
    Pending(tokio::task::JoinHandle<Result<Option<Prepared>, EngineError>>),
}

impl Prep {
    /// The prompt, once made; `None` when making it failed, which is then the
    /// run's fatal error and stops the run.
    async fn ready(
        self,
        fatal: &mut Option<EngineError>,
        cancel: &CancellationToken,
    ) -> Option<Option<Prepared>> {
        let failed = match self {
            Self::Done(p) => return Some(p),
            Self::Pending(h) => match h.await {
                Ok(Ok(p)) => return Some(p),
                Ok(Err(e)) => e,
                Err(e) => EngineError::Internal(e.to_string()),
            },
        };
        fatal.get_or_insert(failed);
        cancel.cancel();
        None
    }
}

/// Closed-loop admission: the initial trajectories take slots `0..n`; when one
/// ends, the next trajectory of the source (FIFO, in source order) prepares its
/// first prompt and inherits the freed slot. Start offsets are ignored.
async fn closed_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
) -> AdmissionStats {
    let mut stats = AdmissionStats::default();
    let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
    let mut next_agent = 0u64;
    let shard = sh.opts.shard;
    for (t, (first, prep)) in ready {
        tasks.spawn(run_trajectory(
            sh.clone(),
            shard.global(next_agent),
            shard.global(next_agent),
            t,
            first,
            prep,
            None,
        ));
        next_agent += 1;
    }
    stats.max_observed = tasks.len() as u64;
    while let Some(done) = tasks.join_next().await {
        let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) else {
            continue;
        };
        if exhausted || sh.cancel.is_cancelled() || sh.deadline.is_cancelled() {
            continue;
        }
        match source.next_trajectory() {
            Some(Ok(mut t)) => {
                let first = t.requests.next();
                tasks.spawn(run_trajectory(
                    sh.clone(),
                    shard.global(next_agent),
                    slot,
                    t,
                    first,
                    None,
                    None,
                ));
                next_agent += 1;
                stats.max_observed = stats.max_observed.max(tasks.len() as u64);
            }
            Some(Err(e)) => {
                stats.fatal.get_or_insert(e.into());
                sh.cancel.cancel();
            }
            None => exhausted = true,
        }
    }
    stats
}

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
    let scale = sh.opts.time_scale.max(1e-9);
    // A session rate replaces recorded start offsets with arrivals.
    let mut schedule =
        sh.opts.load.is_open().then(|| {
            crate::arrivals::Schedule::sharded(&sh.opts.load, sh.opts.seed, sh.opts.shard)
        });
    let mut due_of = |t: &Trajectory| match schedule.as_mut() {
        Some(s) => s.next_due(),
        None => Some(Duration::from_secs_f64(
            t.start_after_ms.unwrap_or(0) as f64 / 1000.0 / scale,
        )),
    };
    let mut queue: std::collections::VecDeque<(
        Trajectory,
        Option<PlannedRequest>,
        Prep,
        Duration,
    )> = std::collections::VecDeque::new();
    for (t, (first, p)) in ready {
        match due_of(&t) {
            Some(d) => queue.push_back((t, first, Prep::Done(p), d)),
            None => exhausted = true,
        }
    }
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
                    let Some(due) = due_of(&t) else {
                        exhausted = true;
                        break;
                    };
                    let first = t.requests.next();
                    let job = first.as_ref().map(|r| {
                        let agent = sh.opts.shard.global(next_agent + queue.len() as u64);
                        first_job(&sh.opts, &t.id, agent, r)
                    });
                    let synth = sh.synth.clone();
                    let handle = tokio::spawn(async move {
                        match job {
                            Some(Ok(j)) => prepare(&synth, j).await.map(Some),
                            Some(Err(e)) => Err(e),
                            None => Ok(None),
                        }
                    });
                    queue.push_back((t, first, Prep::Pending(handle), due));
                }
                Some(Err(e)) => {
                    stats.fatal.get_or_insert(e.into());
                    sh.cancel.cancel();
                }
                None => exhausted = true,
            }
        }
        let Some((t, first, prep, scheduled)) = queue.pop_front() else {
            break;
        };
        if sh.cancel.is_cancelled() || sh.deadline.is_cancelled() {
            break;
        }
        // Wait until shortly before the offset, reaping finished trajectories
        // meanwhile: the first request waits for its exact time itself, with
        // its body made, just before it is sent.
        let release = load::release_time(sh, scheduled);
        loop {
            tokio::select! {
                biased;
                () = sh.cancel.cancelled() => break,
                () = sh.deadline.cancelled() => break,
                Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                    if let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) {
                        free.insert(slot);
                    }
                }
                () = tokio::time::sleep_until(release.into()) => break,
            }
        }
        if sh.deadline.is_cancelled() {
            break;
        }
        // The cap delays admission; the wait is the session's queue, not lag.
        // Released early, a trajectory is late only if the cap held it past its
        // offset.
        let mut held = false;
        while tasks.len() >= cap && !sh.cancel.is_cancelled() && !sh.deadline.is_cancelled() {
            held = true;
            tokio::select! {
                () = sh.cancel.cancelled() => {}
                () = sh.deadline.cancelled() => {}
                Some(done) = tasks.join_next() => {
                    if let Some(slot) = reap(done, &mut stats.fatal, &sh.cancel) {
                        free.insert(slot);
                    }
                }
            }
        }
        // Held by the cap: everything since it was due was the cap's queue (a
        // session behind another held one waits its turn behind it too).
        let cap_wait = if held {
            sh.start.elapsed().saturating_sub(scheduled)
        } else {
            Duration::ZERO
        };
        let late = !cap_wait.is_zero();
        if sh.cancel.is_cancelled() || sh.deadline.is_cancelled() {
            break;
        }
        let Some(prepared) = prep.ready(&mut stats.fatal, &sh.cancel).await else {
            break;
        };
        let now = sh.start.elapsed();
        stats.lag.record(now.saturating_sub(scheduled));
        stats.late += u64::from(late);
        stats.arrivals += 1;
        let slot = free.pop_first().unwrap_or_else(|| {
            next_slot += 1;
            sh.opts.shard.global(next_slot - 1)
        });
        tasks.spawn(run_trajectory(
            sh.clone(),
            sh.opts.shard.global(next_agent),
            slot,
            t,
            first,
            prepared,
            Some((scheduled, cap_wait)),
        ));
        next_agent += 1;
        stats.max_observed = stats.max_observed.max(tasks.len() as u64);
    }
    // Abandon what was never admitted (after Ctrl+C, a fatal error or the deadline).
    for (_, _, p, _) in queue {
        if let Prep::Pending(h) = p {
            h.abort();
        }
    }
    while let Some(done) = tasks.join_next().await {
        reap(done, &mut stats.fatal, &sh.cancel);
    }
    stats
}

#[cfg(test)]
mod tests {
    //! Admission against a loopback server that answers every request after a
    //! fixed delay: which trajectory gets which slot, when, and what is counted.

    use super::*;
    use crate::transport::TargetConfig;
    use batchbench_contract::plugin::{
        BodyWriter, CodecError, EncodeRequest, PluginError, Reply, StreamDecoder, TrajectoryRecord,
        Usage,
    };
    use tokio::io::AsyncWriteExt;

    /// Serves `HTTP/1.1 200` with an empty JSON object after `delay`, on
    /// keep-alive connections; returns the URL.
    async fn server(delay: Duration) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let url = format!(
            "http://{}/",
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = l.accept().await {
                let _ = sock.set_nodelay(true);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        if crate::test_http::read_request(&mut sock, &mut buf)
                            .await
                            .is_none()
                        {
                            return;
                        }
                        tokio::time::sleep(delay).await;
                        let body = b"{}";
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if sock.write_all(head.as_bytes()).await.is_err()
                            || sock.write_all(body).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        url
    }

    /// Writes `{}` and reads every response as one token of usage.
    struct Echo;

    impl RequestCodec for Echo {
        fn encode(&self, _: &EncodeRequest<'_>, out: &mut BodyWriter) -> Result<(), CodecError> {
            out.write(b"{}");
            Ok(())
        }
        fn decode(&self, _: &[u8]) -> Result<Reply, CodecError> {
            Ok(Reply {
                usage: Some(Usage {
                    prompt_tokens: 1,
                    completion_tokens: 1,
                    cached_tokens: None,
                    reasoning_tokens: None,
                    items: None,
                }),
                ..Reply::default()
            })
        }
        fn stream_decoder(&self) -> Box<dyn StreamDecoder> {
            unreachable!("these tests do not stream")
        }
    }

    /// Trajectories of one fixed-prompt request each, at the given offsets.
    struct Source(std::vec::IntoIter<Option<u64>>, u64);

    impl WorkloadSource for Source {
        fn info(&self) -> batchbench_contract::plugin::WorkloadInfo {
            batchbench_contract::plugin::WorkloadInfo::default()
        }
        fn next_trajectory(&mut self) -> Option<Result<Trajectory, PluginError>> {
            let at = self.0.next()?;
            self.1 += 1;
            let mut t =
                Trajectory::from_vec(format!("t{}", self.1 - 1), vec![PlannedRequest::default()]);
            t.start_after_ms = at;
            Some(Ok(t))
        }
        fn needs_tokenizer(&self) -> bool {
            false
        }
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<TrajectoryRecord>>>);

    impl Reporter for Seen {
        fn on_trajectory(&mut self, rec: &TrajectoryRecord) -> Result<(), PluginError> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(rec.clone());
            Ok(())
        }
    }

    async fn run(
        offsets: Vec<Option<u64>>,
        admission: Admission,
        max_active: usize,
        delay_ms: u64,
    ) -> (Summary, Vec<TrajectoryRecord>) {
        let url = server(Duration::from_millis(delay_ms)).await;
        let transport = Transport::new(TargetConfig {
            url,
            api_key: None,
            api_key_header: None,
            timeout: Duration::from_secs(10),
            max_retries: 0,
            retry_delay: Duration::ZERO,
            headers: Vec::new(),
            pool_size: 8,
            verbose: false,
            tls: Default::default(),
            max_response_bytes: crate::transport::MAX_RESPONSE_BYTES,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let seen = Seen::default();
        let opts = EngineOptions {
            max_active,
            admission,
            ..EngineOptions::default()
        };
        let out = Engine::new(opts, transport, Arc::new(Echo))
            .reporter(Box::new(seen.clone()))
            .run(Box::new(Source(offsets.into_iter(), 0)))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut recs = seen
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        recs.sort_by_key(|r| r.agent_id);
        (out.summary, recs)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn closed_loop_fills_slots_in_source_order_and_reuses_freed_ones() {
        let (s, recs) = run(vec![None; 5], Admission::ClosedLoop, 2, 30).await;
        assert_eq!(s.successful_requests, 5);
        assert_eq!(s.max_active_observed, 2);
        assert_eq!(
            s.late_admissions, 0,
            "closed loop has no schedule to be late for"
        );
        // Agent ids follow source order; the first two take slots 0 and 1 and
        // every later one inherits a freed slot.
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.agent_id, i as u64);
            assert_eq!(r.trajectory_id, format!("t{i}"));
            assert!(r.routing_slot < 2, "{r:?}");
            assert!(r.completed);
        }
        assert_eq!((recs[0].routing_slot, recs[1].routing_slot), (0, 1));
        assert!(
            recs[2].admitted_at_seconds
                >= recs[0].finished_at_seconds.min(recs[1].finished_at_seconds) - 1e-3
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_loop_admits_on_schedule_and_counts_what_the_cap_delays() {
        // Uncapped: each trajectory at its offset, whatever is active.
        let (s, recs) = run(
            vec![Some(0), Some(40), Some(80)],
            Admission::OpenLoop,
            usize::MAX,
            200,
        )
        .await;
        assert_eq!(s.successful_requests, 3);
        assert_eq!(s.late_admissions, 0);
        assert_eq!(
            s.max_active_observed, 3,
            "all three overlap: each request takes 200 ms"
        );
        for (r, at) in recs.iter().zip([0.0, 0.04, 0.08]) {
            assert!((r.scheduled_at_seconds - at).abs() < 1e-9, "{r:?}");
            assert!(
                r.admitted_at_seconds >= at,
                "never before its offset: {r:?}"
            );
        }
        // Capped at one: the later two wait for the slot and are counted late.
        let (s, recs) = run(
            vec![Some(0), Some(40), Some(80)],
            Admission::OpenLoop,
            1,
            200,
        )
        .await;
        assert_eq!(s.successful_requests, 3);
        assert_eq!(s.late_admissions, 2);
        assert_eq!(s.max_active_observed, 1);
        assert!(recs[1].queue_wait_seconds > 0.1, "{:?}", recs[1]);
        assert!(recs.iter().all(|r| r.routing_slot == 0), "one slot, reused");
    }
}
