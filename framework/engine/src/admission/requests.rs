//! The request-level open loop: every request released at its own arrival
//! time, round-robin over the trajectories.

use super::{AdmissionStats, Ready};
use crate::admission::turn::{Turn, drive};
use crate::options::EngineError;
use crate::schedule::arrivals::Schedule;
use crate::state::Shared;
use crate::synthesis::blocks::BlockState;
use crate::synthesis::synth::{NextPrep, Prepared, job};
use batchbench_contract::plan::{PlannedRequest, RequestIter, Trajectory};
use batchbench_contract::plugin::WorkloadSource;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// A trajectory whose requests are released one by one.
struct User {
    agent_id: u64,
    id: Arc<str>,
    requests: RequestIter,
    next_index: u64,
}

/// One request on its way out: who, which, when, and its prompt; handed to a
/// lane, which sends it at its due time.
struct Release {
    agent_id: u64,
    id: Arc<str>,
    index: u64,
    request: PlannedRequest,
    due: Duration,
    prep: Made,
}

/// A request's prompt: made already (before the clock started), or to be
/// made by its lane, in place when that costs less than a task.
enum Made {
    Done(Prepared),
    Next(NextPrep),
}

/// Request-level open loop: every request is due at its own arrival time,
/// whatever is in flight. Requests go out round-robin over the trajectories
/// (users) in source order, each with its own index, identity and body, exactly
/// as the closed loop would send them. A trajectory's requests must be
/// independent: a request that continues a conversation needs its reply.
pub(crate) async fn request_loop(
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
    let mut lanes = Lanes::start(sh);
    let mut schedule_ended = false;
    let mut horizon = sh.start;
    // Arrivals the schedule made due (each with its request): those not
    // released are dropped.
    let mut due_count = 0u64;
    let mut stopped_by_deadline = false;
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
            due_count += 1;
            let prep = match prepared {
                Some(p) => Made::Done(p),
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
                        Ok(j) => Made::Next(NextPrep::start(&sh.synth, j)),
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
        // Requests go to the lanes, which wait for each one's exact time
        // themselves, in batches: on each wake-up, every request due within
        // the next window. Before sleeping, the batches go out.
        let release = sh.start + r.due.saturating_sub(HAND_OVER_AHEAD);
        if release > horizon {
            lanes.lanes.flush();
            tokio::select! {
                biased;
                () = sh.cancel.cancelled() => {}
                () = sh.deadline.cancelled() => {}
                () = tokio::time::sleep_until(release.into()) => {}
            }
            horizon = release.max(std::time::Instant::now()) + HAND_OVER_WINDOW;
        } else if lanes.lanes.pending >= super::lanes::HAND_OVER_MOST {
            // Behind its schedule the loop never sleeps: it hands over what
            // it has and lets the lanes and the deadline's timer run.
            lanes.lanes.flush();
            tokio::task::yield_now().await;
        }
        if sh.cancel.is_cancelled() || sh.past_deadline() {
            stopped_by_deadline = sh.past_deadline();
            pipeline.push_front(r);
            break;
        }
        lanes.lanes.push(r);
    }
    for r in pipeline {
        if let Made::Next(p) = r.prep {
            p.cancel();
        }
    }
    let (fatal, max, released) = lanes.finish().await;
    // Every arrival due before the deadline that was not sent by it is
    // dropped, however far behind the client was: those the loop had made and
    // the lanes had not sent, and, where the deadline stopped the loop, the
    // rest of the schedule (a workload that ran out first has no rest).
    if super::reached_deadline(sh) {
        while stopped_by_deadline && schedule.next_due().is_some() {
            due_count += 1;
        }
        sh.collector().metrics.dropped_arrivals += due_count.saturating_sub(released.arrivals);
    }
    if let Some(e) = fatal {
        stats.fatal.get_or_insert(e);
    }
    stats.max_observed = max;
    stats.arrivals = released.arrivals;
    stats.lag = released.lag;
    stats
}

/// How far ahead of their due times requests are handed to the lanes, at
/// most; and the window of due times handed over per wake-up, so that the
/// release loop wakes about once per window whatever the rate, and each
/// request reaches its lane between 10 and 20 ms before it is due.
const HAND_OVER_AHEAD: Duration = Duration::from_millis(20);
const HAND_OVER_WINDOW: Duration = Duration::from_millis(10);

/// The arrivals a lane released, and how late.
#[derive(Default)]
struct Released {
    arrivals: u64,
    lag: crate::measurement::metrics::Latency,
}

/// The workers of the request-level open loop: [`super::lanes::Lanes`], each
/// driving its requests in flight without a task or a channel of their own.
/// The release loop hands requests over up to [`HAND_OVER_AHEAD`] ahead of
/// their due times; each waits for its time on the pacer, inside its lane.
struct Lanes {
    lanes: super::lanes::Lanes<Release, (Option<EngineError>, Released)>,
    in_flight: Arc<InFlight>,
}

/// Requests in flight over every lane, and the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicU64,
    max: AtomicU64,
}

impl Lanes {
    fn start(sh: &Arc<Shared>) -> Self {
        let in_flight = Arc::new(InFlight::default());
        let lanes = super::lanes::Lanes::start(|rx| lane(sh.clone(), rx, in_flight.clone()));
        Self { lanes, in_flight }
    }

    /// Hands over the rest and waits for every request in flight; the first
    /// fatal error and the most requests in flight at once.
    async fn finish(self) -> (Option<EngineError>, u64, Released) {
        let mut fatal = None;
        let mut all = Released::default();
        for h in self.lanes.close() {
            match h.await {
                Ok((e, released)) => {
                    if let Some(e) = e {
                        fatal.get_or_insert(e);
                    }
                    all.arrivals += released.arrivals;
                    all.lag.add(&released.lag);
                }
                Err(e) => {
                    fatal.get_or_insert(EngineError::Internal(format!("a lane failed: {e}")));
                }
            }
        }
        (fatal, self.in_flight.max.load(Ordering::Relaxed), all)
    }
}

/// One lane: takes batches, drives their requests, reaps them; ends when the
/// release loop is done and nothing is in flight.
async fn lane(
    sh: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<Vec<Release>>,
    in_flight: Arc<InFlight>,
) -> (Option<EngineError>, Released) {
    let released = Arc::new(std::sync::Mutex::new(Released::default()));
    let mut requests = FuturesUnordered::new();
    let mut open = true;
    let mut fatal = None;
    loop {
        tokio::select! {
            biased;
            Some(done) = requests.next(), if !requests.is_empty() => {
                if let Err(e) = done {
                    fatal.get_or_insert(e);
                    sh.cancel.cancel();
                }
            }
            batch = rx.recv(), if open => match batch {
                Some(batch) => {
                    for h in batch {
                        requests.push(send(sh.clone(), h, released.clone(), in_flight.clone()));
                    }
                }
                None => open = false,
            },
            else => break,
        }
    }
    let released = std::mem::take(
        &mut *released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    (fatal, released)
}

/// One request of the open loop: makes its prompt (at once, up to
/// [`HAND_OVER_AHEAD`] before its due time), waits for that time, sends,
/// records. It counts as in flight from its release, not from its hand-over.
async fn send(
    sh: Arc<Shared>,
    h: Release,
    released: Arc<std::sync::Mutex<Released>>,
    in_flight: Arc<InFlight>,
) -> Result<(), EngineError> {
    let prepared = match h.prep {
        Made::Done(p) => p,
        Made::Next(p) => p.finish(&sh.synth).await?,
    };
    let mut none: RequestIter = Box::new(std::iter::empty());
    let was_released = std::sync::atomic::AtomicBool::new(false);
    let on_release = |lag: Duration| {
        was_released.store(true, Ordering::Relaxed);
        let now = in_flight.now.fetch_add(1, Ordering::Relaxed) + 1;
        in_flight.max.fetch_max(now, Ordering::Relaxed);
        let mut r = released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        r.arrivals += 1;
        r.lag.record(lag);
        if h.index == 0 {
            sh.collector().metrics.trajectories_started += 1;
        }
    };
    let turn = Turn {
        agent_id: h.agent_id,
        slot: h.agent_id,
        id: &h.id,
        index: h.index,
        intended: Some(h.due),
        admission_wait: Duration::ZERO,
        on_release: Some(&on_release),
    };
    let done = drive(&sh, turn, h.request, prepared, &mut none).await;
    if was_released.load(Ordering::Relaxed) {
        in_flight.now.fetch_sub(1, Ordering::Relaxed);
    }
    done.map(drop)
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
