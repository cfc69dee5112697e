//! `console_summary`: the human-readable report, printed on stdout at the end
//! of a run (also after Ctrl+C, marked partial).

use batchbench_contract::plugin::{PluginError, Reporter};
use batchbench_contract::record::RunInfo;
use batchbench_contract::record::{IntervalMethod, LatencyStats, LoadReport, Summary};
use batchbench_contract::registry::BuildContext;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::io::Write as _;

/// Config of [`ConsoleSummary`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSummaryConfig {
    /// Print to stderr instead of stdout.
    #[serde(default)]
    pub stderr: bool,
}

/// Prints the summary.
#[derive(Debug)]
pub struct ConsoleSummary {
    cfg: ConsoleSummaryConfig,
}

impl ConsoleSummary {
    /// A reporter with this config.
    pub fn new(cfg: ConsoleSummaryConfig, _ctx: &BuildContext) -> Result<Self, PluginError> {
        Ok(Self { cfg })
    }
}

fn lat(out: &mut String, label: &str, s: Option<LatencyStats>) {
    if let Some(s) = s {
        let _ = writeln!(
            out,
            "  {label:<22} p50 {:>9.2}  p90 {:>9.2}  p99 {:>9.2}  mean {:>9.2}  max {:>9.2}  (n={})",
            s.p50_ms, s.p90_ms, s.p99_ms, s.mean_ms, s.max_ms, s.count
        );
    }
}

/// The 95% intervals of a distribution's figures, on a line under it; a
/// percentile with too few samples for a bound on both sides says so.
fn intervals(out: &mut String, s: Option<LatencyStats>) {
    let Some((n, ci)) = s.and_then(|s| Some((s.count, s.ci?))) else {
        return;
    };
    // With enough samples but none to spare once correlation is allowed
    // for, the effective ones were too few.
    let show = |name: &str, b: Option<[f64; 2]>, least: u64| match b {
        Some([lo, hi]) => format!("{name} {lo:.2}-{hi:.2}"),
        None if n >= least => format!("{name} too few effective samples (needs {least})"),
        None => format!("{name} too few samples (needs {least})"),
    };
    let how = match ci.method {
        IntervalMethod::BatchMeans => format!(
            "batch means over {} batches, {:.0} effective samples",
            ci.batches, ci.effective_count
        ),
        IntervalMethod::Independent => "samples taken as independent".to_owned(),
    };
    let _ = writeln!(
        out,
        "  {:<22} {}  {}  {}  {}  ({how})",
        "  95% interval",
        show("p50", ci.p50_ms, 6),
        show("p90", ci.p90_ms, 36),
        show("p99", ci.p99_ms, 368),
        show("mean", ci.mean_ms, 2),
    );
}

/// Renders the summary as the console shows it.
pub fn render(info: &RunInfo, s: &Summary) -> String {
    let mut o = String::new();
    let title = if s.interrupted {
        "batchbench summary (interrupted: partial results)"
    } else {
        "batchbench summary"
    };
    let _ = writeln!(o, "{title}");
    match info.spec.as_ref().and_then(|sp| sp.target.mix.as_ref()) {
        Some(mix) => {
            let total: f64 = mix.models.iter().map(|m| m.weight).sum();
            let shares: Vec<String> = mix
                .models
                .iter()
                .map(|m| {
                    let of = m
                        .base
                        .as_ref()
                        .map_or(String::new(), |b| format!(" (adapter of {b})"));
                    let pct = 100.0 * m.weight / total;
                    let pct = if (pct - pct.round()).abs() < 0.05 {
                        format!("{pct:.0}")
                    } else {
                        format!("{pct:.1}")
                    };
                    format!("{} {pct}%{of}", m.name)
                })
                .collect();
            let _ = writeln!(
                o,
                "  {:<22} {}; picked {} (per model below)",
                "models",
                shares.join(", "),
                match mix.selection {
                    batchbench_contract::models::ModelSelection::Random => "at random by weight",
                    batchbench_contract::models::ModelSelection::RoundRobin => "in turn by weight",
                    batchbench_contract::models::ModelSelection::Session => "per agent",
                }
            );
        }
        None => {
            let _ = writeln!(o, "  {:<22} {}", "model", info.model);
        }
    }
    if s.endpoints.is_empty() {
        let _ = writeln!(o, "  {:<22} {}", "endpoint", info.url);
    } else {
        let _ = writeln!(
            o,
            "  {:<22} a fleet of {}, routed by {} (per endpoint below)",
            "endpoints",
            s.endpoints.len(),
            s.routing.as_deref().unwrap_or("a router")
        );
    }
    let _ = writeln!(o, "  {:<22} {}", "workload", info.workload.mode);
    if let Some(shard) = info.spec.as_ref().and_then(|sp| sp.shard) {
        let start = info.start_skew_ms.map_or(String::new(), |k| {
            format!(", clock started {k:.2} ms after --start-at")
        });
        let _ = writeln!(o, "  {:<22} {shard} of seed {}{start}", "shard", info.seed);
    }
    if !info.merged_shards.is_empty() {
        let offsets = info.merged_shards.iter().map(|m| m.offset_seconds);
        let spread = offsets.fold(0.0, f64::max) * 1000.0;
        let _ = writeln!(
            o,
            "  {:<22} {} merged, clocks started within {spread:.2} ms",
            "shards",
            info.merged_shards.len()
        );
    }
    let reconnects = if s.reconnects > 0 {
        format!(", {} reconnects", s.reconnects)
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "  {:<22} {} total, {} ok, {} failed, {} retries{reconnects}",
        "requests", s.total_requests, s.successful_requests, s.failed_requests, s.retries
    );
    if s.server_closes_connections {
        let _ = writeln!(
            o,
            "  {:<22} the server closed every connection after its response (keep-alive not kept): each later request opened a new one, counted as a reconnect, not a retry",
            "connections"
        );
    }
    if s.retries > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {:.3} s in failed attempts and backoff; latency below is each request's last attempt",
            "retry time", s.retry_seconds
        );
    }
    if !s.failures_by_kind.is_empty() {
        let _ = writeln!(o, "  {:<22} {}", "failures", kinds(&s.failures_by_kind));
        for f in s.failures.iter().take(5) {
            let _ = writeln!(
                o,
                "  {:<22} agent {} trajectory {} request {}: {}",
                "", f.agent_id, f.trajectory_id, f.request_index, f.message
            );
        }
    }
    let _ = writeln!(o, "  {:<22} {:.3} s", "duration", s.total_duration_seconds);
    let _ = writeln!(
        o,
        "  {:<22} {:.2} req/s, {:.1} prompt tok/s, {:.1} completion tok/s",
        "throughput",
        s.requests_per_second,
        s.prompt_tokens_per_second,
        s.completion_tokens_per_second
    );
    let _ = writeln!(
        o,
        "  {:<22} {} prompt, {} completion (usage of successful requests)",
        "tokens", s.total_prompt_tokens, s.total_completion_tokens
    );
    if let Some([lo, hi]) = s.requests_per_second_ci {
        let _ = writeln!(
            o,
            "  {:<22} {lo:.2}-{hi:.2} req/s (95% interval, from the successes per batch of time)",
            "throughput interval"
        );
    }
    if let (Some(n), Some(rate)) = (s.total_items, s.items_per_second) {
        let _ = writeln!(
            o,
            "  {:<22} {n} inputs answered, {rate:.1} inputs/s",
            "items"
        );
    }
    if let (Some(n), Some(b)) = (s.images_sent, s.total_image_bytes) {
        let _ = writeln!(
            o,
            "  {:<22} {n} sent, {b} bytes ({:.1} KiB per image)",
            "images",
            b as f64 / 1024.0 / n.max(1) as f64
        );
    }
    if let Some(a) = &s.audio {
        let _ = writeln!(
            o,
            "  {:<22} {:.1} s in {} requests ({:.2} s each), {:.2} audio s answered per s",
            "audio", a.seconds, a.requests, a.seconds_per_request, a.seconds_per_second
        );
        if a.rtf_samples > 0 {
            let _ = writeln!(
                o,
                "  {:<22} mean {:.2}  p50 {:.2}  p10 {:.2}  min {:.2}  (audio s per s of latency, n={})",
                "real-time factor", a.rtf_mean, a.rtf_p50, a.rtf_p10, a.rtf_min, a.rtf_samples
            );
        }
    }
    if let Some(r) = s.total_reasoning_tokens {
        let source = match s.reasoning_tokens_source.as_deref() {
            Some("counted") => "counted by the client",
            Some("mixed") => "from the usage, else counted by the client",
            _ => "from the usage",
        };
        let answer = s
            .total_answer_tokens
            .map(|a| format!(", {a} answer tokens"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  {:<22} {r} of the completion tokens ({source}){answer}",
            "reasoning tokens"
        );
    }
    if s.reasoning_only_replies > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} replies spent their output cap on reasoning (no answer, no first answer token)",
            "reasoning only", s.reasoning_only_replies
        );
    }
    if let Some(st) = &s.structured {
        structured(&mut o, st);
    }
    if s.planned_prompt_tokens > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} planned vs {} server-counted, over requests with a prompt target (worst request {:+})",
            "prompt tokens",
            s.planned_prompt_tokens,
            s.counted_prompt_tokens,
            s.worst_prompt_drift_tokens
        );
    }
    if s.estimated_cached_input_tokens > 0 || s.server_cached_tokens.is_some() {
        let server = match s.server_cached_tokens {
            None => "not reported by the server".to_owned(),
            Some(c) if s.estimated_cached_input_tokens > 0 => {
                format!(
                    "{c} server-reported ({:.1}% of the estimate)",
                    100.0 * c as f64 / s.estimated_cached_input_tokens as f64
                )
            }
            Some(c) => format!("{c} server-reported"),
        };
        let _ = writeln!(
            o,
            "  {:<22} {} estimated (perfect prefix caching), {server}",
            "cached input tokens", s.estimated_cached_input_tokens
        );
    }
    if s.global_estimated_cached_input_tokens > 0 || s.server_cached_tokens.is_some() {
        let g = s.global_estimated_cached_input_tokens;
        let server = match s.server_cached_tokens {
            Some(c) if g > 0 => format!(
                ", server-reported {:.1}% of it",
                100.0 * c as f64 / g as f64
            ),
            _ => String::new(),
        };
        let rank = s
            .rank_estimated_cached_input_tokens
            .map(|r| format!("; {r} with one cache per DP rank"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  {:<22} {g} estimated across trajectories (one perfect cache, blocks of {}{server}){rank}",
            "shared prefix cache", s.cache_block_tokens
        );
    }
    if s.total_delay_seconds > 0.0 {
        let _ = writeln!(
            o,
            "  {:<22} {:.3} s in total",
            "tool / think time", s.total_delay_seconds
        );
    }
    let _ = writeln!(o, "  latency (ms)");
    lat(&mut o, "request", s.latency);
    intervals(&mut o, s.latency);
    if s.latency_all_attempts.is_some() {
        lat(&mut o, "request, all attempts", s.latency_all_attempts);
    }
    lat(&mut o, "time to first token", s.ttft);
    intervals(&mut o, s.ttft);
    if s.ttfrt.is_some() {
        lat(&mut o, "first reasoning token", s.ttfrt);
        lat(&mut o, "first answer token", s.ttfat);
        intervals(&mut o, s.ttfat);
        lat(&mut o, "reasoning phase", s.reasoning_duration);
        lat(&mut o, "per token, reasoning", s.tpot_reasoning);
        lat(&mut o, "per token, answer", s.tpot_answer);
        lat(&mut o, "inter-token, reasoning", s.itl_reasoning);
        lat(&mut o, "inter-token, answer", s.itl_answer);
    }
    lat(&mut o, "inter-token", s.itl);
    intervals(&mut o, s.itl);
    lat(&mut o, "time per output token", s.tpot);
    intervals(&mut o, s.tpot);
    lat(&mut o, "trajectory end-to-end", s.trajectory_e2e);
    intervals(&mut o, s.trajectory_e2e);
    if let Some(t) = &s.server_timing {
        server_timing(&mut o, t);
    }
    if !s.endpoints.is_empty() {
        let rows = s
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (format!("[{i}]"), Some(e.url.as_str()), e));
        shares(&mut o, "per endpoint", rows);
    }
    if !s.models.is_empty() {
        let rows = s.models.iter().map(|m| (m.model.clone(), None, &m.figures));
        shares(&mut o, "per model", rows);
    }
    if let Some(l) = &s.load {
        load(&mut o, l);
        if let Some(c) = &s.client {
            client(&mut o, c);
        }
    }
    if let Some(b) = &s.client_bound {
        let _ = writeln!(
            o,
            "  {:<22} {} ({})",
            "CLIENT-BOUND",
            b.message,
            b.reasons.join(", ")
        );
    }
    for d in &s.deliveries {
        delivery(&mut o, d);
    }
    if let Some(r) = &s.slo {
        slo(&mut o, r);
    }
    if let Some(m) = &s.server_metrics {
        server_metrics(&mut o, m);
    }
    if info.spec.as_ref().is_some_and(|s| s.target.insecure) {
        let _ = writeln!(
            o,
            "  {:<22} TLS certificates NOT verified (--insecure)",
            "tls"
        );
    }
    if let Some(t) = &s.trend {
        let _ = writeln!(o, "  note: {t}");
    }
    if let Some(n) = correlated_note(s) {
        let _ = writeln!(o, "  note: {n}");
    }
    if let Some(why) = &s.run_failed {
        let _ = writeln!(o, "  {:<22} FAILED: {why} (exit 1)", "run");
    }
    o
}

/// Below this share of the requests, the effective sample of request latency
/// says the run was near its server's capacity, where one run's intervals
/// fall short (see the book's "How sure is a figure").
const CORRELATED_SHARE: f64 = 0.1;

/// One line when request latencies moved together so much that the batch
/// means' effective sample is under [`CORRELATED_SHARE`] of the requests: a
/// queue near capacity, whose correlation one run cannot fully measure.
fn correlated_note(s: &Summary) -> Option<String> {
    let l = s.latency?;
    let ci = l.ci?;
    (ci.method == IntervalMethod::BatchMeans
        && l.count >= 100
        && ci.effective_count < CORRELATED_SHARE * l.count as f64)
        .then(|| {
            format!(
                "request latencies moved together over time (an effective sample of {:.0} of {} requests), as near the knee of a server's capacity: there one run's 95% intervals tend to be too narrow (in our tests 58-85% of them held the true value in 6 s runs, 88-93% in 60 s runs); run longer (--target-ci), or repeat it for intervals across runs (sweep --trials)",
                ci.effective_count, l.count
            )
        })
}

/// Failures by kind: `http_503: 2, timeout: 1`.
fn kinds(by_kind: &std::collections::BTreeMap<String, u64>) -> String {
    let kinds: Vec<String> = by_kind.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    kinds.join(", ")
}

/// A fleet's endpoints or a mix's models, one row each: what went where,
/// how it was answered, and what the prefix cache held (server-reported,
/// beside the perfect cache of its own); `below` goes on a line under its
/// row (an endpoint's URL).
fn shares<'a>(
    o: &mut String,
    heading: &str,
    rows: impl Iterator<
        Item = (
            String,
            Option<&'a str>,
            &'a batchbench_contract::record::EndpointSummary,
        ),
    >,
) {
    let _ = writeln!(
        o,
        "  {heading:<22} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}  cached prompt tokens: server / own perfect cache",
        "requests", "ok", "failed", "req/s", "e2e p50", "e2e p99", "TTFT p50"
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for (label, below, e) in rows {
        let hit = |c: u64| {
            if e.prompt_tokens > 0 {
                format!(" ({:.1}%)", 100.0 * c as f64 / e.prompt_tokens as f64)
            } else {
                String::new()
            }
        };
        let server = e
            .server_cached_tokens
            .map_or_else(|| "not reported".to_owned(), |c| format!("{c}{}", hit(c)));
        let _ = writeln!(
            o,
            "  {:<22} {:>8} {:>8} {:>7} {:>9.2} {:>9} {:>9} {:>9}  {server} / {}{}",
            label,
            e.requests,
            e.successful_requests,
            e.failed_requests,
            e.requests_per_second,
            ms(e.latency.as_ref().map(|l| l.p50_ms)),
            ms(e.latency.as_ref().map(|l| l.p99_ms)),
            ms(e.ttft.as_ref().map(|l| l.p50_ms)),
            e.estimated_cached_tokens,
            hit(e.estimated_cached_tokens),
        );
        if let Some(b) = below {
            let _ = writeln!(o, "  {:<22} {b}", "");
        }
        if !e.failures_by_kind.is_empty() {
            let _ = writeln!(o, "  {:<22} failures {}", "", kinds(&e.failures_by_kind));
        }
    }
}

/// The server's own timings beside the client's.
fn server_timing(o: &mut String, t: &batchbench_contract::record::ServerTimingReport) {
    let _ = writeln!(
        o,
        "  server-side timings (ms, the server's own clock; {} requests)",
        t.requests
    );
    lat(o, "server prompt", t.prompt);
    lat(o, "server generation", t.predicted);
    lat(o, "server total", t.total);
    lat(o, "client minus server", t.client_minus_server);
    lat(o, "TTFT minus prompt", t.ttft_minus_prompt);
    if t.server_over_client > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} requests took longer on the server's clock than on the client's (by over 1 ms)",
            "", t.server_over_client
        );
    }
}

/// The server's metrics: the scrapes, then each common metric's mean and max.
fn server_metrics(o: &mut String, m: &batchbench_contract::record::ServerMetricsReport) {
    let _ = writeln!(o, "  server metrics");
    let _ = writeln!(
        o,
        "  {:<22} {} ({} failed) every {} s from {}",
        "scrapes",
        m.scrapes,
        m.failed_scrapes,
        m.interval_secs,
        m.urls.join(", ")
    );
    for e in &m.errors {
        let _ = writeln!(o, "  {:<22} {e}", "");
    }
    // Each GPU's figures are in the JSON; the console shows their totals (and
    // the energy counter as the energy line below).
    for (name, v) in m
        .metrics
        .iter()
        .filter(|(n, _)| !n.contains('{') && n.as_str() != "gpu_energy_joules")
    {
        let label = match name.as_str() {
            "generation_tokens_per_second" => "generation tok/s".to_owned(),
            "prompt_tokens_per_second" => "prompt tok/s".to_owned(),
            "preemptions_per_second" => "preemptions/s".to_owned(),
            other => other.replace('_', " "),
        };
        let _ = writeln!(
            o,
            "  {label:<22} mean {:.3}, max {:.3} ({} scrapes)",
            v.mean, v.max, v.samples
        );
    }
    if let Some(e) = &m.energy {
        let per = |v: Option<f64>, what: &str| v.map(|v| format!(", {v:.3} J per {what}"));
        let _ = writeln!(
            o,
            "  {:<22} {:.1} J over {:.1} s ({}), mean {:.1} W{}{}{}{}",
            "gpu energy",
            e.joules,
            e.seconds,
            e.source,
            e.mean_power_watts,
            e.peak_power_watts
                .map_or_else(String::new, |p| format!(", peak {p:.1} W")),
            per(e.joules_per_output_token, "output token").unwrap_or_default(),
            per(e.joules_per_request, "request").unwrap_or_default(),
            per(e.joules_per_1k_prompt_tokens, "1,000 prompt tokens").unwrap_or_default(),
        );
    }
}

/// The SLO lines: a verdict per bound, then goodput.
fn slo(o: &mut String, r: &batchbench_contract::slo::SloReport) {
    let _ = writeln!(o, "  SLO");
    for b in &r.bounds {
        let verdict = match (b.met, b.undecided) {
            (true, false) => "pass",
            (false, false) => "FAIL",
            (true, true) => "pass, undecided",
            (false, true) => "FAIL, undecided",
        };
        let seen = match (b.observed_ms, b.share_met) {
            (Some(ms), _) if b.undecided => match b.interval_ms {
                Some([lo, hi]) => format!(
                    "observed {ms:.2} ms (95% interval [{lo:.2}, {hi:.2}]): too near the bound to tell the server's side of it"
                ),
                None => format!(
                    "observed {ms:.2} ms; too few requests for an interval, so the server's side of the bound is unknown"
                ),
            },
            (Some(ms), _) => match b.interval_ms {
                Some([lo, hi]) => format!("observed {ms:.2} ms (95% interval [{lo:.2}, {hi:.2}])"),
                None => format!("observed {ms:.2} ms"),
            },
            (None, Some(share)) => format!("met by {:.2}% of requests", share * 100.0),
            (None, None) => "no samples".to_owned(),
        };
        let _ = writeln!(o, "  {:<22} {verdict}: {seen}", b.bound);
    }
    let _ = writeln!(
        o,
        "  {:<22} {:.2} req/s ({} requests met every per-request bound); SLO {}",
        "goodput",
        r.goodput,
        r.good_requests,
        if r.passed { "met" } else { "NOT met" }
    );
}

/// The load model's lines: the schedule kept, and latency from the intended
/// send time.
fn load(o: &mut String, l: &LoadReport) {
    let _ = writeln!(o, "  load");
    if l.arrival != "closed_loop" {
        let target = l
            .target_rate
            .map_or_else(|| "stages".to_owned(), |r| format!("{r:.2}/s"));
        let _ = writeln!(
            o,
            "  {:<22} {} {}, target {target}, achieved {:.2}/s over {} arrivals",
            "arrivals", l.arrival, l.release, l.achieved_rate, l.arrivals
        );
    }
    if l.warmup_requests > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} requests sent and left out of every figure",
            "warmup", l.warmup_requests
        );
        lat(o, "warmup latency", l.warmup_latency);
    }
    if let Some(s) = &l.steady {
        steady(o, s);
    }
    if let (Some(d), Some(p)) = (l.duration_secs, &l.at_deadline) {
        let _ = writeln!(
            o,
            "  {:<22} {d:.1} s; requests in flight at the deadline: {p} ({} cut)",
            "duration", l.cut_at_deadline
        );
    }
    lat(o, "from intended send", l.latency_from_intended);
    lat(o, "TTFT from intended", l.ttft_from_intended);
    lat(o, "client queue wait", l.queue_wait);
    lat(o, "send lag", l.send_lag);
    if l.late_sends > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} requests sent over 1 ms behind schedule",
            "late sends", l.late_sends
        );
    }
    if l.dropped_arrivals > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} arrivals due before the deadline, not sent by it",
            "dropped arrivals", l.dropped_arrivals
        );
    }
    if l.dropped_waiting > 0 {
        let _ = writeln!(
            o,
            "  {:<22} {} arrivals dropped after waiting too long for a concurrency slot",
            "dropped waiting", l.dropped_waiting
        );
    }
    for st in &l.stages {
        let _ = writeln!(
            o,
            "  {:<22} {:.1} s at {:.2}/s: {} ok of {}, {:.2} req/s",
            format!("stage {}", st.stage),
            st.secs,
            st.rate,
            st.successful_requests,
            st.requests,
            st.requests_per_second
        );
        lat(o, "  latency", st.latency);
        lat(o, "  from intended send", st.latency_from_intended);
    }
    if let Some(c) = &l.convergence {
        convergence(o, c);
    }
    if let Some(v) = &l.verdict {
        let _ = writeln!(o, "  note: {v}");
    }
}

/// What a reporter delivered elsewhere, and what it dropped and why.
fn delivery(o: &mut String, d: &batchbench_contract::record::Delivery) {
    let _ = write!(
        o,
        "  {:<22} {} delivered to {}",
        d.items, d.delivered, d.destination
    );
    match (&d.error, d.dropped) {
        (_, 0) => {
            let _ = writeln!(o);
        }
        (Some(e), n) => {
            let _ = writeln!(o, "; {n} DROPPED ({e})");
        }
        (None, n) => {
            let _ = writeln!(o, "; {n} DROPPED");
        }
    }
}

/// The client's own load: its threads, how busy, how late it ran its tasks.
fn client(o: &mut String, c: &batchbench_contract::record::ClientLoad) {
    let mut parts = Vec::new();
    // Merged shards know no one runtime's threads.
    if c.threads > 0 {
        let s = if c.threads == 1 { "" } else { "s" };
        parts.push(match c.busy_share {
            Some(b) => format!(
                "{} runtime thread{s}, busy {:.0}% of the time",
                c.threads,
                b * 100.0
            ),
            None => format!("{} runtime thread{s}", c.threads),
        });
    }
    if let Some(d) = c.scheduling_delay {
        parts.push(format!(
            "scheduling delay p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            d.p50_ms, d.p99_ms, d.max_ms
        ));
    }
    if !parts.is_empty() {
        let _ = writeln!(o, "  {:<22} {}", "client", parts.join("; "));
    }
    if let Some(n) = &c.note {
        let _ = writeln!(o, "  note: {n}");
    }
}

/// A run whose warmup was found: where its steady window begins, what set
/// it, and each series' transient.
fn steady(o: &mut String, s: &batchbench_contract::record::SteadyState) {
    let head = match &s.set_by {
        Some(by) => format!(
            "from {:.1} s to {:.1} s; the transient before it ({} requests) set by {by}",
            s.from_secs, s.to_secs, s.cut_requests
        ),
        None => format!("the whole run, {:.1} s: no transient found", s.to_secs),
    };
    let _ = writeln!(o, "  {:<22} {head}", "steady state");
    for x in s.series.iter().filter(|x| x.transient_mean.is_some()) {
        let _ = writeln!(
            o,
            "  {:<22} {} until {:.1} s: {:.3} {u} in the transient, {:.3} {u} after",
            "",
            x.name,
            x.cut_secs,
            x.transient_mean.unwrap_or_default(),
            x.steady_mean,
            u = x.unit
        );
    }
    if let Some(d) = s.decided_secs {
        let _ = writeln!(
            o,
            "  {:<22} decided at {d:.1} s, from the run so far (too many records to hold)",
            ""
        );
    }
    if let Some(n) = &s.note {
        let _ = writeln!(o, "  note: {n}");
    }
}

/// A converging run's line: after how many requests its figures were sure
/// enough, or what kept them from it; then each watched figure.
fn convergence(o: &mut String, c: &batchbench_contract::record::Convergence) {
    let head = match (c.converged, c.secs) {
        (true, Some(secs)) => format!(
            "converged after {} requests ({secs:.1} s): {}",
            c.requests, c.rule
        ),
        _ => format!(
            "NOT converged by the end of the run ({} requests; {}): {}",
            c.requests,
            c.rule,
            c.reason.as_deref().unwrap_or("unknown")
        ),
    };
    let _ = writeln!(o, "  {:<22} {head}", "convergence");
    for f in &c.figures {
        let ci = match (f.interval_ms, f.half_width_pct) {
            (Some([lo, hi]), Some(h)) => format!("95% interval [{lo:.2}, {hi:.2}] ms, ±{h:.2}%"),
            _ => "no 95% interval yet (too few requests)".to_owned(),
        };
        let _ = writeln!(o, "  {:<22} {:.2} ms, {ci}", f.name, f.value_ms);
    }
}

impl Reporter for ConsoleSummary {
    fn wants_live(&self) -> bool {
        false
    }

    fn on_finish(&mut self, info: &RunInfo, summary: &Summary) -> Result<(), PluginError> {
        let text = render(info, summary);
        // A closed pipe (`| head`) is not an error worth failing the run for.
        let _ = if self.cfg.stderr {
            std::io::stderr().write_all(text.as_bytes())
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|()| out.flush())
        };
        Ok(())
    }
}

batchbench_contract::register_reporter! {
    name: "console_summary",
    description: "the human-readable summary (totals, throughput, failures, latency percentiles)",
    example: r#"{"stderr": false}"#,
    config: ConsoleSummaryConfig,
    build: ConsoleSummary::new,
}

/// The structured outputs' lines: the valid share with its interval, the
/// invalid answers by reason, and the first request of each schema apart.
fn structured(o: &mut String, st: &batchbench_contract::record::StructuredSummary) {
    let interval = st
        .valid_share_ci
        .map(|[lo, hi]| format!(", 95% interval {:.1}-{:.1}%", 100.0 * lo, 100.0 * hi))
        .unwrap_or_default();
    let against = if st.schemas.is_empty() {
        st.format.clone()
    } else {
        format!("{} {}", st.format, st.schemas.join(", "))
    };
    let _ = writeln!(
        o,
        "  {:<22} {} of {} answers valid ({:.1}%{interval}) against {against}",
        "structured outputs",
        st.valid,
        st.checked,
        100.0 * st.valid_share
    );
    if !st.invalid.is_empty() {
        let reasons: Vec<String> = st.invalid.iter().map(|(r, n)| format!("{r} {n}")).collect();
        let _ = writeln!(o, "  {:<22} {}", "invalid answers", reasons.join(", "));
    }
    if let (Some(first), Some(later)) = (st.first_latency_mean_ms, st.later_latency_p50_ms) {
        let _ = writeln!(
            o,
            "  {:<22} {first:.2} ms mean over each schema's first request (a server compiles its grammar), {later:.2} ms p50 after",
            "schema's first request"
        );
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use batchbench_contract::record::Intervals;

    fn with_effective(count: u64, effective: f64) -> Summary {
        Summary {
            latency: Some(LatencyStats {
                count,
                ci: Some(Intervals {
                    level: 0.95,
                    method: IntervalMethod::BatchMeans,
                    batches: 24,
                    effective_count: effective,
                    p50_ms: Some([1.0, 2.0]),
                    p90_ms: None,
                    p99_ms: None,
                    mean_ms: None,
                }),
                ..LatencyStats::default()
            }),
            ..Summary::default()
        }
    }

    #[test]
    fn a_run_whose_latencies_move_together_is_told_its_intervals_fall_short() {
        let n = correlated_note(&with_effective(6000, 360.0)).unwrap_or_default();
        assert!(n.contains("an effective sample of 360 of 6000"), "{n}");
        assert!(n.contains("sweep --trials"), "{n}");
        // An unsaturated run, or one too small to say, gets no note.
        assert!(correlated_note(&with_effective(6000, 5400.0)).is_none());
        assert!(correlated_note(&with_effective(50, 2.0)).is_none());
        assert!(correlated_note(&Summary::default()).is_none());
    }

    #[test]
    fn a_delivery_says_what_it_dropped_and_why() {
        let mut d = batchbench_contract::record::Delivery {
            reporter: "otlp_spans".into(),
            items: "spans".into(),
            destination: "http://c:4318/v1/traces".into(),
            delivered: 12,
            ..Default::default()
        };
        let mut o = String::new();
        delivery(&mut o, &d);
        assert_eq!(
            o.trim(),
            "spans                  12 delivered to http://c:4318/v1/traces"
        );
        d.dropped = 3;
        d.error = Some("connection refused".into());
        let mut o = String::new();
        delivery(&mut o, &d);
        assert!(o.ends_with("; 3 DROPPED (connection refused)\n"), "{o}");
    }

    #[test]
    fn structured_outputs_say_their_valid_share_and_why_the_rest_failed() {
        let st = batchbench_contract::record::StructuredSummary {
            format: "json_schema".into(),
            schemas: vec!["pet".into(), "order".into()],
            checked: 200,
            valid: 183,
            valid_share: 0.915,
            valid_share_ci: Some([0.868, 0.946]),
            invalid: [("not_json".to_owned(), 17)].into_iter().collect(),
            first_latency_mean_ms: Some(5.67),
            later_latency_p50_ms: Some(2.16),
        };
        let mut o = String::new();
        structured(&mut o, &st);
        assert!(
            o.contains("183 of 200 answers valid (91.5%, 95% interval 86.8-94.6%) against json_schema pet, order"),
            "{o}"
        );
        assert!(o.contains("invalid answers        not_json 17"), "{o}");
        assert!(
            o.contains("5.67 ms mean over each schema's first request"),
            "{o}"
        );
    }
}
