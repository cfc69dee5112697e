//! The load model of the engine: releasing requests at their arrival times,
//! the concurrency cap, warmup, the deadline, and how the schedule was kept.

use super::{
    AdmissionStats, EngineError, Prep, Prepared, Ready, Shared, Turn, drive, job, prepare, reap,
};
use crate::arrivals::Schedule;
use crate::blocks::BlockState;
use crate::metrics::{Metrics, Summary};
use batchbench_contract::plan::{PlannedRequest, RequestIter, Trajectory};
use batchbench_contract::plugin::{FailureKind, Reply, WorkloadSource};
use batchbench_contract::record::{LoadReport, StageReport};
use batchbench_contract::spec::{AtDeadline, LoadSpec};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::SemaphorePermit;
use tokio::task::{JoinHandle, JoinSet};

/// How far ahead of its due time an arrival is handed to its task: enough for
/// the runtime timer's millisecond steps and for making the request's body,
/// so that the task is waiting, body made, when the time comes.
const RELEASE_AHEAD: Duration = Duration::from_millis(2);

/// When the release loops hand an arrival due at `offset` to its task.
pub(super) fn release_time(sh: &Shared, offset: Duration) -> Instant {
    let due = sh.start + offset;
    due.checked_sub(RELEASE_AHEAD)
        .map_or(sh.start, |t| t.max(sh.start))
}

/// Waits until the arrival due at `offset` (from the clock start) may be
/// sent: on the pacer, to within microseconds, or on the runtime's timer
/// without one. `false` when the run stops first.
pub(super) async fn until_due(sh: &Shared, offset: Duration) -> bool {
    let due = sh.start + offset;
    let wait = async {
        match &sh.pacer {
            Some(p) => p.until(due).await,
            None => tokio::time::sleep_until(due.into()).await,
        }
    };
    tokio::select! {
        biased;
        () = sh.cancel.cancelled() => false,
        () = sh.deadline.cancelled() => false,
        () = wait => true,
    }
}

/// Starts the deadline of a duration run: at it nothing new is sent, and with
/// `at_deadline = cancel` requests in flight are cancelled.
pub(super) fn deadline_timer(sh: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let secs = sh.opts.load.duration_secs?;
    let sh = sh.clone();
    Some(tokio::spawn(async move {
        let due = sh.start + Duration::from_secs_f64(secs);
        tokio::select! {
            () = sh.cancel.cancelled() => {}
            () = tokio::time::sleep_until(due.into()) => {
                sh.deadline.cancel();
                if sh.opts.load.at_deadline == AtDeadline::Cancel {
                    sh.cancel.cancel();
                }
            }
        }
    }))
}

/// A concurrency slot and how long it took to get; `None` when the run stops
/// while waiting (a request the deadline caught in the queue is counted as cut).
pub(super) async fn slot(sh: &Shared) -> Option<(Option<SemaphorePermit<'_>>, Duration)> {
    let Some(sem) = &sh.inflight else {
        return Some((None, Duration::ZERO));
    };
    let t0 = Instant::now();
    let got = tokio::select! {
        () = sh.cancel.cancelled() => None,
        () = sh.deadline.cancelled() => None,
        p = sem.acquire() => p.ok().map(|p| (Some(p), t0.elapsed())),
    };
    if got.is_none() && sh.deadline.is_cancelled() && !sh.interrupt.is_cancelled() {
        sh.collector().metrics.cut_at_deadline += 1;
    }
    got
}

/// Whether the request about to be sent, due at `intended`, is warmup.
pub(super) fn is_warmup(sh: &Shared, intended: Duration) -> bool {
    let load = &sh.opts.load;
    let n = sh.sent.fetch_add(1, Ordering::Relaxed);
    load.warmup_requests.is_some_and(|w| n < w)
        || load
            .warmup_secs
            .is_some_and(|w| intended < Duration::from_secs_f64(w))
}

/// A request cancelled by the deadline (not by the host): counted apart, not
/// as a failure. Returns whether `result` is one.
pub(super) fn cut_at_deadline(sh: &Shared, result: &Result<Reply, (FailureKind, String)>) -> bool {
    let cut = matches!(result, Err((FailureKind::Cancelled, _)))
        && sh.deadline.is_cancelled()
        && !sh.interrupt.is_cancelled();
    if cut {
        sh.collector().metrics.cut_at_deadline += 1;
    }
    cut
}

/// A trajectory whose requests are released one by one.
struct User {
    agent_id: u64,
    id: Arc<str>,
    requests: RequestIter,
    next_index: u64,
}

/// One request on its way out: who, which, when, and its prompt.
struct Release {
    agent_id: u64,
    id: Arc<str>,
    index: u64,
    request: PlannedRequest,
    due: Duration,
    prep: Prep,
}

/// Request-level open loop: every request is due at its own arrival time,
/// whatever is in flight. Requests go out round-robin over the trajectories
/// (users) in source order, each with its own index, identity and body, exactly
/// as the closed loop would send them. A trajectory's requests must be
/// independent: a request that continues a conversation needs its reply.
pub(super) async fn request_loop(
    sh: &Arc<Shared>,
    source: &mut dyn WorkloadSource,
    ready: Vec<Ready>,
    mut exhausted: bool,
) -> AdmissionStats {
    let mut stats = AdmissionStats::default();
    let mut schedule = Schedule::sharded(&sh.opts.load, sh.opts.seed, sh.opts.shard);
    let lookahead = sh.opts.lookahead.max(1);
    // The first round: trajectories prepared before the clock, then the source.
    let mut fresh: VecDeque<Ready> = ready.into();
    let mut rotation: VecDeque<User> = VecDeque::new();
    let mut next_agent = 0u64;
    let mut pipeline: VecDeque<Release> = VecDeque::new();
    let mut tasks: JoinSet<Result<u64, EngineError>> = JoinSet::new();
    let mut schedule_ended = false;
    loop {
        // Keep the pipeline full: the next requests, their due times, their prompts.
        while pipeline.len() < lookahead && !schedule_ended && stats.fatal.is_none() {
            let next = match fresh.pop_front() {
                Some((t, (first, prepared))) => Some(first_round(
                    &mut rotation,
                    &mut next_agent,
                    sh.opts.shard,
                    t,
                    first,
                    prepared,
                )),
                None if !exhausted => match source.next_trajectory() {
                    Some(Ok(mut t)) => {
                        let first = t.requests.next();
                        Some(first_round(
                            &mut rotation,
                            &mut next_agent,
                            sh.opts.shard,
                            t,
                            first,
                            None,
                        ))
                    }
                    Some(Err(e)) => {
                        stats.fatal.get_or_insert(e.into());
                        sh.cancel.cancel();
                        None
                    }
                    None => {
                        exhausted = true;
                        continue;
                    }
                },
                None => next_in_rotation(&mut rotation),
            };
            let Some(next) = next else { break };
            let Some((agent_id, id, index, request, prepared)) = next else {
                continue; // a trajectory without requests
            };
            if index > 0 && !request.reset_before {
                stats.fatal.get_or_insert(EngineError::Plan(format!(
                    "trajectory {id}, request {index}: continues a conversation, so it cannot be released at a request rate; use a session rate"
                )));
                sh.cancel.cancel();
                break;
            }
            let Some(due) = schedule.next_due() else {
                schedule_ended = true;
                break;
            };
            let prep = match prepared {
                Some(p) => Prep::Done(Some(p)),
                None => {
                    match job(
                        &sh.opts,
                        &id,
                        agent_id,
                        index,
                        None,
                        &request,
                        &BlockState::default(),
                    ) {
                        Ok(j) => {
                            let synth = sh.synth.clone();
                            Prep::Pending(tokio::spawn(async move {
                                prepare(&synth, j).await.map(Some)
                            }))
                        }
                        Err(e) => {
                            stats.fatal.get_or_insert(e);
                            sh.cancel.cancel();
                            break;
                        }
                    }
                }
            };
            pipeline.push_back(Release {
                agent_id,
                id,
                index,
                request,
                due,
                prep,
            });
        }
        let Some(r) = pipeline.pop_front() else {
            break;
        };
        tokio::select! {
            biased;
            () = sh.cancel.cancelled() => {}
            () = sh.deadline.cancelled() => {}
            () = tokio::time::sleep_until(release_time(sh, r.due).into()) => {}
        }
        if sh.cancel.is_cancelled() || sh.deadline.is_cancelled() {
            pipeline.push_front(r);
            break;
        }
        let Some(prepared) = r.prep.ready(&mut stats.fatal, &sh.cancel).await else {
            break;
        };
        let Some(prepared) = prepared else { continue };
        let now = sh.start.elapsed();
        stats.lag.record(now.saturating_sub(r.due));
        stats.arrivals += 1;
        if r.index == 0 {
            sh.collector().metrics.trajectories_started += 1;
        }
        let sh2 = sh.clone();
        tasks.spawn(async move {
            let mut none: RequestIter = Box::new(std::iter::empty());
            let turn = Turn {
                agent_id: r.agent_id,
                slot: r.agent_id,
                id: &r.id,
                index: r.index,
                intended: Some(r.due),
                admission_wait: Duration::ZERO,
            };
            drive(&sh2, turn, r.request, prepared, &mut none).await?;
            Ok(r.agent_id)
        });
        stats.max_observed = stats.max_observed.max(tasks.len() as u64);
        while let Some(done) = tasks.try_join_next() {
            reap(done, &mut stats.fatal, &sh.cancel);
        }
    }
    for r in pipeline {
        if let Prep::Pending(h) = r.prep {
            h.abort();
        }
    }
    while let Some(done) = tasks.join_next().await {
        reap(done, &mut stats.fatal, &sh.cancel);
    }
    stats
}

type Next = Option<(u64, Arc<str>, u64, PlannedRequest, Option<Prepared>)>;

/// A trajectory's first request, in the first round; the trajectory joins the
/// rotation for its later requests.
fn first_round(
    rotation: &mut VecDeque<User>,
    next_agent: &mut u64,
    shard: batchbench_contract::shard::Shard,
    t: Trajectory,
    first: Option<PlannedRequest>,
    prepared: Option<Prepared>,
) -> Next {
    let agent_id = shard.global(*next_agent);
    *next_agent += 1;
    let first = first?;
    rotation.push_back(User {
        agent_id,
        id: t.id.clone(),
        requests: t.requests,
        next_index: 1,
    });
    Some((agent_id, t.id, 0, first, prepared))
}

/// The next request in the rotation (a trajectory leaves it when it runs out).
fn next_in_rotation(rotation: &mut VecDeque<User>) -> Option<Next> {
    while let Some(mut u) = rotation.pop_front() {
        if let Some(r) = u.requests.next() {
            let next = (u.agent_id, u.id.clone(), u.next_index, r, None);
            u.next_index += 1;
            rotation.push_back(u);
            return Some(Some(next));
        }
    }
    None
}

/// Adds the load report to `summary`: how the schedule was kept, warmup, the
/// deadline, and per-stage figures. The closed loop without a cap, warmup or
/// duration has none. With warmup, rates count from the first measured request.
pub(super) fn report(
    summary: &mut Summary,
    m: &Metrics,
    load: &LoadSpec,
    arrivals: u64,
    elapsed: Duration,
    client_cpu: Option<Duration>,
) {
    let warmup = load.warmup_requests.is_some() || load.warmup_secs.is_some();
    if !(load.is_open() || load.max_concurrency.is_some() || warmup || load.duration_secs.is_some())
    {
        return;
    }
    if warmup && let Some(from) = m.measured_from {
        let window = elapsed.saturating_sub(from).as_secs_f64();
        let per_s = |x: u64| if window > 0.0 { x as f64 / window } else { 0.0 };
        summary.total_duration_seconds = window;
        summary.requests_per_second = per_s(m.successes);
        summary.prompt_tokens_per_second = per_s(m.prompt_tokens);
        summary.completion_tokens_per_second = per_s(m.completion_tokens);
    }
    let stages = load
        .stages
        .iter()
        .zip(
            m.stages
                .iter()
                .chain(std::iter::repeat(&Default::default())),
        )
        .enumerate()
        .map(|(i, (st, sm))| StageReport {
            stage: i,
            secs: st.secs,
            rate: st.rate,
            requests: sm.requests,
            successful_requests: sm.successes,
            requests_per_second: sm.successes as f64 / st.secs,
            latency: sm.latency.stats(),
            latency_from_intended: sm.latency_from_intended.stats(),
            ttft: sm.ttft.stats(),
        })
        .collect();
    // From when arrivals really went out, not when they were released: a
    // client that sends late shows in it.
    let achieved_rate = m.achieved_arrival_rate().unwrap_or(0.0);
    let mut r = LoadReport {
        arrival: if load.is_open() {
            load.arrival.as_str().to_owned()
        } else {
            "closed_loop".to_owned()
        },
        release: match load.release {
            batchbench_contract::spec::Release::Requests => "requests",
            batchbench_contract::spec::Release::Sessions => "sessions",
        }
        .to_owned(),
        target_rate: load.rate,
        achieved_rate,
        arrivals,
        latency_from_intended: m.latency_from_intended.stats(),
        ttft_from_intended: m.ttft_from_intended.stats(),
        queue_wait: load.max_concurrency.and_then(|_| m.queue_wait.stats()),
        send_lag: m.send_lag.stats(),
        late_sends: m.late_sends,
        warmup_requests: m.warmup_requests,
        warmup_latency: m.warmup_latency.stats(),
        duration_secs: load.duration_secs,
        at_deadline: load
            .duration_secs
            .map(|_| load.at_deadline.as_str().to_owned()),
        cut_at_deadline: m.cut_at_deadline,
        stages,
        verdict: None,
    };
    let cpu_share = client_cpu.map(|c| crate::cpu::share_of_cores(c, elapsed));
    r.verdict = verdict(&r, m.requests, load.max_concurrency, cpu_share, summary);
    summary.load = Some(r);
}

/// How the load verdict's sentence on the client's own CPU begins (a merge
/// carries each shard's into the merged verdict).
pub const CLIENT_CPU_VERDICT: &str = "the client kept";

/// Above this share of its cores busy, the client itself may be the limit.
const CLIENT_CPU_BUSY: f64 = 0.9;

/// One line when the client, not the server, decided the figures: its
/// concurrency queue held requests back, it fell behind its schedule, or it
/// kept its cores busy (each is said when it holds).
fn verdict(
    r: &LoadReport,
    measured: u64,
    cap: Option<u64>,
    cpu_share: Option<f64>,
    s: &Summary,
) -> Option<String> {
    let mut says = Vec::new();
    if let (Some(q), Some(cap)) = (r.queue_wait, cap) {
        let served = s.latency.map_or(0.0, |l| l.mean_ms);
        if q.mean_ms > 1.0 && q.mean_ms > 0.1 * served {
            says.push(format!(
                "the client queue (max concurrency {cap}), not the server, held requests back: queue wait p50 {:.1} ms, p99 {:.1} ms against a served latency of {served:.1} ms mean; latency from the intended send time includes it",
                q.p50_ms, q.p99_ms
            ));
        }
    }
    if let Some(lag) = r.send_lag
        && measured > 0
        && (lag.p99_ms > 10.0 || r.late_sends * 100 > measured)
    {
        says.push(format!(
            "the client fell behind its schedule (send lag p99 {:.2} ms; {} of {} requests sent over 1 ms late): these figures measure the client as well as the server",
            lag.p99_ms, r.late_sends, measured
        ));
    }
    if let Some(share) = cpu_share
        && share > CLIENT_CPU_BUSY
    {
        says.push(format!(
            "{CLIENT_CPU_VERDICT} {:.0}% of its cores busy: its CPU, not the server, may limit this run (with sim:// the simulator shares the process)",
            share * 100.0
        ));
    }
    (!says.is_empty()).then(|| says.join("; "))
}
