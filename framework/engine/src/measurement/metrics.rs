//! Run metrics: counters and HDR histograms (no sampling), and the summary built
//! from them.

use batchbench_contract::plugin::{
    FailureKind, Reply, RequestRecord, SendTiming, TrajectoryRecord, Usage,
};
pub use batchbench_contract::record::{FailureExample, LatencyStats, Summary};
use std::collections::BTreeMap;
use std::time::Duration;

/// How many failure examples the report keeps, beyond the per-kind counts.
pub const FAILURE_EXAMPLES: usize = 20;

pub use crate::measurement::itl::{Gap, StreamGaps, itl_gaps, phase_itl_gaps};
pub use crate::measurement::latency::{HISTOGRAM_BOUNDS, Latency};

/// The counters and distributions of a run, updated as events arrive.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Per endpoint of a fleet (empty against one server).
    pub endpoints: Vec<crate::measurement::endpoints::EndpointTally>,
    /// Per model of a run of several models, by name in the mix's order
    /// (empty for one model).
    pub models: Vec<crate::measurement::endpoints::ModelTally>,
    /// Requests that ended (success or failure).
    pub requests: u64,
    /// Successful requests.
    pub successes: u64,
    /// Retries across all requests.
    pub retries: u64,
    /// Requests sent again at once on a new connection because the kept one
    /// was closed by the server (not retries).
    pub reconnects: u64,
    /// Time failed attempts and their backoff cost, over all requests.
    pub retry_time: Duration,
    /// Latency of successes over all their attempts (recorded when a request
    /// was retried; the others' is their latency).
    pub latency_all_attempts: Latency,
    /// The server's own timings, where it reported them.
    pub server: ServerTimes,
    /// Sum of `usage.prompt_tokens` over successes.
    pub prompt_tokens: u64,
    /// Sum of `usage.completion_tokens` over successes.
    pub completion_tokens: u64,
    /// Sum of server-reported cached tokens.
    pub server_cached_tokens: u64,
    /// Successes whose usage reported cached tokens.
    pub server_cache_reports: u64,
    /// Estimated cached input tokens under perfect prefix caching.
    pub estimated_cached_tokens: u64,
    /// Cached input tokens of a perfect prefix cache shared by all requests.
    pub global_estimated_cached_tokens: u64,
    /// The same with one cache per data-parallel rank (present when routed).
    pub rank_estimated_cached_tokens: Option<u64>,
    /// The block size of those two estimates.
    pub cache_block_tokens: u32,
    /// Live blocks generated from their seed for want of a previous reply.
    pub live_block_fallbacks: u64,
    /// Successes with a planned prompt target and usage.
    pub drift_samples: u64,
    /// Sum of planned prompt tokens over those.
    pub planned_prompt_tokens: u64,
    /// Sum of server-counted prompt tokens over those.
    pub counted_prompt_tokens: u64,
    /// Largest |server - planned| seen.
    pub worst_prompt_drift: i64,
    /// Failures by kind.
    pub failures: BTreeMap<FailureKind, u64>,
    /// The first failures, with context.
    pub failure_examples: Vec<FailureExample>,
    /// Latency of successful requests.
    pub latency: Latency,
    /// Time to first token (streamed successes).
    pub ttft: Latency,
    /// Time to the first reasoning token (streamed successes with reasoning).
    pub ttfrt: Latency,
    /// Time to the first answer token (streamed successes that answered).
    pub ttfat: Latency,
    /// The same from the intended send time (the `ttfat` SLO's).
    pub ttfat_from_intended: Latency,
    /// First reasoning token to first answer token (streamed successes that
    /// reasoned, then answered).
    pub reasoning_duration: Latency,
    /// Time per output token of the reasoning phase: its duration over its
    /// tokens (the first answer token is the reasoning's last token's next).
    pub tpot_reasoning: Latency,
    /// Time per output token of the answer phase: first answer token to the
    /// last token, over the answer's tokens after its first.
    pub tpot_answer: Latency,
    /// Reasoning tokens, from the usage or counted by the client.
    pub reasoning_tokens: u64,
    /// Successes with a reasoning token count (from either source).
    pub reasoning_reports: u64,
    /// Of those, the ones the client counted (no count in the usage).
    pub reasoning_counted: u64,
    /// Completion tokens of the successes with a reasoning count.
    pub reasoning_completion_tokens: u64,
    /// Successes that reasoned and gave no answer.
    pub reasoning_only: u64,
    /// Structured answers checked (runs with a response format).
    pub structured: crate::measurement::structured::StructuredCounts,
    /// Inputs answered (embeddings), where the API counts them.
    pub items: Option<u64>,
    /// Images sent (every request, failures included).
    pub images: u64,
    /// Their encoded bytes.
    pub image_bytes: u64,
    /// Audio seconds sent and the replies' real-time factors.
    pub audio: crate::measurement::audio::AudioTally,
    /// Inter-token latency, one sample per token after the first.
    pub itl: Latency,
    /// The same within the reasoning phase of replies that reasoned and then
    /// answered (gaps between reasoning chunks).
    pub itl_reasoning: Latency,
    /// The same within their answer phase (gaps up to each answer chunk,
    /// the first answer chunk's after the last reasoning chunk included).
    pub itl_answer: Latency,
    /// Time per output token, one sample per streamed request.
    pub tpot: Latency,
    /// End-to-end runtime of completed trajectories.
    pub trajectory_e2e: Latency,
    /// Trajectories admitted.
    pub trajectories_started: u64,
    /// Trajectories that finished every planned request.
    pub trajectories_completed: u64,
    /// Trajectories that ended early.
    pub trajectories_failed: u64,
    /// Total think / tool time slept.
    pub delay_total: Duration,
    /// The latest admission of any trajectory, seconds from the clock start.
    pub last_admitted_seconds: f64,
    /// Latency from the intended send time (schedule) to the last byte.
    pub latency_from_intended: Latency,
    /// Time to first token from the intended send time.
    pub ttft_from_intended: Latency,
    /// Wait for a concurrency slot.
    pub queue_wait: Latency,
    /// The client's own delay from the intended send time (beyond the queue).
    pub send_lag: Latency,
    /// Requests sent more than [`LATE_SEND`] behind their intended time, beyond
    /// the concurrency queue.
    pub late_sends: u64,
    /// Arrivals due before the deadline that were not sent by it (a client
    /// behind its schedule): dropped, never sent late.
    pub dropped_arrivals: u64,
    /// Arrivals dropped after waiting longer than `max_queue_wait_secs` for
    /// a concurrency slot.
    pub dropped_waiting: u64,
    /// How late the runtime ran a probe task that wakes at a fixed period:
    /// the delay any of the client's tasks could see before it ran.
    pub scheduling_delay: Latency,
    /// Warmup requests sent (excluded from everything else).
    pub warmup_requests: u64,
    /// Latency of the successful warmup requests.
    pub warmup_latency: Latency,
    /// Requests cancelled at the end of a duration run (`at_deadline = cancel`).
    pub cut_at_deadline: u64,
    /// The earliest intended send time of a measured (non-warmup) request.
    pub measured_from: Option<Duration>,
    /// Arrivals of the schedule actually sent (warmup included).
    pub arrivals_sent: u64,
    /// The first and the last actual send of an arrival.
    pub arrival_sends: Option<(Duration, Duration)>,
    /// Per stage of a rate schedule, by intended send time.
    pub stages: Vec<StageMetrics>,
    /// Measured successes against the per-request SLO bounds.
    pub slo: batchbench_contract::slo::SloCounts,
}

/// The server's own timings of successful requests against the client's.
#[derive(Debug, Default, Clone)]
pub struct ServerTimes {
    /// Successes whose reply carried the server's timings.
    pub requests: u64,
    /// Prompt processing.
    pub prompt: Latency,
    /// Generation.
    pub predicted: Latency,
    /// The server's whole time on the request.
    pub total: Latency,
    /// The client's latency less the server's time: queueing before the
    /// server's clock starts, and the network.
    pub client_minus_server: Latency,
    /// Time to first token less the server's prompt time.
    pub ttft_minus_prompt: Latency,
    /// Requests whose server time exceeded the client's latency by more than
    /// a millisecond: the server counts time the client cannot see (or reports
    /// it wrongly).
    pub server_over_client: u64,
}

impl ServerTimes {
    fn record(
        &mut self,
        t: &batchbench_contract::plugin::ServerTiming,
        latency: Duration,
        ttft: Option<Duration>,
    ) {
        let us = |ms: f64| (ms.max(0.0) * 1000.0).round() as u64;
        let client_ms = latency.as_secs_f64() * 1000.0;
        self.requests += 1;
        if let Some(p) = t.prompt_ms {
            self.prompt.record_us(us(p));
            if let Some(ttft) = ttft {
                self.ttft_minus_prompt
                    .record_us(us(ttft.as_secs_f64() * 1000.0 - p));
            }
        }
        if let Some(g) = t.predicted_ms {
            self.predicted.record_us(us(g));
        }
        if let Some(total) = t.server_ms() {
            self.total.record_us(us(total));
            self.client_minus_server.record_us(us(client_ms - total));
            if total > client_ms + 1.0 {
                self.server_over_client += 1;
            }
        }
    }

    /// The figures, when any reply carried them.
    pub fn report(&self) -> Option<batchbench_contract::record::ServerTimingReport> {
        (self.requests > 0).then(|| batchbench_contract::record::ServerTimingReport {
            requests: self.requests,
            prompt: self.prompt.stats(),
            predicted: self.predicted.stats(),
            total: self.total.stats(),
            client_minus_server: self.client_minus_server.stats(),
            ttft_minus_prompt: self.ttft_minus_prompt.stats(),
            server_over_client: self.server_over_client,
        })
    }
}

/// A request sent further than this behind its intended time (beyond the
/// concurrency queue) is a late send.
pub const LATE_SEND: Duration = Duration::from_millis(1);

/// The figures of one stage of a rate schedule.
#[derive(Debug, Default, Clone)]
pub struct StageMetrics {
    /// Requests that ended.
    pub requests: u64,
    /// Successes.
    pub successes: u64,
    /// Latency of successes.
    pub latency: Latency,
    /// Latency from the intended send time.
    pub latency_from_intended: Latency,
    /// Time to first token.
    pub ttft: Latency,
}

impl Metrics {
    /// Folds in one request as a run does: in its stage of `load`'s rate
    /// schedule, and against the `slo` bounds (setting `rec.slo_met` when they
    /// judge each request). A merge replays records through it too.
    pub fn record_outcome(
        &mut self,
        rec: &mut RequestRecord<'_>,
        load: &batchbench_contract::spec::LoadSpec,
        slo: &[batchbench_contract::slo::SloBound],
    ) {
        let stage = (!load.stages.is_empty())
            .then(|| crate::schedule::arrivals::Schedule::stage_of(load, rec.timing.intended));
        self.record_request_in(rec, stage);
        if !slo.is_empty() && !rec.timing.warmup && rec.failure.is_none() {
            let behind = rec.timing.behind();
            let figures = batchbench_contract::slo::RequestFigures {
                ttft: rec.ttft.map(|t| t + behind),
                ttfat: rec.ttfat.map(|t| t + behind),
                tpot: rec.tpot,
                itl_max: rec.itl_max,
                e2e: rec.latency + behind,
                queue_wait: rec.timing.queue_wait,
            };
            let tokens = rec.usage.map_or(0, |u| u.completion_tokens);
            let good = self.slo.record(slo, &figures, tokens, rec.model);
            if let Some(m) = self.model_mut(rec.model) {
                m.slo.record(&figures, rec.timing.sent);
            }
            if slo.iter().any(|b| b.percentile.is_none()) {
                rec.slo_met = Some(good);
            }
        }
    }

    /// Each model's share of a run of several models over `secs`, in the
    /// mix's order (empty for one model).
    pub fn model_summaries(&self, secs: f64) -> Vec<batchbench_contract::record::ModelSummary> {
        self.models
            .iter()
            .map(|m| batchbench_contract::record::ModelSummary {
                model: m.name.clone(),
                figures: m.tally.summary(String::new(), secs),
            })
            .collect()
    }

    /// The tally of the model `name` of a mix.
    pub fn model_mut(
        &mut self,
        name: Option<&str>,
    ) -> Option<&mut crate::measurement::endpoints::ModelTally> {
        let name = name?;
        self.models.iter_mut().find(|m| m.name == name)
    }

    /// Folds in one request outcome; `stage` is its stage of a rate schedule.
    pub fn record_request_in(&mut self, rec: &RequestRecord<'_>, stage: Option<usize>) {
        self.record_arrival(&rec.timing);
        if rec.timing.warmup {
            self.warmup_requests += 1;
            if rec.failure.is_none() {
                self.warmup_latency.record(rec.latency);
            }
            return;
        }
        if let Some(i) = stage {
            if self.stages.len() <= i {
                self.stages.resize_with(i + 1, StageMetrics::default);
            }
            let st = &mut self.stages[i];
            st.requests += 1;
            if rec.failure.is_none() {
                st.successes += 1;
                st.latency.record(rec.latency);
                st.latency_from_intended
                    .record(rec.latency + rec.timing.behind());
                if let Some(t) = rec.ttft {
                    st.ttft.record(t);
                }
            }
        }
        self.record_request(rec);
    }

    /// Folds in one request outcome.
    pub fn record_request(&mut self, rec: &RequestRecord<'_>) {
        if rec.timing.warmup {
            self.warmup_requests += 1;
            return;
        }
        self.record_timing(&rec.timing);
        if let Some(e) = rec
            .endpoint
            .and_then(|i| self.endpoints.get_mut(i as usize))
        {
            e.record(rec);
        }
        if let Some(m) = self.model_mut(rec.model) {
            // A model's own perfect cache: caches do not cross models.
            m.tally.record_with(rec, rec.cache_estimate.model);
        }
        self.requests += 1;
        self.retries += u64::from(rec.retries);
        self.reconnects += u64::from(rec.reconnects);
        if rec.retries > 0 {
            self.retry_time += rec.timing.retry_time();
        }
        self.images += rec.images;
        self.image_bytes += rec.image_bytes;
        self.audio.record(rec);
        self.live_block_fallbacks += u64::from(rec.live_block_fallbacks);
        match rec.failure {
            Some((kind, message)) => {
                *self.failures.entry(kind).or_insert(0) += 1;
                if self.failure_examples.len() < FAILURE_EXAMPLES {
                    let mut message = message.to_owned();
                    truncate(&mut message, 300);
                    self.failure_examples.push(FailureExample {
                        agent_id: rec.agent_id,
                        trajectory_id: rec.trajectory_id.to_owned(),
                        request_index: rec.request_index,
                        kind: kind.to_string(),
                        message,
                    });
                }
            }
            None => {
                self.successes += 1;
                let at = rec.timing.sent;
                self.latency.record_at(rec.latency, at);
                let retried = if rec.retries > 0 {
                    rec.timing.retry_time()
                } else {
                    Duration::ZERO
                };
                self.latency_all_attempts.record(rec.latency + retried);
                if let Some(t) = &rec.server_timing {
                    self.server.record(t, rec.latency, rec.ttft);
                }
                let behind = rec.timing.behind();
                self.latency_from_intended
                    .record_at(rec.latency + behind, at);
                if let Some(t) = rec.ttft {
                    self.ttft.record_at(t, at);
                    self.ttft_from_intended.record_at(t + behind, at);
                }
                if let Some(t) = rec.ttfrt {
                    self.ttfrt.record(t);
                    match rec.ttfat {
                        Some(a) => self.reasoning_duration.record(a.saturating_sub(t)),
                        None => self.reasoning_only += 1,
                    }
                    let (reasoning, answer) = phase_tpot(rec);
                    if let Some(d) = reasoning {
                        self.tpot_reasoning.record(d);
                    }
                    if let Some(d) = answer {
                        self.tpot_answer.record(d);
                    }
                }
                if let Some(t) = rec.ttfat {
                    self.ttfat.record_at(t, at);
                    self.ttfat_from_intended.record_at(t + behind, at);
                }
                if let Some(c) = rec.structured {
                    self.structured.record(c, rec.latency);
                }
                if let Some(r) = rec.reasoning_tokens {
                    self.reasoning_tokens += r;
                    self.reasoning_reports += 1;
                    self.reasoning_counted += u64::from(rec.reasoning_counted);
                    self.reasoning_completion_tokens +=
                        rec.usage.map_or(r, |u| u.completion_tokens.max(r));
                }
                self.estimated_cached_tokens += rec.estimated_cached_tokens;
                self.global_estimated_cached_tokens += rec.cache_estimate.global;
                if let Some(r) = rec.cache_estimate.rank {
                    *self.rank_estimated_cached_tokens.get_or_insert(0) += r;
                }
                if let Some(u) = rec.usage {
                    self.prompt_tokens += u.prompt_tokens;
                    self.completion_tokens += u.completion_tokens;
                    if let Some(n) = u.items {
                        *self.items.get_or_insert(0) += n;
                    }
                    if let Some(c) = u.cached_tokens {
                        self.server_cached_tokens += c;
                        self.server_cache_reports += 1;
                    }
                    if let Some(p) = rec.planned_prompt_tokens {
                        self.drift_samples += 1;
                        self.planned_prompt_tokens += u64::from(p);
                        self.counted_prompt_tokens += u.prompt_tokens;
                        let d = u.prompt_tokens as i64 - i64::from(p);
                        if d.abs() > self.worst_prompt_drift.abs() {
                            self.worst_prompt_drift = d;
                        }
                    }
                }
            }
        }
    }

    /// When an arrival of the schedule really went out.
    fn record_arrival(&mut self, t: &SendTiming) {
        if !t.arrival {
            return;
        }
        self.arrivals_sent += 1;
        self.arrival_sends = Some(match self.arrival_sends {
            None => (t.sent, t.sent),
            Some((first, last)) => (first.min(t.sent), last.max(t.sent)),
        });
    }

    /// Arrivals per second as they were really sent: the gaps between the
    /// first and the last actual send (`None` below two arrivals).
    pub fn achieved_arrival_rate(&self) -> Option<f64> {
        let (first, last) = self.arrival_sends?;
        let span = last.saturating_sub(first).as_secs_f64();
        (self.arrivals_sent >= 2 && span > 0.0).then(|| (self.arrivals_sent - 1) as f64 / span)
    }

    /// The schedule figures of a measured request.
    fn record_timing(&mut self, t: &SendTiming) {
        self.queue_wait.record_at(t.queue_wait, t.sent);
        let lag = t.send_lag();
        self.send_lag.record(lag);
        if lag > LATE_SEND {
            self.late_sends += 1;
        }
        self.measured_from = Some(self.measured_from.map_or(t.intended, |m| m.min(t.intended)));
    }

    /// Folds in one trajectory outcome.
    pub fn record_trajectory(&mut self, rec: &TrajectoryRecord) {
        self.last_admitted_seconds = self.last_admitted_seconds.max(rec.admitted_at_seconds);
        if rec.completed {
            self.trajectories_completed += 1;
            self.trajectory_e2e
                .record(Duration::from_secs_f64(rec.runtime_seconds.max(0.0)));
        } else {
            self.trajectories_failed += 1;
        }
    }

    /// The failure count.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// Adds a held reply's inter-token gaps to the figures (and to its
    /// `model`'s, of a mix), in the batch of send time `sent`.
    pub fn record_gaps(&mut self, gaps: &StreamGaps, sent: Duration, model: Option<&str>) {
        if let Some(m) = model.and_then(|n| self.models.iter_mut().find(|m| m.name == n)) {
            for &(us, k) in &gaps.all {
                m.slo.itl.record_n_at(u64::from(us), u64::from(k), sent);
            }
        }
        for (family, held) in [
            (&mut self.itl, &gaps.all),
            (&mut self.itl_reasoning, &gaps.reasoning),
            (&mut self.itl_answer, &gaps.answer),
        ] {
            for &(us, k) in held {
                family.record_n_at(u64::from(us), u64::from(k), sent);
            }
        }
    }

    /// Folds in a streamed reply's timing (when `measured`: a warmup request
    /// is not): time per output token, and inter-token latency per token (not
    /// per chunk), in the batch of its send time `sent`; where the reply
    /// reasoned (`reasoning` tokens of the completion) and then answered, the
    /// inter-token latency of each phase too; in a run of several models, its
    /// `model`'s inter-token latency as well. Returns the reply's time per
    /// output token and its longest per-token gap (the figures of per-request
    /// SLO bounds).
    pub fn record_stream(
        &mut self,
        reply: &Reply,
        completion_tokens: u64,
        reasoning: Option<u64>,
        measured: bool,
        sent: Duration,
        model: Option<&str>,
    ) -> (Option<Duration>, Option<Duration>) {
        let Some(first) = reply.first_token_at else {
            return (None, None);
        };
        let Some(&(last, _)) = reply.chunks.last() else {
            return (None, None);
        };
        let mut tpot = None;
        if completion_tokens >= 2 && last > first {
            let t = (last - first) / (completion_tokens - 1) as u32;
            if measured {
                self.tpot.record_at(t, sent);
            }
            tpot = Some(t);
        }
        let mut itl_max: Option<Duration> = None;
        let mut model_itl = model
            .filter(|_| measured)
            .and_then(|n| self.models.iter_mut().find(|m| m.name == n))
            .map(|m| &mut m.slo.itl);
        for (per_token, k) in merged(itl_gaps(reply, completion_tokens)) {
            if measured {
                self.itl.record_n_at(per_token, k, sent);
            }
            if let Some(l) = model_itl.as_mut() {
                l.record_n_at(per_token, k, sent);
            }
            let d = Duration::from_micros(per_token);
            itl_max = Some(itl_max.map_or(d, |m| m.max(d)));
        }
        if measured {
            if let Some((in_reasoning, in_answer)) =
                phase_itl_gaps(reply, completion_tokens, reasoning)
            {
                for (per_token, k) in merged(in_reasoning) {
                    self.itl_reasoning.record_n_at(per_token, k, sent);
                }
                for (per_token, k) in merged(in_answer) {
                    self.itl_answer.record_n_at(per_token, k, sent);
                }
            }
        }
        (tpot, itl_max)
    }
}

/// Gaps of a reply with each run of equal ones (per token) as one, its
/// tokens summed: recorded once, they fill a histogram as each would (chunks
/// read together have equal gaps, and a sample's record costs its bucket's
/// lookup and its batch's).
fn merged(gaps: impl IntoIterator<Item = (u64, u64)>) -> impl Iterator<Item = (u64, u64)> {
    let mut gaps = gaps.into_iter().peekable();
    std::iter::from_fn(move || {
        let (per_token, mut tokens) = gaps.next()?;
        while let Some((_, k)) = gaps.next_if(|&(p, _)| p == per_token) {
            tokens += k;
        }
        Some((per_token, tokens))
    })
}

/// The time per output token of a reply's two phases, where it reasoned and
/// then answered: the reasoning's (first reasoning token to first answer
/// token, over the reasoning tokens) and the answer's (first answer token to
/// the last token, over the answer tokens after the first). The last token's
/// time is the record's: its first token and its TPOT over the completion.
pub fn phase_tpot(rec: &RequestRecord<'_>) -> (Option<Duration>, Option<Duration>) {
    let (Some(first_reasoning), Some(first_answer), Some(reasoning)) =
        (rec.ttfrt, rec.ttfat, rec.reasoning_tokens)
    else {
        return (None, None);
    };
    let per = |span: Duration, tokens: u64| {
        u32::try_from(tokens)
            .ok()
            .filter(|&n| n > 0)
            .map(|n| span / n)
    };
    let in_reasoning = per(first_answer.saturating_sub(first_reasoning), reasoning);
    let in_answer = match (rec.ttft, rec.tpot, rec.usage) {
        (Some(first), Some(tpot), Some(u)) if u.completion_tokens > reasoning + 1 => {
            let last = first + tpot * u32::try_from(u.completion_tokens - 1).unwrap_or(u32::MAX);
            per(
                last.saturating_sub(first_answer),
                u.completion_tokens - reasoning - 1,
            )
        }
        _ => None,
    };
    (in_reasoning, in_answer)
}

/// A request's contribution to the perfect-prefix-cache estimate: within a
/// trajectory, what a server holds after the previous request (its
/// server-counted prompt tokens, and its reply where the reply goes back as
/// the server generated it) is a prefix of this prompt, capped by this
/// prompt. A fresh conversation (nothing held) contributes nothing.
pub fn estimated_cached_tokens(prev_held: Option<u64>, usage: Option<Usage>) -> u64 {
    match (prev_held, usage) {
        (Some(p), Some(u)) => p.min(u.prompt_tokens),
        _ => 0,
    }
}

/// Truncates `s` to at most `max` bytes on a character boundary, marking the cut.
pub fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
}

/// The histogram family of model `name`'s inter-token latency.
pub fn model_itl_family(name: &str) -> String {
    format!("itl{{model={name}}}")
}

impl Metrics {
    /// Every latency family as sparse buckets, for the results directory.
    pub fn histograms(&self) -> batchbench_contract::results::Histograms {
        let (lowest, highest, significant_figures) = HISTOGRAM_BOUNDS;
        let families = [
            ("latency", &self.latency),
            ("ttft", &self.ttft),
            ("ttfrt", &self.ttfrt),
            ("ttfat", &self.ttfat),
            ("reasoning_duration", &self.reasoning_duration),
            ("tpot_reasoning", &self.tpot_reasoning),
            ("tpot_answer", &self.tpot_answer),
            ("itl", &self.itl),
            ("itl_reasoning", &self.itl_reasoning),
            ("itl_answer", &self.itl_answer),
            ("tpot", &self.tpot),
            ("trajectory_e2e", &self.trajectory_e2e),
            ("latency_from_intended", &self.latency_from_intended),
            ("ttft_from_intended", &self.ttft_from_intended),
            ("queue_wait", &self.queue_wait),
            ("send_lag", &self.send_lag),
            ("scheduling_delay", &self.scheduling_delay),
        ]
        .into_iter()
        .filter(|(_, l)| !l.is_empty())
        .map(|(name, l)| (name.to_owned(), l.buckets()))
        // A mix's inter-token latency per model: a merge judges a bound that
        // names one from them (the records do not hold the gaps).
        .chain(
            self.models
                .iter()
                .filter(|m| !m.slo.itl.is_empty())
                .map(|m| (model_itl_family(&m.name), m.slo.itl.buckets())),
        )
        .collect();
        batchbench_contract::results::Histograms {
            unit: "us".to_owned(),
            lowest,
            highest,
            significant_figures,
            families,
        }
    }
}

impl Metrics {
    /// The run's summary: these metrics over `elapsed`.
    pub fn summary(&self, elapsed: Duration) -> Summary {
        let m = self;
        let secs = elapsed.as_secs_f64();
        let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
        Summary {
            total_duration_seconds: secs,
            total_requests: m.requests,
            successful_requests: m.successes,
            failed_requests: m.failed(),
            retries: m.retries,
            reconnects: m.reconnects,
            retry_seconds: m.retry_time.as_secs_f64(),
            latency_all_attempts: if m.retries > 0 {
                m.latency_all_attempts.stats()
            } else {
                None
            },
            server_timing: m.server.report(),
            failures_by_kind: m
                .failures
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            failures: m.failure_examples.clone(),
            total_prompt_tokens: m.prompt_tokens,
            total_completion_tokens: m.completion_tokens,
            estimated_cached_input_tokens: m.estimated_cached_tokens,
            global_estimated_cached_input_tokens: m.global_estimated_cached_tokens,
            rank_estimated_cached_input_tokens: m.rank_estimated_cached_tokens,
            cache_block_tokens: m.cache_block_tokens,
            live_block_fallbacks: m.live_block_fallbacks,
            server_cached_tokens: (m.server_cache_reports > 0).then_some(m.server_cached_tokens),
            planned_prompt_tokens: m.planned_prompt_tokens,
            counted_prompt_tokens: m.counted_prompt_tokens,
            worst_prompt_drift_tokens: m.worst_prompt_drift,
            requests_per_second: per_s(m.successes),
            prompt_tokens_per_second: per_s(m.prompt_tokens),
            completion_tokens_per_second: per_s(m.completion_tokens),
            latency: m.latency.stats(),
            ttft: m.ttft.stats(),
            ttfrt: m.ttfrt.stats(),
            ttfat: m.ttfat.stats(),
            reasoning_duration: m.reasoning_duration.stats(),
            tpot_reasoning: m.tpot_reasoning.stats(),
            tpot_answer: m.tpot_answer.stats(),
            total_reasoning_tokens: (m.reasoning_reports > 0).then_some(m.reasoning_tokens),
            reasoning_tokens_source: (m.reasoning_reports > 0).then(|| {
                match m.reasoning_counted {
                    0 => "usage",
                    n if n == m.reasoning_reports => "counted",
                    _ => "mixed",
                }
                .to_owned()
            }),
            total_answer_tokens: (m.reasoning_reports > 0).then(|| {
                m.reasoning_completion_tokens
                    .saturating_sub(m.reasoning_tokens)
            }),
            reasoning_only_replies: m.reasoning_only,
            structured: m.structured.summary(),
            total_items: m.items,
            images_sent: (m.images > 0).then_some(m.images),
            total_image_bytes: (m.images > 0).then_some(m.image_bytes),
            audio: m.audio.summary(secs),
            items_per_second: m.items.map(per_s),
            itl: m.itl.stats(),
            itl_reasoning: m.itl_reasoning.stats(),
            itl_answer: m.itl_answer.stats(),
            tpot: m.tpot.stats(),
            trajectory_e2e: m.trajectory_e2e.stats(),
            trajectories_started: m.trajectories_started,
            trajectories_completed: m.trajectories_completed,
            trajectories_failed: m.trajectories_failed,
            total_delay_seconds: m.delay_total.as_secs_f64(),
            last_admitted_seconds: m.last_admitted_seconds,
            ..Summary::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::itl::allocate_tokens;
    use std::time::Instant;

    #[test]
    fn percentiles_are_exact_enough() {
        let mut l = Latency::default();
        for ms in 1..=100u64 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.stats().unwrap_or_default();
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99_ms - 99.0).abs() < 0.1, "{s:?}");
    }

    #[test]
    fn buckets_give_back_the_exact_distribution_and_merge() {
        let mut a = Latency::default();
        let mut b = Latency::default();
        for i in 1..=5000u64 {
            a.record_us(i * i % 977_313 + 1);
            b.record_us(i * 37 % 12_345 + 1);
        }
        let back = Latency::from_buckets(&a.buckets());
        assert_eq!(back.stats(), a.stats());
        let mut both = Latency::from_buckets(a.buckets().iter().chain(&b.buckets()));
        let mut added = a.clone();
        added.add(&b);
        assert_eq!(both.stats(), added.stats());
        both.add(&Latency::default());
        assert_eq!(both.len(), 10_000);
    }

    /// A successful request's record of `latency`, every other figure absent.
    fn blank(latency: Duration) -> RequestRecord<'static> {
        RequestRecord {
            agent_id: 0,
            trajectory_id: "t",
            request_index: 0,
            planned_prompt_tokens: None,
            retries: 0,
            reconnects: 0,
            latency,
            server_timing: None,
            usage: None,
            estimated_cached_tokens: 0,
            cache_estimate: crate::synthesis::prefix::Estimate::default(),
            live_block_fallbacks: 0,
            ttft: None,
            ttfrt: None,
            ttfat: None,
            reasoning_tokens: None,
            reasoning_counted: false,
            images: 0,
            image_bytes: 0,
            audio_seconds: 0.0,
            tpot: None,
            itl_max: None,
            structured: None,
            token_times: Vec::new(),
            slo_met: None,
            failure: None,
            timing: SendTiming::default(),
            endpoint: None,
            model: None,
            ids: Default::default(),
        }
    }

    #[test]
    fn failures_are_counted_and_kept() {
        let mut m = Metrics::default();
        let rec = RequestRecord {
            agent_id: 3,
            request_index: 1,
            retries: 2,
            failure: Some((FailureKind::Http(503), "unavailable")),
            ..blank(Duration::from_millis(5))
        };
        m.record_request(&rec);
        assert_eq!(m.failed(), 1);
        assert_eq!(m.retries, 2);
        assert_eq!(m.failure_examples[0].kind, "http_503");
        assert!(m.latency.is_empty());
    }

    #[test]
    fn each_phase_of_a_reasoning_reply_has_its_own_time_per_output_token() {
        let ms = Duration::from_millis;
        // 64 reasoning tokens 2 ms apart from 10 ms, then 32 answer tokens 4
        // ms apart from 138 ms: the last token at 262 ms.
        let rec = RequestRecord {
            usage: Some(batchbench_contract::plugin::Usage {
                prompt_tokens: 8,
                completion_tokens: 96,
                cached_tokens: None,
                reasoning_tokens: Some(64),
                items: None,
            }),
            ttft: Some(ms(10)),
            ttfrt: Some(ms(10)),
            ttfat: Some(ms(138)),
            reasoning_tokens: Some(64),
            // The whole reply's: 252 ms over 95 gaps.
            tpot: Some(ms(252) / 95),
            ..blank(ms(262))
        };
        let (reasoning, answer) = phase_tpot(&rec);
        assert_eq!(reasoning, Some(ms(2)));
        let answer = answer.unwrap_or_default().as_secs_f64() * 1000.0;
        assert!((answer - 4.0).abs() < 0.01, "{answer}");
        // Without reasoning, no phases.
        let plain = RequestRecord {
            ttfrt: None,
            reasoning_tokens: None,
            ..rec
        };
        assert_eq!(phase_tpot(&plain), (None, None));
    }

    #[test]
    fn the_achieved_rate_counts_actual_sends_of_arrivals_only() {
        let mut m = Metrics::default();
        let ms = Duration::from_millis;
        let mut rec = |sent: Duration, arrival: bool| {
            let rec = RequestRecord {
                endpoint: None,
                model: None,
                agent_id: 0,
                trajectory_id: "t",
                request_index: 0,
                planned_prompt_tokens: None,
                retries: 0,
                reconnects: 0,
                latency: ms(1),
                server_timing: None,
                usage: None,
                estimated_cached_tokens: 0,
                cache_estimate: crate::synthesis::prefix::Estimate::default(),
                live_block_fallbacks: 0,
                ttft: None,
                ttfrt: None,
                ttfat: None,
                reasoning_tokens: None,
                reasoning_counted: false,
                images: 0,
                image_bytes: 0,
                audio_seconds: 0.0,
                tpot: None,
                itl_max: None,
                structured: None,
                token_times: Vec::new(),
                slo_met: None,
                failure: None,
                timing: SendTiming {
                    intended: sent,
                    sent,
                    last_attempt: sent,
                    arrival,
                    ..SendTiming::default()
                },
                ids: Default::default(),
            };
            m.record_request_in(&rec, None);
        };
        // 101 arrivals sent 10 ms apart (100/s) and later turns that are not.
        for i in 0..=100u64 {
            rec(ms(5 + 10 * i), true);
            rec(ms(7 + 10 * i), false);
        }
        let rate = m.achieved_arrival_rate().unwrap_or_default();
        assert!((rate - 100.0).abs() < 1e-9, "{rate}");
        assert_eq!(m.arrivals_sent, 101);
        assert_eq!(Metrics::default().achieved_arrival_rate(), None);
    }

    #[test]
    fn a_retry_is_not_send_lag_but_counts_from_the_intended_time() {
        let mut m = Metrics::default();
        let ms = Duration::from_millis;
        let rec = RequestRecord {
            endpoint: None,
            model: None,
            agent_id: 0,
            trajectory_id: "t",
            request_index: 0,
            planned_prompt_tokens: None,
            retries: 1,
            reconnects: 0,
            latency: ms(20),
            server_timing: None,
            usage: None,
            estimated_cached_tokens: 0,
            cache_estimate: crate::synthesis::prefix::Estimate::default(),
            live_block_fallbacks: 0,
            ttft: None,
            ttfrt: None,
            ttfat: None,
            reasoning_tokens: None,
            reasoning_counted: false,
            images: 0,
            image_bytes: 0,
            audio_seconds: 0.0,
            tpot: None,
            itl_max: None,
            structured: None,
            token_times: Vec::new(),
            slo_met: None,
            failure: None,
            timing: SendTiming {
                intended: ms(100),
                sent: ms(100),
                last_attempt: ms(350),
                ..SendTiming::default()
            },
            ids: Default::default(),
        };
        m.record_request_in(&rec, None);
        assert_eq!(m.late_sends, 0);
        let lag = m.send_lag.stats().map_or(f64::MAX, |s| s.max_ms);
        assert!(lag < 0.01, "{lag}");
        let from_intended = m.latency_from_intended.stats().map_or(0.0, |s| s.max_ms);
        assert!((from_intended - 270.0).abs() < 0.5, "{from_intended}");
    }

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

    #[test]
    fn inter_token_latency_splits_at_the_first_answer_token() {
        // Four reasoning chunks of one token 1 ms apart, then an answer of
        // six tokens in three chunks of two, 5 ms apart, the first 3 ms
        // after the last reasoning chunk.
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let mut chunks: Vec<(Instant, u32)> = (0..4).map(|i| (at(i * 1000), 4)).collect();
        chunks.extend((0..3).map(|i| (at(6000 + i * 5000), 8)));
        let reply = Reply {
            first_reasoning_at: Some(at(0)),
            first_answer_at: Some(at(6000)),
            first_token_at: Some(at(0)),
            chunks,
            ..Reply::default()
        };
        let (reasoning, answer) = phase_itl_gaps(&reply, 10, Some(4)).unwrap_or_default();
        assert_eq!(reasoning, vec![(1000, 1); 3], "three gaps after the first");
        assert_eq!(answer, vec![(1500, 2), (2500, 2), (2500, 2)]);
        let tokens: u64 = reasoning.iter().chain(&answer).map(|g| g.1).sum();
        assert_eq!(tokens, 9, "every token after the first");
        // Recorded into each phase's family, beside the whole reply's.
        let mut m = Metrics::default();
        m.record_stream(&reply, 10, Some(4), true, Duration::ZERO, None);
        assert_eq!((m.itl_reasoning.len(), m.itl_answer.len()), (3, 6));
        assert_eq!(m.itl.len(), 9);
        // Without both phases there is no split.
        assert!(phase_itl_gaps(&reply, 10, None).is_none());
        assert!(phase_itl_gaps(&reply, 4, Some(4)).is_none(), "no answer");
        let unanswered = Reply {
            first_answer_at: None,
            ..reply.clone()
        };
        assert!(phase_itl_gaps(&unanswered, 10, Some(4)).is_none());
    }

    #[test]
    fn equal_gaps_recorded_once_fill_the_histograms_as_one_each_would() {
        // Chunks read together share their arrival (gaps of 0), and others
        // come apart: runs of equal gaps are merged before they are recorded.
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let times = [0, 900, 900, 900, 1800, 2700, 2700, 9000, 9000, 9000, 9000];
        let reply = Reply {
            first_token_at: Some(at(0)),
            chunks: times.iter().map(|&t| (at(t), 4)).collect(),
            ..Reply::default()
        };
        let gaps: Vec<_> = itl_gaps(&reply, 11).collect();
        assert_eq!(merged(gaps.clone()).count(), 6, "{gaps:?}");
        let mut m = Metrics::default();
        let sent = Duration::from_secs(3);
        m.record_stream(&reply, 11, None, true, sent, None);
        let mut each = Latency::default();
        for &(us, k) in &gaps {
            each.record_n_at(us, k, sent);
        }
        assert_eq!(m.itl.len(), 10);
        assert_eq!(m.itl.buckets(), each.buckets());
        assert_eq!(m.itl.stats(), each.stats());
        assert_eq!(
            m.itl.quantile_interval_ms(0.5),
            each.quantile_interval_ms(0.5)
        );
        assert_eq!(
            merged([(5, 1), (5, 2), (7, 1), (5, 1)]).collect::<Vec<_>>(),
            [(5, 3), (7, 1), (5, 1)],
            "only neighbours merge"
        );
    }

    #[test]
    fn the_cache_estimate_is_what_the_server_holds_capped_by_this_prompt() {
        let u = |p| {
            Some(batchbench_contract::plugin::Usage {
                prompt_tokens: p,
                completion_tokens: 1,
                cached_tokens: None,
                reasoning_tokens: None,
                items: None,
            })
        };
        assert_eq!(estimated_cached_tokens(None, u(100)), 0);
        assert_eq!(estimated_cached_tokens(Some(80), u(100)), 80);
        assert_eq!(estimated_cached_tokens(Some(120), u(100)), 100);
        assert_eq!(estimated_cached_tokens(Some(80), None), 0);
    }
}
