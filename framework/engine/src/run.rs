//! The engine: a run of a workload against a target, with its plugins and
//! options, from the first prompts made before the clock to the summary.
//!
//! [`Engine::run`] prepares the first prompts, starts the reporters and the
//! clock, hands the trajectories to admission, which runs each through the
//! turn driver, and sums up. This module is also where the engine's public
//! types are named: the options, the errors, the summary and the dry run.

use crate::admission::load;
use crate::admission::{AdmissionStats, closed_loop, open_loop, request_loop};
pub use crate::dry_run::{DryRunStats, dry_run};
use crate::measurement::metrics::{Metrics, Summary};
pub use crate::measurement::summary::{CLIENT_CPU_VERDICT, Tally, summarize};
pub use crate::options::{Admission, DEFAULT_PROMPT, EngineError, EngineOptions};
use crate::scrape::scrape_loop;
use crate::state::{Collector, Shared};
use crate::synthesis::blocks;
use crate::synthesis::synth::{Prepared, Synth, first_job, prepare};
use crate::tokens::TokenizerHandle;
use crate::transport::Transport;
use batchbench_contract::plan::PlannedRequest;
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
    transports: Vec<Transport>,
    gpu: Option<crate::telemetry::gpu::Nvml>,
    codec: Arc<dyn RequestCodec>,
    routers: Vec<Arc<dyn Router>>,
    /// With a model map: a routing policy per pool of endpoints.
    pool_routers: Vec<Arc<dyn Router>>,
    reporters: Vec<Box<dyn Reporter>>,
    tokenizer: Option<Arc<TokenizerHandle>>,
    /// A run of several models: each model's own tokenizer (`None`: the run's).
    model_tokenizers: Vec<Option<Arc<TokenizerHandle>>>,
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
            transports: vec![transport],
            gpu: None,
            codec,
            routers: Vec::new(),
            pool_routers: Vec::new(),
            reporters: Vec::new(),
            tokenizer: None,
            model_tokenizers: Vec::new(),
            cancel: CancellationToken::new(),
            config: serde_json::Value::Null,
            spec: None,
        }
    }

    /// Adds an endpoint of a fleet: the run's first is the transport it was
    /// made with, and a router that picks endpoints
    /// ([`Router::chooses_endpoint`]) sends each request to one of them.
    pub fn endpoint(mut self, t: Transport) -> Self {
        self.transports.push(t);
        self
    }

    /// Samples the GPUs beside the client with the server's metrics, at
    /// their interval (`--gpu-telemetry nvml`), as the URL `nvml`.
    pub fn gpu_telemetry(mut self, nvml: crate::telemetry::gpu::Nvml) -> Self {
        self.gpu = Some(nvml);
        self
    }

    /// Adds a router; routers decorate in the order added.
    pub fn router(mut self, r: Arc<dyn Router>) -> Self {
        self.routers.push(r);
        self
    }

    /// Against a fleet whose model map makes pools of endpoints
    /// ([`crate::models::Models::pool_count`]): a routing policy for each
    /// pool, in pool order, each an instance of the run's own (they decorate
    /// nothing; the run's routers do). Without them the run's one policy
    /// picks in every pool.
    pub fn pool_routers(mut self, rs: Vec<Arc<dyn Router>>) -> Self {
        self.pool_routers = rs;
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

    /// A run of several models ([`EngineOptions::models`]): each model's
    /// tokenizer, in the mix's order (`None`: the run's own).
    pub fn model_tokenizers(mut self, t: Vec<Option<Arc<TokenizerHandle>>>) -> Self {
        self.model_tokenizers = t;
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
        // What goes back of earlier reasoning: the run's choice, else the
        // API's own default, as the codec says.
        let reasoning_history = self
            .codec
            .reasoning_history(self.opts.reasoning_history)
            .map_err(|e| EngineError::Plan(format!("reasoning history: {e}")))?;
        let mut info = RunInfo {
            model: self.opts.model.clone(),
            url: batchbench_contract::record::redact_url(&self.transports[0].config().url),
            seed: self.opts.seed,
            started_unix: 0.0,
            max_active,
            workload: source.info(),
            config: self.config,
            spec: self.spec,
            start_skew_ms: None,
            merged_shards: Vec::new(),
        };
        let models = per_model_tokenizers(
            self.opts.models.as_ref().map_or(0, |m| m.names.len()),
            self.model_tokenizers,
            self.tokenizer.as_ref(),
        );
        let synth = Arc::new(Synth {
            seed: self.opts.seed,
            models,
            tokenizer: self.tokenizer,
            pool: Semaphore::new(self.opts.synth_workers.max(1)),
            texts: blocks::TextCache::default(),
            images: self.opts.images,
            image_maker: std::sync::OnceLock::new(),
            audio: self.opts.audio.clone(),
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
        // start replaces it below (`on_clock_start`).
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
            .then(crate::schedule::pacer::Pacer::start)
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
        }
        // The benchmark clock starts now; its Unix time is taken with it, for
        // the reporters that turn offsets into wall-clock times.
        let start = Instant::now();
        info.started_unix = unix_now();
        if let Some(at) = self.opts.start_at_ms {
            info.start_skew_ms = Some((info.started_unix - at as f64 / 1000.0) * 1000.0);
        }
        for r in &mut reporters {
            r.on_clock_start(info.started_unix);
        }
        let cpu_at_start = crate::telemetry::cpu::process_cpu();
        let busy_at_start = crate::telemetry::probe::runtime_busy();
        let cancel = self.cancel.child_token();
        let inflight = self
            .opts
            .load
            .max_concurrency
            .map(|n| Semaphore::new(usize::try_from(n).unwrap_or(Semaphore::MAX_PERMITS)));
        let block_tokens = self.opts.cache_block_tokens;
        let warmup_auto = self.opts.load.warmup == Some(batchbench_contract::spec::Warmup::Auto);
        let fleet = self.transports.len() > 1;
        let chooser = self.routers.iter().find(|r| r.chooses_endpoint()).cloned();
        if fleet && chooser.is_none() {
            return Err(EngineError::Plan(
                "several endpoints need a router that picks one per request (a routing policy)"
                    .into(),
            ));
        }
        let endpoints: Vec<crate::measurement::endpoints::EndpointTally> = if fleet {
            self.transports.iter().map(|_| Default::default()).collect()
        } else {
            Vec::new()
        };
        let load_duration = self
            .opts
            .load
            .duration_secs
            .map(std::time::Duration::from_secs_f64);
        let structured =
            crate::measurement::structured::StructuredCounts::of(self.opts.structured.as_deref());
        let models = self.opts.models.as_ref().map_or_else(Vec::new, |m| {
            m.names
                .iter()
                .map(|n| crate::measurement::endpoints::ModelTally::named(n.clone()))
                .collect()
        });
        let shared = Arc::new(Shared {
            opts: self.opts,
            in_flight: self
                .transports
                .iter()
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            transports: self.transports,
            chooser,
            pool_choosers: self.pool_routers,
            gpu: self.gpu,
            codec: self.codec,
            routers: self.routers,
            synth,
            cancel,
            interrupt: self.cancel,
            deadline: CancellationToken::new(),
            deadline_at: load_duration.map(|d| start + d),
            busy_at_start,
            inflight,
            pacer,
            sent: std::sync::atomic::AtomicU64::new(0),
            start,
            estimator: Mutex::default(),
            reasoning_history,
            converged: std::sync::OnceLock::new(),
            collector: Mutex::new(Collector {
                metrics: Metrics {
                    cache_block_tokens: block_tokens,
                    structured,
                    endpoints,
                    models,
                    ..Metrics::default()
                },
                failed: reporters.iter().map(|_| None).collect(),
                reporters,
                steady: warmup_auto.then(crate::measurement::steady::Steady::default),
            }),
        });

        let scraper = (!shared.opts.server_metrics.is_empty() || shared.gpu.is_some()).then(|| {
            let stop = CancellationToken::new();
            (
                tokio::spawn(scrape_loop(shared.clone(), stop.clone())),
                stop,
            )
        });
        // Live views only for the reporters that read them (the last one, at
        // the end, goes to all).
        let wants_live = shared.collector().reporters.iter().any(|r| r.wants_live());
        let live = wants_live.then(|| {
            let stop = CancellationToken::new();
            (
                tokio::spawn(crate::live::live_loop(shared.clone(), stop.clone())),
                stop,
            )
        });
        // The runtime's scheduling delay, sampled through the run.
        let probe = {
            let stop = CancellationToken::new();
            let sh = shared.clone();
            let task = tokio::spawn(crate::telemetry::probe::probe(stop.clone(), move |d| {
                sh.collector().metrics.scheduling_delay.record(d);
            }));
            (task, stop)
        };
        let timer = load::deadline_timer(&shared);
        let watch = load::convergence_watch(&shared);
        let load = shared.opts.load.clone();
        let adm = if load.is_open() && load.release == Release::Requests {
            request_loop(
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
        for t in [timer, watch].into_iter().flatten() {
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
        let client_runtime = busy_at_start.and_then(|(threads, before)| {
            let (_, after) = crate::telemetry::probe::runtime_busy()?;
            Some((threads, after.saturating_sub(before)))
        });
        probe.1.cancel();
        let _ = probe.0.await;
        // The steady state's cut, from the whole run's windows, and the held
        // records replayed, before anything below can fail.
        shared.collector().settle(&load, &shared.opts.slo, None);
        // The live views' last look: the run as it ends.
        if let Some((task, stop)) = live {
            stop.cancel();
            let _ = task.await;
        }
        let last = crate::live::stats(&shared);
        shared.collector().notify(|r| r.on_live(&last));
        // The scraper takes one last scrape, then hands over its tally.
        let server_metrics = match scraper {
            Some((task, stop)) => {
                stop.cancel();
                task.await
                    .ok()
                    .map(crate::telemetry::server_metrics::Tally::report)
            }
            None => None,
        };
        let client_cpu = cpu_at_start
            .and_then(|c| Some(crate::telemetry::cpu::process_cpu()?.saturating_sub(c)));
        // The source may finish its description in the background (a digest).
        info.workload = tokio::task::spawn_blocking(move || source.final_info())
            .await
            .map_err(|e| EngineError::Internal(format!("the workload source failed: {e}")))?;
        let mut guard = shared.collector();
        let c = &mut *guard;
        // Reporters that send records elsewhere finish doing so first: the
        // summary counts what they delivered and what they dropped. Each
        // waits within a bound of its own (seconds, for a collector that is
        // down), holding this thread: nothing of the run is left to run.
        let mut deliveries = Vec::new();
        for (r, failed) in c.reporters.iter_mut().zip(&mut c.failed) {
            if failed.is_none() {
                match r.deliver() {
                    Ok(d) => deliveries.extend(d),
                    Err(e) => *failed = Some(e),
                }
            }
        }
        let mut summary = summarize(&Tally {
            metrics: &c.metrics,
            elapsed,
            load: &load,
            slo: &shared.opts.slo,
            max_failure_rate: shared.opts.max_failure_rate,
            fail_if_client_bound: shared.opts.fail_if_client_bound,
            arrivals,
            client_cpu,
            client_runtime,
            interrupted: shared.interrupt.is_cancelled() && fatal.is_none(),
            max_active_observed: max_observed,
            late_admissions: late,
            admission_lag: &lag,
            converged: shared.converged.get(),
        });
        summary.prompt_synthesis = shared
            .synth
            .tokenizer
            .as_ref()
            .map(|t| t.synthesis_path().as_str().to_owned());
        summary.server_metrics = server_metrics;
        summary.deliveries = deliveries;
        if let Some(e) = summary
            .server_metrics
            .as_mut()
            .and_then(|m| m.energy.as_mut())
        {
            e.per_work(
                summary.successful_requests,
                summary.total_prompt_tokens,
                summary.total_completion_tokens,
            );
        }
        if shared.transports.len() > 1 {
            summary.routing.clone_from(&shared.opts.routing);
            let secs = elapsed.as_secs_f64();
            summary.endpoints = c
                .metrics
                .endpoints
                .iter()
                .zip(&shared.transports)
                .map(|(e, t)| {
                    e.summary(
                        batchbench_contract::record::redact_url(&t.config().url),
                        secs,
                    )
                })
                .collect();
        }
        summary.models = c.metrics.model_summaries(elapsed.as_secs_f64());
        if let (Some(l), Some(s)) = (summary.load.as_mut(), &c.steady) {
            l.steady = s.report(c.metrics.warmup_requests);
        }
        summary.server_closes_connections = shared
            .transport()
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

/// Each of `n` models' tokenizer and block texts: its own, else the run's
/// (none without a mix, or without any tokenizer at all). Models that share
/// a tokenizer share the texts made with it.
fn per_model_tokenizers(
    n: usize,
    own: Vec<Option<Arc<TokenizerHandle>>>,
    run: Option<&Arc<TokenizerHandle>>,
) -> Vec<(Arc<TokenizerHandle>, Arc<blocks::TextCache>)> {
    let mut out: Vec<(Arc<TokenizerHandle>, Arc<blocks::TextCache>)> = Vec::with_capacity(n);
    for i in 0..n {
        let Some(tok) = own.get(i).cloned().flatten().or_else(|| run.cloned()) else {
            return Vec::new();
        };
        let texts = out
            .iter()
            .find(|(t, _)| Arc::ptr_eq(t, &tok))
            .map_or_else(Default::default, |(_, c)| c.clone());
        out.push((tok, texts));
    }
    out
}
