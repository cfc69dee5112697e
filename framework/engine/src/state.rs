//! The state of a run that its tasks share: the plugins, the transport, the
//! synthesiser, the cancellation tokens, the load's limits, and the collector
//! that metrics and reporters are fed through.

use crate::measurement::metrics::Metrics;
use crate::options::EngineOptions;
use crate::synthesis::synth::Synth;
use crate::transport::Transport;
use batchbench_contract::plugin::{
    EndpointContext, PluginError, Reporter, RequestCodec, RequestRecord, RouteContext, Router,
};
use batchbench_contract::slo::SloBound;
use batchbench_contract::spec::LoadSpec;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub(crate) struct Collector {
    pub(crate) metrics: Metrics,
    pub(crate) reporters: Vec<Box<dyn Reporter>>,
    /// The first failure of each reporter's per-event hooks: a failed reporter
    /// gets no further events, and its error ends the run (exit 1) once every
    /// reporter has finished.
    pub(crate) failed: Vec<Option<PluginError>>,
    /// With `warmup = "auto"`: the search for the steady state, which holds
    /// the records until it knows the cut.
    pub(crate) steady: Option<crate::measurement::steady::Steady>,
}

impl Collector {
    /// Folds in one request's outcome and hands it to the reporters. With
    /// `warmup = "auto"` it is held until the cut is known (`itl`: its reply's
    /// inter-token gaps, which a held record adds when replayed); a run that
    /// holds too much decides the cut now (`now`, from the clock start).
    pub(crate) fn request(
        &mut self,
        mut rec: RequestRecord<'_>,
        itl: impl FnOnce() -> crate::measurement::metrics::StreamGaps,
        load: &LoadSpec,
        slo: &[SloBound],
        now: std::time::Duration,
    ) {
        if let Some(s) = self.steady.as_mut() {
            s.observe(&rec);
            if s.holding() {
                let full = s.hold(&rec, itl());
                self.notify(|r| r.on_held(&rec));
                if full {
                    self.settle(load, slo, Some(now));
                }
                return;
            }
        }
        self.metrics.record_outcome(&mut rec, load, slo);
        self.notify(|r| r.on_request(&rec));
    }

    /// Decides the steady state's cut if it is not yet known (`early`: the run
    /// goes on), and replays the held records.
    pub(crate) fn settle(
        &mut self,
        load: &LoadSpec,
        slo: &[SloBound],
        early: Option<std::time::Duration>,
    ) {
        let Some(mut steady) = self.steady.take() else {
            return;
        };
        let mut metrics = std::mem::take(&mut self.metrics);
        crate::measurement::steady::settle(&mut steady, &mut metrics, load, slo, early, |rec| {
            self.notify(|r| r.on_request(rec));
        });
        self.metrics = metrics;
        self.steady = Some(steady);
    }

    /// Calls `hook` on every reporter that has not failed.
    pub(crate) fn notify(
        &mut self,
        mut hook: impl FnMut(&mut dyn Reporter) -> Result<(), PluginError>,
    ) {
        for (r, failed) in self.reporters.iter_mut().zip(&mut self.failed) {
            if failed.is_none() {
                if let Err(e) = hook(r.as_mut()) {
                    *failed = Some(e);
                }
            }
        }
    }
}

pub(crate) struct Shared {
    pub(crate) opts: EngineOptions,
    /// One per endpoint, in the order of the run's hosts.
    pub(crate) transports: Vec<Transport>,
    /// This client's requests in flight per endpoint (a fleet's only).
    pub(crate) in_flight: Vec<std::sync::atomic::AtomicU32>,
    /// The router that picks endpoints, against a fleet.
    pub(crate) chooser: Option<Arc<dyn Router>>,
    /// With a model map: one routing policy per pool of endpoints (the
    /// chooser's kind), each with its own state, as a gateway's balancers.
    pub(crate) pool_choosers: Vec<Arc<dyn Router>>,
    /// The GPUs beside the client, sampled with the server's metrics.
    pub(crate) gpu: Option<crate::telemetry::gpu::Nvml>,
    pub(crate) codec: Arc<dyn RequestCodec>,
    pub(crate) routers: Vec<Arc<dyn Router>>,
    pub(crate) synth: Arc<Synth>,
    /// Stops the run: the host's cancellation (Ctrl+C), a fatal error, or the
    /// deadline with `at_deadline = cancel`.
    pub(crate) cancel: CancellationToken,
    /// The host's own cancellation: the run was interrupted.
    pub(crate) interrupt: CancellationToken,
    /// Fires at the end of a duration run: nothing new is sent.
    pub(crate) deadline: CancellationToken,
    /// When the deadline is due: every send checks the clock against it, so
    /// that a client too busy to run the deadline's timer in time still
    /// sends nothing after it.
    pub(crate) deadline_at: Option<Instant>,
    /// The runtime's worker threads and their busy time at the clock start
    /// (see [`crate::telemetry::probe::runtime_busy`]).
    pub(crate) busy_at_start: Option<(usize, std::time::Duration)>,
    /// Requests in flight at most (`max_concurrency`).
    pub(crate) inflight: Option<Semaphore>,
    /// Precise send times for arrivals (open loop only).
    pub(crate) pacer: Option<crate::schedule::pacer::Pacer>,
    /// Requests sent so far (warmup counts the first ones).
    pub(crate) sent: std::sync::atomic::AtomicU64,
    pub(crate) start: Instant,
    pub(crate) collector: Mutex<Collector>,
    /// When a converging run's figures were sure enough (measured requests,
    /// time from the clock start).
    pub(crate) converged: std::sync::OnceLock<crate::measurement::converge::Converged>,
    /// The prefix-cache estimates, fed in send order.
    pub(crate) estimator: Mutex<crate::synthesis::prefix::Estimator>,
    /// What goes back of a reply's reasoning in the turns after it.
    pub(crate) reasoning_history: batchbench_contract::spec::ReasoningHistory,
}

impl Shared {
    /// Whether the run is past its deadline: the deadline fired, or its time
    /// has come on the clock (then it fires now).
    pub(crate) fn past_deadline(&self) -> bool {
        if self.deadline.is_cancelled() {
            return true;
        }
        let due = self.deadline_at.is_some_and(|d| Instant::now() >= d);
        if due {
            self.end_at_deadline();
        }
        due
    }

    /// Ends the run as its deadline does: nothing new is sent, and with
    /// `at_deadline = cancel` requests in flight are cancelled.
    pub(crate) fn end_at_deadline(&self) {
        self.deadline.cancel();
        if self.opts.load.at_deadline == batchbench_contract::spec::AtDeadline::Cancel {
            self.cancel.cancel();
        }
    }

    pub(crate) fn collector(&self) -> std::sync::MutexGuard<'_, Collector> {
        self.collector
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The first endpoint's transport (the only one against one server): its
    /// client settings are every endpoint's.
    pub(crate) fn transport(&self) -> &Transport {
        &self.transports[0]
    }

    /// The endpoint the request of `route` goes to: the routing policy's
    /// pick against a fleet (from this client's load per endpoint and the
    /// prompt's block hashes), endpoint 0 otherwise. A request of a `model`
    /// that a fleet's map gives to some endpoints alone goes to one of them:
    /// the policy picks among those (as a gateway's pool per model).
    pub(crate) fn choose_endpoint(
        &self,
        route: RouteContext<'_>,
        block_hashes: &[u64],
        model: Option<usize>,
    ) -> Result<Option<usize>, crate::options::EngineError> {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(mut r) = self.chooser.as_ref() else {
            return Ok(None);
        };
        let pool = model.and_then(|m| self.opts.models.as_deref()?.pool(m));
        if let Some(own) = pool.and_then(|(p, _)| self.pool_choosers.get(p)) {
            r = own;
        }
        let pool = pool.map(|(_, endpoints)| endpoints);
        let count = |e: usize| self.in_flight[e].load(Relaxed);
        // The counts as they stand, on the stack for a fleet of up to 32.
        let n = pool.map_or(self.in_flight.len(), <[usize]>::len);
        let (mut small, mut large) = ([0u32; 32], Vec::new());
        let in_flight: &[u32] = if n <= small.len() {
            for (i, c) in small[..n].iter_mut().enumerate() {
                *c = count(pool.map_or(i, |p| p[i]));
            }
            &small[..n]
        } else {
            large.extend((0..n).map(|i| count(pool.map_or(i, |p| p[i]))));
            &large
        };
        let i = r.choose_endpoint(&EndpointContext {
            route,
            in_flight,
            block_hashes,
            block_tokens: self.opts.cache_block_tokens,
        })?;
        if i >= n {
            return Err(PluginError::Config {
                plugin: self.opts.routing.clone().unwrap_or_else(|| "router".into()),
                message: format!("chose endpoint {i}, but was offered {n} (0 to {})", n - 1),
            }
            .into());
        }
        let i = pool.map_or(i, |p| p[i]);
        Ok(Some(i))
    }
}
